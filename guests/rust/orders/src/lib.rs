//! The realistic example handler: validates an order and publishes a
//! follow-up message for it.
//!
//! Input: a JSON object with `id` (string or number) and optional `qty`
//! (positive integer). Test switches in the payload:
//! - `"retry_until_attempt": N` — retry (after config `retry_delay_ms`,
//!   default 10) while `attempt < N`;
//! - `"always_retry": true` — always `retry(none)`, leaving the delay and the
//!   dead-lettering to the host's policy.
//!
//! Config `work_ms` makes every call sleep that long first (simulated work).
//!
//! Otherwise publishes `{"order": id, "qty": qty, "source": message-id}` to
//! the queue named by config `followup_queue` (default `shipping`), announces
//! it on the topic named by config `events_topic` (if set) with routing key
//! `orders.<region>.created`, and counts the forward in the key-value store
//! (key `forwarded`). Without the key-value grant it logs a warning and
//! forwards the order all the same. See `guests/spec/ORDERS.md`.
use std::time::Duration;

use serde_json::{Map, Value, json};
use sluice_sdk::{
    Error, Malformed, Message, Reject, Retry, config, error, info, kv, publish, publish_to_topic,
    warn,
};

const DEFAULT_RETRY_DELAY_MS: u64 = 10;
const DEFAULT_FOLLOWUP_QUEUE: &str = "shipping";
/// The key-value counter of forwarded orders.
const FORWARDED_KEY: &str = "forwarded";

struct Order {
    /// The id as it appeared in the JSON (a string or a number).
    id: Value,
    /// The id as text, for headers and logs.
    id_text: String,
    qty: u64,
    /// The routing key's middle word: the order's `region`, or `default`.
    region: String,
}

fn malformed(why: impl std::fmt::Display) -> Error {
    Reject::new(format!("malformed order: {why}"))
}

/// The payload as a JSON object: rejects what is not UTF-8 (`payload is
/// not UTF-8`), not JSON or not an object (`malformed order: ...`).
fn read_object(message: &Message) -> Result<Map<String, Value>, Error> {
    match message.json() {
        Ok(Value::Object(obj)) => Ok(obj),
        Ok(_) => Err(malformed("not a JSON object")),
        Err(Malformed::Json(e)) => Err(malformed(e)),
        Err(not_text) => Err(not_text.into()),
    }
}

fn parse_order(obj: &Map<String, Value>) -> Result<Order, Error> {
    let (id, id_text) = match obj.get("id") {
        None => return Err(malformed("missing `id`")),
        Some(Value::String(s)) => (Value::String(s.clone()), s.clone()),
        Some(Value::Number(n)) => (Value::Number(n.clone()), n.to_string()),
        Some(_) => return Err(malformed("`id` must be a string or a number")),
    };
    let qty = match obj.get("qty") {
        None => 1,
        Some(v) => match v.as_u64() {
            Some(q) if q > 0 => q,
            _ => {
                return Err(malformed(format!(
                    "`qty` must be a positive integer, got {v}"
                )));
            }
        },
    };
    let region = match obj.get("region") {
        None => "default".to_string(),
        Some(Value::String(r)) if is_word(r) => r.clone(),
        Some(_) => {
            return Err(malformed(
                "`region` must be a word of letters, digits, - or _",
            ));
        }
    };
    Ok(Order {
        id,
        id_text,
        qty,
        region,
    })
}

/// 1 to 32 of letters, digits, `-` and `_`: one word of a routing key.
fn is_word(s: &str) -> bool {
    (1..=32).contains(&s.len())
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

fn retry_delay_ms() -> u64 {
    config::parse("retry_delay_ms")
        .unwrap_or_else(|e| {
            warn!("{e}; using {DEFAULT_RETRY_DELAY_MS}");
            None
        })
        .unwrap_or(DEFAULT_RETRY_DELAY_MS)
}

fn handle(message: &Message) -> sluice_sdk::Result {
    // Simulated processing time, for demos and for tests that must catch
    // a host in the middle of a drain.
    if let Ok(Some(ms)) = config::parse("work_ms") {
        std::thread::sleep(Duration::from_millis(ms));
    }
    let obj = read_object(message)?;
    let order = parse_order(&obj)?;
    let id = &order.id_text;

    if let Some(until) = obj.get("retry_until_attempt").and_then(Value::as_u64)
        && u64::from(message.attempt()) < until
    {
        let delay = retry_delay_ms();
        info!(
            "order {id}: attempt {} < {until}, retrying in {delay} ms",
            message.attempt()
        );
        return Err(Retry::after(Duration::from_millis(delay)));
    }
    if obj.get("always_retry") == Some(&Value::Bool(true)) {
        info!("order {id}: always_retry set, retrying");
        return Err(Retry::backoff());
    }

    let queue = config::get("followup_queue").unwrap_or_else(|| DEFAULT_FOLLOWUP_QUEUE.into());
    let followup = json!({
        "order": order.id,
        "qty": order.qty,
        "source": message.id(),
    });
    publish(&queue)
        .json(&followup)?
        .header("order-id", id)
        .send()
        .map_err(|e| {
            error!("order {id}: publish to {queue:?} failed: {e}");
            Retry::backoff()
        })?;
    if let Some(topic) = config::get("events_topic") {
        let route = format!("orders.{}.created", order.region);
        let n = publish_to_topic(&topic, &route)
            .json(&followup)?
            .header("order-id", id)
            .send()
            .map_err(|e| {
                error!("order {id}: publish to topic {topic:?} failed: {e}");
                // The held follow-up is dropped with the retry.
                Retry::backoff()
            })?;
        info!("order {id} announced on {topic} as {route} to {n} queue(s)");
    }
    let line = format!(
        "order {id} (qty {}) from message {} forwarded to {queue}",
        order.qty,
        message.id()
    );
    // The count is a statistic: without it the order still goes through.
    match kv::increment(FORWARDED_KEY, 1) {
        Ok(n) => info!("{line} (forwarded: {n})"),
        Err(e) => {
            warn!("order {id}: not counted: {e}");
            info!("{line}");
        }
    }
    Ok(())
}

sluice_sdk::handler!(handle);

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_sdk::log::Level;
    use sluice_sdk::testing::{FakeHost, Published, To};
    use sluice_sdk::{IntoOutcome, Outcome};

    fn run(payload: &str, attempt: u32) -> Outcome {
        handle(&Message::new(payload).with_attempt(attempt)).into_outcome()
    }

    fn reject_reason(outcome: Outcome) -> String {
        match outcome {
            Outcome::Reject(reason) => reason,
            other => panic!("not a reject: {other:?}"),
        }
    }

    fn retry_after(ms: u64) -> Outcome {
        Outcome::Retry(Some(Duration::from_millis(ms)))
    }

    /// Where each publish went, and its payload as JSON.
    fn sent(host: &FakeHost) -> Vec<(To, Value)> {
        host.published()
            .into_iter()
            .map(|p| (p.to, serde_json::from_slice(&p.payload).unwrap()))
            .collect()
    }

    fn queue(name: &str) -> To {
        To::Queue(name.into())
    }

    #[test]
    fn rejects_bad_input() {
        let host = FakeHost::new();
        let r = handle(&Message::new(vec![0xff, 0xfe])).into_outcome();
        assert_eq!(r, Outcome::Reject("payload is not UTF-8".into()));
        for (p, want) in [
            ("nope", "malformed order: expected"),
            ("[1]", "malformed order: not a JSON object"),
            ("{}", "malformed order: missing `id`"),
            (r#"{"id":true}"#, "must be a string or a number"),
            (
                r#"{"id":1,"qty":0}"#,
                "`qty` must be a positive integer, got 0",
            ),
            (r#"{"id":1,"qty":-2}"#, "`qty` must be a positive integer"),
            (r#"{"id":1,"qty":1.5}"#, "`qty` must be a positive integer"),
            (r#"{"id":1,"region":"e u"}"#, "`region` must be a word"),
            (r#"{"id":1,"region":7}"#, "`region` must be a word"),
        ] {
            let r = reject_reason(run(p, 1));
            assert!(
                r.starts_with("malformed order: ") && r.contains(want),
                "{p}: {r}"
            );
        }
        assert!(host.published().is_empty());
    }

    #[test]
    fn publishes_followup() {
        let host = FakeHost::new();
        assert_eq!(run(r#"{"id":"A7","qty":3}"#, 1), Outcome::Done);
        assert_eq!(run(r#"{"id":42}"#, 1), Outcome::Done);
        let p = host.published();
        assert_eq!(
            p[0],
            Published {
                to: queue("shipping"),
                payload: br#"{"order":"A7","qty":3,"source":"m-1"}"#.to_vec(),
                headers: vec![("order-id".into(), "A7".into())],
                key: None,
                delay_ms: None,
            }
        );
        assert_eq!(p[1].payload, br#"{"order":42,"qty":1,"source":"m-1"}"#);
        assert_eq!(p[1].headers, [("order-id".into(), "42".into())]);
    }

    #[test]
    fn followup_queue_from_config() {
        let host = FakeHost::new().with_config("followup_queue", "ship2");
        assert_eq!(run(r#"{"id":1}"#, 1), Outcome::Done);
        assert_eq!(host.published()[0].to, queue("ship2"));
    }

    #[test]
    fn retries() {
        let _host = FakeHost::new();
        let p = r#"{"id":1,"retry_until_attempt":3}"#;
        assert_eq!(run(p, 1), retry_after(10));
        assert_eq!(run(p, 2), retry_after(10));
        assert_eq!(run(p, 3), Outcome::Done);
        let _host = FakeHost::new().with_config("retry_delay_ms", "250");
        assert_eq!(run(p, 1), retry_after(250));
        assert_eq!(
            run(r#"{"id":1,"always_retry":true}"#, 9),
            Outcome::Retry(None)
        );
        assert_eq!(run(r#"{"id":1,"always_retry":false}"#, 9), Outcome::Done);
    }

    #[test]
    fn a_retry_delay_that_does_not_parse_warns_and_uses_10() {
        let host = FakeHost::new().with_config("retry_delay_ms", "soon");
        assert_eq!(
            run(r#"{"id":1,"retry_until_attempt":2}"#, 1),
            retry_after(10)
        );
        let (level, line) = &host.logs()[0];
        assert_eq!(*level, Level::Warn);
        assert!(
            line.starts_with(r#"config retry_delay_ms="soon" does not parse"#),
            "{line}"
        );
    }

    #[test]
    fn publish_error_retries_and_logs() {
        let host = FakeHost::new().refusing_publishes("queue full");
        assert_eq!(run(r#"{"id":1}"#, 1), Outcome::Retry(None));
        assert_eq!(
            host.logs(),
            [(
                Level::Error,
                r#"order 1: publish to "shipping" failed: queue full"#.to_string()
            )]
        );
    }

    #[test]
    fn counts_forwards_in_the_store() {
        let host = FakeHost::new().with_kv();
        assert_eq!(run(r#"{"id":"A7","qty":3}"#, 1), Outcome::Done);
        assert_eq!(run(r#"{"id":42}"#, 1), Outcome::Done);
        assert_eq!(
            run(r#"{"id":1,"retry_until_attempt":2}"#, 1),
            retry_after(10)
        );
        assert_eq!(
            host.kv_value("forwarded").as_deref(),
            Some(&b"2"[..]),
            "only forwards count"
        );
        assert_eq!(
            host.logs()[..2],
            [
                (
                    Level::Info,
                    "order A7 (qty 3) from message m-1 forwarded to shipping (forwarded: 1)"
                        .to_string()
                ),
                (
                    Level::Info,
                    "order 42 (qty 1) from message m-1 forwarded to shipping (forwarded: 2)"
                        .to_string()
                ),
            ]
        );
    }

    #[test]
    fn forwards_without_the_store_and_warns() {
        let host = FakeHost::new();
        assert_eq!(run(r#"{"id":5}"#, 1), Outcome::Done);
        assert_eq!(host.published().len(), 1);
        assert_eq!(
            host.logs(),
            [
                (
                    Level::Warn,
                    "order 5: not counted: the handler is not granted the key-value store"
                        .to_string()
                ),
                (
                    Level::Info,
                    "order 5 (qty 1) from message m-1 forwarded to shipping".to_string()
                ),
            ]
        );
    }

    #[test]
    fn announces_on_the_events_topic() {
        let host = FakeHost::new()
            .with_config("events_topic", "order-events")
            .with_topic("order-events", 2);
        assert_eq!(run(r#"{"id":"A7","region":"eu"}"#, 1), Outcome::Done);
        assert_eq!(run(r#"{"id":8}"#, 1), Outcome::Done);
        let topic = |route: &str| To::Topic {
            topic: "order-events".into(),
            route: route.into(),
        };
        let sent = sent(&host);
        let targets: Vec<To> = sent.iter().map(|(to, _)| to.clone()).collect();
        assert_eq!(
            targets,
            [
                queue("shipping"),
                topic("orders.eu.created"),
                queue("shipping"),
                topic("orders.default.created"),
            ]
        );
        assert_eq!(sent[1].1, sent[0].1, "the same payload as the follow-up");
        assert_eq!(host.published()[1].headers, host.published()[0].headers);
        assert!(
            host.logs().iter().any(|(_, m)| m
                == "order A7 announced on order-events as orders.eu.created to 2 queue(s)")
        );
    }

    #[test]
    fn an_unbound_events_topic_retries() {
        let host = FakeHost::new().with_config("events_topic", "order-events");
        assert_eq!(run(r#"{"id":3}"#, 1), Outcome::Retry(None));
        assert!(host.logs().iter().any(|(l, m)| *l == Level::Error
            && m.starts_with("order 3: publish to topic \"order-events\" failed: no queue")));
    }
}
