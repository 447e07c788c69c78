//! `sluice run`: load the handlers, serve their queues, follow changes to
//! the handlers directory, redrive dead letters on schedule, stop cleanly.

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::Result;

use crate::broker::{Broker, HandlerStatus, STATUS_EVERY};
use crate::cache::CompileCache;
use crate::redrive::{self, Clock, SystemClock};
use crate::registry::Registry;
use crate::reload::{DirWatcher, RESCAN};
use crate::runtime::Runtime;

/// How `run` behaves.
#[derive(Clone, Debug)]
pub struct RunOptions {
    pub handlers: PathBuf,
    /// Exit once no bound queue has a ready, delayed or in-flight message.
    pub until_idle: bool,
    /// How long in-flight calls may finish after a stop.
    pub grace: Duration,
    pub max_message_size: u64,
    /// Where compiled components are cached; `None` keeps them in memory only.
    pub cache_dir: Option<PathBuf>,
    /// Follow changes to the handlers directory.
    pub watch: bool,
}

/// Serve every handler in `options.handlers` until `shutdown` resolves (or
/// the queues are idle, with `until_idle`).
pub async fn run(
    broker: Arc<dyn Broker>,
    options: RunOptions,
    shutdown: impl Future<Output = ()>,
) -> Result<()> {
    run_with_clock(broker, options, shutdown, Arc::new(SystemClock)).await
}

/// [`run`], with the clock that schedules redrives of dead letters.
pub async fn run_with_clock(
    broker: Arc<dyn Broker>,
    options: RunOptions,
    shutdown: impl Future<Output = ()>,
    clock: Arc<dyn Clock>,
) -> Result<()> {
    let runtime = Runtime::new()?;
    let cache = CompileCache::new(&runtime, options.cache_dir.clone());
    let registry = Arc::new(Registry::new(
        runtime,
        broker.clone(),
        cache,
        options.handlers.clone(),
        options.max_message_size,
    ));
    // Watch before the first scan, so nothing that changes in between is missed.
    let mut watcher = if options.watch {
        Some(DirWatcher::start(&options.handlers)?)
    } else {
        None
    };
    let names = registry.scan()?;
    registry.bind_sidecars(&names).await;
    for name in &names {
        registry.apply(name).await;
    }
    if registry.workers().await.is_empty() {
        tracing::warn!(
            dir = %options.handlers.display(),
            "no handlers loaded; messages wait in their queues until a handler for them is deployed"
        );
    }
    let host = host_id();
    report(&*broker, &registry, &host).await;
    // Bindings lost with a broker's data, or not written while it was away,
    // come back; the status report stays fresh.
    let periodic = async {
        loop {
            tokio::time::sleep(STATUS_EVERY).await;
            registry.sync_bindings().await;
            report(&*broker, &registry, &host).await;
        }
    };
    let follow = async {
        let Some(watcher) = watcher.as_mut() else {
            return std::future::pending().await;
        };
        loop {
            let mut names = watcher.changed().await;
            if names.iter().any(|n| n == RESCAN) {
                names = registry.scan().unwrap_or_default();
                names.extend(registry.statuses().await.into_iter().map(|s| s.handler));
                names.sort();
                names.dedup();
            }
            for name in names {
                registry.apply(&name).await;
            }
            report(&*broker, &registry, &host).await;
        }
    };
    let idle = wait_idle(broker.clone(), registry.clone(), options.until_idle);
    let redrive = redrive::run(broker.clone(), registry.clone(), clock);
    tokio::select! {
        _ = shutdown => tracing::info!("stopping: finishing messages in flight (up to {:?})", options.grace),
        r = idle => {
            r?;
            tracing::info!("all bound queues are idle; exiting");
        }
        _ = follow => {}
        _ = periodic => {}
        _ = redrive => {}
    }
    registry.stop_all(options.grace).await;
    // Publishes committed with the last acks may still wait in an outbox;
    // left there, they would wait for the relay of another running host.
    if let Err(e) = broker.flush().await {
        tracing::warn!(error = %e, "could not pass on the last held publishes; the relay of any running host, or the next to start, will");
    }
    if let Err(e) = broker.put_handler_statuses(&host, Vec::new()).await {
        tracing::debug!(error = %e, "could not clear this host's handler status");
    }
    Ok(())
}

/// This process, as `stats` names it: host name and process id.
fn host_id() -> String {
    format!("{}-{}", crate::message::hostname(), std::process::id())
}

/// Tell the broker what this host serves and refused, for `sluice stats`.
async fn report(broker: &dyn Broker, registry: &Registry, host: &str) {
    let now = crate::message::now_ms();
    let statuses = registry
        .statuses()
        .await
        .into_iter()
        .map(|s| HandlerStatus {
            host: host.to_string(),
            handler: s.handler,
            queue: s.queue,
            version: s.version,
            refusals: s.refusals,
            last_refusal: s.last_refusal,
            updated_at_ms: now,
        })
        .collect();
    if let Err(e) = broker.put_handler_statuses(host, statuses).await {
        tracing::warn!(error = %e, "could not report handler status to the broker");
    }
}

/// Resolves when every served queue is idle twice in a row; never, unless
/// `enabled`.
async fn wait_idle(broker: Arc<dyn Broker>, registry: Arc<Registry>, enabled: bool) -> Result<()> {
    if !enabled {
        return std::future::pending().await;
    }
    let mut idle_rounds = 0;
    loop {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let mut idle = true;
        for (queue, stats) in registry.workers().await {
            if stats.in_flight.load(Ordering::Relaxed) > 0
                || broker.queue_stats(&queue).await?.pending() > 0
            {
                idle = false;
                break;
            }
        }
        idle_rounds = if idle { idle_rounds + 1 } else { 0 };
        if idle_rounds >= 2 {
            return Ok(());
        }
    }
}
