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

use tokio::sync::OwnedSemaphorePermit;
use tokio::sync::mpsc::{self, error::TryRecvError};
use tokio::task::JoinSet;

use super::{Settled, WorkerStats};
use crate::broker::{BrokerError, Queue, Settlement};
use crate::error::chain;
use crate::serve::metrics::HandlerMetrics;

/// Most settlements written in one broker call.
const MAX_SETTLE_BATCH: usize = 1024;
/// The fewest settlements a call is started for while another is in flight
/// (where the broker takes more than one at once). Fewer wait for it: were
/// every settlement written as it came, each call's own cost would make
/// calls slower, and slower calls more of them.
const MIN_OVERLAPPING: usize = 128;
/// The first wait before a batch is written again; it doubles up to 5 s.
const FIRST_BACKOFF: Duration = Duration::from_millis(50);

/// What a write needs beside its batch.
#[derive(Clone)]
struct Writer {
    broker: Arc<dyn Queue>,
    name: String,
    stats: Arc<WorkerStats>,
    metrics: Option<HandlerMetrics>,
}

impl Writer {
    /// Write `batch`, then count it out of flight and return its permits.
    async fn write(self, batch: Vec<Settlement>, permits: Vec<OwnedSemaphorePermit>) {
        write(&*self.broker, &self.name, &batch).await;
        if let Some(m) = &self.metrics {
            batch.iter().for_each(|s| m.settled(s));
            m.finished(&batch, crate::message::now_us());
        }
        let n = batch.len() as u64;
        self.stats.in_flight.fetch_sub(n, Ordering::Relaxed);
        self.stats.handled.fetch_add(n, Ordering::Relaxed);
        drop(permits);
    }
}

/// Write the settlements of queue `name` as they come, in batches, until
/// every sender is gone. A batch is written at once when no write is in
/// flight. A broker that takes several at once ([`Queue::settle_writes`])
/// gets the next batch while one is in flight, once it holds
/// [`MIN_OVERLAPPING`] settlements; the rest wait for a write to end.
/// `ordered`: the queue keeps ordered groups.
pub(super) async fn settle_loop(
    broker: Arc<dyn Queue>,
    name: String,
    ordered: bool,
    mut rx: mpsc::UnboundedReceiver<Settled>,
    stats: Arc<WorkerStats>,
    metrics: Option<HandlerMetrics>,
) {
    let max_writes = broker.settle_writes(ordered).max(1);
    let writer = Writer {
        broker,
        name,
        stats,
        metrics,
    };
    let mut writing = JoinSet::new();
    let (mut batch, mut permits) = (Vec::new(), Vec::new());
    let mut open = true;
    while open || !batch.is_empty() || !writing.is_empty() {
        while open && batch.len() < MAX_SETTLE_BATCH {
            match rx.try_recv() {
                Ok((s, p)) => {
                    batch.push(s);
                    permits.push(p);
                }
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => open = false,
            }
        }
        let may_start = writing.is_empty()
            || (writing.len() < max_writes && (batch.len() >= MIN_OVERLAPPING || !open));
        if may_start && !batch.is_empty() {
            let batch = std::mem::take(&mut batch);
            writing.spawn(writer.clone().write(batch, std::mem::take(&mut permits)));
            continue;
        }
        tokio::select! {
            Some(ended) = writing.join_next(), if !writing.is_empty() => {
                // A write that panicked ends the settler, as it did when
                // writes ran in it.
                if let Err(e) = ended
                    && e.is_panic()
                {
                    std::panic::resume_unwind(e.into_panic());
                }
            }
            received = rx.recv(), if open && batch.len() < MAX_SETTLE_BATCH => match received {
                Some((s, p)) => {
                    batch.push(s);
                    permits.push(p);
                }
                None => open = false,
            },
            // The channel closed with nothing left to write.
            else => break,
        }
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
    /// It takes `writes[0]` writes at once for a plain queue, `writes[1]`
    /// for an ordered one. With a `gate`, each call first sends its batch's
    /// length to `started`, then waits for a permit of the gate.
    #[derive(Default)]
    struct Picky {
        away: Mutex<u32>,
        calls: Mutex<u32>,
        settled: Mutex<Vec<String>>,
        writes: [usize; 2],
        gate: Option<(mpsc::UnboundedSender<usize>, Arc<tokio::sync::Semaphore>)>,
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
            if let Some((started, gate)) = &self.gate {
                started.send(batch.len()).unwrap();
                gate.acquire().await.unwrap().forget();
            }
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

        fn settle_writes(&self, ordered: bool) -> usize {
            self.writes[usize::from(ordered)]
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

    /// A settler over a queue whose calls wait at a gate: the queue, the
    /// settler's sender, the lengths of the calls started, the gate, and
    /// the settler's stats and task.
    struct Gated {
        queue: Arc<Picky>,
        tx: Option<mpsc::UnboundedSender<Settled>>,
        started: mpsc::UnboundedReceiver<usize>,
        gate: Arc<tokio::sync::Semaphore>,
        stats: Arc<WorkerStats>,
        settler: tokio::task::JoinHandle<()>,
    }

    impl Gated {
        /// A settler of a plain queue over a broker that takes `writes`.
        fn start(writes: usize) -> Self {
            Self::start_with([writes; 2], false)
        }

        /// A settler of a queue, `ordered` or not, over a broker that
        /// takes `writes` (see [`Picky`]).
        fn start_with(writes: [usize; 2], ordered: bool) -> Self {
            let (started_tx, started) = mpsc::unbounded_channel();
            let gate = Arc::new(tokio::sync::Semaphore::new(0));
            let queue = Arc::new(Picky {
                writes,
                gate: Some((started_tx, gate.clone())),
                ..Picky::default()
            });
            let (tx, rx) = mpsc::unbounded_channel();
            let stats = Arc::new(WorkerStats::default());
            let settler = tokio::spawn(settle_loop(
                queue.clone(),
                "q".into(),
                ordered,
                rx,
                stats.clone(),
                None,
            ));
            Gated {
                queue,
                tx: Some(tx),
                started,
                gate,
                stats,
                settler,
            }
        }

        fn send(&self, n: usize) {
            let permits = Arc::new(tokio::sync::Semaphore::new(n));
            for i in 0..n {
                let permit = permits.clone().try_acquire_owned().unwrap();
                let tx = self.tx.as_ref().expect("the settler's channel is open");
                tx.send((duplicate(&format!("m{i}")), permit)).unwrap();
            }
        }

        /// The length of the next call started within 200 ms, if one was.
        async fn next_call(&mut self) -> Option<usize> {
            let wait = Duration::from_millis(200);
            tokio::time::timeout(wait, self.started.recv())
                .await
                .ok()
                .flatten()
        }

        /// Drop the settler's sender, as the callers do when they stop.
        fn close(&mut self) {
            self.tx = None;
        }

        /// Let every call through, close the settler's channel and wait
        /// for it to end. Returns how many settlements it wrote.
        async fn finish(mut self) -> u64 {
            self.gate.add_permits(1000);
            self.close();
            self.settler.await.unwrap();
            assert_eq!(
                self.queue.settled.lock().unwrap().len() as u64,
                self.stats.handled.load(Ordering::Relaxed)
            );
            self.stats.handled.load(Ordering::Relaxed)
        }
    }

    #[tokio::test]
    async fn a_broker_that_takes_two_writes_gets_a_full_batch_while_one_is_in_flight() {
        let mut g = Gated::start(2);
        g.send(1);
        assert_eq!(g.next_call().await, Some(1));
        g.send(MIN_OVERLAPPING - 1);
        assert_eq!(g.next_call().await, None, "too few to overlap: they wait");
        g.send(1);
        assert_eq!(g.next_call().await, Some(MIN_OVERLAPPING));
        g.send(MIN_OVERLAPPING);
        assert_eq!(g.next_call().await, None, "two calls are in flight already");
        g.gate.add_permits(1);
        assert_eq!(g.next_call().await, Some(MIN_OVERLAPPING));
        assert_eq!(g.finish().await, 1 + 2 * MIN_OVERLAPPING as u64);
    }

    #[tokio::test]
    async fn one_write_at_a_time_where_the_broker_takes_one() {
        let mut g = Gated::start(1);
        g.send(1);
        assert_eq!(g.next_call().await, Some(1));
        g.send(2 * MIN_OVERLAPPING);
        assert_eq!(g.next_call().await, None, "one call is in flight");
        g.gate.add_permits(1);
        assert_eq!(g.next_call().await, Some(2 * MIN_OVERLAPPING));
        assert_eq!(g.finish().await, 1 + 2 * MIN_OVERLAPPING as u64);
    }

    #[tokio::test]
    async fn the_settler_says_whether_its_queue_is_ordered() {
        // A broker that takes two writes at once for an ordered queue only.
        for (ordered, overlapped) in [(false, None), (true, Some(MIN_OVERLAPPING))] {
            let mut g = Gated::start_with([1, 2], ordered);
            g.send(1);
            assert_eq!(g.next_call().await, Some(1));
            g.send(MIN_OVERLAPPING);
            assert_eq!(g.next_call().await, overlapped, "ordered: {ordered}");
            assert_eq!(g.finish().await, 1 + MIN_OVERLAPPING as u64);
        }
    }

    #[tokio::test]
    async fn what_is_left_when_the_callers_are_gone_is_written_at_once() {
        let mut g = Gated::start(2);
        g.send(1);
        assert_eq!(g.next_call().await, Some(1));
        g.send(3);
        assert_eq!(g.next_call().await, None);
        g.close();
        // With no sender left the three do not wait for the call in flight.
        assert_eq!(g.next_call().await, Some(3));
        assert_eq!(g.finish().await, 4);
    }
}
