//! Schedule ticks: a role of its own, so that every host running a handler
//! with a schedule can try to fire each tick and exactly one of them does.
//! A tick is fired only if it is later than the last tick fired for its
//! schedule; recording it and publishing its message are one step. Hosts
//! that try a schedule's due ticks in order therefore fire each of them
//! once between them, whichever host gets there first.

use async_trait::async_trait;

use super::Result;
use crate::message::NewMessage;

/// One tick of a schedule, to fire.
#[derive(Clone, Debug)]
pub struct Tick {
    /// The queue the schedule publishes to (its handler's queue).
    pub queue: String,
    /// The schedule's name, unique within its queue.
    pub schedule: String,
    /// When the tick is due, in milliseconds since the Unix epoch.
    pub at_ms: u64,
    /// What to publish to `queue`; `None` records the tick as passed
    /// without publishing (a tick skipped by the catch-up policy).
    pub message: Option<NewMessage>,
}

/// The last tick a schedule fired (or skipped).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LastTick {
    /// The schedule's queue.
    pub queue: String,
    /// The schedule's name within its queue.
    pub schedule: String,
    /// When that tick was due, in milliseconds since the Unix epoch.
    pub at_ms: u64,
}

/// The broker's record of schedule ticks, shared by every host.
#[async_trait]
pub trait Schedules: Send + Sync {
    /// Fire `tick` unless a tick of its schedule at or after it fired
    /// already: record it as the schedule's last and publish its message,
    /// in one step. True if this call fired it. A message for a queue other
    /// than the tick's is refused as invalid.
    async fn fire(&self, tick: Tick) -> Result<bool>;

    /// The last tick of every schedule, by queue, then schedule.
    async fn last_ticks(&self) -> Result<Vec<LastTick>>;
}

/// Refuse a tick whose message goes to another queue.
#[cfg(any(feature = "sqlite", feature = "redis", feature = "postgres"))]
pub(super) fn check(tick: &Tick) -> Result<()> {
    match &tick.message {
        Some(m) if m.queue != tick.queue => Err(super::BrokerError::Invalid(format!(
            "schedule {:?} of queue {:?} cannot publish to queue {:?}",
            tick.schedule, tick.queue, m.queue
        ))),
        _ => Ok(()),
    }
}
