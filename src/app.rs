//! `sluice run`: load the handlers, serve their queues, stop cleanly.

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::Result;
use tokio::sync::watch;

use crate::broker::Broker;
use crate::registry;
use crate::runtime::Runtime;
use crate::worker::{QueueWorker, WorkerStats};

/// How `run` behaves.
#[derive(Clone, Debug)]
pub struct RunOptions {
    pub handlers: PathBuf,
    /// Exit once no bound queue has a ready, delayed or in-flight message.
    pub until_idle: bool,
    /// How long in-flight calls may finish after a stop.
    pub grace: Duration,
    pub max_message_size: u64,
}

/// Serve every handler in `options.handlers` until `shutdown` resolves (or
/// the queues are idle, with `until_idle`).
pub async fn run(
    broker: Arc<dyn Broker>,
    options: RunOptions,
    shutdown: impl Future<Output = ()>,
) -> Result<()> {
    let runtime = Runtime::new()?;
    let dir = options.handlers.clone();
    let rt = runtime.clone();
    let max = options.max_message_size;
    let loaded = tokio::task::spawn_blocking(move || registry::load_dir(&rt, &dir, max)).await??;
    if loaded.handlers.is_empty() {
        tracing::warn!(
            dir = %options.handlers.display(),
            "no handlers loaded; messages wait in their queues until a handler for them is deployed"
        );
    }
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut tasks = Vec::new();
    let mut watched: Vec<(String, Arc<WorkerStats>)> = Vec::new();
    for (queue, handler) in &loaded.handlers {
        let worker = QueueWorker::new(broker.clone(), handler.clone(), handler.spec.clone());
        watched.push((queue.clone(), worker.stats.clone()));
        tasks.push(tokio::spawn(worker.serve(stop_rx.clone(), options.grace)));
    }
    let idle = wait_idle(broker.clone(), watched, options.until_idle);
    tokio::select! {
        _ = shutdown => tracing::info!("stopping: finishing messages in flight (up to {:?})", options.grace),
        r = idle => {
            r?;
            tracing::info!("all bound queues are idle; exiting");
        }
    }
    let _ = stop_tx.send(true);
    for task in tasks {
        let _ = task.await;
    }
    Ok(())
}

/// Resolves when every watched queue is idle twice in a row; never, unless
/// `enabled`.
async fn wait_idle(
    broker: Arc<dyn Broker>,
    queues: Vec<(String, Arc<WorkerStats>)>,
    enabled: bool,
) -> Result<()> {
    if !enabled {
        return std::future::pending().await;
    }
    let mut idle_rounds = 0;
    loop {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let mut idle = true;
        for (queue, stats) in &queues {
            if stats.in_flight.load(Ordering::Relaxed) > 0
                || broker.queue_stats(queue).await?.pending() > 0
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
