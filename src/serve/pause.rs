//! Pausing queues, on the host's side. The broker stores which queues are
//! paused ([`Presence::set_paused`]); each host reads that every
//! [`PAUSE_POLL`] onto its [`PauseBoard`], and each worker watches the board
//! for its queue: while it is paused the worker leases nothing, so messages
//! wait with their attempts as they were, and calls in flight finish.

use std::collections::BTreeSet;
use std::sync::Arc;

use tokio::sync::watch;

use crate::broker::{PAUSE_POLL, Presence};
use crate::error::chain;

type Set = Arc<BTreeSet<String>>;

/// The queues this host takes for paused, as last read from the broker.
pub(crate) struct PauseBoard {
    tx: watch::Sender<Set>,
}

impl Default for PauseBoard {
    fn default() -> Self {
        PauseBoard {
            tx: watch::channel(Set::default()).0,
        }
    }
}

impl PauseBoard {
    /// A watch on `queue`, for its worker.
    pub(crate) fn watch(&self, queue: &str) -> Paused {
        Paused {
            rx: self.tx.subscribe(),
            queue: queue.to_string(),
        }
    }

    /// Whether `queue` is paused now.
    pub(crate) fn is_paused(&self, queue: &str) -> bool {
        self.tx.borrow().contains(queue)
    }

    /// Take `paused` for the paused queues from now on.
    pub(crate) fn set(&self, paused: Vec<String>) {
        let new: BTreeSet<String> = paused.into_iter().collect();
        self.tx.send_if_modified(|old| {
            if **old == new {
                return false;
            }
            for q in new.difference(old) {
                tracing::info!(queue = %q, "queue paused: its messages wait until it is resumed");
            }
            for q in old.difference(&new) {
                tracing::info!(queue = %q, "queue resumed");
            }
            *old = Arc::new(new);
            true
        });
    }

    /// Read the paused queues from `broker` every [`PAUSE_POLL`]. While the
    /// broker cannot say, the last answer stands. Never ends.
    pub(crate) async fn follow(&self, broker: &dyn Presence) {
        let mut failing = false;
        loop {
            match broker.paused().await {
                Ok(paused) => {
                    failing = false;
                    self.set(paused);
                }
                Err(e) if !failing => {
                    failing = true;
                    tracing::warn!(error = %chain(&e), "cannot read which queues are paused; keeping the last answer until the broker answers");
                }
                Err(_) => {}
            }
            tokio::time::sleep(PAUSE_POLL).await;
        }
    }
}

/// One queue's view of the `PauseBoard`.
#[derive(Clone)]
pub struct Paused {
    rx: watch::Receiver<Set>,
    queue: String,
}

impl Paused {
    /// A queue no one ever pauses: for workers run without a host.
    #[cfg(any(test, feature = "testkit"))]
    pub fn never(queue: &str) -> Paused {
        PauseBoard::default().watch(queue)
    }

    /// Whether the queue is paused now.
    pub fn is_paused(&self) -> bool {
        self.rx.borrow().contains(&self.queue)
    }

    /// Resolves once the queue is not paused (at once if it is not).
    pub async fn resumed(&self) {
        let mut rx = self.rx.clone();
        if rx.wait_for(|set| !set.contains(&self.queue)).await.is_err() {
            // The board is gone, and with it any change: paused for good.
            std::future::pending::<()>().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn a_worker_waits_while_its_queue_is_paused() {
        let board = PauseBoard::default();
        let a = board.watch("a");
        let b = board.watch("b");
        board.set(vec!["a".into()]);
        assert!(a.is_paused() && !b.is_paused());
        // b runs on; a waits.
        b.resumed().await;
        let waiting = tokio::time::timeout(Duration::from_millis(50), a.resumed()).await;
        assert!(waiting.is_err(), "a resumed while paused");
        let resumed = tokio::spawn({
            let a = a.clone();
            async move { a.resumed().await }
        });
        board.set(Vec::new());
        tokio::time::timeout(Duration::from_secs(1), resumed)
            .await
            .expect("a resumes when the board says so")
            .unwrap();
        assert!(!a.is_paused());
    }
}
