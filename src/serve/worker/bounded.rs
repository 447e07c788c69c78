//! A bound on every broker call a worker makes: a call the broker does not
//! answer within `broker_timeout` (and never longer than the queue's lease)
//! is given up, logged with what it was and how long it waited, and
//! reported to the worker as the broker being unavailable, which it already
//! handles by backing off and trying again. Without it a connection that
//! stops answering without closing (a frozen peer, a half-open socket, a
//! pool whose connections all hang) would hold a worker forever, silently.
//!
//! Giving up is safe for each call the worker makes: a lease that was taken
//! after all runs out and the message comes back; a settlement applied
//! after all is fenced by its receipt, so the retry of it finds it written;
//! an extension that did not happen is tried again at the next renewal.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;

use super::WorkerStats;
use crate::broker::{
    BrokerError, ClaimState, Flow, KeyClaim, KeyOf, Lease, OrderedGroups, Queue, Received, Result,
    Settlement,
};
use crate::error::chain;
use crate::message::{Delivery, NewMessage};

/// The default bound on one broker call (`broker_timeout`).
pub const DEFAULT_BROKER_TIMEOUT: Duration = Duration::from_secs(10);

/// When a worker's work last moved, and what it is waiting on: read by the
/// stall watchdog.
#[derive(Debug)]
pub(crate) struct Progress {
    /// When a receive last leased something, or a settle or an extension
    /// last succeeded (or the worker started).
    moved: Mutex<Instant>,
    /// Broker calls under way: an id, what, since when.
    under_way: Mutex<Vec<(u64, &'static str, Instant)>>,
    next: AtomicU64,
    /// The last broker call that failed: what, why, when.
    failed: Mutex<Option<(&'static str, String, Instant)>>,
    /// Since when the worker waits for work (`Queue::idle`), its last
    /// receive having found none; `None` while it does not.
    idle_since: Mutex<Option<Instant>>,
}

impl Default for Progress {
    fn default() -> Self {
        Progress {
            moved: Mutex::new(Instant::now()),
            under_way: Mutex::default(),
            next: AtomicU64::new(0),
            failed: Mutex::default(),
            idle_since: Mutex::default(),
        }
    }
}

impl Progress {
    /// How long since the work last moved.
    pub(crate) fn still_for(&self) -> Duration {
        self.moved.lock().expect("progress lock").elapsed()
    }

    fn moved(&self) {
        *self.moved.lock().expect("progress lock") = Instant::now();
    }

    /// How long the worker has waited for work, if it waits now.
    pub(crate) fn idle_for(&self) -> Option<Duration> {
        self.idle_since
            .lock()
            .expect("progress lock")
            .map(|since| since.elapsed())
    }

    /// What the worker waits on, in words: the longest broker call under
    /// way, else the last one that failed.
    pub(crate) fn waiting_on(&self) -> String {
        let oldest = self
            .under_way
            .lock()
            .expect("progress lock")
            .iter()
            .min_by_key(|(_, _, since)| *since)
            .map(|(_, what, since)| (*what, since.elapsed()));
        if let Some((what, waited)) = oldest {
            return format!("a {what} of the broker, under way for {waited:.1?}");
        }
        match &*self.failed.lock().expect("progress lock") {
            Some((what, why, at)) => format!(
                "the broker: the last {what} failed {:.1?} ago ({why})",
                at.elapsed()
            ),
            None => "nothing the broker was asked: the worker leased nothing".to_string(),
        }
    }
}

/// A broker call under way, until dropped.
struct UnderWay<'a> {
    progress: &'a Progress,
    id: u64,
}

impl<'a> UnderWay<'a> {
    fn new(progress: &'a Progress, what: &'static str) -> Self {
        let id = progress.next.fetch_add(1, Ordering::Relaxed);
        let mut calls = progress.under_way.lock().expect("progress lock");
        calls.push((id, what, Instant::now()));
        UnderWay { progress, id }
    }
}

impl Drop for UnderWay<'_> {
    fn drop(&mut self) {
        let mut calls = self.progress.under_way.lock().expect("progress lock");
        calls.retain(|(id, _, _)| *id != self.id);
    }
}

/// A queue whose calls are bounded: see the module.
pub(crate) struct Bounded {
    inner: Arc<dyn Queue>,
    bound: Duration,
    queue: String,
    stats: Arc<WorkerStats>,
    /// The longest an idle wait may take before its bound starts:
    /// [`IDLE_MOST`](crate::broker::IDLE_MOST).
    idle_most: Duration,
}

impl Bounded {
    /// `inner`, each call of the worker of `queue` bounded by `bound`, its
    /// progress kept in `stats`.
    pub(crate) fn wrap(
        inner: Arc<dyn Queue>,
        stats: &Arc<WorkerStats>,
        queue: &str,
        bound: Duration,
    ) -> Arc<dyn Queue> {
        Arc::new(Bounded {
            inner,
            bound,
            queue: queue.to_string(),
            stats: stats.clone(),
            idle_most: crate::broker::IDLE_MOST,
        })
    }

    /// `call`, given up after the bound with a log line naming `what`;
    /// `moves` says whether its answer is work moving.
    async fn bounded<T>(
        &self,
        what: &'static str,
        call: impl Future<Output = Result<T>>,
        moves: impl FnOnce(&T) -> bool,
    ) -> Result<T> {
        let progress = &self.stats.progress;
        let under_way = UnderWay::new(progress, what);
        let answer = match tokio::time::timeout(self.bound, call).await {
            Ok(answer) => answer,
            Err(_) => {
                let bound = self.bound;
                tracing::warn!(
                    queue = %self.queue,
                    "the broker did not answer a {what} within {bound:?} (broker_timeout); giving it up, to be tried again"
                );
                Err(BrokerError::Unavailable {
                    context: format!("no answer to a {what} within {bound:?}"),
                    source: None,
                })
            }
        };
        drop(under_way);
        match &answer {
            Ok(value) if moves(value) => progress.moved(),
            Ok(_) => {}
            Err(e) => {
                *progress.failed.lock().expect("progress lock") =
                    Some((what, chain(e), Instant::now()));
            }
        }
        answer
    }
}

#[async_trait]
impl Queue for Bounded {
    async fn publish(&self, messages: Vec<NewMessage>) -> Result<Vec<String>> {
        // Not bounded: a publish given up might have been written, and the
        // worker does not publish on its own (its publishes go with settles).
        self.inner.publish(messages).await
    }

    async fn receive(
        &self,
        queue: &str,
        max: usize,
        lease: Duration,
        flow: Flow,
    ) -> Result<Vec<Delivery>> {
        let call = self.inner.receive(queue, max, lease, flow);
        self.bounded("receive", call, |d| !d.is_empty()).await
    }

    async fn claim(
        &self,
        queue: &str,
        claims: &[KeyClaim],
        lease: Duration,
    ) -> Result<Vec<ClaimState>> {
        let call = self.inner.claim(queue, claims, lease);
        self.bounded("claim of idempotency keys", call, |_| false)
            .await
    }

    async fn receive_claiming(
        &self,
        queue: &str,
        max: usize,
        lease: Duration,
        flow: Flow,
        key_of: &KeyOf,
    ) -> Result<Received> {
        let call = self.inner.receive_claiming(queue, max, lease, flow, key_of);
        self.bounded("receive", call, |r| !r.deliveries.is_empty())
            .await
    }

    fn claims_with_receive(&self) -> bool {
        self.inner.claims_with_receive()
    }

    async fn settle(&self, settlements: &[Settlement]) -> Result<()> {
        let call = self.inner.settle(settlements);
        self.bounded("settle", call, |_| true).await
    }

    fn settle_writes(&self, ordered: bool) -> usize {
        self.inner.settle_writes(ordered)
    }

    async fn extend(&self, queue: &str, leases: &[Lease], lease: Duration) -> Result<Vec<bool>> {
        let call = self.inner.extend(queue, leases, lease);
        self.bounded("lease extension", call, |_| true).await
    }

    async fn set_ordering(&self, queue: &str, ordering: Option<&OrderedGroups>) -> Result<()> {
        let call = self.inner.set_ordering(queue, ordering);
        self.bounded("change of ordering", call, |_| false).await
    }

    async fn idle(&self, queue: &str, up_to: Duration) {
        // Waiting is what idle is for (up to `IDLE_MOST`); a broker that
        // does not answer the look it takes meanwhile is caught by the
        // next, bounded, receive.
        let most = up_to.max(self.idle_most) + self.bound;
        let idle_since = &self.stats.progress.idle_since;
        *idle_since.lock().expect("progress lock") = Some(Instant::now());
        let _ = tokio::time::timeout(most, self.inner.idle(queue, up_to)).await;
        *idle_since.lock().expect("progress lock") = None;
    }

    async fn flush(&self) -> Result<()> {
        self.inner.flush().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A queue whose every call waits forever.
    struct Frozen;

    #[async_trait]
    impl Queue for Frozen {
        async fn publish(&self, _: Vec<NewMessage>) -> Result<Vec<String>> {
            std::future::pending().await
        }
        async fn receive(&self, _: &str, _: usize, _: Duration, _: Flow) -> Result<Vec<Delivery>> {
            std::future::pending().await
        }
        async fn claim(&self, _: &str, _: &[KeyClaim], _: Duration) -> Result<Vec<ClaimState>> {
            std::future::pending().await
        }
        async fn settle(&self, _: &[Settlement]) -> Result<()> {
            std::future::pending().await
        }
        async fn extend(&self, _: &str, _: &[Lease], _: Duration) -> Result<Vec<bool>> {
            std::future::pending().await
        }
        async fn set_ordering(&self, _: &str, _: Option<&OrderedGroups>) -> Result<()> {
            std::future::pending().await
        }
        async fn idle(&self, _: &str, _: Duration) {
            std::future::pending().await
        }
    }

    #[tokio::test]
    async fn every_worker_call_ends_at_the_bound() {
        let bound = Duration::from_millis(50);
        let stats = Arc::new(WorkerStats::default());
        let idle_most = Duration::from_millis(100);
        let q: Arc<dyn Queue> = Arc::new(Bounded {
            inner: Arc::new(Frozen),
            bound,
            queue: "orders".into(),
            stats: stats.clone(),
            idle_most,
        });
        let start = tokio::time::Instant::now();
        let e = q
            .receive("orders", 1, Duration::from_secs(30), Flow::default())
            .await
            .unwrap_err();
        assert!(
            e.is_unavailable() && e.to_string().contains("receive"),
            "{e}"
        );
        assert!(q.settle(&[]).await.unwrap_err().is_unavailable());
        assert!(q.extend("orders", &[], bound).await.is_err());
        assert!(q.claim("orders", &[], bound).await.is_err());
        assert!(q.set_ordering("orders", None).await.is_err());
        let idle = tokio::time::Instant::now();
        q.idle("orders", Duration::from_millis(20)).await;
        assert!(idle.elapsed() >= idle_most + bound, "{:?}", idle.elapsed());
        assert_eq!(stats.progress.idle_for(), None, "the wait is over");
        let took = start.elapsed();
        assert!(took >= bound * 5 + idle_most, "{took:?}");
        assert!(took < Duration::from_secs(5), "{took:?}");
        let waiting = stats.progress.waiting_on();
        assert!(waiting.contains("change of ordering failed"), "{waiting}");
    }
}
