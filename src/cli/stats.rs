//! `sluice stats`.

use anyhow::Result;
use clap::Args;

use super::Context;
use crate::base::schedule::{self, ScheduleView};
use crate::broker::{HandlerStatus, QueueStats, fresh_statuses};
use crate::message::now_ms;

/// The arguments of `sluice stats`.
#[derive(Debug, Args)]
pub(crate) struct StatsArgs {
    /// With --json: print the handlers the running hosts report instead of
    /// the queues.
    #[arg(long, conflicts_with = "schedules")]
    pub(crate) handlers: bool,
    /// With --json: print the cron schedules, with their last and next
    /// tick, instead of the queues.
    #[arg(long)]
    pub(crate) schedules: bool,
}

pub(crate) async fn stats(ctx: &Context, args: StatsArgs) -> Result<()> {
    let broker = ctx.broker().await?;
    let all = broker.stats().await?;
    let now = now_ms();
    let handlers = fresh_statuses(&*broker, now).await?;
    if ctx.json {
        if args.handlers {
            for h in &handlers {
                super::print_json(h)?;
            }
        } else if args.schedules {
            for s in &schedule::overview(&*broker, &handlers, now).await? {
                super::print_json(s)?;
            }
        } else {
            for q in &all {
                super::print_json(q)?;
            }
        }
        return Ok(());
    }
    print_queues(&all);
    print_handlers(&handlers);
    print_schedules(&schedule::overview(&*broker, &handlers, now).await?);
    Ok(())
}

/// The queues table.
fn print_queues(all: &[QueueStats]) {
    outln!(
        "{:<24} {:>9} {:>9} {:>9} {:>9} {:>10} {:>9} {:>9} {:>11} {:>9}  STATE",
        "QUEUE",
        "READY",
        "DELAYED",
        "IN_FLIGHT",
        "DONE",
        "DUPLICATES",
        "RETRIED",
        "DEAD",
        "LOST_LEASES",
        "UNGROUPED"
    );
    for q in all {
        let state = if q.paused { "paused" } else { "running" };
        outln!(
            "{:<24} {:>9} {:>9} {:>9} {:>9} {:>10} {:>9} {:>9} {:>11} {:>9}  {state}",
            q.queue,
            q.ready,
            q.delayed,
            q.in_flight,
            q.done,
            q.duplicates,
            q.retried,
            q.dead,
            q.lost_leases,
            q.ungrouped
        );
    }
}

/// The handlers the running hosts report, when there are any.
fn print_handlers(handlers: &[HandlerStatus]) {
    if handlers.is_empty() {
        return;
    }
    outln!("");
    outln!(
        "{:<20} {:<24} {:<20} {:<16} {:<20} {:<16} {:>14} {:>8} {:>8}  LAST REFUSAL OR FAILURE",
        "HANDLER",
        "HOST",
        "QUEUE",
        "VERSION",
        "WORLD",
        "LIMITS",
        "INSTANCES",
        "REFUSALS",
        "RESTARTS"
    );
    for h in handlers {
        let last = h
            .last_worker_failure
            .as_deref()
            .map(|f| format!("worker died: {f}"))
            .or_else(|| h.last_refusal.clone())
            .unwrap_or_else(|| "-".into());
        // The package is always sluice:handler: the world and version say it.
        let world = h
            .world
            .as_deref()
            .map(|w| w.trim_start_matches("sluice:handler/"));
        outln!(
            "{:<20} {:<24} {:<20} {:<16} {:<20} {:<16} {:>14} {:>8} {:>8}  {last}",
            h.handler,
            h.host,
            h.queue.as_deref().unwrap_or("-"),
            h.version.as_deref().unwrap_or("(none)"),
            world.unwrap_or("-"),
            limits(h),
            instances(h),
            h.refusals,
            h.worker_restarts,
        );
    }
    print_pools(handlers);
}

/// A handler's instances as `held (floor-cap)`: `2 (1-16)`; `-` when its
/// host did not say.
fn instances(h: &HandlerStatus) -> String {
    h.instances.map_or_else(
        || "-".into(),
        |i| format!("{} ({}-{})", i.held, i.floor, i.cap),
    )
}

/// Each host's pool of instances: in use over every handler, of its
/// `max_instances`.
fn print_pools(handlers: &[HandlerStatus]) {
    let mut pools: std::collections::BTreeMap<&str, crate::broker::PoolCounts> =
        std::collections::BTreeMap::new();
    for h in handlers {
        if let Some(p) = h.pool {
            pools.insert(&h.host, p);
        }
    }
    for (host, p) in pools {
        outln!(
            "host {host}: {} of {} handler instances in use (max_instances)",
            p.in_use,
            p.max_instances
        );
    }
}

/// A handler's flow limits, as `max 4, 200/s`; `-` without any.
fn limits(h: &HandlerStatus) -> String {
    let max = h.max_in_flight.map(|n| format!("max {n}"));
    let all: Vec<String> = max.into_iter().chain(h.rate.clone()).collect();
    if all.is_empty() {
        "-".into()
    } else {
        all.join(", ")
    }
}

/// The schedules table, when there are schedules.
fn print_schedules(schedules: &[ScheduleView]) {
    if schedules.is_empty() {
        return;
    }
    let tick = |ms: Option<u64>| ms.map_or_else(|| "-".to_string(), schedule::rfc3339);
    outln!("");
    outln!(
        "{:<20} {:<20} {:<16} {:<14} {:<21} {:<21}",
        "QUEUE",
        "SCHEDULE",
        "CRON",
        "TIMEZONE",
        "LAST TICK",
        "NEXT TICK"
    );
    for s in schedules {
        outln!(
            "{:<20} {:<20} {:<16} {:<14} {:<21} {}",
            s.queue,
            s.schedule,
            s.cron.as_deref().unwrap_or("(no host)"),
            s.timezone.as_deref().unwrap_or("-"),
            tick(s.last_tick_ms),
            tick(s.next_tick_ms),
        );
    }
}
