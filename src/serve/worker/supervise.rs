//! Keeping a worker running: a worker task that dies (a panic, a bug) is
//! logged, counted where `sluice stats` shows it, and started again after a
//! pause, until the handler is stopped. Its leased messages come back when
//! their leases run out; none is lost.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::sync::watch;

use super::{Dispatch, Observe, QueueWorker, WorkerStats};
use crate::broker::Queue;
use crate::config::HandlerSpec;

/// The first pause before a dead worker is started again; it doubles, up to
/// [`MAX_PAUSE`], while workers keep dying.
const FIRST_PAUSE: Duration = Duration::from_millis(100);
const MAX_PAUSE: Duration = Duration::from_secs(30);

/// Serve `spec.queue` with `dispatch` until `stop` turns true (see
/// [`QueueWorker::serve`]), starting a new worker whenever one dies.
pub(crate) async fn supervise(
    broker: Arc<dyn Queue>,
    dispatch: Arc<dyn Dispatch>,
    spec: HandlerSpec,
    stats: Arc<WorkerStats>,
    observe: Observe,
    mut stop: watch::Receiver<bool>,
    grace: Duration,
) {
    let mut pause = FIRST_PAUSE;
    loop {
        let worker = QueueWorker {
            broker: broker.clone(),
            dispatch: dispatch.clone(),
            spec: Arc::new(spec.clone()),
            stats: stats.clone(),
            observe: observe.clone(),
        };
        let died = match tokio::spawn(worker.serve(stop.clone(), grace)).await {
            Ok(()) => return,
            Err(e) if e.is_panic() => panic_text(e.into_panic()),
            Err(e) => e.to_string(),
        };
        if *stop.borrow() {
            return;
        }
        // What it had leased is abandoned: it comes back after its lease.
        stats.in_flight.store(0, Ordering::Relaxed);
        stats.restarts.fetch_add(1, Ordering::Relaxed);
        *stats.last_failure.lock().expect("stats lock") = Some(died.clone());
        tracing::error!(
            handler = %spec.name, queue = %spec.queue, version = dispatch.version(),
            "the worker died ({died}); its leased messages come back when their leases expire; starting it again in {pause:?}"
        );
        tokio::select! {
            _ = tokio::time::sleep(pause) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
        pause = (pause * 2).min(MAX_PAUSE);
    }
}

fn panic_text(payload: Box<dyn std::any::Any + Send>) -> String {
    let text = payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".into());
    format!("panicked: {text}")
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::sync::atomic::AtomicU32;
    use std::time::Instant;

    use async_trait::async_trait;

    use super::*;
    use crate::broker::{ClaimState, KeyClaim, Result, Settlement};
    use crate::message::{Delivery, NewMessage};
    use crate::policy::Outcome;
    use crate::sandbox::runtime::Invocation;

    /// One message, delivered again whenever it is asked for until it is
    /// settled (as if each lease ran out at once).
    #[derive(Default)]
    struct OneMessage {
        settled: Mutex<Vec<Settlement>>,
    }

    #[async_trait]
    impl Queue for OneMessage {
        async fn publish(&self, _: Vec<NewMessage>) -> Result<Vec<String>> {
            unreachable!()
        }
        async fn receive(
            &self,
            queue: &str,
            _: usize,
            _: Duration,
            _: crate::broker::Flow,
        ) -> Result<Vec<Delivery>> {
            if !self.settled.lock().unwrap().is_empty() {
                return Ok(Vec::new());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
            Ok(vec![Delivery::for_test("m1", queue)])
        }
        async fn claim(&self, _: &str, c: &[KeyClaim], _: Duration) -> Result<Vec<ClaimState>> {
            Ok(vec![ClaimState::Acquired; c.len()])
        }
        async fn settle(&self, batch: &[Settlement]) -> Result<()> {
            self.settled.lock().unwrap().extend(batch.iter().cloned());
            Ok(())
        }

        async fn extend(
            &self,
            _: &str,
            leases: &[crate::broker::Lease],
            _: Duration,
        ) -> Result<Vec<bool>> {
            Ok(vec![true; leases.len()])
        }

        async fn set_ordering(
            &self,
            _queue: &str,
            _ordering: Option<&crate::broker::OrderedGroups>,
        ) -> Result<()> {
            Ok(())
        }
    }

    /// Panics on its first call, then handles every message.
    #[derive(Default)]
    struct PanicsOnce(AtomicU32);

    #[async_trait]
    impl Dispatch for PanicsOnce {
        async fn invoke(
            &self,
            _: crate::sandbox::runtime::Ready,
            _: &Delivery,
            _: &crate::sandbox::runtime::Deadline,
        ) -> Invocation {
            if self.0.fetch_add(1, Ordering::Relaxed) == 0 {
                panic!("boom");
            }
            Invocation::ended(Ok(Outcome::Done), Vec::new())
        }
        fn version(&self) -> &str {
            "v1"
        }
    }

    #[tokio::test]
    async fn a_worker_that_dies_is_counted_and_started_again() {
        let queue = Arc::new(OneMessage::default());
        let stats = Arc::new(WorkerStats::default());
        let mut spec = HandlerSpec::defaults("h").unwrap();
        spec.concurrency = 1;
        spec.prefetch = 1;
        let (stop, stop_rx) = watch::channel(false);
        let task = tokio::spawn(supervise(
            queue.clone(),
            Arc::new(PanicsOnce::default()),
            spec.clone(),
            stats.clone(),
            Observe::none(&spec.queue),
            stop_rx,
            Duration::from_secs(1),
        ));
        let start = Instant::now();
        while queue.settled.lock().unwrap().is_empty() {
            assert!(start.elapsed() < Duration::from_secs(10), "never handled");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(matches!(
            queue.settled.lock().unwrap()[0],
            Settlement::Done { .. }
        ));
        assert_eq!(stats.restarts.load(Ordering::Relaxed), 1);
        let failure = stats.last_failure.lock().unwrap().clone().unwrap();
        assert_eq!(failure, "panicked: boom");
        stop.send(true).unwrap();
        tokio::time::timeout(Duration::from_secs(5), task)
            .await
            .expect("stops")
            .unwrap();
    }
}
