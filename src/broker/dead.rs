//! The dead-letter role: what `sluice dlq` and the redrive scheduler need.
//! Messages that ran out of attempts or were rejected wait here, with why,
//! until they are replayed onto their queue or purged.

use async_trait::async_trait;
use serde::Serialize;

use super::Result;

/// A queue's dead letters: listed, shown, replayed and purged.
#[async_trait]
pub trait DeadLetters: Send + Sync + 'static {
    /// The oldest `limit` dead letters of `queue`.
    async fn dead_letters(&self, queue: &str, limit: usize) -> Result<Vec<DeadLetter>>;

    /// One dead letter of `queue` by message id.
    async fn dead_letter(&self, queue: &str, id: &str) -> Result<Option<DeadLetter>>;

    /// Move the dead letters `selector` takes back to the queue with their
    /// attempts reset. Each moves atomically: replays running at once, on
    /// any number of hosts, never move one twice. Returns how many moved.
    async fn replay(&self, queue: &str, selector: &ReplaySelector) -> Result<u64>;

    /// Delete every dead letter of `queue`. Returns how many were deleted.
    async fn purge(&self, queue: &str) -> Result<u64>;
}

/// A message in the dead-letter store.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct DeadLetter {
    pub id: String,
    pub queue: String,
    pub key: String,
    #[serde(skip)]
    pub payload: Vec<u8>,
    pub headers: Vec<(String, String)>,
    pub attempts: u32,
    /// Scheduled redrives the message had been through when it died.
    pub redrives: u32,
    pub enqueued_at_ms: u64,
    pub died_at_ms: u64,
    pub reason: String,
    pub last_error: Option<String>,
    pub handler_version: Option<String>,
}

/// Which dead letters a replay takes: those that pass every filter that is
/// set, oldest death first. The default takes all of them.
#[derive(Clone, Debug, Default)]
pub struct ReplaySelector {
    /// Only these ids; any id when empty.
    pub ids: Vec<String>,
    /// Only those that died at or before this time (ms since the epoch).
    pub died_before_ms: Option<u64>,
    /// At most this many, the ones that died first.
    pub limit: Option<usize>,
    /// Only those with fewer scheduled redrives than this.
    pub max_redrives: Option<u32>,
    /// Whether this is a scheduled redrive: the re-queued message then
    /// carries one more redrive. A manual replay leaves the count as it was.
    pub redrive: bool,
}
