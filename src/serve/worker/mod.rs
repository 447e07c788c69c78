//! The dispatch loop of one queue. Four stages, each its own task, joined
//! by channels so that a networked broker's round trips overlap:
//!
//! 1. the reader leases batches (`read_loop`), as many messages as the
//!    prefetch allows;
//! 2. the admitter ([`admit`]) turns away what must not run (over the attempt
//!    limit, key done or busy) and takes the idempotency keys of the rest;
//! 3. `concurrency` callers ([`call`]) run the handler, one delivery a call
//!    or, for a batch handler, up to its `batch_size` ([`batch`]); a call
//!    that asks for more time has its leases kept meanwhile ([`keep`]);
//! 4. the settler ([`settle`]) writes outcomes back in batches.
//!
//! Every way an attempt can end is turned into a broker [`Settlement`] in one
//! place, [`settlement_for`](call::settlement_for), from the pure decision
//! in [`crate::policy`].

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::{Mutex, OwnedSemaphorePermit, Semaphore, mpsc, watch};
use tokio::task::JoinSet;

use crate::base::trace::Exporter;
use crate::broker::{ClaimState, KeyOf, Queue, Received, Settlement};
use crate::config::HandlerSpec;
use crate::error::chain;
use crate::message::Delivery;
use crate::sandbox::runtime::{BatchInvocation, Deadline, Handler, Invocation, Ready};
use crate::serve::metrics::HandlerMetrics;
use crate::serve::pause::Paused;
pub use bounded::DEFAULT_BROKER_TIMEOUT;
pub(crate) use bounded::Progress;

mod admit;
mod batch;
mod bounded;
mod call;
mod keep;
mod settle;
mod supervise;

pub(crate) use supervise::supervise;

/// Longest pause between polls of an empty queue.
const MAX_IDLE_POLL: Duration = Duration::from_millis(50);

/// Something that handles a delivery: a WASM handler, or a native one in
/// benchmarks and tests.
#[async_trait]
pub trait Dispatch: Send + Sync + 'static {
    /// Wait until a call may start now (an instance is free for it), before
    /// its deadline starts; what was found goes to the call. By default at
    /// once, with nothing.
    async fn ready(&self) -> Ready {
        Ready::default()
    }

    /// Handle one delivery by `deadline`, on what [`Dispatch::ready`] found.
    async fn invoke(&self, ready: Ready, delivery: &Delivery, deadline: &Deadline) -> Invocation;

    /// Work kept off the message path (dropping used instances, making
    /// spare ones), done by a caller after it passes a settlement on.
    async fn tidy(&self) {}

    /// Whether its calls take batches ([`Dispatch::invoke_batch`]).
    fn batch(&self) -> bool {
        false
    }

    /// Handle `deliveries` by `deadline`, one outcome each. By default one
    /// call each, in turn (the first on `ready`): the batch fails with the
    /// first call that fails.
    async fn invoke_batch(
        &self,
        ready: Ready,
        deliveries: &[Delivery],
        deadline: &Deadline,
    ) -> BatchInvocation {
        let mut outcomes = Vec::with_capacity(deliveries.len());
        let mut publishes = Vec::new();
        let mut ready = Some(ready);
        for d in deliveries {
            let one = self
                .invoke(ready.take().unwrap_or_default(), d, deadline)
                .await;
            match one.result {
                Ok(outcome) => outcomes.push(outcome),
                Err(f) => {
                    return BatchInvocation {
                        result: Err(f),
                        publishes: Vec::new(),
                        instantiate: None,
                        memory: one.memory,
                    };
                }
            }
            publishes.extend(one.publishes);
        }
        BatchInvocation {
            result: Ok(outcomes),
            publishes,
            instantiate: None,
            memory: 0,
        }
    }

    /// The version recorded with dead letters and log lines.
    fn version(&self) -> &str;
}

#[async_trait]
impl Dispatch for Handler {
    async fn ready(&self) -> Ready {
        Handler::ready(self).await
    }

    async fn invoke(&self, ready: Ready, delivery: &Delivery, deadline: &Deadline) -> Invocation {
        Handler::invoke_on(self, ready, delivery, deadline).await
    }

    fn batch(&self) -> bool {
        self.world().is_batch()
    }

    async fn invoke_batch(
        &self,
        ready: Ready,
        deliveries: &[Delivery],
        deadline: &Deadline,
    ) -> BatchInvocation {
        Handler::invoke_batch(self, ready, deliveries, deadline).await
    }

    fn version(&self) -> &str {
        &self.version
    }

    async fn tidy(&self) {
        Handler::tidy(self).await
    }
}

/// Live counts of one worker, read by `--until-idle`, the admin view and
/// the stall watchdog.
#[derive(Debug, Default)]
pub struct WorkerStats {
    /// Deliveries in a handler call now.
    pub(crate) calling: AtomicU64,
    /// Callers in a handler call now (a batch is one).
    pub(crate) busy_callers: AtomicU64,
    /// When its work last moved, and the broker calls under way.
    pub(crate) progress: Progress,
    /// Deliveries leased and not yet settled.
    pub(crate) in_flight: AtomicU64,
    /// Deliveries whose settlement was written, since the worker started.
    pub handled: AtomicU64,
    /// Times the worker died and was started again.
    pub(crate) restarts: AtomicU64,
    /// Why it died last.
    pub(crate) last_failure: std::sync::Mutex<Option<String>>,
}

/// What a worker reports to, and is steered by, besides its broker.
#[derive(Clone)]
pub struct Observe {
    /// Its handler version's metrics; none when the host serves no metrics.
    pub metrics: Option<HandlerMetrics>,
    /// Where attempt spans go; none when spans are not exported (their
    /// trace context is carried all the same).
    pub exporter: Option<Arc<Exporter>>,
    /// Whether its queue is paused.
    pub paused: Paused,
    /// The longest it waits for one broker call (`broker_timeout`), never
    /// longer than the queue's lease: see `bounded.rs`.
    pub broker_timeout: Duration,
}

impl Observe {
    /// No metrics, no export, never paused.
    #[cfg(any(test, feature = "testkit"))]
    pub fn none(queue: &str) -> Self {
        Observe {
            metrics: None,
            exporter: None,
            paused: Paused::never(queue),
            broker_timeout: DEFAULT_BROKER_TIMEOUT,
        }
    }
}

/// The dispatch loop of one queue for one handler version: see the module.
pub struct QueueWorker {
    /// Where the queue is.
    pub(crate) broker: Arc<dyn Queue>,
    /// What handles each delivery.
    pub(crate) dispatch: Arc<dyn Dispatch>,
    /// The handler's settings: queue, concurrency, prefetch, policy.
    pub(crate) spec: Arc<HandlerSpec>,
    /// Counts the worker keeps as it runs.
    pub stats: Arc<WorkerStats>,
    /// Metrics, spans, pauses and the broker call bound.
    pub(crate) observe: Observe,
}

/// A settlement and the prefetch permit its delivery holds until it is written.
type Settled = (Settlement, OwnedSemaphorePermit);
/// A leased batch on its way to the admitter, one permit per delivery.
struct Leased {
    batch: Vec<(Delivery, OwnedSemaphorePermit)>,
    /// The keys, where the broker took them with the leases
    /// ([`Queue::claims_with_receive`]); `None`: the admitter takes them.
    taken: Option<Taken>,
}
/// The keys a batch's deliveries took with their leases (see
/// [`admit::key_of`]), one per delivery, and what taking them found, one
/// answer per `Some` key, in order.
struct Taken {
    keys: Vec<Option<String>>,
    claims: crate::broker::Result<Vec<ClaimState>>,
}
/// An admitted delivery with its idempotency key and its prefetch permit.
type Job = (Delivery, Option<String>, OwnedSemaphorePermit);
/// The shared end of the job queue: the callers take turns on it.
type Jobs = Arc<Mutex<mpsc::UnboundedReceiver<Job>>>;

impl QueueWorker {
    /// A worker for `spec`'s queue, observed by nothing.
    #[cfg(any(test, feature = "testkit"))]
    pub fn new(broker: Arc<dyn Queue>, dispatch: Arc<dyn Dispatch>, spec: HandlerSpec) -> Self {
        QueueWorker {
            broker,
            dispatch,
            observe: Observe::none(&spec.queue),
            spec: Arc::new(spec),
            stats: Arc::new(WorkerStats::default()),
        }
    }

    /// The worker, reporting to and steered by `observe`.
    #[cfg(any(test, feature = "testkit"))]
    pub fn with_observe(mut self, observe: Observe) -> Self {
        self.observe = observe;
        self
    }

    /// Serve the queue until `stop` turns true, then wait up to `grace` for
    /// the calls in flight. Whatever is still leased after that is left for
    /// its lease to expire and be delivered again.
    ///
    /// Panics when one of its stages (settler, callers, admitter) dies while
    /// it serves, with that stage's panic: a worker missing a stage would
    /// wedge its queue without a word. `supervise` starts a new one.
    pub async fn serve(mut self, mut stop: watch::Receiver<bool>, grace: Duration) {
        let spec = self.spec.clone();
        let bound = self.observe.broker_timeout.min(spec.lease);
        self.broker = bounded::Bounded::wrap(self.broker, &self.stats, &spec.queue, bound);
        let leases = Arc::new(Semaphore::new(spec.prefetch));
        let mut stages = JoinSet::new();
        let (settle_tx, settle_rx) = mpsc::unbounded_channel::<Settled>();
        let (leased_tx, leased_rx) = mpsc::unbounded_channel::<Leased>();
        self.spawn_stages(&mut stages, settle_tx.clone(), settle_rx, leased_rx, &stop);
        // No stage ends on its own while the reader runs: one that does died.
        let died = tokio::select! {
            () = self.read_loop(&leases, &leased_tx, &mut stop) => None,
            Some(ended) = stages.join_next() => Some(ended),
        };
        if let Some(ended) = died {
            stages.abort_all();
            match ended {
                Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
                Err(e) => panic!("a stage of the worker ended: {e}"),
                Ok(()) => panic!("a stage of the worker ended while it served"),
            }
        }
        drop(leased_tx);
        // Stopping: wait for calls in flight, then for their settlements.
        let all = spec.prefetch as u32;
        if tokio::time::timeout(grace, leases.acquire_many(all))
            .await
            .is_err()
        {
            tracing::warn!(
                queue = %spec.queue,
                in_flight = self.stats.in_flight.load(Ordering::Relaxed),
                "grace period over; unfinished messages will be delivered again when their lease expires"
            );
        }
        // Calls still running after the grace period are abandoned; their
        // messages come back when the lease runs out.
        drop(settle_tx);
        stages.abort_all();
    }

    /// Start the settler, the callers and the admitter, joined by channels:
    /// leased batches come in on `leased_rx`, settlements go out through
    /// `settle_tx`.
    fn spawn_stages(
        &self,
        stages: &mut JoinSet<()>,
        settle_tx: mpsc::UnboundedSender<Settled>,
        settle_rx: mpsc::UnboundedReceiver<Settled>,
        leased_rx: mpsc::UnboundedReceiver<Leased>,
        stop: &watch::Receiver<bool>,
    ) {
        let spec = &self.spec;
        stages.spawn(settle::settle_loop(
            self.broker.clone(),
            spec.queue.clone(),
            spec.ordering.is_some(),
            settle_rx,
            self.stats.clone(),
            self.observe.metrics.clone(),
        ));
        // A fixed set of callers rather than a task per message: a warm
        // instance answers in about a microsecond, less than a spawn costs.
        let (jobs_tx, jobs_rx) = mpsc::unbounded_channel::<Job>();
        let jobs: Jobs = Arc::new(Mutex::new(jobs_rx));
        for _ in 0..spec.concurrency {
            let caller = call::Caller {
                jobs: jobs.clone(),
                broker: self.broker.clone(),
                dispatch: self.dispatch.clone(),
                spec: spec.clone(),
                observe: self.observe.clone(),
                settle_tx: settle_tx.clone(),
                stop: stop.clone(),
                stats: self.stats.clone(),
            };
            if self.dispatch.batch() {
                stages.spawn(batch::batch_loop(caller));
            } else {
                stages.spawn(call::call_loop(caller));
            }
        }
        // The admitter takes keys for one batch while the next is read.
        stages.spawn(admit::admit_loop(
            leased_rx,
            self.broker.clone(),
            spec.clone(),
            self.dispatch.clone(),
            settle_tx,
            jobs_tx,
        ));
    }

    /// Lease batches for as long as the prefetch allows, and the queue is not
    /// paused, until `stop`.
    async fn read_loop(
        &self,
        leases: &Arc<Semaphore>,
        leased_tx: &mpsc::UnboundedSender<Leased>,
        stop: &mut watch::Receiver<bool>,
    ) {
        let spec = &*self.spec;
        let mut idle = Duration::from_millis(1);
        let mut broker_backoff = Duration::from_millis(50);
        let floor = batch_floor(spec.prefetch);
        let key_of = admit::key_of(self.spec.clone());
        loop {
            let Some(mut permits) = take_permits(leases, floor, stop).await else {
                return;
            };
            if self.observe.paused.is_paused() {
                // Lease nothing until resumed: messages wait as they are.
                drop(permits);
                if self.resumed_or_stopped(stop).await {
                    return;
                }
                continue;
            }
            let (batch, taken) = match self.receive(permits.num_permits(), &key_of).await {
                Ok(received) => {
                    broker_backoff = Duration::from_millis(50);
                    received
                }
                Err(e) => {
                    tracing::error!(queue = %spec.queue, error = %chain(&e), "receive failed; retrying in {broker_backoff:?}");
                    drop(permits);
                    if sleep_or_stop(stop, broker_backoff).await {
                        return;
                    }
                    broker_backoff = (broker_backoff * 2).min(Duration::from_secs(5));
                    continue;
                }
            };
            if batch.is_empty() {
                drop(permits);
                let waited = self.broker.idle(&spec.queue, idle);
                tokio::select! {
                    () = waited => {}
                    _ = stop.wait_for(|s| *s) => return,
                }
                idle = (idle * 2).min(MAX_IDLE_POLL);
                continue;
            }
            idle = Duration::from_millis(1);
            self.stats
                .in_flight
                .fetch_add(batch.len() as u64, Ordering::Relaxed);
            let batch = batch
                .into_iter()
                .map(|d| (d, permits.split(1).expect("one permit per delivery")))
                .collect();
            let _ = leased_tx.send(Leased { batch, taken });
        }
    }
}

impl QueueWorker {
    /// Lease up to `want` messages of the queue, within its flow limits;
    /// where the broker takes idempotency keys in the same step, with the
    /// keys `key_of` gives them and what taking them found.
    async fn receive(
        &self,
        want: usize,
        key_of: &KeyOf,
    ) -> crate::broker::Result<(Vec<Delivery>, Option<Taken>)> {
        let spec = &*self.spec;
        if !self.broker.claims_with_receive() {
            let batch = self
                .broker
                .receive(&spec.queue, want, spec.lease, spec.flow)
                .await?;
            return Ok((batch, None));
        }
        let Received {
            deliveries,
            keys,
            claims,
        } = self
            .broker
            .receive_claiming(&spec.queue, want, spec.lease, spec.flow, key_of)
            .await?;
        Ok((deliveries, Some(Taken { keys, claims })))
    }

    /// Wait until the queue is resumed; true if `stop` came first.
    async fn resumed_or_stopped(&self, stop: &mut watch::Receiver<bool>) -> bool {
        tokio::select! {
            () = self.observe.paused.resumed() => false,
            _ = stop.wait_for(|s| *s) => true,
        }
    }
}

/// Permits for the next batch: at least `floor` (waiting for them), and
/// whatever else the prefetch allows now, up to [`MAX_BATCH`]. `None` once
/// `stop` turns true.
async fn take_permits(
    leases: &Arc<Semaphore>,
    floor: u32,
    stop: &mut watch::Receiver<bool>,
) -> Option<OwnedSemaphorePermit> {
    let mut permits = tokio::select! {
        p = leases.clone().acquire_many_owned(floor) => p.expect("semaphore never closes"),
        _ = stop.wait_for(|s| *s) => return None,
    };
    // Only the reader takes permits, so what is available stays available.
    let more = leases
        .available_permits()
        .min(MAX_BATCH.saturating_sub(permits.num_permits()));
    if more > 0
        && let Ok(more) = leases.clone().try_acquire_many_owned(more as u32)
    {
        permits.merge(more);
    }
    Some(permits)
}

/// How many deliveries one receive asks for at least, so that a busy queue
/// costs one broker call per batch rather than per message (and at most
/// [`MAX_BATCH`]). The floor is an eighth of the prefetch, so that several
/// batches are in flight at once, each at another stage (being read, having
/// its keys taken, being handled, being settled): with one or two, every
/// stage waits for the others' round trips.
fn batch_floor(prefetch: usize) -> u32 {
    (prefetch / 8).clamp(1, 256) as u32
}

/// Most deliveries one receive asks for.
const MAX_BATCH: usize = 512;

/// Counts `n` deliveries, and one caller, as in a handler call while held.
pub(super) struct InCall<'a> {
    stats: &'a WorkerStats,
    n: u64,
}

impl<'a> InCall<'a> {
    pub(super) fn new(stats: &'a WorkerStats, n: usize) -> Self {
        stats.calling.fetch_add(n as u64, Ordering::Relaxed);
        stats.busy_callers.fetch_add(1, Ordering::Relaxed);
        InCall { stats, n: n as u64 }
    }
}

impl Drop for InCall<'_> {
    fn drop(&mut self) {
        self.stats.calling.fetch_sub(self.n, Ordering::Relaxed);
        self.stats.busy_callers.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Sleep for `d`; true if `stop` turned true meanwhile.
async fn sleep_or_stop(stop: &mut watch::Receiver<bool>, d: Duration) -> bool {
    tokio::select! {
        _ = tokio::time::sleep(d) => {}
        _ = stop.wait_for(|s| *s) => {}
    }
    *stop.borrow()
}
