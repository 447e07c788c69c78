//! The settler: writes outcomes back in batches and returns the prefetch
//! permits of what it wrote.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::sync::mpsc;

use super::{Settled, WorkerStats};
use crate::broker::Broker;

/// Most settlements written in one broker call.
const MAX_SETTLE_BATCH: usize = 1024;

pub(super) async fn settle_loop(
    broker: Arc<dyn Broker>,
    queue: String,
    mut rx: mpsc::UnboundedReceiver<Settled>,
    stats: Arc<WorkerStats>,
) {
    let mut batch = Vec::new();
    let mut permits = Vec::new();
    while let Some((first, permit)) = rx.recv().await {
        batch.push(first);
        permits.push(permit);
        while batch.len() < MAX_SETTLE_BATCH {
            match rx.try_recv() {
                Ok((s, p)) => {
                    batch.push(s);
                    permits.push(p);
                }
                Err(_) => break,
            }
        }
        let mut backoff = Duration::from_millis(50);
        // Until a settlement is written its message stays leased, so keep
        // trying: giving up would only mean handling it again later.
        while let Err(e) = broker.settle(&batch).await {
            tracing::error!(queue = %queue, error = %e, count = batch.len(), "settling failed; retrying in {backoff:?}");
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_secs(5));
        }
        stats
            .in_flight
            .fetch_sub(batch.len() as u64, Ordering::Relaxed);
        stats
            .handled
            .fetch_add(batch.len() as u64, Ordering::Relaxed);
        batch.clear();
        permits.clear();
    }
}
