//! The dead-letter role: what `sluice dlq` and the redrive scheduler need.
//! Messages that ran out of attempts or were rejected wait here, with why,
//! until they are replayed onto their queue or purged.

use async_trait::async_trait;
use base64::Engine as _;
use serde::Serialize;

use super::Result;
use crate::units::parse_duration;

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
    /// The message id, kept through replays.
    pub id: String,
    /// The queue it died in, and goes back to when replayed.
    pub queue: String,
    /// The idempotency key (the id when none was given).
    pub key: String,
    /// The body, as published (left out of the JSON).
    #[serde(skip)]
    pub payload: Vec<u8>,
    /// The headers, as published.
    pub headers: Vec<(String, String)>,
    /// Attempts made before it died.
    pub attempts: u32,
    /// Scheduled redrives the message had been through when it died.
    pub redrives: u32,
    /// When it was published, in milliseconds since the Unix epoch.
    pub enqueued_at_ms: u64,
    /// When it died, in milliseconds since the Unix epoch.
    pub died_at_ms: u64,
    /// Why it died (`rejected: ...`, `gave up after N attempt(s)`, ...).
    pub reason: String,
    /// The last attempt's error, if it failed.
    pub last_error: Option<String>,
    /// The content hash of the handler version that handled it last.
    pub handler_version: Option<String>,
    /// The ordered group the message was in, if any (`[ordering]`).
    #[serde(default)]
    pub group: Option<String>,
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

impl ReplaySelector {
    /// A replay by hand, from its options as a person typed them: `ids`,
    /// `older_than` (a duration, e.g. `10m`) and `limit` (a count). `names`
    /// are what the caller calls the last two (flags, or parameters), for
    /// errors that name them. A replay by hand is not one of the scheduled
    /// redrives: it takes dead letters whatever their redrives, and does not
    /// count one.
    pub fn by_hand(
        ids: Vec<String>,
        older_than: Option<&str>,
        limit: Option<&str>,
        now_ms: u64,
        names: [&str; 2],
    ) -> std::result::Result<Self, String> {
        let [older_than_name, limit_name] = names;
        let died_before_ms = match older_than {
            Some(text) => {
                let age = parse_duration(text).map_err(|e| format!("{older_than_name}: {e}"))?;
                Some(now_ms.saturating_sub(age.as_millis() as u64))
            }
            None => None,
        };
        let limit = match limit {
            Some(text) => match text.trim().parse::<usize>() {
                Ok(n) if n > 0 => Some(n),
                _ => {
                    return Err(format!(
                        "{limit_name}: bad number {text:?}; give how many dead letters at most, 1 or more"
                    ));
                }
            },
            None => None,
        };
        Ok(ReplaySelector {
            ids,
            died_before_ms,
            limit,
            ..ReplaySelector::default()
        })
    }
}

impl DeadLetter {
    /// The dead letter as JSON, with its payload as text when it is UTF-8
    /// (`payload`) and as base64 otherwise (`payload_base64`).
    pub fn to_json(&self) -> serde_json::Value {
        let mut v = serde_json::to_value(self).expect("dead letters serialize");
        let obj = v.as_object_mut().expect("a dead letter is an object");
        match std::str::from_utf8(&self.payload) {
            Ok(text) => obj.insert("payload".into(), text.into()),
            Err(_) => obj.insert(
                "payload_base64".into(),
                base64::engine::general_purpose::STANDARD
                    .encode(&self.payload)
                    .into(),
            ),
        };
        v
    }
}
