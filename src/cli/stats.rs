//! `sluice stats`.

use anyhow::Result;
use clap::Args;

use super::Context;
use crate::broker::{HandlerStatus, STATUS_STALE};
use crate::message::now_ms;

/// The arguments of `sluice stats`.
#[derive(Debug, Args)]
pub struct StatsArgs {
    /// With --json: print the handlers the running hosts report instead of
    /// the queues.
    #[arg(long)]
    pub handlers: bool,
}

pub async fn stats(ctx: &Context, args: StatsArgs) -> Result<()> {
    let broker = ctx.broker().await?;
    let all = broker.stats().await?;
    let fresh_after = now_ms().saturating_sub(STATUS_STALE.as_millis() as u64);
    let handlers: Vec<HandlerStatus> = broker
        .handler_statuses()
        .await?
        .into_iter()
        .filter(|h| h.updated_at_ms >= fresh_after)
        .collect();
    if ctx.json {
        if args.handlers {
            for h in &handlers {
                super::print_json(h)?;
            }
        } else {
            for q in &all {
                super::print_json(q)?;
            }
        }
        return Ok(());
    }
    println!(
        "{:<24} {:>9} {:>9} {:>9} {:>9} {:>10} {:>9} {:>9}  STATE",
        "QUEUE", "READY", "DELAYED", "IN_FLIGHT", "DONE", "DUPLICATES", "RETRIED", "DEAD"
    );
    for q in &all {
        let state = if q.paused { "paused" } else { "running" };
        println!(
            "{:<24} {:>9} {:>9} {:>9} {:>9} {:>10} {:>9} {:>9}  {state}",
            q.queue, q.ready, q.delayed, q.in_flight, q.done, q.duplicates, q.retried, q.dead
        );
    }
    if !handlers.is_empty() {
        println!();
        println!(
            "{:<20} {:<24} {:<20} {:<16} {:>8} {:>8}  LAST REFUSAL OR FAILURE",
            "HANDLER", "HOST", "QUEUE", "VERSION", "REFUSALS", "RESTARTS"
        );
        for h in &handlers {
            let last = h
                .last_worker_failure
                .as_deref()
                .map(|f| format!("worker died: {f}"))
                .or_else(|| h.last_refusal.clone())
                .unwrap_or_else(|| "-".into());
            println!(
                "{:<20} {:<24} {:<20} {:<16} {:>8} {:>8}  {last}",
                h.handler,
                h.host,
                h.queue.as_deref().unwrap_or("-"),
                h.version.as_deref().unwrap_or("(none)"),
                h.refusals,
                h.worker_restarts,
            );
        }
    }
    Ok(())
}
