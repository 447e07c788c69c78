//! Publishing new messages, to a queue or to a topic.
//!
//! A publish is held until the handler returns: committed with the ack when
//! the message is done, dropped when it is retried, rejected or snoozed, or
//! the call fails.
//!
//! ```no_run
//! # fn f() -> sluice_sdk::Result {
//! use std::time::Duration;
//! use sluice_sdk::{publish, publish_to_topic};
//!
//! publish("shipping")
//!     .json(&serde_json::json!({"order": 7}))?
//!     .header("order-id", "7")
//!     .key("ship-7")
//!     .delay(Duration::from_secs(30))
//!     .send()?;
//! let copies: u32 = publish_to_topic("order-events", "orders.eu.created")
//!     .payload("order 7 created")
//!     .send()?;
//! # Ok(()) }
//! ```

use std::time::Duration;

use serde::Serialize;

use crate::host::{self, HostError, PublishOptions};
use crate::outcome::millis;

/// Starts a publish to `queue`. Set the payload and options on the
/// [`Publish`] it returns, then [`send`](Publish::<Queue>::send) it.
pub fn publish(queue: impl Into<String>) -> Publish<Queue> {
    Publish::new(Queue(queue.into()))
}

/// Starts a publish to `topic` with the routing key `route`, dot-separated
/// words like `orders.eu.created`. A copy goes to every queue bound to the
/// topic with a matching pattern (or to its catch-all queues when none
/// matches); [`send`](Publish::<Topic>::send) returns how many.
pub fn publish_to_topic(topic: impl Into<String>, route: impl Into<String>) -> Publish<Topic> {
    Publish::new(Topic {
        topic: topic.into(),
        route: route.into(),
    })
}

/// A publish being built: where it goes, its payload (empty unless set)
/// and options. Nothing reaches the host until `send`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use = "a publish does nothing until it is sent"]
pub struct Publish<To> {
    to: To,
    payload: Vec<u8>,
    headers: Vec<(String, String)>,
    key: Option<String>,
    delay: Option<Duration>,
}

/// The destination of a [`publish`]: a queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Queue(String);

/// The destination of a [`publish_to_topic`]: a topic and a routing key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topic {
    topic: String,
    route: String,
}

impl<To> Publish<To> {
    fn new(to: To) -> Self {
        Publish {
            to,
            payload: Vec::new(),
            headers: Vec::new(),
            key: None,
            delay: None,
        }
    }

    /// Sets the payload: bytes or text.
    pub fn payload(mut self, payload: impl Into<Vec<u8>>) -> Self {
        self.payload = payload.into();
        self
    }

    /// Sets the payload to `value` as compact JSON. Fails only for values
    /// serde_json cannot write (a map with keys that are not strings, a
    /// `Serialize` impl that fails).
    pub fn json<T: Serialize + ?Sized>(mut self, value: &T) -> Result<Self, serde_json::Error> {
        self.payload = serde_json::to_vec(value)?;
        Ok(self)
    }

    /// Adds a header, after those added before.
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// Sets the new message's idempotency key (by default its id).
    pub fn key(mut self, key: impl Into<String>) -> Self {
        self.key = Some(key.into());
        self
    }

    /// Delivers the new message no earlier than `delay` after the commit.
    pub fn delay(mut self, delay: Duration) -> Self {
        self.delay = Some(delay);
        self
    }

    /// The options as the host takes them.
    fn options(&self) -> PublishOptions {
        PublishOptions {
            headers: self.headers.clone(),
            key: self.key.clone(),
            delay_ms: self.delay.map(millis),
        }
    }
}

impl Publish<Queue> {
    /// Hands the publish to the host, which holds it until the call returns.
    /// Fails, with the host's reason, when the queue name is invalid or the
    /// message is over the host's size limit.
    pub fn send(self) -> Result<(), HostError> {
        host::publish(&self.to.0, &self.payload, &self.options()).map_err(HostError::new)
    }
}

impl Publish<Topic> {
    /// Hands the publish to the host and returns how many copies it holds,
    /// one per queue reached. Fails, with the host's reason, when the names
    /// are invalid or no queue would take the publish.
    pub fn send(self) -> Result<u32, HostError> {
        let Topic { topic, route } = &self.to;
        host::publish_to_topic(topic, route, &self.payload, &self.options()).map_err(HostError::new)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{FakeHost, Published, To};

    #[test]
    fn options_reach_the_host_in_its_terms() {
        let p = publish("q")
            .payload("x")
            .header("a", "1")
            .header("a", "2")
            .key("k")
            .delay(Duration::from_micros(1500));
        let o = p.options();
        assert_eq!(
            o.headers,
            [("a".into(), "1".into()), ("a".into(), "2".into())]
        );
        assert_eq!(o.key.as_deref(), Some("k"));
        assert_eq!(o.delay_ms, Some(2), "rounded up to whole ms");
        let o = publish("q").options();
        assert!(o.headers.is_empty() && o.key.is_none() && o.delay_ms.is_none());
    }

    #[test]
    fn sends_to_queues_and_topics() {
        let host = FakeHost::new().with_topic("events", 3);
        publish("q")
            .json(&serde_json::json!({"order": 7, "qty": 1}))
            .unwrap()
            .header("order-id", "7")
            .send()
            .unwrap();
        let n = publish_to_topic("events", "orders.eu.created")
            .payload(b"raw".to_vec())
            .send()
            .unwrap();
        assert_eq!(n, 3);
        assert_eq!(
            host.published(),
            [
                Published {
                    to: To::Queue("q".into()),
                    payload: br#"{"order":7,"qty":1}"#.to_vec(),
                    headers: vec![("order-id".into(), "7".into())],
                    key: None,
                    delay_ms: None,
                },
                Published {
                    to: To::Topic {
                        topic: "events".into(),
                        route: "orders.eu.created".into()
                    },
                    payload: b"raw".to_vec(),
                    headers: vec![],
                    key: None,
                    delay_ms: None,
                },
            ]
        );
    }

    #[test]
    fn a_refusal_is_an_error_that_retries() {
        let _host = FakeHost::new().refusing_publishes("queue full");
        fn handle() -> crate::Result {
            publish("q").send()?;
            Ok(())
        }
        let e = handle().unwrap_err();
        assert_eq!(e.outcome(), &crate::Outcome::Retry(None));
        assert_eq!(e.cause(), Some("queue full"));
        let e = publish_to_topic("t", "a.b").send().unwrap_err();
        assert_eq!(e.reason(), "queue full");
    }

    #[test]
    fn json_that_cannot_be_written_fails() {
        let map: std::collections::BTreeMap<(u8, u8), u8> = [((1, 2), 3)].into();
        assert!(publish("q").json(&map).is_err());
    }
}
