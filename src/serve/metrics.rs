//! Prometheus metrics, served by the admin endpoint at `/metrics` in the
//! OpenMetrics text format.
//!
//! Labels are bounded: queue, handler, version and broker operation names,
//! never a message id or key. Per-handler metrics are resolved once per
//! worker ([`HandlerMetrics`]), so that counting an outcome on the message
//! path is an atomic add, not a lookup. Queue gauges are read from the broker
//! when `/metrics` is scraped ([`Metrics::encode`]).

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Registry, Unit};

use crate::broker::{
    ClaimState, Flow, KeyClaim, KeyOf, OrderedGroups, Presence, Queue, QueueStats, Received,
    Result, Settlement,
};
use crate::message::{Delivery, NewMessage};
use crate::sandbox::runtime::Failure;

/// Labels of a per-handler metric.
type HandlerLabels = [(&'static str, String); 2];
/// Labels of a per-queue gauge.
type QueueLabels = [(&'static str, String); 1];

type Histograms<L> = Family<L, Histogram, fn() -> Histogram>;

/// How many handler instances the engine's pool holds, for its gauges.
#[derive(Clone, Copy, Debug, Default)]
pub struct PoolCounts {
    /// Instances in a call now.
    pub(crate) in_use: i64,
    /// Instances made ahead and waiting for a call.
    pub(crate) spare: i64,
}

/// How long a scrape waits for the broker's counts.
pub(crate) const SCRAPE_BROKER_TIMEOUT: Duration = Duration::from_secs(3);

/// Every metric of one host.
pub struct Metrics {
    registry: Registry,
    done: Family<HandlerLabels, Counter>,
    retried: Family<HandlerLabels, Counter>,
    snoozed: Family<HandlerLabels, Counter>,
    dead: Family<HandlerLabels, Counter>,
    duplicates: Family<HandlerLabels, Counter>,
    rejected: Family<HandlerLabels, Counter>,
    timeouts: Family<HandlerLabels, Counter>,
    traps: Family<HandlerLabels, Counter>,
    memory_limit: Family<HandlerLabels, Counter>,
    handle_seconds: Histograms<HandlerLabels>,
    instantiate_seconds: Histograms<HandlerLabels>,
    queue_wait_seconds: Histograms<HandlerLabels>,
    end_to_end_seconds: Histograms<QueueLabels>,
    ready: Family<QueueLabels, Gauge>,
    delayed: Family<QueueLabels, Gauge>,
    in_flight: Family<QueueLabels, Gauge>,
    dead_letters: Family<QueueLabels, Gauge>,
    paused: Family<QueueLabels, Gauge>,
    /// 1 for each queue the stall watchdog finds stalled on this host.
    stalled: Family<QueueLabels, Gauge>,
    /// Those queues, as the watchdog last set them.
    stalled_now: std::sync::Mutex<std::collections::BTreeSet<String>>,
    /// 1 when the broker answered the last scrape's counts.
    broker_up: Gauge,
    /// Versions swapped in (first loads included).
    pub(crate) reloads: Counter,
    /// Handler files refused, by handler.
    refusals: Family<QueueLabels, Counter>,
    /// Handler instances alive in the engine's pool.
    pub(crate) instances: Gauge,
    /// Spare fresh instances among them.
    pub(crate) spares: Gauge,
    broker_seconds: Histograms<QueueLabels>,
    broker_errors: Family<QueueLabels, Counter>,
}

fn handle_buckets() -> Histogram {
    // 10 µs to about 42 s.
    Histogram::new(exponential_buckets(0.000_01, 4.0, 12))
}

/// Buckets for a message's time in the system: 1, 2.5 and 5 of each power
/// of ten from 0.1 ms to 10,000 s (about 2.8 hours), fine enough at the low
/// end to read a median under a millisecond.
fn wait_buckets() -> Histogram {
    let steps = (-4..=3).flat_map(|e| [1.0, 2.5, 5.0].map(|m| m * 10f64.powi(e)));
    Histogram::new(steps.chain([10_000.0]))
}

fn broker_buckets() -> Histogram {
    // 50 µs to about 13 s.
    Histogram::new(exponential_buckets(0.000_05, 4.0, 10))
}

impl Metrics {
    /// Every metric registered, all at zero.
    pub fn new() -> Arc<Self> {
        let mut m = Metrics {
            registry: Registry::with_prefix("sluice"),
            done: Family::default(),
            retried: Family::default(),
            snoozed: Family::default(),
            dead: Family::default(),
            duplicates: Family::default(),
            rejected: Family::default(),
            timeouts: Family::default(),
            traps: Family::default(),
            memory_limit: Family::default(),
            handle_seconds: Family::new_with_constructor(handle_buckets),
            instantiate_seconds: Family::new_with_constructor(handle_buckets),
            queue_wait_seconds: Family::new_with_constructor(wait_buckets),
            end_to_end_seconds: Family::new_with_constructor(wait_buckets),
            ready: Family::default(),
            delayed: Family::default(),
            in_flight: Family::default(),
            dead_letters: Family::default(),
            paused: Family::default(),
            stalled: Family::default(),
            stalled_now: Default::default(),
            broker_up: Gauge::default(),
            reloads: Counter::default(),
            refusals: Family::default(),
            instances: Gauge::default(),
            spares: Gauge::default(),
            broker_seconds: Family::new_with_constructor(broker_buckets),
            broker_errors: Family::default(),
        };
        m.register();
        Arc::new(m)
    }

    fn register(&mut self) {
        self.register_handler_metrics();
        self.register_queue_metrics();
        self.register_host_metrics();
    }

    /// Counters and histograms by handler and version.
    fn register_handler_metrics(&mut self) {
        let r = &mut self.registry;
        let counters = [
            (
                "messages_done",
                "Messages handled to completion (acked), by handler and version",
                &self.done,
            ),
            (
                "messages_retried",
                "Attempts that ended in a retry, by handler and version",
                &self.retried,
            ),
            (
                "messages_snoozed",
                "Attempts the handler snoozed (no attempt spent), by handler and version",
                &self.snoozed,
            ),
            (
                "messages_dead",
                "Messages moved to the dead letters, by handler and version",
                &self.dead,
            ),
            (
                "messages_duplicate",
                "Messages acked unhandled because their key had completed, by handler and version",
                &self.duplicates,
            ),
            (
                "messages_rejected",
                "Attempts the handler rejected, by handler and version",
                &self.rejected,
            ),
            (
                "handler_timeouts",
                "Attempts stopped at the handler's timeout, by handler and version",
                &self.timeouts,
            ),
            (
                "handler_traps",
                "Attempts that trapped, by handler and version",
                &self.traps,
            ),
            (
                "handler_memory_limit",
                "Attempts stopped at the handler's memory cap, by handler and version",
                &self.memory_limit,
            ),
        ];
        for (name, help, family) in counters {
            r.register(name, help, family.clone());
        }
        self.register_histograms();
    }

    /// Histograms by handler and version.
    fn register_histograms(&mut self) {
        let r = &mut self.registry;
        r.register_with_unit(
            "handle_duration",
            "Time from the start of an attempt to its outcome, by handler and version",
            Unit::Seconds,
            self.handle_seconds.clone(),
        );
        r.register_with_unit(
            "instantiate_duration",
            "Time to make a fresh handler instance, by handler and version",
            Unit::Seconds,
            self.instantiate_seconds.clone(),
        );
        r.register_with_unit(
            "queue_wait",
            "Time from publish to the start of a message's first attempt (a delay included), by handler and version",
            Unit::Seconds,
            self.queue_wait_seconds.clone(),
        );
        r.register_with_unit(
            "end_to_end",
            "Time from publish to the settle that finished a message (done, duplicate or dead), retries and delays included, by queue",
            Unit::Seconds,
            self.end_to_end_seconds.clone(),
        );
    }

    /// Gauges by queue.
    fn register_queue_metrics(&mut self) {
        let r = &mut self.registry;
        let gauges = [
            ("queue_ready", "Messages ready to be leased", &self.ready),
            (
                "queue_delayed",
                "Messages waiting for their delay or retry backoff",
                &self.delayed,
            ),
            (
                "queue_in_flight",
                "Messages leased and not yet settled",
                &self.in_flight,
            ),
            ("queue_dead", "Dead letters", &self.dead_letters),
            ("queue_paused", "1 while the queue is paused", &self.paused),
            (
                "queue_stalled",
                "1 while the queue is stalled on this host: it could move and has not for stall_after",
                &self.stalled,
            ),
        ];
        for (name, help, family) in gauges {
            r.register(name, help, family.clone());
        }
    }

    /// The host's own gauges and counters, and its broker calls.
    fn register_host_metrics(&mut self) {
        let r = &mut self.registry;
        let host_gauges = [
            (
                "broker_up",
                "1 when the broker answered this scrape's counts; 0: the queue gauges are missing",
                &self.broker_up,
            ),
            (
                "pool_instances_in_use",
                "Handler instances alive in the engine's pool",
                &self.instances,
            ),
            (
                "pool_spare_instances",
                "Fresh instances made ahead of the messages, ready or being made",
                &self.spares,
            ),
        ];
        for (name, help, gauge) in host_gauges {
            r.register(name, help, gauge.clone());
        }
        r.register(
            "reloads",
            "Handler versions swapped in, first loads included",
            self.reloads.clone(),
        );
        r.register(
            "refusals",
            "Handler files refused, by handler",
            self.refusals.clone(),
        );
        r.register_with_unit(
            "broker_request_duration",
            "Round-trip time of broker calls on the message path, by operation",
            Unit::Seconds,
            self.broker_seconds.clone(),
        );
        r.register(
            "broker_errors",
            "Broker calls on the message path that failed, by operation",
            self.broker_errors.clone(),
        );
    }

    /// The metrics of one handler version serving `queue`, for its worker.
    pub fn handler(&self, handler: &str, version: &str, queue: &str) -> HandlerMetrics {
        let labels = [
            ("handler", handler.to_string()),
            ("version", version.to_string()),
        ];
        let c = |f: &Family<HandlerLabels, Counter>| f.get_or_create_owned(&labels);
        let h = |f: &Histograms<HandlerLabels>| f.get_or_create_owned(&labels);
        HandlerMetrics {
            done: c(&self.done),
            retried: c(&self.retried),
            snoozed: c(&self.snoozed),
            dead: c(&self.dead),
            duplicates: c(&self.duplicates),
            rejected: c(&self.rejected),
            timeouts: c(&self.timeouts),
            traps: c(&self.traps),
            memory_limit: c(&self.memory_limit),
            handle_seconds: h(&self.handle_seconds),
            instantiate_seconds: h(&self.instantiate_seconds),
            queue_wait_seconds: h(&self.queue_wait_seconds),
            end_to_end_seconds: self
                .end_to_end_seconds
                .get_or_create_owned(&[("queue", queue.to_string())]),
        }
    }

    /// Count a refused file of handler `name`.
    pub fn refused(&self, name: &str) {
        self.refusals
            .get_or_create(&[("handler", name.to_string())])
            .inc();
    }

    /// A queue role that times each call and counts its failures.
    pub fn metered(self: &Arc<Self>, inner: Arc<dyn Queue>) -> Arc<dyn Queue> {
        Arc::new(Metered {
            inner,
            metrics: self.clone(),
        })
    }

    /// The text `/metrics` serves: the queues' gauges read from `broker`
    /// now, then everything else. Queues the broker no longer knows drop
    /// out.
    /// The metrics in OpenMetrics text, with the queue gauges read from
    /// `broker` and the pool gauges set to `pool`.
    ///
    /// A broker that fails or does not answer within `SCRAPE_BROKER_TIMEOUT`
    /// leaves the queue gauges out and `sluice_broker_up` 0: the host's own
    /// metrics, a stalled queue's gauge among them, are served all the same.
    pub async fn encode(&self, broker: &dyn Presence, pool: PoolCounts) -> String {
        match tokio::time::timeout(SCRAPE_BROKER_TIMEOUT, broker.stats()).await {
            Ok(Ok(stats)) => {
                self.set_queues(&stats);
                self.broker_up.set(1);
            }
            Ok(Err(e)) => {
                tracing::warn!(error = %crate::error::chain(&e), "metrics: cannot read the queues from the broker; serving the host's own metrics");
                self.set_queues(&[]);
                self.broker_up.set(0);
            }
            Err(_) => {
                tracing::warn!(
                    "metrics: the broker did not answer within {SCRAPE_BROKER_TIMEOUT:?}; serving the host's own metrics"
                );
                self.set_queues(&[]);
                self.broker_up.set(0);
            }
        }
        self.instances.set(pool.in_use);
        self.spares.set(pool.spare);
        let mut text = String::new();
        encode(&mut text, &self.registry).expect("writing to a String cannot fail");
        text
    }

    /// Show `stalled` as the stalled queues, each at 1; every other queue
    /// the broker counts shows 0 at the next scrape.
    pub fn set_stalled(&self, stalled: &std::collections::BTreeMap<String, String>) {
        *self.stalled_now.lock().expect("stalled lock") = stalled.keys().cloned().collect();
        self.stalled.clear();
        for queue in stalled.keys() {
            self.stalled
                .get_or_create(&[("queue", queue.clone())])
                .set(1);
        }
    }

    fn set_queues(&self, stats: &[QueueStats]) {
        for family in [
            &self.ready,
            &self.delayed,
            &self.in_flight,
            &self.dead_letters,
            &self.paused,
            &self.stalled,
        ] {
            family.clear();
        }
        let stalled = self.stalled_now.lock().expect("stalled lock").clone();
        for queue in &stalled {
            self.stalled
                .get_or_create(&[("queue", queue.clone())])
                .set(1);
        }
        for s in stats {
            let l = [("queue", s.queue.clone())];
            let n = |v: u64| v.min(i64::MAX as u64) as i64;
            self.ready.get_or_create(&l).set(n(s.ready));
            self.delayed.get_or_create(&l).set(n(s.delayed));
            self.in_flight.get_or_create(&l).set(n(s.in_flight));
            self.dead_letters.get_or_create(&l).set(n(s.dead));
            self.paused.get_or_create(&l).set(i64::from(s.paused));
            // 0 unless the watchdog set it.
            let _ = self.stalled.get_or_create(&l);
        }
    }

    fn broker_call<T>(&self, op: &'static str, started: Instant, result: &Result<T>) {
        let l = [("op", op.to_string())];
        self.broker_seconds
            .get_or_create(&l)
            .observe(started.elapsed().as_secs_f64());
        if result.is_err() {
            self.broker_errors.get_or_create(&l).inc();
        }
    }
}

/// One handler version's metrics, resolved: each count is an atomic add.
#[derive(Clone)]
pub struct HandlerMetrics {
    done: Counter,
    retried: Counter,
    snoozed: Counter,
    dead: Counter,
    duplicates: Counter,
    rejected: Counter,
    timeouts: Counter,
    traps: Counter,
    memory_limit: Counter,
    handle_seconds: Histogram,
    instantiate_seconds: Histogram,
    queue_wait_seconds: Histogram,
    end_to_end_seconds: Histogram,
}

impl HandlerMetrics {
    /// Count how a settlement ends its delivery. Deferrals (busy key, full
    /// pool, shutdown) spend no attempt and count nothing.
    pub fn settled(&self, s: &Settlement) {
        match s {
            Settlement::Done { .. } => self.done.inc(),
            Settlement::Duplicate { .. } => self.duplicates.inc(),
            Settlement::Retry { .. } => self.retried.inc(),
            Settlement::Snooze { .. } => self.snoozed.inc(),
            Settlement::Dead { .. } => self.dead.inc(),
            Settlement::Defer { .. } => 0,
        };
    }

    /// Record a call of the handler: how long it took, how it failed or
    /// whether it rejected, and how long its fresh instance took to make.
    pub fn called(
        &self,
        took: Duration,
        result: &std::result::Result<crate::policy::Outcome, Failure>,
        instantiate: Option<Duration>,
    ) {
        self.handle_seconds.observe(took.as_secs_f64());
        if let Some(t) = instantiate {
            self.instantiate_seconds.observe(t.as_secs_f64());
        }
        match result {
            Ok(crate::policy::Outcome::Reject(_)) => self.rejected.inc(),
            Err(Failure::Timeout(_)) => self.timeouts.inc(),
            Err(Failure::Trap(_)) => self.traps.inc(),
            Err(Failure::MemoryLimit(_)) => self.memory_limit.inc(),
            _ => 0,
        };
    }

    /// Record how long a first attempt waited in its queue.
    pub fn waited(&self, delivery: &Delivery, now_us: u64) {
        if delivery.attempt == 1 {
            let us = now_us.saturating_sub(delivery.enqueued_at_us);
            self.queue_wait_seconds.observe(us as f64 / 1e6);
        }
    }

    /// Record, for each settlement written at `now_us` that finished its
    /// message, how long the message took from its publish.
    pub fn finished(&self, settlements: &[Settlement], now_us: u64) {
        for s in settlements {
            if matches!(
                s,
                Settlement::Done { .. } | Settlement::Duplicate { .. } | Settlement::Dead { .. }
            ) {
                let us = now_us.saturating_sub(s.delivery().enqueued_at_us);
                self.end_to_end_seconds.observe(us as f64 / 1e6);
            }
        }
    }
}

/// The queue role with each call timed and its failures counted.
struct Metered {
    inner: Arc<dyn Queue>,
    metrics: Arc<Metrics>,
}

#[async_trait]
impl Queue for Metered {
    async fn publish(&self, messages: Vec<NewMessage>) -> Result<Vec<String>> {
        let started = Instant::now();
        let r = self.inner.publish(messages).await;
        self.metrics.broker_call("publish", started, &r);
        r
    }

    async fn receive(
        &self,
        queue: &str,
        max: usize,
        lease: Duration,
        flow: Flow,
    ) -> Result<Vec<Delivery>> {
        let started = Instant::now();
        let r = self.inner.receive(queue, max, lease, flow).await;
        self.metrics.broker_call("receive", started, &r);
        r
    }

    async fn claim(
        &self,
        queue: &str,
        claims: &[KeyClaim],
        lease: Duration,
    ) -> Result<Vec<ClaimState>> {
        let started = Instant::now();
        let r = self.inner.claim(queue, claims, lease).await;
        self.metrics.broker_call("claim", started, &r);
        r
    }

    /// Timed as a `receive`: where the broker takes the keys in the same
    /// step, there are no `claim` calls.
    async fn receive_claiming(
        &self,
        queue: &str,
        max: usize,
        lease: Duration,
        flow: Flow,
        key_of: &KeyOf,
    ) -> Result<Received> {
        let started = Instant::now();
        let r = self
            .inner
            .receive_claiming(queue, max, lease, flow, key_of)
            .await;
        self.metrics.broker_call("receive", started, &r);
        r
    }

    fn claims_with_receive(&self) -> bool {
        self.inner.claims_with_receive()
    }

    async fn settle(&self, settlements: &[Settlement]) -> Result<()> {
        let started = Instant::now();
        let r = self.inner.settle(settlements).await;
        self.metrics.broker_call("settle", started, &r);
        r
    }

    fn settle_writes(&self, ordered: bool) -> usize {
        self.inner.settle_writes(ordered)
    }

    async fn flush(&self) -> Result<()> {
        self.inner.flush().await
    }

    async fn idle(&self, queue: &str, up_to: Duration) {
        self.inner.idle(queue, up_to).await
    }

    async fn extend(
        &self,
        queue: &str,
        leases: &[crate::broker::Lease],
        lease: Duration,
    ) -> Result<Vec<bool>> {
        let started = Instant::now();
        let r = self.inner.extend(queue, leases, lease).await;
        self.metrics.broker_call("extend", started, &r);
        r
    }

    async fn set_ordering(&self, queue: &str, ordering: Option<&OrderedGroups>) -> Result<()> {
        self.inner.set_ordering(queue, ordering).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Outcome;

    fn text(m: &Metrics) -> String {
        let mut out = String::new();
        encode(&mut out, &m.registry).unwrap();
        out
    }

    #[test]
    fn outcomes_are_counted_by_handler_and_version() {
        let m = Metrics::new();
        let h = m.handler("orders", "abc", "orders");
        let d = Delivery::for_test("1", "q");
        h.settled(&Settlement::Done {
            delivery: d.clone(),
            key: None,
            publishes: Vec::new(),
        });
        h.settled(&Settlement::Defer {
            delivery: d.clone(),
            delay: Duration::ZERO,
            key: None,
        });
        h.called(
            Duration::from_millis(3),
            &Err(Failure::Timeout("t".into())),
            Some(Duration::from_millis(1)),
        );
        h.called(
            Duration::from_millis(1),
            &Ok(Outcome::Reject("no".into())),
            None,
        );
        let t = text(&m);
        let line = |name: &str| {
            t.lines()
                .find(|l| l.starts_with(name) && l.contains("handler=\"orders\""))
                .unwrap_or_else(|| panic!("no {name} in\n{t}"))
                .to_string()
        };
        assert!(line("sluice_messages_done_total").ends_with(" 1"), "{t}");
        assert!(line("sluice_handler_timeouts_total").ends_with(" 1"), "{t}");
        assert!(
            line("sluice_messages_rejected_total").ends_with(" 1"),
            "{t}"
        );
        assert!(line("sluice_messages_retried_total").ends_with(" 0"), "{t}");
        assert!(line("sluice_handle_duration_seconds_count").ends_with(" 2"));
        assert!(line("sluice_instantiate_duration_seconds_count").ends_with(" 1"));
        assert!(line("sluice_messages_done_total").contains("version=\"abc\""));
    }

    #[test]
    fn queue_gauges_follow_the_broker_and_forget_queues_it_dropped() {
        let m = Metrics::new();
        let mut a = QueueStats::empty("a");
        a.ready = 5;
        a.paused = true;
        m.set_queues(&[a, QueueStats::empty("b")]);
        let t = text(&m);
        assert!(t.contains("sluice_queue_ready{queue=\"a\"} 5"), "{t}");
        assert!(t.contains("sluice_queue_paused{queue=\"a\"} 1"), "{t}");
        assert!(t.contains("sluice_queue_ready{queue=\"b\"} 0"), "{t}");
        m.set_queues(&[QueueStats::empty("a")]);
        let t = text(&m);
        assert!(!t.contains("queue=\"b\""), "{t}");
        assert!(t.contains("sluice_queue_stalled{queue=\"a\"} 0"), "{t}");
        let stalled = [("a".to_string(), "a settle".to_string())].into();
        m.set_stalled(&stalled);
        m.set_queues(&[QueueStats::empty("a")]);
        assert!(text(&m).contains("sluice_queue_stalled{queue=\"a\"} 1"));
        m.set_stalled(&Default::default());
        m.set_queues(&[QueueStats::empty("a")]);
        assert!(text(&m).contains("sluice_queue_stalled{queue=\"a\"} 0"));
    }
}
