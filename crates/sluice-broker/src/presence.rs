//! The presence role: what `sluice stats` shows. Counts per queue, what
//! each running host says it serves, so that any host or CLI sees them all,
//! and which queues are paused, which every host serving them honours.

use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use super::Result;

/// Queue counts and the handler statuses hosts report.
#[async_trait]
pub trait Presence: Send + Sync + 'static {
    /// Counts for one queue.
    async fn queue_stats(&self, queue: &str) -> Result<QueueStats>;

    /// Counts for every queue the broker knows.
    async fn stats(&self) -> Result<Vec<QueueStats>>;

    /// Replace everything `host` reported about its handlers.
    async fn put_handler_statuses(&self, host: &str, statuses: Vec<HandlerStatus>) -> Result<()>;

    /// What every host reported, stale reports included (readers filter).
    async fn handler_statuses(&self) -> Result<Vec<HandlerStatus>>;

    /// Pause `queue` (`true`) or resume it. A paused queue's messages wait:
    /// no host leases them, so their attempts stay as they are. Calls in
    /// flight finish. Hosts look every [`PAUSE_POLL`].
    async fn set_paused(&self, queue: &str, paused: bool) -> Result<()>;

    /// The queues paused now, by name.
    async fn paused(&self) -> Result<Vec<String>>;
}

/// Per-queue counts for `sluice stats`. The JSON field names are stable.
#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
pub struct QueueStats {
    /// The queue counted.
    pub queue: String,
    /// Messages that can be leased now.
    pub ready: u64,
    /// Messages waiting for a delay: a delayed publish, a retry, a snooze.
    pub delayed: u64,
    /// Messages leased and not yet settled.
    pub in_flight: u64,
    /// Messages settled `done`, ever.
    pub done: u64,
    /// Deliveries settled as duplicates of a key already done, ever.
    pub duplicates: u64,
    /// Retries, ever.
    pub retried: u64,
    /// Dead letters held now.
    pub dead: u64,
    /// Settlements refused because their delivery had lost its lease: the
    /// message was delivered again meanwhile (the host was too slow, or
    /// stopped), so this delivery's result did not count.
    pub lost_leases: u64,
    /// Messages published to an ordered queue without a group value (the
    /// header missing, the pointer not resolving): handled unordered.
    pub ungrouped: u64,
    /// Paused: no host leases its messages until it is resumed.
    pub paused: bool,
}

impl QueueStats {
    /// Counts of a queue the broker holds nothing of.
    pub fn empty(queue: &str) -> Self {
        QueueStats {
            queue: queue.to_string(),
            ..QueueStats::default()
        }
    }

    /// Messages not yet settled: ready, delayed or in flight.
    pub fn pending(&self) -> u64 {
        self.ready + self.delayed + self.in_flight
    }
}

/// One host's view of one handler, for `sluice stats` and the registry's
/// own account of what it serves. Hosts write theirs when their handlers
/// change and every [`STATUS_EVERY`]; readers ignore entries older than
/// [`STATUS_STALE`], so a host that died drops out.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct HandlerStatus {
    /// The host reporting: its host name and process id.
    pub host: String,
    /// The handler's name (its file's stem).
    pub handler: String,
    /// The queue it serves; `None` when no version of it loads.
    pub queue: Option<String>,
    /// The content hash of the version serving.
    pub version: Option<String>,
    /// Files of this handler the host refused since it started.
    pub refusals: u64,
    /// Why the last refused file was refused.
    pub last_refusal: Option<String>,
    /// Times the handler's worker died and was started again.
    #[serde(default)]
    pub worker_restarts: u64,
    /// Why it died last.
    #[serde(default)]
    pub last_worker_failure: Option<String>,
    /// Log lines of the serving version dropped: over its `log_rate` or a
    /// call's budget.
    #[serde(default)]
    pub dropped_log_lines: u64,
    /// The flow limits of the serving version's queue: `max_in_flight`...
    #[serde(default)]
    pub max_in_flight: Option<u32>,
    /// ... and `rate`, as written (`200/s`).
    #[serde(default)]
    pub rate: Option<String>,
    /// The cron schedules of the serving version.
    #[serde(default)]
    pub schedules: Vec<ScheduleSpec>,
    /// The WIT world the serving version implements, e.g.
    /// `sluice:handler/handler@0.2.0`.
    #[serde(default)]
    pub world: Option<String>,
    /// The handler's instances in the host's pool: what it holds now, its
    /// floor and its cap.
    #[serde(default)]
    pub instances: Option<InstanceCounts>,
    /// The host's pool, over every handler it serves.
    #[serde(default)]
    pub pool: Option<PoolCounts>,
    /// When the host wrote this, in milliseconds since the Unix epoch.
    pub updated_at_ms: u64,
}

/// One handler's instances in its host's pool.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct InstanceCounts {
    /// Alive now, in a call or warm between calls.
    pub held: u64,
    /// Kept for it alone (`min_concurrency`).
    pub floor: u64,
    /// The most it runs at once (`concurrency`).
    pub cap: u64,
}

/// A host's pool of handler instances.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolCounts {
    /// Held now, over every handler.
    pub in_use: u64,
    /// Its size (`max_instances`).
    pub max_instances: u64,
}

/// A cron schedule as a host reports it: enough for a reader to say when
/// its next tick is due.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScheduleSpec {
    /// The schedule's name in its sidecar.
    pub name: String,
    /// The cron expression as written.
    pub cron: String,
    /// An IANA time zone name.
    pub timezone: String,
    /// `none`, `one` or `all`.
    pub catch_up: String,
}

/// How often a host reports its handlers' statuses.
pub const STATUS_EVERY: Duration = Duration::from_secs(10);
/// How often a host looks which queues are paused: a pause takes hold
/// within this (plus one broker round trip).
pub const PAUSE_POLL: Duration = Duration::from_millis(500);
/// How old a report may be before readers take its host for gone.
pub const STATUS_STALE: Duration = Duration::from_secs(60);

/// The handler statuses reported by hosts still running at `now_ms`: those
/// reported within [`STATUS_STALE`].
pub async fn fresh_statuses(presence: &dyn Presence, now_ms: u64) -> Result<Vec<HandlerStatus>> {
    let fresh_after = now_ms.saturating_sub(STATUS_STALE.as_millis() as u64);
    let mut all = presence.handler_statuses().await?;
    all.retain(|h| h.updated_at_ms >= fresh_after);
    Ok(all)
}
