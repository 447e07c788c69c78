//! The callers: run the handler for admitted deliveries, and the one place
//! where an attempt's ending becomes a settlement.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, mpsc, watch};

use super::keep::{self, Leases};
use super::{Dispatch, InCall, Jobs, Observe, Settled, WorkerStats};
use crate::base::trace::{Attempt, AttemptFields};
use crate::broker::{Queue, Settlement};
use crate::config::{HandlerSpec, KeySource, bounds};
use crate::message::{Delivery, NewMessage, now_ms, now_us, stored_text, without_nul};
use crate::policy::{self, Decision, Outcome};
use crate::sandbox::runtime::{Deadline, Failure, Invocation, Ready};

/// How long a message that found no free instance waits before it is
/// delivered again.
const POOL_FULL_DELAY: Duration = Duration::from_millis(100);

/// What each of the worker's callers works with.
pub(super) struct Caller {
    pub(crate) jobs: Jobs,
    pub(crate) broker: Arc<dyn Queue>,
    pub(crate) dispatch: Arc<dyn Dispatch>,
    pub(crate) spec: Arc<HandlerSpec>,
    pub(crate) observe: Observe,
    pub(crate) settle_tx: mpsc::UnboundedSender<Settled>,
    pub(crate) stop: watch::Receiver<bool>,
    pub(crate) stats: Arc<WorkerStats>,
}

impl Caller {
    /// Whether the worker is stopping: what is prefetched but not started
    /// goes back at once, without spending an attempt.
    pub(crate) fn stopping(&self) -> bool {
        *self.stop.borrow()
    }

    /// What the next call may start on, once the handler has an instance
    /// free for it; `None` when the worker stops first.
    pub(crate) async fn ready(&self) -> Option<Ready> {
        let mut stop = self.stop.clone();
        tokio::select! {
            biased;
            ready = self.dispatch.ready() => Some(ready),
            _ = stop.wait_for(|stopping| *stopping) => None,
        }
    }

    /// Pass a settlement on to the settler.
    pub(crate) fn settled(&self, settlement: Settlement, permit: OwnedSemaphorePermit) {
        let _ = self.settle_tx.send((settlement, permit));
    }
}

/// One of the worker's callers: takes admitted deliveries in turn, handles
/// each and passes its settlement on, until the job queue closes.
pub(super) async fn call_loop(caller: Caller) {
    loop {
        let next = caller.jobs.lock().await.recv().await;
        let Some((delivery, key, permit)) = next else {
            return;
        };
        let settlement = if caller.stopping() {
            back(delivery, key)
        } else {
            let _in_call = InCall::new(&caller.stats, 1);
            run_one(&caller, delivery, key).await
        };
        caller.settled(settlement, permit);
        caller.dispatch.tidy().await;
    }
}

/// A delivery handed back untouched, its attempt not spent.
pub(super) fn back(delivery: Delivery, key: Option<String>) -> Settlement {
    Settlement::Defer {
        delivery,
        delay: Duration::ZERO,
        key,
    }
}

/// Whether a delivery waited so long that its lease would run out during
/// the call, or while it settles: it goes back untouched rather than risk
/// being handled twice at once. Half the margin a lease must leave beyond
/// the timeout is for settling.
pub(super) fn too_late(delivery: &Delivery, spec: &HandlerSpec) -> bool {
    let settle_margin = (bounds::LEASE_MARGIN / 2).as_millis() as u64;
    let must_end_by = now_ms() + spec.timeout.as_millis() as u64 + settle_margin;
    must_end_by >= delivery.lease_until_ms
}

/// Handle one delivery and say how it settles: one attempt, with its span
/// and its metrics.
async fn run_one(caller: &Caller, mut delivery: Delivery, key: Option<String>) -> Settlement {
    // Waiting for an instance spends nothing of the attempt: a delivery
    // that waited too long goes back untouched.
    let Some(ready) = caller.ready().await else {
        return back(delivery, key);
    };
    if too_late(&delivery, &caller.spec) {
        return back(delivery, key);
    }
    let (spec, observe) = (&*caller.spec, &caller.observe);
    let version = caller.dispatch.version();
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
        m.waited(&delivery, now_us());
    }
    let deadline = Deadline::new(spec.timeout, spec.max_extend);
    let leases = Leases::of(std::slice::from_ref(&delivery), std::slice::from_ref(&key));
    let call = caller.dispatch.invoke(ready, &delivery, &deadline);
    let (mut invocation, until) = leases.keep(call, &deadline, &*caller.broker, spec).await;
    keep::renewed(std::slice::from_mut(&mut delivery), &until);
    if let Some(m) = &observe.metrics {
        m.called(
            started.elapsed(),
            &invocation.result,
            invocation.instantiate,
        );
    }
    attempt.stamp(&mut invocation.publishes);
    let (outcome, error) = span_outcome(&invocation.result);
    attempt.end(outcome, error.as_deref());
    settlement_for(delivery, invocation, spec, key, version, rand::random())
}

/// How an attempt's span names its ending, and the error it records.
pub(super) fn span_outcome(result: &Result<Outcome, Failure>) -> (&'static str, Option<String>) {
    match result {
        Ok(Outcome::Done) => ("done", None),
        Ok(Outcome::Retry(_)) => ("retry", None),
        Ok(Outcome::Snooze(_)) => ("snooze", None),
        Ok(Outcome::Reject(reason)) => ("reject", Some(reason.clone())),
        Ok(Outcome::Failed) => ("failed", None),
        Err(f) => (f.kind(), Some(f.to_string())),
    }
}

/// The one place where an attempt's ending becomes a settlement.
pub(crate) fn settlement_for(
    delivery: Delivery,
    invocation: Invocation,
    spec: &HandlerSpec,
    key: Option<String>,
    version: &str,
    jitter: f64,
) -> Settlement {
    let (outcome, error) = match ending(invocation.result) {
        Ok(ending) => ending,
        Err(why) => return pool_full(spec, version, delivery, key, &why),
    };
    let decision = policy::decide(
        &outcome,
        delivery.attempt,
        delivery.snoozes,
        &spec.retry,
        jitter,
    );
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
        Decision::Snooze { delay } => Settlement::Snooze {
            delivery,
            delay,
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

/// A message that found no free instance goes back without spending an
/// attempt.
fn pool_full(
    spec: &HandlerSpec,
    version: &str,
    delivery: Delivery,
    key: Option<String>,
    why: &str,
) -> Settlement {
    tracing::warn!(handler = %spec.name, version, id = %delivery.id, "{why}; the message goes back without spending an attempt");
    Settlement::Defer {
        delivery,
        delay: POOL_FULL_DELAY,
        key,
    }
}

/// An attempt's ending as an outcome and the error it records, both
/// bounded; `Err` with why when the message found no free instance (it
/// spends no attempt).
fn ending(result: Result<Outcome, Failure>) -> Result<(Outcome, Option<String>), String> {
    match result {
        // The guest's words, kept with the dead letter: bounded.
        Ok(Outcome::Reject(reason)) => Ok((Outcome::Reject(stored_text(&reason)), None)),
        Ok(outcome) => Ok((outcome, None)),
        Err(Failure::PoolFull(why)) => Err(why),
        Err(failure) => Ok((Outcome::Failed, Some(stored_text(&failure.to_string())))),
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
/// message's own key. A NUL character in the value read is taken as U+FFFD
/// on every broker (PostgreSQL's text cannot hold one).
pub(crate) fn idempotency_key(delivery: &Delivery, spec: &HandlerSpec) -> Option<String> {
    if !spec.idempotency.enabled {
        return None;
    }
    let derived = match &spec.idempotency.source {
        KeySource::Message => None,
        KeySource::Header(name) => delivery.header(name).map(without_nul),
        KeySource::Pointer(pointer) => {
            serde_json::from_slice::<serde_json::Value>(&delivery.payload)
                .ok()
                .and_then(|v| match v.pointer(pointer)? {
                    serde_json::Value::String(s) => Some(without_nul(s)),
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
            enqueued_at_us: 0,
            last_error: None,
            receipt: "r".into(),
            lease_until_ms: u64::MAX,
            group: None,
            snoozes: 0,
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
    fn a_snooze_goes_back_with_its_key_until_the_snoozes_run_out() {
        let mut spec = spec();
        spec.retry.max_snoozes = 2;
        let snooze = || ended(Ok(Outcome::Snooze(Duration::from_secs(30))), Vec::new());
        let mut d = delivery(3, "{}");
        d.snoozes = 1;
        let s = settlement_for(d.clone(), snooze(), &spec, Some("k1".into()), "v1", 0.0);
        let Settlement::Snooze {
            delivery,
            delay,
            key,
        } = s
        else {
            panic!("not snoozed: {s:?}");
        };
        assert_eq!(
            (delivery.attempt, delay, key.as_deref()),
            (3, Duration::from_secs(30), Some("k1")),
            "on the last attempt too, and the key is let go"
        );
        d.snoozes = 2;
        let s = settlement_for(d, snooze(), &spec, None, "v1", 0.0);
        let Settlement::Dead { reason, error, .. } = s else {
            panic!("not dead: {s:?}");
        };
        assert_eq!(
            reason,
            "snoozed 2 time(s), the most `retry.max_snoozes` allows, and asked for 30s more"
        );
        assert_eq!(error, None);
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

    /// PostgreSQL's text holds no NUL, so none reaches a broker from a
    /// handler's words or a key read from a message; every broker gets
    /// the same text.
    #[test]
    fn a_nul_in_a_reject_reason_or_a_read_key_is_stored_as_u_fffd() {
        let reject = ended(Ok(Outcome::Reject("bad\0sku".into())), Vec::new());
        let s = settlement_for(delivery(1, "{}"), reject, &spec(), None, "v1", 0.0);
        let Settlement::Dead { reason, .. } = s else {
            panic!("not dead");
        };
        assert_eq!(reason, "rejected: bad\u{FFFD}sku");
        let trap = Err(Failure::Trap("at\0here".into()));
        let Settlement::Retry { error, .. } = settle(1, trap) else {
            panic!("not retried");
        };
        assert_eq!(error, "trap: at\u{FFFD}here");

        let mut spec = spec();
        let mut d = delivery(1, r#"{"id": "a\u0000b"}"#);
        d.headers = vec![("order-id".into(), "o\0-9".into())];
        spec.idempotency.source = KeySource::Pointer("/id".into());
        assert_eq!(idempotency_key(&d, &spec).as_deref(), Some("a\u{FFFD}b"));
        spec.idempotency.source = KeySource::Header("order-id".into());
        assert_eq!(idempotency_key(&d, &spec).as_deref(), Some("o\u{FFFD}-9"));
    }
}
