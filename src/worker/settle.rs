//! The settler: writes outcomes back in batches and returns the prefetch
//! permits of what it wrote.
//!
//! What the broker says decides what happens next. A batch the broker could
//! not be reached for is written again, with backoff, until it is: until
//! then its messages stay leased, and giving up would only mean handling
//! them again. A batch the broker refused is written again one settlement at
//! a time, so that one entry it will not take (a script error, a permission
//! it lacks) does not hold up the rest; a settlement refused on its own is
//! given up and logged with its message, which stays leased and is
//! delivered again when its lease runs out.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::sync::mpsc;

use super::{Settled, WorkerStats};
use crate::broker::{BrokerError, Queue, Settlement};
use crate::error::chain;
use crate::metrics::HandlerMetrics;

/// Most settlements written in one broker call.
const MAX_SETTLE_BATCH: usize = 1024;
/// The first wait before a batch is written again; it doubles up to 5 s.
const FIRST_BACKOFF: Duration = Duration::from_millis(50);

/// Write the settlements of queue `name` as they come, in batches, until
/// every sender is gone.
pub(super) async fn settle_loop(
    broker: Arc<dyn Queue>,
    name: String,
    mut rx: mpsc::UnboundedReceiver<Settled>,
    stats: Arc<WorkerStats>,
    metrics: Option<HandlerMetrics>,
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
        write(&*broker, &name, &batch).await;
        if let Some(m) = &metrics {
            batch.iter().for_each(|s| m.settled(s));
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

/// Write `batch`, as the module's comment says.
async fn write(broker: &dyn Queue, name: &str, batch: &[Settlement]) {
    let Err(refused) = settle_while_unavailable(broker, name, batch).await else {
        return;
    };
    if let [one] = batch {
        return give_up(name, one, &refused);
    }
    tracing::error!(
        queue = %name, count = batch.len(), error = %chain(&refused),
        "the broker refused a batch of settlements; writing them one at a time"
    );
    for s in batch {
        if let Err(e) = settle_while_unavailable(broker, name, std::slice::from_ref(s)).await {
            give_up(name, s, &e);
        }
    }
}

/// Settle `batch`, trying again with backoff for as long as the broker is
/// unavailable. The error is the broker's refusal.
async fn settle_while_unavailable(
    broker: &dyn Queue,
    name: &str,
    batch: &[Settlement],
) -> Result<(), BrokerError> {
    let mut backoff = FIRST_BACKOFF;
    loop {
        match broker.settle(batch).await {
            Ok(()) => return Ok(()),
            Err(e) if e.is_unavailable() => {
                tracing::error!(queue = %name, error = %chain(&e), count = batch.len(), "settling failed; retrying in {backoff:?}");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(5));
            }
            Err(e) => return Err(e),
        }
    }
}

fn give_up(name: &str, s: &Settlement, e: &BrokerError) {
    let d = s.delivery();
    tracing::error!(
        queue = %name, id = %d.id, attempt = d.attempt, error = %chain(e),
        "the broker refused to settle this message; it stays leased and is delivered again when its lease expires"
    );
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use async_trait::async_trait;

    use super::*;
    use crate::broker::{ClaimState, KeyClaim, Result};
    use crate::message::{Delivery, NewMessage};

    /// A queue that is away for its first `away` calls, refuses any call
    /// with a settlement of message "poison", and records what it took.
    #[derive(Default)]
    struct Picky {
        away: Mutex<u32>,
        calls: Mutex<u32>,
        settled: Mutex<Vec<String>>,
    }

    #[async_trait]
    impl Queue for Picky {
        async fn publish(&self, _: Vec<NewMessage>) -> Result<Vec<String>> {
            unreachable!("the settler only settles")
        }
        async fn receive(
            &self,
            _: &str,
            _: usize,
            _: Duration,
            _: crate::broker::Flow,
        ) -> Result<Vec<Delivery>> {
            unreachable!("the settler only settles")
        }
        async fn claim(&self, _: &str, _: &[KeyClaim], _: Duration) -> Result<Vec<ClaimState>> {
            unreachable!("the settler only settles")
        }
        async fn settle(&self, batch: &[Settlement]) -> Result<()> {
            *self.calls.lock().unwrap() += 1;
            let mut away = self.away.lock().unwrap();
            if *away > 0 {
                *away -= 1;
                return Err(BrokerError::unavailable(
                    "test",
                    std::io::Error::other("connection refused"),
                ));
            }
            if batch.iter().any(|s| s.delivery().id == "poison") {
                return Err(BrokerError::refused(
                    "test",
                    std::io::Error::other("no such script"),
                ));
            }
            let ids = batch.iter().map(|s| s.delivery().id.clone());
            self.settled.lock().unwrap().extend(ids);
            Ok(())
        }

        async fn extend(
            &self,
            _: &str,
            _: &[crate::broker::Lease],
            _: Duration,
        ) -> Result<Vec<bool>> {
            unreachable!("the settler only settles")
        }

        async fn set_ordering(
            &self,
            _queue: &str,
            _ordering: Option<&crate::broker::OrderedGroups>,
        ) -> Result<()> {
            Ok(())
        }
    }

    fn duplicate(id: &str) -> Settlement {
        Settlement::Duplicate {
            delivery: Delivery::for_test(id, "q"),
        }
    }

    #[tokio::test]
    async fn a_batch_is_written_again_while_the_broker_is_away() {
        let q = Picky {
            away: Mutex::new(2),
            ..Picky::default()
        };
        write(&q, "q", &[duplicate("a"), duplicate("b")]).await;
        assert_eq!(
            *q.calls.lock().unwrap(),
            3,
            "two tries while away, then one"
        );
        assert_eq!(*q.settled.lock().unwrap(), ["a", "b"]);
    }

    #[tokio::test]
    async fn a_refused_entry_does_not_hold_up_the_rest_of_its_batch() {
        let q = Picky::default();
        let batch = [duplicate("a"), duplicate("poison"), duplicate("b")];
        write(&q, "q", &batch).await;
        assert_eq!(*q.settled.lock().unwrap(), ["a", "b"]);
        // The batch, then each of its three alone: never again after that.
        assert_eq!(*q.calls.lock().unwrap(), 4);
    }

    #[tokio::test]
    async fn a_refused_single_settlement_is_given_up_at_once() {
        let q = Picky::default();
        write(&q, "q", &[duplicate("poison")]).await;
        assert_eq!(*q.calls.lock().unwrap(), 1);
        assert!(q.settled.lock().unwrap().is_empty());
    }
}
