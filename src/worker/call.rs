//! The callers: run the handler for admitted deliveries, and the one place
//! where an attempt's ending becomes a settlement.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, watch};

use super::{Dispatch, Jobs, Settled};
use crate::broker::Settlement;
use crate::config::{HandlerSpec, KeySource};
use crate::message::{Delivery, NewMessage, now_ms};
use crate::policy::{self, Decision, Outcome};
use crate::runtime::Invocation;

/// One of the worker's callers: takes admitted deliveries in turn, handles
/// each and passes its settlement on, until the job queue closes.
pub(super) async fn call_loop(
    jobs: Jobs,
    dispatch: Arc<dyn Dispatch>,
    spec: Arc<HandlerSpec>,
    settle_tx: mpsc::UnboundedSender<Settled>,
    stop: watch::Receiver<bool>,
) {
    loop {
        let next = jobs.lock().await.recv().await;
        let Some((delivery, key, permit)) = next else {
            return;
        };
        // Prefetched but not started when the stop came: hand it back at
        // once, without spending an attempt.
        let settlement = if *stop.borrow() {
            Settlement::Defer {
                delivery,
                delay: Duration::ZERO,
            }
        } else {
            run_one(&*dispatch, &spec, delivery, key).await
        };
        let _ = settle_tx.send((settlement, permit));
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
pub(super) fn dead(
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
