//! The host's loop that fires the due ticks of its handlers' cron
//! schedules. Every host serving a handler runs it; the broker fires each
//! tick once, so however many hosts there are, a tick publishes one
//! message ([`crate::broker::Schedules`]).
//!
//! Between ticks the loop does not touch the broker: it keeps when each
//! schedule is next due and reads the last ticks only when one is.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use crate::base::schedule::{MAX_CATCH_UP, Schedule, rfc3339};
use crate::broker::{self, BrokerError, LastTick, Schedules};
use crate::error::chain;
use crate::serve::redrive::Clock;
use crate::serve::registry::Registry;

/// How often the loop wakes to see which schedules are due: a tick fires
/// within this of its time (plus a broker round trip).
pub(crate) const WAKE_EVERY: Duration = Duration::from_secs(1);

/// Fire, for as long as it runs, the due ticks of every schedule of the
/// serving handlers in `registry`, on `clock`. A handler loaded, changed
/// or removed later is followed.
pub(crate) async fn run(
    broker: Arc<dyn Schedules>,
    registry: Arc<Registry>,
    clock: Arc<dyn Clock>,
) {
    // Each schedule as last seen, by queue and name, and when it is next
    // due; one not here (or changed) is looked at on the next wake.
    let mut next: HashMap<(String, String), (Schedule, u64)> = HashMap::new();
    loop {
        clock.sleep(WAKE_EVERY).await;
        let now = clock.now_ms();
        let schedules = registry.schedules().await;
        // A schedule gone or changed is forgotten (equal schedules have
        // equal names).
        next.retain(|(q, _), (s, _)| schedules.iter().any(|(q2, s2)| q2 == q && s2 == s));
        let due: Vec<(String, Schedule)> = schedules
            .into_iter()
            .filter(|(q, s)| {
                next.get(&(q.clone(), s.name.clone()))
                    .is_none_or(|(_, at)| *at <= now)
            })
            .collect();
        if due.is_empty() {
            continue;
        }
        let last = match broker.last_ticks().await {
            Ok(last) => last,
            Err(e) => {
                tracing::warn!(error = %chain(&e), "cannot read the schedules' last ticks; trying again in {WAKE_EVERY:?}");
                continue;
            }
        };
        for (queue, schedule) in due {
            let last_ms = last_tick(&last, &queue, &schedule.name);
            match fire_due(&*broker, &queue, &schedule, last_ms, now).await {
                Ok(planned) => {
                    // A catch-up cut short goes on at the next wake.
                    let at = if planned >= MAX_CATCH_UP {
                        now
                    } else {
                        schedule.next_after(now).unwrap_or(u64::MAX)
                    };
                    next.insert((queue, schedule.name.clone()), (schedule, at));
                }
                Err(e) => {
                    tracing::warn!(queue = %queue, schedule = %schedule.name, error = %chain(&e), "cannot fire the schedule's due tick; trying again in {WAKE_EVERY:?}");
                }
            }
        }
    }
}

fn last_tick(last: &[LastTick], queue: &str, schedule: &str) -> Option<u64> {
    last.iter()
        .find(|t| t.queue == queue && t.schedule == schedule)
        .map(|t| t.at_ms)
}

/// Fire the ticks of `schedule` due at `now_ms`, oldest first; returns how
/// many there were. A tick whose message the broker refuses as invalid is
/// recorded without it, so that it is not tried at every wake.
pub(crate) async fn fire_due(
    broker: &dyn Schedules,
    queue: &str,
    schedule: &Schedule,
    last_ms: Option<u64>,
    now_ms: u64,
) -> broker::Result<usize> {
    let ticks = schedule.due(queue, last_ms, now_ms);
    let planned = ticks.len();
    for tick in ticks {
        let at = tick.at_ms;
        let publishes = tick.message.is_some();
        let skipped = tick.clone();
        let fired = match broker.fire(tick).await {
            Err(BrokerError::Invalid(why)) => {
                tracing::error!(queue, schedule = %schedule.name, tick = %rfc3339(at), "the schedule's message is refused ({why}); skipping the tick");
                broker
                    .fire(broker::Tick {
                        message: None,
                        ..skipped
                    })
                    .await?;
                continue;
            }
            r => r?,
        };
        match (fired, publishes) {
            (true, true) => {
                tracing::debug!(queue, schedule = %schedule.name, tick = %rfc3339(at), "fired the schedule's tick")
            }
            (true, false) if last_ms.is_some() => {
                tracing::info!(queue, schedule = %schedule.name, tick = %rfc3339(at), "skipped the schedule's tick: it is over a minute late and catch_up is \"none\"")
            }
            _ => {}
        }
    }
    Ok(planned)
}
