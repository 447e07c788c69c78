//! `sluice run`.

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;

use super::Context;
use crate::app::{RunOptions, run as run_app};

/// The arguments of `sluice run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// Directory of NAME.wasm handlers (default: `handlers` in sluice.toml, else ./handlers).
    #[arg(long, value_name = "DIR")]
    pub handlers: Option<PathBuf>,
    /// Exit 0 once no bound queue has a ready, delayed or in-flight message.
    #[arg(long)]
    pub until_idle: bool,
}

pub async fn run(ctx: &Context, args: RunArgs) -> Result<()> {
    let handlers = args
        .handlers
        .or_else(|| ctx.config.handlers.clone())
        .unwrap_or_else(|| PathBuf::from("handlers"));
    let broker = ctx.broker().await?;
    tracing::info!(broker = %ctx.broker_url, handlers = %handlers.display(), "sluice starting");
    let cache_dir = ctx
        .config
        .cache_dir
        .clone()
        .unwrap_or_else(|| handlers.join(".sluice-cache"));
    let options = RunOptions {
        cache_dir: Some(cache_dir),
        watch: true,
        handlers,
        until_idle: args.until_idle,
        grace: ctx.grace(),
        max_message_size: ctx.config.max_message_size(),
    };
    run_app(broker, options, shutdown_signal()).await
}

/// Resolves on SIGINT or SIGTERM.
async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).expect("installing the SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}
