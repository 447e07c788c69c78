//! The admitter: turns away deliveries that must not reach the handler and
//! takes the idempotency keys of the rest, one broker call per batch.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;

use super::{Dispatch, Job, Leased, Settled, call};
use crate::broker::{ClaimState, KeyClaim, Queue, Settlement};
use crate::config::HandlerSpec;
use crate::error::chain;
use crate::policy::{self, Decision};

/// How long a delivery whose key is busy elsewhere, or could not be taken,
/// waits before it is tried again.
const BUSY_KEY_DELAY: Duration = Duration::from_millis(500);

/// Admit each leased batch in turn and queue what may run for the callers.
pub(super) async fn admit_loop(
    mut leased: mpsc::UnboundedReceiver<Leased>,
    broker: Arc<dyn Queue>,
    spec: Arc<HandlerSpec>,
    dispatch: Arc<dyn Dispatch>,
    settle_tx: mpsc::UnboundedSender<Settled>,
    jobs_tx: mpsc::UnboundedSender<Job>,
) {
    while let Some(batch) = leased.recv().await {
        for job in admit(&*broker, &spec, &*dispatch, batch, &settle_tx).await {
            let _ = jobs_tx.send(job);
        }
    }
}

/// Turn away deliveries that must not reach the handler: over the attempt
/// limit, or whose idempotency key is done or busy. Returns the rest.
async fn admit(
    broker: &dyn Queue,
    spec: &HandlerSpec,
    dispatch: &dyn Dispatch,
    batch: Leased,
    settle_tx: &mpsc::UnboundedSender<Settled>,
) -> Vec<Job> {
    let mut runnable = Vec::with_capacity(batch.len());
    for (delivery, permit) in batch {
        let key = call::idempotency_key(&delivery, spec);
        if let Some(Decision::Dead { reason }) = policy::over_limit(delivery.attempt, &spec.retry) {
            let error = delivery.last_error.clone();
            let settlement = call::dead(spec, delivery, reason, error, dispatch.version(), key);
            let _ = settle_tx.send((settlement, permit));
            continue;
        }
        runnable.push((delivery, key, permit));
    }
    take_keys(broker, spec, runnable, settle_tx).await
}

/// Take the idempotency keys of `runnable` in one broker call. Returns the
/// jobs that hold theirs (or have none); the rest go to the settler: as
/// duplicates when the key is done, back to the queue when it is busy.
async fn take_keys(
    broker: &dyn Queue,
    spec: &HandlerSpec,
    runnable: Vec<Job>,
    settle_tx: &mpsc::UnboundedSender<Settled>,
) -> Vec<Job> {
    let claims: Vec<KeyClaim> = runnable
        .iter()
        .filter_map(|(d, key, _)| {
            key.as_ref().map(|k| KeyClaim {
                key: k.clone(),
                holder: d.receipt.clone(),
            })
        })
        .collect();
    if claims.is_empty() {
        return runnable;
    }
    let states = match broker.claim(&spec.queue, &claims, spec.lease).await {
        Ok(states) => states,
        Err(e) => {
            // Without keys nothing may run: the batch goes back, without
            // spending an attempt, through the settler, which counts it out
            // of in flight once the broker takes the settlement.
            tracing::error!(queue = %spec.queue, error = %chain(&e), "could not take idempotency keys; the batch goes back to the queue");
            for (delivery, _, permit) in runnable {
                let _ = settle_tx.send((defer(delivery), permit));
            }
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
                let _ = settle_tx.send((defer(delivery), permit));
            }
        }
    }
    admitted
}

/// Hand `delivery` back for a later try that spends no attempt; it holds
/// no key.
fn defer(delivery: crate::message::Delivery) -> Settlement {
    Settlement::Defer {
        delivery,
        delay: BUSY_KEY_DELAY,
        key: None,
    }
}
