//! The stall watchdog: a queue this host serves is stalled when its work
//! could move and has not for `stall_after`. Then the host logs an error
//! once, naming the queue and what it waits on, `/readyz` says not ready,
//! `sluice_queue_stalled{queue}` is 1 and the dashboard shows it; with
//! `exit_on_stall` the host exits non-zero for its supervisor to restart
//! it. It clears, with a log line, when work moves again.
//!
//! Work "could move" when, on this host, the queue is not paused and
//! either
//!
//! - deliveries it leased wait outside a handler call while a caller is
//!   free (they wait on a broker call: taking keys or settling), or
//! - the queue has ready messages this host may take: it has room for more
//!   leases and a free caller, `max_in_flight` is not reached over every
//!   host, `rate` allows at least one lease per `stall_after`, and, for a
//!   queue of ordered groups, none of its messages is in flight or (with
//!   `block_on_dead`) dead, so no group holds the ready ones back.
//!
//! Work moved when a receive leased something, or a settle or a lease
//! extension succeeded ([`crate::serve::worker::Progress`]). The watchdog reads
//! those marks, and the broker's counts (one stats call, bounded by
//! `broker_timeout`), every `stall_after / 4`. When the broker does not
//! answer, it judges by the last counts it gave: a queue that had ready
//! messages then still has them.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::{Result, bail};

use crate::broker::{Broker, QueueStats};
use crate::serve::registry::{Registry, Watched};
use crate::serve::stall::StallBoard;

/// The default of `stall_after`.
pub(crate) const DEFAULT_STALL_AFTER: Duration = Duration::from_secs(30);

/// How the watchdog is set.
#[derive(Clone, Copy, Debug)]
pub(crate) struct WatchSettings {
    pub(crate) stall_after: Duration,
    pub(crate) exit_on_stall: bool,
    /// The bound on its own stats call.
    pub(crate) broker_timeout: Duration,
}

/// Watch `registry`'s workers until a stall with `exit_on_stall` (an error
/// naming it); never ends otherwise.
pub(crate) async fn run(
    broker: Arc<dyn Broker>,
    registry: Arc<Registry>,
    settings: WatchSettings,
    on_change: impl Fn(&BTreeMap<String, String>),
) -> Result<()> {
    let board: Arc<StallBoard> = registry.observers().stalls.clone();
    let tick = (settings.stall_after / 4).clamp(Duration::from_millis(250), Duration::from_secs(5));
    // Judged stalled at the last tick: a queue is reported at its second.
    let mut seen: BTreeMap<String, String> = BTreeMap::new();
    let mut counts: Option<Vec<QueueStats>> = None;
    loop {
        tokio::time::sleep(tick).await;
        if let Ok(Ok(all)) = tokio::time::timeout(settings.broker_timeout, broker.stats()).await {
            counts = Some(all);
        }
        let watched = registry.watched().await;
        let now = judge_all(counts.as_deref(), &watched, &settings);
        let confirmed: BTreeMap<String, String> = now
            .iter()
            .filter(|(q, _)| seen.contains_key(*q))
            .map(|(q, why)| (q.clone(), why.clone()))
            .collect();
        let before = board.all();
        report(&before, &confirmed, settings.stall_after);
        if before != confirmed {
            on_change(&confirmed);
        }
        board.set(confirmed.clone());
        seen = now;
        if settings.exit_on_stall
            && let Some((queue, why)) = confirmed.iter().next()
        {
            bail!(
                "queue {queue} stalled (waiting on {why}) and exit_on_stall is set: exiting for the supervisor to restart the host"
            );
        }
    }
}

/// Log the queues that stalled since `before`, and those that moved again.
fn report(before: &BTreeMap<String, String>, now: &BTreeMap<String, String>, after: Duration) {
    for (queue, why) in now.iter().filter(|(q, _)| !before.contains_key(*q)) {
        tracing::error!(
            queue = %queue,
            "queue {queue} is stalled: it has work that could move and nothing moved for {after:?} (stall_after); waiting on {why}"
        );
    }
    for queue in before.keys().filter(|q| !now.contains_key(*q)) {
        tracing::info!(queue = %queue, "queue {queue} moves again; the stall is over");
    }
}

/// Each watched queue judged stalled now, with what it waits on, by the
/// broker's last `counts`.
fn judge_all(
    counts: Option<&[QueueStats]>,
    watched: &[Watched],
    settings: &WatchSettings,
) -> BTreeMap<String, String> {
    let suspects: Vec<&Watched> = watched
        .iter()
        // A batch handler's caller may hold deliveries for `batch_wait`.
        .filter(|w| {
            !w.paused && w.stats.progress.still_for() >= settings.stall_after + w.spec.batch.wait
        })
        .collect();
    let mut stalled = BTreeMap::new();
    for w in suspects {
        let count = counts.map(|all| {
            all.iter()
                .find(|s| s.queue == w.queue)
                .cloned()
                .unwrap_or_else(|| QueueStats::empty(&w.queue))
        });
        if could_move(w, count.as_ref(), settings.stall_after) {
            stalled.insert(w.queue.clone(), w.stats.progress.waiting_on());
        }
    }
    stalled
}

/// Whether `w`'s work could move now (see the module); `count`: the
/// queue's counts, when the broker gave them.
fn could_move(w: &Watched, count: Option<&QueueStats>, stall_after: Duration) -> bool {
    let stats = &w.stats;
    let leased = stats.in_flight.load(Ordering::Relaxed);
    let calling = stats.calling.load(Ordering::Relaxed);
    let caller_free = (stats.busy_callers.load(Ordering::Relaxed) as usize) < w.spec.concurrency;
    if leased > calling && caller_free {
        return true;
    }
    let Some(count) = count else {
        // The broker never gave counts: ready messages cannot be told from none.
        return false;
    };
    let room = (leased as usize) < w.spec.prefetch && caller_free;
    room && count.ready > 0 && !held_back(w, count, stall_after)
}

/// Whether the queue's own limits keep its ready messages waiting.
fn held_back(w: &Watched, count: &QueueStats, stall_after: Duration) -> bool {
    let flow = &w.spec.flow;
    if flow
        .max_in_flight
        .is_some_and(|max| count.in_flight >= u64::from(max))
    {
        return true;
    }
    // Slower than one lease per stall_after: not moving is expected.
    if flow
        .rate
        .is_some_and(|r| r.per_ms() * (stall_after.as_millis() as f64) < 1.0)
    {
        return true;
    }
    w.spec.ordering.as_ref().is_some_and(|o| {
        count.in_flight > 0 || count.delayed > 0 || (o.block_on_dead && count.dead > 0)
    })
}
