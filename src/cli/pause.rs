//! `sluice pause QUEUE` and `sluice resume QUEUE`.

use anyhow::{Context as _, Result, bail};
use clap::Args;

use super::{Context, print_json};
use crate::broker::{PAUSE_POLL, Presence};

/// The arguments of `sluice pause` and `sluice resume`.
#[derive(Debug, Args)]
pub(crate) struct PauseArgs {
    /// The queue.
    pub(crate) queue: String,
}

/// Pause (`true`) or resume a queue on every host that serves it.
pub(crate) async fn set_paused(ctx: &Context, args: PauseArgs, paused: bool) -> Result<()> {
    let queue = args.queue.trim();
    if queue.is_empty() {
        bail!(
            "give the queue to {}",
            if paused { "pause" } else { "resume" }
        );
    }
    let broker: std::sync::Arc<dyn Presence> = ctx.broker().await?;
    broker
        .set_paused(queue, paused)
        .await
        .with_context(|| format!("cannot change queue {queue:?} on {}", ctx.broker_url))?;
    if ctx.json {
        return print_json(&serde_json::json!({ "queue": queue, "paused": paused }));
    }
    if paused {
        outln!(
            "paused queue {queue}: every host stops leasing its messages within {PAUSE_POLL:?}; calls in flight finish; `sluice resume {queue}` undoes it"
        );
    } else {
        outln!("resumed queue {queue}");
    }
    Ok(())
}
