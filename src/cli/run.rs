//! `sluice run`.

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;

use super::Context;
use crate::base::trace::OTLP_ENDPOINT_ENV;
use crate::config::StallAfter;
use crate::sandbox::cache::CacheFiles;
use crate::serve::admin::{DEFAULT_ADDR, TOKEN_ENV};
use crate::serve::app::{AdminOptions, RunOptions, run as run_app};
use crate::serve::watchdog::DEFAULT_STALL_AFTER;

/// The arguments of `sluice run`.
#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    /// Directory of NAME.wasm handlers (default: `handlers` in sluice.toml, else ./handlers).
    #[arg(long, value_name = "DIR")]
    pub(crate) handlers: Option<PathBuf>,
    /// Exit 0 once no bound queue has a ready, delayed or in-flight message.
    #[arg(long)]
    pub(crate) until_idle: bool,
    /// Serve metrics, health, the admin API and the dashboard on HOST:PORT
    /// (default: `admin` in sluice.toml, else 127.0.0.1:9464), or `off`.
    #[arg(long, value_name = "ADDR|off")]
    pub(crate) admin: Option<String>,
}

pub(crate) async fn run(ctx: &Context, args: RunArgs) -> Result<()> {
    let handlers = args
        .handlers
        .or_else(|| ctx.config.handlers.clone())
        .unwrap_or_else(|| PathBuf::from("handlers"));
    let stopped = shutdown_signal();
    let broker = ctx.broker().await?;
    tracing::info!(broker = %ctx.broker_url, handlers = %handlers.display(), "sluice starting");
    let cache = cache_files(ctx);
    if cache.is_none() {
        tracing::warn!(
            "no home directory to keep compiled handlers in: they are compiled at every start; set cache_dir and cache_key in sluice.toml"
        );
    }
    let options = RunOptions {
        cache,
        watch: true,
        handlers,
        until_idle: args.until_idle,
        grace: ctx.grace(),
        max_message_size: ctx.config.max_message_size(),
        max_component_size: ctx.config.max_component_size(),
        admin: admin_options(ctx, args.admin),
        broker_timeout: ctx.config.broker_timeout.map(|d| d.0),
        stall_after: match ctx.config.stall_after {
            Some(StallAfter::Off) => None,
            Some(StallAfter::After(after)) => Some(after),
            None => Some(DEFAULT_STALL_AFTER),
        },
        exit_on_stall: ctx.config.exit_on_stall.unwrap_or(false),
        max_instances: ctx.config.max_instances,
        otlp_endpoint: ctx
            .config
            .otlp_endpoint
            .clone()
            .or_else(|| env(OTLP_ENDPOINT_ENV)),
    };
    run_app(broker, options, stopped).await
}

/// The admin endpoint: `--admin`, else `admin` in sluice.toml, else the
/// default address; `off` turns it off. The token is `admin_token`, else
/// `SLUICE_ADMIN_TOKEN`.
fn admin_options(ctx: &Context, flag: Option<String>) -> Option<AdminOptions> {
    let addr = flag
        .or_else(|| ctx.config.admin.clone())
        .unwrap_or_else(|| DEFAULT_ADDR.to_string());
    if addr.trim().eq_ignore_ascii_case("off") {
        return None;
    }
    Some(AdminOptions {
        addr: addr.trim().to_string(),
        token: ctx.config.admin_token.clone().or_else(|| env(TOKEN_ENV)),
        hosts: ctx.config.admin_hosts.clone().unwrap_or_default(),
    })
}

/// A variable of the environment, unless unset or empty.
fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// Where compiled handlers are cached: `cache_dir` and `cache_key` from
/// sluice.toml, each defaulting to the user's cache and config directories.
pub(super) fn cache_files(ctx: &Context) -> Option<CacheFiles> {
    let default = CacheFiles::default_for_user();
    Some(CacheFiles {
        dir: ctx
            .config
            .cache_dir
            .clone()
            .or_else(|| default.as_ref().map(|d| d.dir.clone()))?,
        key: ctx
            .config
            .cache_key
            .clone()
            .or_else(|| default.map(|d| d.key))?,
    })
}

/// Resolves on SIGINT or SIGTERM. The handlers are installed when this is
/// called, not when it is first awaited: a signal that comes while the
/// host connects to its broker and loads its handlers is not lost, nor
/// does it kill the host without its shutdown.
fn shutdown_signal() -> impl Future<Output = ()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).expect("installing the SIGTERM handler");
    let mut int = signal(SignalKind::interrupt()).expect("installing the SIGINT handler");
    async move {
        tokio::select! {
            _ = int.recv() => {}
            _ = term.recv() => {}
        }
    }
}
