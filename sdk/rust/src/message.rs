//! One delivery of one message, and reading its payload.

use std::fmt;
use std::time::{Duration, SystemTime};

use serde::de::DeserializeOwned;

use crate::outcome::{Error, Reject};

/// One delivery of one message, as the host handed it to the handler.
///
/// Outside sluice (in unit tests) make one with [`Message::new`] and the
/// `with_*` methods.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    id: String,
    key: String,
    queue: String,
    payload: Vec<u8>,
    headers: Vec<(String, String)>,
    attempt: u32,
    enqueued_at_ms: u64,
}

/// A payload that cannot be read as asked: not UTF-8, or not JSON of the
/// asked type.
///
/// `?` makes it a reject with its text as the reason: a payload that does
/// not parse now never will. (So it is not a [`std::error::Error`], which
/// `?` would make a retry; see [`Error`].)
#[derive(Debug)]
#[non_exhaustive]
pub enum Malformed {
    /// The payload is not UTF-8. Its text is `payload is not UTF-8`.
    NotUtf8,
    /// The payload is not JSON of the asked type. Its text is
    /// `malformed payload: <the parser's message>`.
    Json(serde_json::Error),
}

impl fmt::Display for Malformed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Malformed::NotUtf8 => write!(f, "payload is not UTF-8"),
            Malformed::Json(e) => write!(f, "malformed payload: {e}"),
        }
    }
}

impl From<Malformed> for Error {
    fn from(malformed: Malformed) -> Self {
        Reject::new(malformed.to_string())
    }
}

impl Message {
    /// A message with this payload, for tests: id and key `m-1`, queue
    /// `test`, first attempt, no headers, enqueued at the Unix epoch.
    pub fn new(payload: impl Into<Vec<u8>>) -> Self {
        Message {
            id: "m-1".into(),
            key: "m-1".into(),
            queue: "test".into(),
            payload: payload.into(),
            headers: Vec::new(),
            attempt: 1,
            enqueued_at_ms: 0,
        }
    }

    /// The same message with this id.
    pub fn with_id(mut self, id: impl Into<String>) -> Self {
        self.id = id.into();
        self
    }

    /// The same message with this idempotency key.
    pub fn with_key(mut self, key: impl Into<String>) -> Self {
        self.key = key.into();
        self
    }

    /// The same message, taken from this queue.
    pub fn with_queue(mut self, queue: impl Into<String>) -> Self {
        self.queue = queue.into();
        self
    }

    /// The same message with this header added after the others.
    pub fn with_header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// The same message, delivered for the `attempt`th time.
    pub fn with_attempt(mut self, attempt: u32) -> Self {
        self.attempt = attempt;
        self
    }

    /// The same message, first published at `at` (to the millisecond).
    pub fn with_enqueued_at(mut self, at: SystemTime) -> Self {
        let since = at
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default();
        self.enqueued_at_ms = u64::try_from(since.as_millis()).unwrap_or(u64::MAX);
        self
    }

    /// The unique id the broker gave the message when it was published.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The idempotency key: a key that has completed is never handled
    /// again. The message id unless the sender or the sidecar set one.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The queue the message was taken from.
    pub fn queue(&self) -> &str {
        &self.queue
    }

    /// The body, as the sender gave it: any bytes.
    pub fn payload(&self) -> &[u8] {
        &self.payload
    }

    /// The body as text; [`Malformed::NotUtf8`] when it is not UTF-8.
    pub fn text(&self) -> Result<&str, Malformed> {
        std::str::from_utf8(&self.payload).map_err(|_| Malformed::NotUtf8)
    }

    /// The body parsed as JSON into a `T` (any serde `Deserialize` type, or
    /// `serde_json::Value`). A body that is not UTF-8 is
    /// [`Malformed::NotUtf8`], one that does not parse as a `T` is
    /// [`Malformed::Json`]; `?` rejects the message with either.
    pub fn json<T: DeserializeOwned>(&self) -> Result<T, Malformed> {
        serde_json::from_str(self.text()?).map_err(Malformed::Json)
    }

    /// The headers as the sender gave them, in order.
    pub fn headers(&self) -> &[(String, String)] {
        &self.headers
    }

    /// The value of the first header named exactly `name`.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// Which delivery this is: 1 on the first attempt, 2 on the first
    /// retry, ... (a snooze does not count).
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// When the message was first published.
    pub fn enqueued_at(&self) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_millis(self.enqueued_at_ms)
    }
}

impl From<crate::__private::bindings::Message> for Message {
    fn from(m: crate::__private::bindings::Message) -> Self {
        Message {
            id: m.id,
            key: m.key,
            queue: m.queue,
            payload: m.payload,
            headers: m.headers,
            attempt: m.attempt,
            enqueued_at_ms: m.enqueued_at_ms,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Outcome;

    #[derive(Debug, PartialEq, serde::Deserialize)]
    struct Order {
        id: String,
        qty: u32,
    }

    #[test]
    fn reads_text_and_json() {
        let m = Message::new(r#"{"id":"A7","qty":3}"#);
        assert_eq!(m.text().unwrap(), r#"{"id":"A7","qty":3}"#);
        let order: Order = m.json().unwrap();
        assert_eq!(
            order,
            Order {
                id: "A7".into(),
                qty: 3
            }
        );
    }

    fn reject_reason(result: Result<Order, Malformed>) -> String {
        let error = Error::from(result.unwrap_err());
        match Outcome::from(error) {
            Outcome::Reject(reason) => reason,
            other => panic!("not a reject: {other:?}"),
        }
    }

    #[test]
    fn an_unreadable_payload_rejects() {
        assert_eq!(
            reject_reason(Message::new(vec![0xff, 0xfe]).json()),
            "payload is not UTF-8"
        );
        let reason = reject_reason(Message::new("nope").json());
        assert!(
            reason.starts_with("malformed payload: expected"),
            "{reason}"
        );
        let reason = reject_reason(Message::new(r#"{"id":"A7"}"#).json());
        assert_eq!(
            reason,
            "malformed payload: missing field `qty` at line 1 column 11"
        );
    }

    #[test]
    fn question_mark_on_json_rejects() {
        fn handle(m: &Message) -> crate::Result {
            let _: Order = m.json()?;
            Ok(())
        }
        let error = handle(&Message::new("7")).unwrap_err();
        assert!(
            matches!(error.outcome(), Outcome::Reject(r) if r.starts_with("malformed payload: invalid type")),
            "{error}"
        );
        assert_eq!(error.cause(), None);
    }

    #[test]
    fn headers_and_fields() {
        let at = SystemTime::UNIX_EPOCH + Duration::from_millis(1_700_000_000_123);
        let m = Message::new("x")
            .with_id("m-9")
            .with_key("k")
            .with_queue("orders")
            .with_header("a", "1")
            .with_header("b", "2")
            .with_header("a", "3")
            .with_attempt(4)
            .with_enqueued_at(at);
        assert_eq!((m.id(), m.key(), m.queue()), ("m-9", "k", "orders"));
        assert_eq!(m.header("a"), Some("1"), "the first of its name");
        assert_eq!(m.header("A"), None, "names match exactly");
        assert_eq!(m.headers().len(), 3);
        assert_eq!(m.attempt(), 4);
        assert_eq!(m.enqueued_at(), at);
        assert_eq!(m.payload(), b"x");
    }
}
