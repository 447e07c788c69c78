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
//! extension succeeded ([`crate::serve::worker::Progress`]). A worker that
//! holds nothing and waits for work (its last receive found none, and its
//! broker's idle wait has not run past its longest) has nothing it could
//! take. The watchdog reads those marks every `stall_after / 4`, and the
//! broker's counts of the queues not waiting for work (one call each, or
//! one stats call of every queue when they are many; bounded by
//! `broker_timeout`). When the broker does not answer, it judges by the
//! last counts it gave: a queue that had ready messages then still has
//! them.

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
    let mut counts: BTreeMap<String, QueueStats> = BTreeMap::new();
    loop {
        tokio::time::sleep(tick).await;
        let watched = registry.watched().await;
        // Counts are read of the queues not waiting for work: a host whose
        // queues are all idle asks the broker nothing here.
        let busy: Vec<&str> = (watched.iter())
            .filter(|w| !waits_for_work(w, &settings))
            .map(|w| w.queue.as_str())
            .collect();
        if !busy.is_empty() {
            let read = read_counts(&*broker, &busy);
            if let Ok(Ok(read)) = tokio::time::timeout(settings.broker_timeout, read).await {
                counts.extend(read.into_iter().map(|s| (s.queue.clone(), s)));
            }
        }
        let now = judge_all(&counts, &watched, &settings);
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

/// Queues (of many) whose counts are read with one stats call of every
/// queue rather than one call each.
const COUNTS_ONE_BY_ONE: usize = 32;

/// The counts of `queues`: one call each, or one stats call of every queue
/// when they are many.
async fn read_counts(
    broker: &dyn Broker,
    queues: &[&str],
) -> crate::broker::Result<Vec<QueueStats>> {
    if queues.len() > COUNTS_ONE_BY_ONE {
        return broker.stats().await;
    }
    let mut out = Vec::with_capacity(queues.len());
    for q in queues {
        out.push(broker.queue_stats(q).await?);
    }
    Ok(out)
}

/// Each watched queue judged stalled now, with what it waits on, by the
/// broker's last `counts` of it.
fn judge_all(
    counts: &BTreeMap<String, QueueStats>,
    watched: &[Watched],
    settings: &WatchSettings,
) -> BTreeMap<String, String> {
    let suspects: Vec<&Watched> = watched.iter().filter(|w| suspect(w, settings)).collect();
    let mut stalled = BTreeMap::new();
    for w in suspects {
        if could_move(w, counts.get(&w.queue), settings.stall_after) {
            stalled.insert(w.queue.clone(), w.stats.progress.waiting_on());
        }
    }
    stalled
}

/// Whether `w` has not moved for `stall_after`, unpaused, and does not
/// wait for work as a worker should: one whose last receive found nothing
/// and whose broker's idle wait has not run past its longest
/// ([`IDLE_MOST`](crate::broker::IDLE_MOST), and the bound on the look it
/// takes) has nothing it could take. A batch handler's caller may hold
/// deliveries for `batch_wait`.
fn suspect(w: &Watched, settings: &WatchSettings) -> bool {
    !w.paused
        && !waits_for_work(w, settings)
        && w.stats.progress.still_for() >= settings.stall_after + w.spec.batch.wait
}

/// Whether `w`'s worker holds nothing and waits for work, within the
/// longest its broker's idle wait takes.
fn waits_for_work(w: &Watched, settings: &WatchSettings) -> bool {
    w.stats
        .progress
        .idle_for()
        .is_some_and(|idle| idle < crate::broker::IDLE_MOST + settings.broker_timeout)
        && w.stats.in_flight.load(Ordering::Relaxed) == 0
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
