//! The admitter: turns away deliveries that must not reach the handler and
//! takes the idempotency keys of the rest, one broker call per batch (or
//! finds them taken with the leases, where the broker does both at once).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;

use super::{Dispatch, Job, Leased, Settled, Taken, call};
use crate::broker::{ClaimState, KeyOf, Queue, Settlement, claim_all, claims_of};
use crate::config::HandlerSpec;
use crate::error::chain;
use crate::message::Delivery;
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

/// The idempotency key a delivery takes: none when it is over the attempt
/// limit (the admitter dead-letters it without taking one), else the one
/// its handler's `[idempotency]` gives, if any.
pub(super) fn key_of(spec: Arc<HandlerSpec>) -> KeyOf {
    Arc::new(move |d: &Delivery| {
        if let Some(Decision::Dead { .. }) = policy::over_limit(d.attempt, &spec.retry) {
            return None;
        }
        call::idempotency_key(d, &spec)
    })
}

/// Turn away deliveries that must not reach the handler: over the attempt
/// limit, or whose idempotency key is done or busy. Returns the rest.
async fn admit(
    broker: &dyn Queue,
    spec: &HandlerSpec,
    dispatch: &dyn Dispatch,
    leased: Leased,
    settle_tx: &mpsc::UnboundedSender<Settled>,
) -> Vec<Job> {
    let Leased { batch, taken } = leased;
    let (mut given, claimed) = match taken {
        Some(Taken { keys, claims }) => (Some(keys.into_iter()), Some(claims)),
        None => (None, None),
    };
    let mut runnable = Vec::with_capacity(batch.len());
    for (delivery, permit) in batch {
        // The key `key_of` gave it with the lease, if the broker took keys.
        let given_key = given.as_mut().map(|keys| keys.next().flatten());
        if let Some(Decision::Dead { reason }) = policy::over_limit(delivery.attempt, &spec.retry) {
            let key = call::idempotency_key(&delivery, spec);
            let error = delivery.last_error.clone();
            let settlement = call::dead(spec, delivery, reason, error, dispatch.version(), key);
            let _ = settle_tx.send((settlement, permit));
            continue;
        }
        let key = given_key.unwrap_or_else(|| call::idempotency_key(&delivery, spec));
        runnable.push((delivery, key, permit));
    }
    let states = match claimed {
        // Taken with the leases, one answer per key `key_of` gave: the
        // keys of `runnable`, in the same order.
        Some(states) => states,
        None => {
            let claims = claims_of(runnable.iter().map(|(d, key, _)| (d, key)));
            claim_all(broker, &spec.queue, &claims, spec.lease).await
        }
    };
    sort_by_claims(spec, runnable, states, settle_tx)
}

/// The jobs of `runnable` that hold their keys (or have none), given what
/// taking the keys found (`states`, one per key); the rest go to the
/// settler: as duplicates when the key is done, back to the queue when it
/// is busy or could not be taken.
fn sort_by_claims(
    spec: &HandlerSpec,
    runnable: Vec<Job>,
    states: crate::broker::Result<Vec<ClaimState>>,
    settle_tx: &mpsc::UnboundedSender<Settled>,
) -> Vec<Job> {
    let states = match states {
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
