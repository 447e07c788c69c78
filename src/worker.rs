//! The dispatch loop of one queue: lease a batch, take idempotency keys,
//! call the handler with bounded concurrency, and settle outcomes in batches.
//!
//! Every way an attempt can end is turned into a broker [`Settlement`] in one
//! place, [`settlement_for`], from the pure decision in [`crate::policy`].

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, watch};

use crate::broker::{Broker, ClaimState, KeyClaim, Settlement};
use crate::config::{HandlerSpec, KeySource};
use crate::message::{Delivery, NewMessage, now_ms};
use crate::policy::{self, Decision, Outcome};
use crate::runtime::{Handler, Invocation};

/// Longest pause between polls of an empty queue.
const MAX_IDLE_POLL: Duration = Duration::from_millis(50);
/// How long a delivery whose key is busy elsewhere waits before it is tried again.
const BUSY_KEY_DELAY: Duration = Duration::from_millis(500);
/// Most settlements written in one broker call.
const MAX_SETTLE_BATCH: usize = 1024;

/// Something that handles a delivery: a WASM handler, or a native one in
/// benchmarks and tests.
#[async_trait]
pub trait Dispatch: Send + Sync + 'static {
    async fn invoke(&self, delivery: &Delivery) -> Invocation;
    /// The version recorded with dead letters and log lines.
    fn version(&self) -> &str;
}

#[async_trait]
impl Dispatch for Handler {
    async fn invoke(&self, delivery: &Delivery) -> Invocation {
        Handler::invoke(self, delivery).await
    }

    fn version(&self) -> &str {
        &self.version
    }
}

/// Live counts of one worker, read by `--until-idle` and the admin view.
#[derive(Debug, Default)]
pub struct WorkerStats {
    /// Deliveries leased and not yet settled.
    pub in_flight: AtomicU64,
    pub handled: AtomicU64,
}

pub struct QueueWorker {
    pub broker: Arc<dyn Broker>,
    pub dispatch: Arc<dyn Dispatch>,
    pub spec: Arc<HandlerSpec>,
    pub stats: Arc<WorkerStats>,
}

type Settled = (Settlement, OwnedSemaphorePermit);

impl QueueWorker {
    pub fn new(broker: Arc<dyn Broker>, dispatch: Arc<dyn Dispatch>, spec: HandlerSpec) -> Self {
        QueueWorker {
            broker,
            dispatch,
            spec: Arc::new(spec),
            stats: Arc::new(WorkerStats::default()),
        }
    }

    /// Serve the queue until `stop` turns true, then wait up to `grace` for
    /// the calls in flight. Whatever is still leased after that is left for
    /// its lease to expire and be delivered again.
    pub async fn serve(self, mut stop: watch::Receiver<bool>, grace: Duration) {
        let spec = self.spec.clone();
        let leases = Arc::new(Semaphore::new(spec.prefetch));
        let calls = Arc::new(Semaphore::new(spec.concurrency));
        let (settle_tx, settle_rx) = mpsc::unbounded_channel::<Settled>();
        let settler = tokio::spawn(settle_loop(
            self.broker.clone(),
            settle_rx,
            self.stats.clone(),
        ));
        let mut idle = Duration::from_millis(1);
        let mut broker_backoff = Duration::from_millis(50);
        // Receive in batches of at least half the prefetch, so that a busy
        // queue costs one broker call per batch rather than per message.
        let batch_floor = (spec.prefetch / 2).max(1) as u32;
        loop {
            let mut permits = tokio::select! {
                p = leases.clone().acquire_many_owned(batch_floor) => p.expect("semaphore never closes"),
                _ = stop.wait_for(|s| *s) => break,
            };
            while let Ok(more) = leases.clone().try_acquire_owned() {
                permits.merge(more);
            }
            let want = permits.num_permits();
            let batch = match self.broker.receive(&spec.queue, want, spec.lease).await {
                Ok(batch) => {
                    broker_backoff = Duration::from_millis(50);
                    batch
                }
                Err(e) => {
                    tracing::error!(queue = %spec.queue, error = %e, "receive failed; retrying in {broker_backoff:?}");
                    drop(permits);
                    if sleep_or_stop(&mut stop, broker_backoff).await {
                        break;
                    }
                    broker_backoff = (broker_backoff * 2).min(Duration::from_secs(5));
                    continue;
                }
            };
            if batch.is_empty() {
                drop(permits);
                if sleep_or_stop(&mut stop, idle).await {
                    break;
                }
                idle = (idle * 2).min(MAX_IDLE_POLL);
                continue;
            }
            idle = Duration::from_millis(1);
            self.stats
                .in_flight
                .fetch_add(batch.len() as u64, Ordering::Relaxed);
            let mut per_message = Vec::with_capacity(batch.len());
            for _ in 0..batch.len() {
                per_message.push(permits.split(1).expect("one permit per delivery"));
            }
            drop(permits);
            for (delivery, key, permit) in self.admit(batch, per_message, &settle_tx).await {
                let dispatch = self.dispatch.clone();
                let spec = spec.clone();
                let calls = calls.clone();
                let settle_tx = settle_tx.clone();
                let stop = stop.clone();
                tokio::spawn(async move {
                    let _call = calls.acquire_owned().await.expect("semaphore never closes");
                    // Prefetched but not started when the stop came: hand it
                    // back at once, without spending an attempt.
                    let settlement = if *stop.borrow() {
                        Settlement::Defer {
                            delivery,
                            delay: Duration::ZERO,
                        }
                    } else {
                        run_one(&*dispatch, &spec, delivery, key).await
                    };
                    let _ = settle_tx.send((settlement, permit));
                });
            }
        }
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
        drop(settle_tx);
        settler.abort();
    }

    /// Turn away deliveries that must not reach the handler: over the attempt
    /// limit, or whose idempotency key is done or busy. Returns the rest.
    async fn admit(
        &self,
        batch: Vec<Delivery>,
        permits: Vec<OwnedSemaphorePermit>,
        settle_tx: &mpsc::UnboundedSender<Settled>,
    ) -> Vec<(Delivery, Option<String>, OwnedSemaphorePermit)> {
        let spec = &*self.spec;
        let mut runnable = Vec::with_capacity(batch.len());
        for (delivery, permit) in batch.into_iter().zip(permits) {
            let key = idempotency_key(&delivery, spec);
            if let Some(Decision::Dead { reason }) =
                policy::over_limit(delivery.attempt, &spec.retry)
            {
                let error = delivery.last_error.clone();
                let settlement = dead(spec, delivery, reason, error, self.dispatch.version(), key);
                let _ = settle_tx.send((settlement, permit));
                continue;
            }
            runnable.push((delivery, key, permit));
        }
        let claims: Vec<KeyClaim> = runnable
            .iter()
            .filter_map(|(d, key, _)| {
                key.as_ref().map(|k| KeyClaim {
                    key: k.clone(),
                    message_id: d.id.clone(),
                })
            })
            .collect();
        if claims.is_empty() {
            return runnable;
        }
        let states = match self.broker.claim(&spec.queue, &claims, spec.lease).await {
            Ok(states) => states,
            Err(e) => {
                // Without keys nothing may run; the leases expire and the
                // messages come back.
                tracing::error!(queue = %spec.queue, error = %e, "could not take idempotency keys");
                return Vec::new();
            }
        };
        let mut states = states.into_iter();
        let mut admitted = Vec::with_capacity(runnable.len());
        for (delivery, key, permit) in runnable {
            let state = if key.is_some() {
                states.next()
            } else {
                Some(ClaimState::Acquired)
            };
            match state {
                Some(ClaimState::Acquired) => admitted.push((delivery, key, permit)),
                Some(ClaimState::AlreadyDone) => {
                    tracing::debug!(queue = %spec.queue, id = %delivery.id, "duplicate: key already done");
                    let _ = settle_tx.send((Settlement::Duplicate { delivery }, permit));
                }
                Some(ClaimState::Busy) | None => {
                    let settlement = Settlement::Defer {
                        delivery,
                        delay: BUSY_KEY_DELAY,
                    };
                    let _ = settle_tx.send((settlement, permit));
                }
            }
        }
        admitted
    }
}

/// Handle one delivery and say how it settles.
async fn run_one(
    dispatch: &dyn Dispatch,
    spec: &HandlerSpec,
    delivery: Delivery,
    key: Option<String>,
) -> Settlement {
    // A delivery that waited so long that its lease would run out during the
    // call goes back untouched rather than risk being handled twice at once.
    let must_end_by = now_ms() + spec.timeout.as_millis() as u64;
    if must_end_by >= delivery.lease_until_ms {
        return Settlement::Defer {
            delivery,
            delay: Duration::ZERO,
        };
    }
    let invocation = dispatch.invoke(&delivery).await;
    settlement_for(
        delivery,
        invocation,
        spec,
        key,
        dispatch.version(),
        rand::random(),
    )
}

/// The one place where an attempt's ending becomes a settlement.
pub fn settlement_for(
    delivery: Delivery,
    invocation: Invocation,
    spec: &HandlerSpec,
    key: Option<String>,
    version: &str,
    jitter: f64,
) -> Settlement {
    let (outcome, error) = match invocation.result {
        Ok(outcome) => (outcome, None),
        Err(failure) => (Outcome::Failed, Some(failure.to_string())),
    };
    let decision = policy::decide(&outcome, delivery.attempt, &spec.retry, jitter);
    tracing::debug!(
        handler = %spec.name, version, queue = %delivery.queue, id = %delivery.id,
        attempt = delivery.attempt, ?outcome, ?decision, error = error.as_deref(), "handled"
    );
    if let Some(e) = &error {
        tracing::warn!(handler = %spec.name, version, id = %delivery.id, attempt = delivery.attempt, "attempt failed: {e}");
    }
    match decision {
        Decision::Ack => Settlement::Done {
            delivery,
            key: key.map(|k| (k, spec.idempotency.retention)),
            publishes: invocation.publishes,
        },
        Decision::Retry { delay } => Settlement::Retry {
            delivery,
            delay,
            error: error.unwrap_or_else(|| "handler asked for a retry".to_string()),
            key,
        },
        Decision::Dead { reason } => {
            let error = match (&outcome, error) {
                (_, Some(e)) => Some(e),
                (Outcome::Retry(_), None) => Some("handler asked for a retry".to_string()),
                _ => None,
            };
            tracing::info!(handler = %spec.name, version, id = %delivery.id, "dead-lettered: {reason}");
            dead(spec, delivery, reason, error, version, key)
        }
    }
}

/// A dead-lettering, with the notice for the handler's `on_dead` queue.
fn dead(
    spec: &HandlerSpec,
    delivery: Delivery,
    reason: String,
    error: Option<String>,
    version: &str,
    key: Option<String>,
) -> Settlement {
    let notice = spec.on_dead.as_ref().map(|queue| {
        let body = serde_json::json!({
            "queue": delivery.queue,
            "id": delivery.id,
            "key": delivery.key,
            "reason": reason,
            "attempts": delivery.attempt,
            "last_error": error,
            "handler_version": version,
        });
        let mut notice = NewMessage::new(queue.clone(), body.to_string());
        notice.headers = vec![("dead-letter-of".into(), delivery.id.clone())];
        notice
    });
    Settlement::Dead {
        delivery,
        reason,
        error,
        handler_version: Some(version.to_string()),
        key,
        notice,
    }
}

/// The idempotency key this handler uses for a delivery, if idempotency is on.
/// A configured header or JSON pointer that is missing falls back to the
/// message's own key.
pub fn idempotency_key(delivery: &Delivery, spec: &HandlerSpec) -> Option<String> {
    if !spec.idempotency.enabled {
        return None;
    }
    let derived = match &spec.idempotency.source {
        KeySource::Message => None,
        KeySource::Header(name) => delivery.header(name).map(str::to_string),
        KeySource::Pointer(pointer) => {
            serde_json::from_slice::<serde_json::Value>(&delivery.payload)
                .ok()
                .and_then(|v| match v.pointer(pointer)? {
                    serde_json::Value::String(s) => Some(s.clone()),
                    serde_json::Value::Number(n) => Some(n.to_string()),
                    _ => None,
                })
        }
    };
    Some(derived.unwrap_or_else(|| delivery.key.clone()))
}

async fn settle_loop(
    broker: Arc<dyn Broker>,
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
        while let Err(e) = broker.settle(batch.clone()).await {
            tracing::error!(error = %e, count = batch.len(), "settling failed; retrying in {backoff:?}");
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

/// Sleep for `d`; true if `stop` turned true meanwhile.
async fn sleep_or_stop(stop: &mut watch::Receiver<bool>, d: Duration) -> bool {
    tokio::select! {
        _ = tokio::time::sleep(d) => {}
        _ = stop.wait_for(|s| *s) => {}
    }
    *stop.borrow()
}
