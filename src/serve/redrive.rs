//! Scheduled redrive: the dead letters of a handler with `redrive_every` go
//! back to its queue, attempts reset, once they have been dead that long,
//! until they have been through `max_redrives` redrives; then they stay dead.
//!
//! Every host runs this for the handlers it serves, so several hosts may
//! redrive one queue at once. That is safe because the broker moves each
//! dead letter atomically (none is redriven twice) and the redrive count
//! travels with the message (`max_redrives` holds however many hosts there
//! are).
//!
//! Time comes from a [`Clock`]: the system's in production, one the test
//! moves on by hours in an instant otherwise. Both when to look and what is
//! old enough come from it, so the schedule can be tested without waiting.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use crate::broker::{self, DeadLetters, ReplaySelector};
use crate::error::chain;
use crate::policy::RedrivePolicy;
use crate::serve::registry::Registry;

/// Where the scheduler gets the time and waits.
#[async_trait]
pub trait Clock: Send + Sync + 'static {
    /// Milliseconds since the Unix epoch.
    fn now_ms(&self) -> u64;
    /// Resolves once `duration` has passed on this clock.
    async fn sleep(&self, duration: Duration);
}

/// The system clock and tokio's timers.
#[derive(Debug, Default)]
pub(crate) struct SystemClock;

#[async_trait]
impl Clock for SystemClock {
    fn now_ms(&self) -> u64 {
        crate::message::now_ms()
    }

    async fn sleep(&self, duration: Duration) {
        tokio::time::sleep(duration).await
    }
}

/// How often the scheduler wakes to see which queues are due. Each queue is
/// looked at only every [`RedrivePolicy::check_every`].
const WAKE_EVERY: Duration = Duration::from_secs(1);

/// The dead letters a redrive takes at `now_ms`: dead for `every`, with
/// redrives left. They come back with one redrive more.
pub(crate) fn selector(policy: &RedrivePolicy, now_ms: u64) -> ReplaySelector {
    ReplaySelector {
        died_before_ms: Some(policy.due_if_died_by(now_ms)),
        max_redrives: Some(policy.max_redrives),
        redrive: true,
        ..ReplaySelector::default()
    }
}

/// Redrive the due dead letters of one queue; returns how many went back.
pub(crate) async fn redrive_queue(
    broker: &dyn DeadLetters,
    queue: &str,
    policy: &RedrivePolicy,
    now_ms: u64,
) -> broker::Result<u64> {
    let n = broker.replay(queue, &selector(policy, now_ms)).await?;
    if n > 0 {
        tracing::info!(
            queue,
            redriven = n,
            max_redrives = policy.max_redrives,
            "redrove {n} dead letter(s) of queue {queue}"
        );
    }
    Ok(n)
}

/// Redrive, for as long as it runs, the dead letters of every queue whose
/// serving handler in `registry` asks for it. A handler loaded, changed or
/// removed later is followed.
pub(crate) async fn run(
    broker: Arc<dyn DeadLetters>,
    registry: Arc<Registry>,
    clock: Arc<dyn Clock>,
) {
    // When each queue is next due, by the clock.
    let mut next: HashMap<String, u64> = HashMap::new();
    loop {
        clock.sleep(WAKE_EVERY).await;
        let now = clock.now_ms();
        let policies = registry.redrives().await;
        next.retain(|queue, _| policies.iter().any(|(q, _)| q == queue));
        for (queue, policy) in policies {
            if next.get(&queue).is_some_and(|at| now < *at) {
                continue;
            }
            let check = policy.check_every();
            if let Err(e) = redrive_queue(&*broker, &queue, &policy, now).await {
                tracing::warn!(queue = %queue, error = %chain(&e), "redriving dead letters failed; trying again in {check:?}");
            }
            next.insert(queue, now + check.as_millis() as u64);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_redrive_takes_what_has_been_dead_long_enough_with_redrives_left() {
        let policy = RedrivePolicy {
            every: Duration::from_secs(600),
            max_redrives: 2,
        };
        let s = selector(&policy, 1_000_000);
        assert_eq!(s.died_before_ms, Some(400_000));
        assert_eq!(s.max_redrives, Some(2));
        assert!(s.redrive, "it counts as a redrive");
        assert!(s.ids.is_empty() && s.limit.is_none(), "{s:?}");
    }
}
