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
use serde_json::{Map, Value, json};
use sluice_guest::{Guest, Level, Message, Outcome, PublishOptions};

const DEFAULT_RETRY_DELAY_MS: u64 = 10;
const DEFAULT_FOLLOWUP_QUEUE: &str = "shipping";
/// The key-value counter of forwarded orders.
const FORWARDED_KEY: &str = "forwarded";

struct Orders;

struct Order {
    /// The id as it appeared in the JSON (a string or a number).
    id: Value,
    /// The id as text, for headers and logs.
    id_text: String,
    qty: u64,
    /// The routing key's middle word: the order's `region`, or `default`.
    region: String,
}

fn malformed(why: impl std::fmt::Display) -> Outcome {
    Outcome::Reject(format!("malformed order: {why}"))
}

fn parse_order(obj: &Map<String, Value>) -> Result<Order, Outcome> {
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
        && s
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

/// The host calls the handler makes; a trait so the logic can be unit-tested
/// natively.
trait Host {
    fn log(&self, level: Level, message: &str);
    fn config(&self, key: &str) -> Option<String>;
    fn publish(&self, queue: &str, payload: &[u8], options: &PublishOptions) -> Result<(), String>;
    fn publish_to_topic(
        &self,
        topic: &str,
        route: &str,
        payload: &[u8],
        options: &PublishOptions,
    ) -> Result<u32, String>;
    fn increment(&self, key: &str, delta: i64) -> Result<i64, String>;
}

/// The real host, through the component's imports.
struct Imports;

impl Host for Imports {
    fn log(&self, level: Level, message: &str) {
        sluice_guest::log(level, message);
    }
    fn config(&self, key: &str) -> Option<String> {
        sluice_guest::config_get(key)
    }
    fn publish(&self, queue: &str, payload: &[u8], options: &PublishOptions) -> Result<(), String> {
        sluice_guest::publish::publish(queue, payload, options)
    }
    fn publish_to_topic(
        &self,
        topic: &str,
        route: &str,
        payload: &[u8],
        options: &PublishOptions,
    ) -> Result<u32, String> {
        sluice_guest::publish::publish_to_topic(topic, route, payload, options)
    }
    fn increment(&self, key: &str, delta: i64) -> Result<i64, String> {
        sluice_guest::kv::increment(key, delta)
    }
}

fn retry_delay_ms(host: &impl Host) -> u64 {
    match host.config("retry_delay_ms") {
        None => DEFAULT_RETRY_DELAY_MS,
        Some(s) => s.trim().parse().unwrap_or_else(|_| {
            host.log(
                Level::Warn,
                &format!(
                    "config retry_delay_ms={s:?} is not a u64; using {DEFAULT_RETRY_DELAY_MS}"
                ),
            );
            DEFAULT_RETRY_DELAY_MS
        }),
    }
}

impl Guest for Orders {
    fn handle(message: Message) -> Outcome {
        // Simulated processing time, for demos and for tests that must catch
        // a host in the middle of a drain.
        if let Some(ms) = Imports.config("work_ms").and_then(|v| v.parse().ok()) {
            std::thread::sleep(std::time::Duration::from_millis(ms));
        }
        handle(&message, &Imports)
    }
}

fn handle(message: &Message, host: &impl Host) -> Outcome {
    let Ok(text) = std::str::from_utf8(&message.payload) else {
        return Outcome::Reject("payload is not UTF-8".to_string());
    };
    let value: Value = match serde_json::from_str(text) {
        Ok(v) => v,
        Err(e) => return malformed(e),
    };
    let Value::Object(obj) = value else {
        return malformed("not a JSON object");
    };
    let order = match parse_order(&obj) {
        Ok(o) => o,
        Err(outcome) => return outcome,
    };

    if let Some(until) = obj.get("retry_until_attempt").and_then(Value::as_u64)
        && u64::from(message.attempt) < until
    {
        let delay = retry_delay_ms(host);
        host.log(
            Level::Info,
            &format!(
                "order {}: attempt {} < {until}, retrying in {delay} ms",
                order.id_text, message.attempt
            ),
        );
        return Outcome::Retry(Some(delay));
    }
    if obj.get("always_retry") == Some(&Value::Bool(true)) {
        host.log(
            Level::Info,
            &format!("order {}: always_retry set, retrying", order.id_text),
        );
        return Outcome::Retry(None);
    }

    let queue = host
        .config("followup_queue")
        .unwrap_or_else(|| DEFAULT_FOLLOWUP_QUEUE.to_string());
    let followup = json!({
        "order": order.id,
        "qty": order.qty,
        "source": &message.id,
    });
    let payload = serde_json::to_vec(&followup).expect("a JSON value serialises");
    let options = PublishOptions {
        headers: vec![("order-id".to_string(), order.id_text.clone())],
        key: None,
        delay_ms: None,
    };
    if let Err(e) = host.publish(&queue, &payload, &options) {
        host.log(
            Level::Error,
            &format!("order {}: publish to {queue:?} failed: {e}", order.id_text),
        );
        return Outcome::Retry(None);
    }
    if let Some(topic) = host.config("events_topic") {
        let route = format!("orders.{}.created", order.region);
        match host.publish_to_topic(&topic, &route, &payload, &options) {
            Ok(n) => host.log(
                Level::Info,
                &format!(
                    "order {} announced on {topic} as {route} to {n} queue(s)",
                    order.id_text
                ),
            ),
            Err(e) => {
                host.log(
                    Level::Error,
                    &format!(
                        "order {}: publish to topic {topic:?} failed: {e}",
                        order.id_text
                    ),
                );
                // The held follow-up is dropped with the retry.
                return Outcome::Retry(None);
            }
        }
    }
    let line = format!(
        "order {} (qty {}) from message {} forwarded to {queue}",
        order.id_text, order.qty, message.id
    );
    // The count is a statistic: without it the order still goes through.
    match host.increment(FORWARDED_KEY, 1) {
        Ok(n) => host.log(Level::Info, &format!("{line} (forwarded: {n})")),
        Err(e) => {
            host.log(
                Level::Warn,
                &format!("order {}: not counted: {e}", order.id_text),
            );
            host.log(Level::Info, &line);
        }
    }
    Outcome::Done
}

sluice_guest::export!(Orders);

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    type Published = (String, Value, Vec<(String, String)>);

    #[derive(Default)]
    struct Fake {
        config: Vec<(&'static str, &'static str)>,
        fail_publish: bool,
        /// Queues bound to the `events_topic`; none: the topic publish fails.
        bound: u32,
        /// The `forwarded` counter; `None`: not granted the key-value store.
        counter: Option<RefCell<i64>>,
        /// (queue, payload, headers) of each publish.
        published: RefCell<Vec<Published>>,
        logs: RefCell<Vec<(u8, String)>>,
    }

    impl Host for Fake {
        fn log(&self, level: Level, message: &str) {
            self.logs
                .borrow_mut()
                .push((level as u8, message.to_string()));
        }
        fn config(&self, key: &str) -> Option<String> {
            self.config
                .iter()
                .find(|(k, _)| *k == key)
                .map(|(_, v)| v.to_string())
        }
        fn publish(&self, queue: &str, payload: &[u8], o: &PublishOptions) -> Result<(), String> {
            assert!(o.key.is_none() && o.delay_ms.is_none());
            if self.fail_publish {
                return Err("queue full".into());
            }
            let v = serde_json::from_slice(payload).unwrap();
            self.published
                .borrow_mut()
                .push((queue.into(), v, o.headers.clone()));
            Ok(())
        }
        fn publish_to_topic(
            &self,
            topic: &str,
            route: &str,
            payload: &[u8],
            o: &PublishOptions,
        ) -> Result<u32, String> {
            if self.bound == 0 {
                return Err(format!("no queue is bound to topic {topic:?}"));
            }
            let v = serde_json::from_slice(payload).unwrap();
            self.published
                .borrow_mut()
                .push((format!("{topic}/{route}"), v, o.headers.clone()));
            Ok(self.bound)
        }
        fn increment(&self, key: &str, delta: i64) -> Result<i64, String> {
            assert_eq!(key, "forwarded");
            let counter = self.counter.as_ref().ok_or("not granted")?;
            *counter.borrow_mut() += delta;
            Ok(*counter.borrow())
        }
    }

    fn msg(payload: &[u8], attempt: u32) -> Message {
        Message {
            id: "m-1".into(),
            key: "m-1".into(),
            queue: "orders".into(),
            payload: payload.to_vec(),
            headers: vec![],
            attempt,
            enqueued_at_ms: 0,
        }
    }

    fn run(payload: &str, attempt: u32, host: &Fake) -> String {
        format!("{:?}", handle(&msg(payload.as_bytes(), attempt), host))
    }

    #[test]
    fn rejects_bad_input() {
        let h = Fake::default();
        let r = format!("{:?}", handle(&msg(&[0xff, 0xfe], 1), &h));
        assert!(r.contains("payload is not UTF-8"), "{r}");
        for (p, want) in [
            ("nope", "malformed order: expected"),
            ("[1]", "malformed order: not a JSON object"),
            ("{}", "malformed order: missing `id`"),
            (r#"{"id":true}"#, "must be a string or a number"),
            (r#"{"id":1,"qty":0}"#, "`qty` must be a positive integer"),
            (r#"{"id":1,"qty":-2}"#, "`qty` must be a positive integer"),
            (r#"{"id":1,"qty":1.5}"#, "`qty` must be a positive integer"),
            (r#"{"id":1,"region":"e u"}"#, "`region` must be a word"),
            (r#"{"id":1,"region":7}"#, "`region` must be a word"),
        ] {
            let r = run(p, 1, &h);
            assert!(
                r.starts_with("Outcome::Reject") && r.contains(want),
                "{p}: {r}"
            );
        }
        assert!(h.published.borrow().is_empty());
    }

    #[test]
    fn publishes_followup() {
        let h = Fake::default();
        assert_eq!(run(r#"{"id":"A7","qty":3}"#, 1, &h), "Outcome::Done");
        assert_eq!(run(r#"{"id":42}"#, 1, &h), "Outcome::Done");
        let p = h.published.borrow();
        assert_eq!(p[0].0, "shipping");
        assert_eq!(p[0].1, json!({"order": "A7", "qty": 3, "source": "m-1"}));
        assert_eq!(p[0].2, vec![("order-id".to_string(), "A7".to_string())]);
        assert_eq!(p[1].1, json!({"order": 42, "qty": 1, "source": "m-1"}));
        assert_eq!(p[1].2, vec![("order-id".to_string(), "42".to_string())]);
    }

    #[test]
    fn followup_queue_from_config() {
        let h = Fake {
            config: vec![("followup_queue", "ship2")],
            ..Default::default()
        };
        assert_eq!(run(r#"{"id":1}"#, 1, &h), "Outcome::Done");
        assert_eq!(h.published.borrow()[0].0, "ship2");
    }

    #[test]
    fn retries() {
        let h = Fake::default();
        let p = r#"{"id":1,"retry_until_attempt":3}"#;
        assert_eq!(run(p, 1, &h), "Outcome::Retry(Some(10))");
        assert_eq!(run(p, 2, &h), "Outcome::Retry(Some(10))");
        assert_eq!(run(p, 3, &h), "Outcome::Done");
        let h = Fake {
            config: vec![("retry_delay_ms", "250")],
            ..Default::default()
        };
        assert_eq!(run(p, 1, &h), "Outcome::Retry(Some(250))");
        assert_eq!(
            run(r#"{"id":1,"always_retry":true}"#, 9, &h),
            "Outcome::Retry(None)"
        );
        assert_eq!(
            run(r#"{"id":1,"always_retry":false}"#, 9, &h),
            "Outcome::Done"
        );
    }

    #[test]
    fn publish_error_retries_and_logs() {
        let h = Fake {
            fail_publish: true,
            ..Default::default()
        };
        assert_eq!(run(r#"{"id":1}"#, 1, &h), "Outcome::Retry(None)");
        let logs = h.logs.borrow();
        assert!(
            logs.iter()
                .any(|(l, m)| *l == Level::Error as u8 && m.contains("queue full"))
        );
    }

    #[test]
    fn counts_forwards_in_the_store() {
        let h = Fake {
            counter: Some(RefCell::new(0)),
            ..Default::default()
        };
        assert_eq!(run(r#"{"id":"A7","qty":3}"#, 1, &h), "Outcome::Done");
        assert_eq!(run(r#"{"id":42}"#, 1, &h), "Outcome::Done");
        assert_eq!(run(r#"{"id":1,"retry_until_attempt":2}"#, 1, &h), "Outcome::Retry(Some(10))");
        assert_eq!(*h.counter.as_ref().unwrap().borrow(), 2, "only forwards count");
        let logs = h.logs.borrow();
        assert_eq!(
            logs[..2],
            [
                (Level::Info as u8, "order A7 (qty 3) from message m-1 forwarded to shipping (forwarded: 1)".to_string()),
                (Level::Info as u8, "order 42 (qty 1) from message m-1 forwarded to shipping (forwarded: 2)".to_string()),
            ]
        );
    }

    #[test]
    fn forwards_without_the_store_and_warns() {
        let h = Fake::default();
        assert_eq!(run(r#"{"id":5}"#, 1, &h), "Outcome::Done");
        assert_eq!(h.published.borrow().len(), 1);
        assert_eq!(
            *h.logs.borrow(),
            [
                (Level::Warn as u8, "order 5: not counted: not granted".to_string()),
                (Level::Info as u8, "order 5 (qty 1) from message m-1 forwarded to shipping".to_string()),
            ]
        );
    }

    #[test]
    fn announces_on_the_events_topic() {
        let h = Fake {
            config: vec![("events_topic", "order-events")],
            bound: 2,
            ..Default::default()
        };
        assert_eq!(run(r#"{"id":"A7","region":"eu"}"#, 1, &h), "Outcome::Done");
        assert_eq!(run(r#"{"id":8}"#, 1, &h), "Outcome::Done");
        let p = h.published.borrow();
        let targets: Vec<&str> = p.iter().map(|(q, _, _)| q.as_str()).collect();
        assert_eq!(
            targets,
            [
                "shipping",
                "order-events/orders.eu.created",
                "shipping",
                "order-events/orders.default.created"
            ]
        );
        assert_eq!(p[1].1, p[0].1, "the same payload as the follow-up");
        assert!(h.logs.borrow().iter().any(|(_, m)| m
            == "order A7 announced on order-events as orders.eu.created to 2 queue(s)"));
    }

    #[test]
    fn an_unbound_events_topic_retries() {
        let h = Fake {
            config: vec![("events_topic", "order-events")],
            ..Default::default()
        };
        assert_eq!(run(r#"{"id":3}"#, 1, &h), "Outcome::Retry(None)");
        assert!(h.logs.borrow().iter().any(|(l, m)| *l == Level::Error as u8
            && m.starts_with("order 3: publish to topic \"order-events\" failed: no queue")));
    }
}
