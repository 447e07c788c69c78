//! The callers: run the handler for admitted deliveries, and the one place
//! where an attempt's ending becomes a settlement.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, watch};

use super::{Dispatch, Jobs, Observe, Settled};
use crate::broker::Settlement;
use crate::config::{HandlerSpec, KeySource, bounds};
use crate::message::{Delivery, MAX_REASON, NewMessage, now_ms, truncate};
use crate::policy::{self, Decision, Outcome};
use crate::runtime::{Failure, Invocation};
use crate::trace::{Attempt, AttemptFields};

/// How long a message that found no free instance waits before it is
/// delivered again.
const POOL_FULL_DELAY: Duration = Duration::from_millis(100);

/// One of the worker's callers: takes admitted deliveries in turn, handles
/// each and passes its settlement on, until the job queue closes.
pub(super) async fn call_loop(
    jobs: Jobs,
    dispatch: Arc<dyn Dispatch>,
    spec: Arc<HandlerSpec>,
    observe: Observe,
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
                key,
            }
        } else {
            run_one(&*dispatch, &spec, &observe, delivery, key).await
        };
        let _ = settle_tx.send((settlement, permit));
    }
}

/// Handle one delivery and say how it settles: one attempt, with its span
/// and its metrics.
async fn run_one(
    dispatch: &dyn Dispatch,
    spec: &HandlerSpec,
    observe: &Observe,
    mut delivery: Delivery,
    key: Option<String>,
) -> Settlement {
    // A delivery that waited so long that its lease would run out during the
    // call, or while it settles, goes back untouched rather than risk being
    // handled twice at once. Half the margin a lease must leave beyond the
    // timeout is for settling.
    let settle_margin = (bounds::LEASE_MARGIN / 2).as_millis() as u64;
    let must_end_by = now_ms() + spec.timeout.as_millis() as u64 + settle_margin;
    if must_end_by >= delivery.lease_until_ms {
        return Settlement::Defer {
            delivery,
            delay: Duration::ZERO,
            key,
        };
    }
    let version = dispatch.version();
    let fields = AttemptFields {
        queue: &spec.queue,
        handler: &spec.name,
        version,
        attempt: delivery.attempt,
        message_id: &delivery.id,
    };
    let attempt = Attempt::begin(&mut delivery.headers, observe.exporter.as_deref(), fields);
    let started = std::time::Instant::now();
    if let Some(m) = &observe.metrics {
        m.waited(&delivery, now_ms());
    }
    let mut invocation = dispatch.invoke(&delivery).await;
    if let Some(m) = &observe.metrics {
        m.called(
            started.elapsed(),
            &invocation.result,
            invocation.instantiate,
        );
    }
    attempt.stamp(&mut invocation.publishes);
    let (outcome, error) = span_outcome(&invocation);
    attempt.end(outcome, error.as_deref());
    settlement_for(delivery, invocation, spec, key, version, rand::random())
}

/// How an attempt's span names its ending, and the error it records.
fn span_outcome(invocation: &Invocation) -> (&'static str, Option<String>) {
    match &invocation.result {
        Ok(Outcome::Done) => ("done", None),
        Ok(Outcome::Retry(_)) => ("retry", None),
        Ok(Outcome::Reject(reason)) => ("reject", Some(reason.clone())),
        Ok(Outcome::Failed) => ("failed", None),
        Err(f) => (f.kind(), Some(f.to_string())),
    }
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
        Ok(Outcome::Reject(reason)) => {
            // The guest's words, kept with the dead letter: bounded.
            let reason = truncate(&reason, MAX_REASON).into_owned();
            (Outcome::Reject(reason), None)
        }
        Ok(outcome) => (outcome, None),
        Err(Failure::PoolFull(why)) => {
            tracing::warn!(handler = %spec.name, version, id = %delivery.id, "{why}; the message goes back without spending an attempt");
            return Settlement::Defer {
                delivery,
                delay: POOL_FULL_DELAY,
                key,
            };
        }
        Err(failure) => (
            Outcome::Failed,
            Some(truncate(&failure.to_string(), MAX_REASON).into_owned()),
        ),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Backoff;

    fn spec() -> HandlerSpec {
        let mut spec = HandlerSpec::defaults("orders").unwrap();
        spec.retry.max_attempts = 3;
        spec.retry.backoff = Backoff::Fixed(vec![Duration::from_secs(7)]);
        spec
    }

    fn delivery(attempt: u32, payload: &str) -> Delivery {
        Delivery {
            id: "m1".into(),
            queue: "orders".into(),
            key: "k1".into(),
            payload: payload.as_bytes().to_vec(),
            headers: vec![("Order-Id".into(), "o-9".into())],
            attempt,
            enqueued_at_ms: 0,
            last_error: None,
            receipt: "r".into(),
            lease_until_ms: u64::MAX,
            group: None,
        }
    }

    fn ended(result: Result<Outcome, Failure>, publishes: Vec<NewMessage>) -> Invocation {
        Invocation::ended(result, publishes)
    }

    fn settle(attempt: u32, result: Result<Outcome, Failure>) -> Settlement {
        let publishes = vec![NewMessage::new("next", "x")];
        let d = delivery(attempt, "{}");
        settlement_for(
            d,
            ended(result, publishes),
            &spec(),
            Some("k1".into()),
            "v1",
            0.5,
        )
    }

    #[test]
    fn done_records_the_key_for_its_retention_and_keeps_the_publishes() {
        let Settlement::Done { key, publishes, .. } = settle(1, Ok(Outcome::Done)) else {
            panic!("not done");
        };
        assert_eq!(key, Some(("k1".into(), spec().idempotency.retention)));
        assert_eq!(publishes, vec![NewMessage::new("next", "x")]);
    }

    #[test]
    fn a_retry_waits_by_the_policy_or_the_guest_and_keeps_the_error() {
        let Settlement::Retry {
            delay, error, key, ..
        } = settle(1, Ok(Outcome::Retry(None)))
        else {
            panic!("not a retry");
        };
        assert_eq!(
            (delay, key.as_deref()),
            (Duration::from_secs(7), Some("k1"))
        );
        assert_eq!(error, "handler asked for a retry");
        let asked = Ok(Outcome::Retry(Some(Duration::from_millis(250))));
        let Settlement::Retry { delay, .. } = settle(2, asked) else {
            panic!("not a retry");
        };
        assert_eq!(delay, Duration::from_millis(250));
        let trap = Err(Failure::Trap("unreachable".into()));
        let Settlement::Retry { error, .. } = settle(1, trap) else {
            panic!("not a retry");
        };
        assert_eq!(error, "trap: unreachable");
    }

    #[test]
    fn a_full_pool_sends_the_message_back_without_spending_an_attempt() {
        let full = Err(Failure::PoolFull("maximum concurrent limit".into()));
        let Settlement::Defer {
            delivery,
            delay,
            key,
        } = settle(3, full)
        else {
            panic!("not deferred");
        };
        assert_eq!((delivery.attempt, delay), (3, POOL_FULL_DELAY));
        assert_eq!(key.as_deref(), Some("k1"), "the key it took is let go");
    }

    #[test]
    fn the_last_attempt_dies_with_its_error_and_drops_the_publishes() {
        let timeout = Err(Failure::Timeout("timed out after 5s".into()));
        let Settlement::Dead {
            reason,
            error,
            handler_version,
            key,
            notice,
            ..
        } = settle(3, timeout)
        else {
            panic!("not dead");
        };
        assert_eq!(reason, "gave up after 3 attempt(s)");
        assert_eq!(error.as_deref(), Some("timeout: timed out after 5s"));
        assert_eq!(
            (handler_version.as_deref(), key.as_deref()),
            (Some("v1"), Some("k1"))
        );
        assert!(notice.is_none(), "no on_dead queue, no notice");
        let Settlement::Dead { error, .. } = settle(3, Ok(Outcome::Retry(None))) else {
            panic!("not dead");
        };
        assert_eq!(error.as_deref(), Some("handler asked for a retry"));
    }

    #[test]
    fn a_reject_dies_at_once_with_a_notice_for_on_dead() {
        let mut spec = spec();
        spec.on_dead = Some("orders-dead".into());
        let reject = ended(Ok(Outcome::Reject("bad sku".into())), Vec::new());
        let s = settlement_for(delivery(1, "{}"), reject, &spec, None, "v1", 0.0);
        let Settlement::Dead {
            reason,
            error,
            notice,
            ..
        } = s
        else {
            panic!("not dead");
        };
        assert_eq!((reason.as_str(), error), ("rejected: bad sku", None));
        let notice = notice.expect("a notice");
        assert_eq!(notice.queue, "orders-dead");
        assert_eq!(notice.headers, [("dead-letter-of".into(), "m1".into())]);
        let body: serde_json::Value = serde_json::from_slice(&notice.payload).unwrap();
        assert_eq!(body["reason"], "rejected: bad sku");
        assert_eq!(
            (body["id"].as_str(), body["attempts"].as_u64()),
            (Some("m1"), Some(1))
        );
    }

    #[test]
    fn the_idempotency_key_comes_from_where_the_spec_says() {
        let mut spec = spec();
        let d = delivery(1, r#"{"order": {"id": 42, "sku": "a-1", "tags": []}}"#);
        assert_eq!(idempotency_key(&d, &spec).as_deref(), Some("k1"));
        spec.idempotency.source = KeySource::Header("order-id".into());
        assert_eq!(
            idempotency_key(&d, &spec).as_deref(),
            Some("o-9"),
            "any case"
        );
        spec.idempotency.source = KeySource::Header("missing".into());
        assert_eq!(
            idempotency_key(&d, &spec).as_deref(),
            Some("k1"),
            "falls back"
        );
        for (pointer, want) in [
            ("/order/id", "42"),
            ("/order/sku", "a-1"),
            ("/order/tags", "k1"),
            ("/nothing", "k1"),
        ] {
            spec.idempotency.source = KeySource::Pointer(pointer.into());
            assert_eq!(
                idempotency_key(&d, &spec).as_deref(),
                Some(want),
                "{pointer}"
            );
        }
        let not_json = delivery(1, "plain text");
        assert_eq!(idempotency_key(&not_json, &spec).as_deref(), Some("k1"));
        spec.idempotency.enabled = false;
        assert_eq!(idempotency_key(&d, &spec), None);
    }
}
