//! The broker: where messages wait, are leased, settled and dead-lettered.
//!
//! One small trait with the same semantics on every backend. Calls work in
//! batches so that a networked backend makes one round trip per batch, not per
//! message. The embedded SQLite broker is the default.

use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::message::{Delivery, NewMessage};

pub mod kv;
pub mod redis;
pub mod sqlite;
pub mod topics;

pub use self::redis::RedisBroker;
pub use kv::KvStore;
pub use sqlite::SqliteBroker;
pub use topics::TopicStore;

#[derive(Debug, thiserror::Error)]
pub enum BrokerError {
    #[error("broker storage error: {0}")]
    Storage(String),
    #[error("broker unavailable: {0}")]
    Unavailable(String),
    #[error("{0}")]
    Invalid(String),
}

pub type Result<T, E = BrokerError> = std::result::Result<T, E>;

/// An idempotency key to take before a delivery is handled.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyClaim {
    pub key: String,
    pub message_id: String,
}

/// What came of a [`KeyClaim`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClaimState {
    /// The key is now leased to this delivery: handle it.
    Acquired,
    /// The key already completed within its retention: ack as a duplicate.
    AlreadyDone,
    /// Another delivery holds the key right now: try again later.
    Busy,
}

/// How one delivery ends its lease. Each is applied atomically.
#[derive(Clone, Debug)]
pub enum Settlement {
    /// Handled. Removes the message, records `key` as done for `retention`
    /// and commits `publishes`, all in one step. If the key turns out to be
    /// done already (a concurrent delivery won), the publishes are dropped
    /// and the message counts as a duplicate.
    Done {
        delivery: Delivery,
        key: Option<(String, Duration)>,
        publishes: Vec<NewMessage>,
    },
    /// The key had completed before: remove the message without handling it.
    Duplicate { delivery: Delivery },
    /// Deliver again after `delay`; this attempt counts. Releases `key`.
    Retry {
        delivery: Delivery,
        delay: Duration,
        error: String,
        key: Option<String>,
    },
    /// Put back for `delay` without counting an attempt (key busy, shutdown).
    Defer { delivery: Delivery, delay: Duration },
    /// Move to the dead letters. Releases `key`. `notice`, if any, is
    /// published in the same atomic step that stores the dead letter (the
    /// handler's `on_dead` hook), and only if it is stored.
    Dead {
        delivery: Delivery,
        reason: String,
        error: Option<String>,
        handler_version: Option<String>,
        key: Option<String>,
        notice: Option<NewMessage>,
    },
}

impl Settlement {
    pub fn delivery(&self) -> &Delivery {
        match self {
            Settlement::Done { delivery, .. }
            | Settlement::Duplicate { delivery }
            | Settlement::Retry { delivery, .. }
            | Settlement::Defer { delivery, .. }
            | Settlement::Dead { delivery, .. } => delivery,
        }
    }
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

/// Per-queue counts for `sluice stats`. The JSON field names are stable.
#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
pub struct QueueStats {
    pub queue: String,
    pub ready: u64,
    pub delayed: u64,
    pub in_flight: u64,
    pub done: u64,
    pub duplicates: u64,
    pub retried: u64,
    pub dead: u64,
}

impl QueueStats {
    /// Messages not yet settled: ready, delayed or in flight.
    pub fn pending(&self) -> u64 {
        self.ready + self.delayed + self.in_flight
    }
}

/// One host's view of one handler, for `sluice stats`. Hosts write theirs
/// when their handlers change and every [`STATUS_EVERY`]; readers ignore
/// entries older than [`STATUS_STALE`], so a host that died drops out.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct HandlerStatus {
    pub host: String,
    pub handler: String,
    /// The queue it serves; `None` when no version of it loads.
    pub queue: Option<String>,
    /// The content hash of the version serving.
    pub version: Option<String>,
    /// Files of this handler the host refused since it started.
    pub refusals: u64,
    pub last_refusal: Option<String>,
    pub updated_at_ms: u64,
}

pub const STATUS_EVERY: Duration = Duration::from_secs(10);
pub const STATUS_STALE: Duration = Duration::from_secs(60);

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

/// Every broker also keeps the handlers' key-value stores ([`KvStore`]) and
/// the topics' bindings ([`TopicStore`]).
#[async_trait]
pub trait Broker: KvStore + TopicStore + Send + Sync + 'static {
    /// Enqueue messages, each after its own delay. Returns their ids in order.
    async fn publish(&self, messages: Vec<NewMessage>) -> Result<Vec<String>>;

    /// Lease up to `max` due messages of `queue` for `lease`. Every delivery
    /// counts one attempt, whether or not it is settled before the lease ends.
    async fn receive(&self, queue: &str, max: usize, lease: Duration) -> Result<Vec<Delivery>>;

    /// Take idempotency keys of `queue` for `lease`, one answer per claim.
    async fn claim(
        &self,
        queue: &str,
        claims: &[KeyClaim],
        lease: Duration,
    ) -> Result<Vec<ClaimState>>;

    /// End leases. A settlement whose lease was lost to another consumer is
    /// ignored, except `Done`, which still records its key so the other
    /// consumer's copy becomes a duplicate.
    async fn settle(&self, settlements: &[Settlement]) -> Result<()>;

    /// Counts for one queue.
    async fn queue_stats(&self, queue: &str) -> Result<QueueStats>;

    /// Counts for every queue the broker knows.
    async fn stats(&self) -> Result<Vec<QueueStats>>;

    /// The oldest `limit` dead letters of `queue`.
    async fn dead_letters(&self, queue: &str, limit: usize) -> Result<Vec<DeadLetter>>;

    async fn dead_letter(&self, queue: &str, id: &str) -> Result<Option<DeadLetter>>;

    /// Move the dead letters `selector` takes back to the queue with their
    /// attempts reset. Each moves atomically: replays running at once, on
    /// any number of hosts, never move one twice. Returns how many moved.
    async fn replay(&self, queue: &str, selector: &ReplaySelector) -> Result<u64>;

    /// Delete every dead letter of `queue`. Returns how many were deleted.
    async fn purge(&self, queue: &str) -> Result<u64>;

    /// Replace everything `host` reported about its handlers.
    async fn put_handler_statuses(&self, host: &str, statuses: Vec<HandlerStatus>) -> Result<()>;

    /// What every host reported, stale reports included (readers filter).
    async fn handler_statuses(&self) -> Result<Vec<HandlerStatus>>;

    /// Finish what the broker does in the background for this host before it
    /// exits: on Redis, move held publishes from the outboxes of the queues
    /// it served to their targets.
    async fn flush(&self) -> Result<()> {
        Ok(())
    }
}

/// Open the broker a URL names: `sqlite://PATH` or `redis://HOST:PORT[/DB]`.
pub async fn connect(url: &str) -> anyhow::Result<std::sync::Arc<dyn Broker>> {
    if let Some(path) = url.strip_prefix("sqlite://") {
        if path.is_empty() {
            anyhow::bail!("broker URL {url:?} has no file path; write it like sqlite://sluice.db");
        }
        return Ok(std::sync::Arc::new(SqliteBroker::open(path)?));
    }
    if url.starts_with("redis://") {
        return Ok(std::sync::Arc::new(RedisBroker::connect(url).await?));
    }
    anyhow::bail!("unknown broker URL {url:?}: use sqlite://PATH or redis://HOST:PORT")
}
