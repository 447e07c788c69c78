//! The message envelope: what a sender hands to a broker and what a broker
//! hands back on delivery, plus the checks every entry point applies.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::units::format_size;

/// The default cap on one message's payload plus headers.
pub const DEFAULT_MAX_MESSAGE_SIZE: u64 = 1 << 20;

/// Most headers one message may carry.
pub const MAX_HEADERS: usize = 64;

/// The longest idempotency key, in bytes.
pub const MAX_KEY: usize = 512;

/// The longest delay sluice accepts anywhere: a publish's delay, a retry
/// delay, a backoff bound, a guest's delay cap.
pub const MAX_DELAY: Duration = Duration::from_secs(30 * 24 * 3600);

/// What each header costs in a message's size beyond its name and value,
/// so that empty headers are not free.
pub const HEADER_OVERHEAD: u64 = 32;

/// The longest reason or last error kept with a message or dead letter, in
/// bytes; longer ones are cut with a marker.
pub const MAX_REASON: usize = 4 << 10;

/// `text` cut to at most `max` bytes (at a character boundary), with a
/// marker saying how much was cut.
pub fn truncate(text: &str, max: usize) -> std::borrow::Cow<'_, str> {
    if text.len() <= max {
        return text.into();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… [cut: {} more bytes]", &text[..end], text.len() - end).into()
}

/// `text` as kept for a reason or last error: cut to [`MAX_REASON`] bytes
/// by [`truncate`], then each NUL character read as U+FFFD (so at most
/// three times that). PostgreSQL's text cannot hold a NUL, and every
/// broker keeps the same text.
pub fn stored_text(text: &str) -> String {
    without_nul(&truncate(text, MAX_REASON))
}

/// `text` with each NUL character read as U+FFFD, for text a broker stores
/// that sluice did not refuse at its entry (a handler's reject reason, an
/// idempotency key read from a payload).
pub fn without_nul(text: &str) -> String {
    text.replace('\0', "\u{FFFD}")
}

/// A message on its way into a queue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewMessage {
    /// The queue it goes to.
    pub queue: String,
    /// The body, any bytes.
    pub payload: Vec<u8>,
    /// Headers, in order; names need not be unique.
    pub headers: Vec<(String, String)>,
    /// Idempotency key; the message id when `None`.
    pub key: Option<String>,
    /// Deliver no earlier than this long after the publish commits.
    pub delay: Duration,
}

impl NewMessage {
    /// `payload` for `queue`, without headers, key or delay.
    pub fn new(queue: impl Into<String>, payload: impl Into<Vec<u8>>) -> Self {
        NewMessage {
            queue: queue.into(),
            payload: payload.into(),
            headers: Vec::new(),
            key: None,
            delay: Duration::ZERO,
        }
    }

    /// Bytes this message occupies: payload, headers (each with
    /// [`HEADER_OVERHEAD`]) and key.
    pub fn size(&self) -> u64 {
        let headers: u64 = self
            .headers
            .iter()
            .map(|(k, v)| (k.len() + v.len()) as u64 + HEADER_OVERHEAD)
            .sum();
        self.payload.len() as u64 + headers + self.key.as_ref().map_or(0, String::len) as u64
    }

    /// The one check every publish entry point applies (the `Client` and
    /// so `sluice send`, a handler's publish, a cron schedule's message;
    /// the SQL function `sluice.publish` makes the same checks in
    /// `postgres/migrations/0008_publish_checks.sql`): the queue name, at most [`MAX_HEADERS`] headers
    /// with names and values a broker can keep, a key of 1 to [`MAX_KEY`]
    /// bytes without NUL, a delay of at most [`MAX_DELAY`], and the size
    /// limit. The error names the queue and what is wrong.
    pub fn validate(&self, max_size: u64) -> Result<(), String> {
        validate_queue_name(&self.queue)?;
        self.validate_headers()?;
        if let Some(key) = &self.key {
            self.validate_key(key)?;
        }
        if self.delay > MAX_DELAY {
            return Err(format!(
                "message for queue {:?} has a delay of {}, over the longest sluice accepts ({}): publish it later, with a shorter delay",
                self.queue,
                humantime::format_duration(self.delay),
                humantime::format_duration(MAX_DELAY)
            ));
        }
        let size = self.size();
        if size > max_size {
            return Err(format!(
                "message for queue {:?} is {}, over the {} limit (raise max_message_size in sluice.toml, or send less)",
                self.queue,
                format_size(size),
                format_size(max_size)
            ));
        }
        Ok(())
    }

    /// At most [`MAX_HEADERS`]; names not empty and without `=` (`sluice
    /// send --header K=V` could not give one) or NUL, values without NUL
    /// (PostgreSQL's text cannot hold it).
    fn validate_headers(&self) -> Result<(), String> {
        let queue = &self.queue;
        if self.headers.len() > MAX_HEADERS {
            return Err(format!(
                "message for queue {queue:?} has {} headers; at most {MAX_HEADERS} are allowed",
                self.headers.len()
            ));
        }
        for (name, value) in &self.headers {
            if name.is_empty() || name.contains(['=', '\0']) {
                return Err(format!(
                    "message for queue {queue:?} has a bad header name {name:?}: a header name is 1 or more characters without `=` or NUL"
                ));
            }
            if value.contains('\0') {
                return Err(format!(
                    "message for queue {queue:?} has a NUL character in header {name:?}: a header value is text without NUL"
                ));
            }
        }
        Ok(())
    }

    /// 1 to [`MAX_KEY`] bytes without NUL.
    fn validate_key(&self, key: &str) -> Result<(), String> {
        let queue = &self.queue;
        if key.is_empty() {
            return Err(format!(
                "message for queue {queue:?} has an empty idempotency key: give 1 to {MAX_KEY} bytes, or none to key it by its id"
            ));
        }
        if key.len() > MAX_KEY {
            return Err(format!(
                "message for queue {queue:?} has an idempotency key of {} bytes; at most {MAX_KEY} are allowed (hash a longer one)",
                key.len()
            ));
        }
        if key.contains('\0') {
            return Err(format!(
                "message for queue {queue:?} has a NUL character in its idempotency key {key:?}; a key is text without NUL (PostgreSQL cannot store it)"
            ));
        }
        Ok(())
    }
}

/// One delivery of a message, leased to this host until it is settled.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Delivery {
    /// The message id, the same on every delivery of the message.
    pub id: String,
    /// The queue it was leased from.
    pub queue: String,
    /// The sender's idempotency key (the message id when none was given).
    pub key: String,
    /// The body, as published.
    pub payload: Vec<u8>,
    /// The headers, as published (with the trace context the publish gave).
    pub headers: Vec<(String, String)>,
    /// 1 on the first delivery, counting every delivery including those whose
    /// lease expired.
    pub attempt: u32,
    /// When the message was published, in microseconds since the Unix
    /// epoch.
    pub enqueued_at_us: u64,
    /// Error text of the previous attempt, if it failed.
    pub last_error: Option<String>,
    /// The broker's proof of this lease, handed back when settling.
    pub receipt: String,
    /// When the lease runs out, in milliseconds since the Unix epoch.
    pub lease_until_ms: u64,
    /// The ordered group the message is in (`[ordering]`), if any.
    pub group: Option<String>,
    /// Times the handler snoozed the message (each without spending an
    /// attempt).
    pub snoozes: u32,
}

impl Delivery {
    /// A first delivery of message `id` on `queue` with an empty payload,
    /// leased for ever: for unit tests of what handles deliveries.
    #[cfg(any(test, feature = "testkit"))]
    pub fn for_test(id: &str, queue: &str) -> Delivery {
        Delivery {
            id: id.into(),
            queue: queue.into(),
            key: id.into(),
            payload: Vec::new(),
            headers: Vec::new(),
            attempt: 1,
            enqueued_at_us: 0,
            last_error: None,
            receipt: "r".into(),
            lease_until_ms: u64::MAX,
            group: None,
            snoozes: 0,
        }
    }

    /// When the message was published, in milliseconds since the Unix
    /// epoch.
    pub fn enqueued_at_ms(&self) -> u64 {
        self.enqueued_at_us / 1000
    }

    /// The value of the first header called `name`, ignoring ASCII case.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// Queue names are used in file names, keys and metrics: keep them plain.
pub fn validate_queue_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 128
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "bad queue name {name:?}: use 1 to 128 of A-Z a-z 0-9 - _ ."
        ))
    }
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Microseconds since the Unix epoch.
pub fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

/// This machine's host name, for consumer names and status reports.
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "host".into())
}

/// A new, time-ordered message id.
pub fn new_id() -> String {
    uuid::Uuid::now_v7().simple().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_text_is_cut_at_a_character_boundary_with_a_marker() {
        assert_eq!(truncate("short", 10), "short");
        assert_eq!(truncate("ééééé", 3), "é… [cut: 8 more bytes]");
    }

    #[test]
    fn headers_are_counted_and_not_free() {
        let mut m = NewMessage::new("q", "x");
        m.headers = vec![("h".into(), String::new()); MAX_HEADERS];
        assert_eq!(m.size(), 1 + MAX_HEADERS as u64 * (1 + HEADER_OVERHEAD));
        assert!(m.validate(DEFAULT_MAX_MESSAGE_SIZE).is_ok());
        m.headers.push(("a".into(), "b".into()));
        let err = m.validate(DEFAULT_MAX_MESSAGE_SIZE).unwrap_err();
        assert!(err.contains("65 headers; at most 64"), "{err}");
    }

    #[test]
    fn a_key_with_a_nul_is_refused_naming_the_queue() {
        let mut m = NewMessage::new("orders", "x");
        m.key = Some("a\0b".into());
        let err = m.validate(DEFAULT_MAX_MESSAGE_SIZE).unwrap_err();
        assert!(
            err.contains("\"orders\"") && err.contains("NUL") && err.contains("\"a\\0b\""),
            "{err}"
        );
        m.key = Some("a b".into());
        assert!(m.validate(DEFAULT_MAX_MESSAGE_SIZE).is_ok());
    }

    #[test]
    fn keys_are_1_to_512_bytes() {
        let mut m = NewMessage::new("orders", "x");
        m.key = Some(String::new());
        let err = m.validate(DEFAULT_MAX_MESSAGE_SIZE).unwrap_err();
        assert!(err.contains("\"orders\"") && err.contains("empty"), "{err}");
        m.key = Some("k".repeat(MAX_KEY));
        assert!(m.validate(DEFAULT_MAX_MESSAGE_SIZE).is_ok());
        m.key = Some("k".repeat(MAX_KEY + 1));
        let err = m.validate(DEFAULT_MAX_MESSAGE_SIZE).unwrap_err();
        assert!(
            err.contains("\"orders\"") && err.contains("513 bytes; at most 512"),
            "{err}"
        );
    }

    #[test]
    fn header_names_and_values_are_checked() {
        let refused = |name: &str, value: &str| {
            let mut m = NewMessage::new("orders", "x");
            m.headers = vec![(name.into(), value.into())];
            m.validate(DEFAULT_MAX_MESSAGE_SIZE).err()
        };
        assert_eq!(refused("tenant", "a=b c"), None);
        for (name, value) in [("", "v"), ("a=b", "v"), ("a\0", "v")] {
            let err = refused(name, value).unwrap();
            assert!(
                err.contains("\"orders\"") && err.contains("bad header name"),
                "{err}"
            );
        }
        let err = refused("tenant", "a\0").unwrap();
        assert!(err.contains("NUL") && err.contains("\"tenant\""), "{err}");
    }

    #[test]
    fn delays_are_at_most_30_days() {
        let mut m = NewMessage::new("orders", "x");
        m.delay = MAX_DELAY;
        assert!(m.validate(DEFAULT_MAX_MESSAGE_SIZE).is_ok());
        m.delay = MAX_DELAY + Duration::from_millis(1);
        let err = m.validate(DEFAULT_MAX_MESSAGE_SIZE).unwrap_err();
        assert!(
            err.contains("\"orders\"") && err.contains("delay") && err.contains("30days"),
            "{err}"
        );
    }

    #[test]
    fn stored_text_has_no_nul_and_is_bounded() {
        assert_eq!(stored_text("bad\0input\0"), "bad\u{FFFD}input\u{FFFD}");
        assert_eq!(stored_text("plain"), "plain");
        let long = stored_text(&"\0".repeat(MAX_REASON + 10));
        assert!(
            !long.contains('\0') && long.ends_with("[cut: 10 more bytes]"),
            "{long}"
        );
        assert!(long.len() <= 3 * MAX_REASON + 32, "{}", long.len());
    }

    #[test]
    fn queue_names() {
        assert!(validate_queue_name("orders.eu-1_x").is_ok());
        assert!(validate_queue_name("").is_err());
        assert!(validate_queue_name("a/b").unwrap_err().contains("a/b"));
    }

    #[test]
    fn size_limit_names_queue_and_limit() {
        let msg = NewMessage::new("orders", vec![0u8; 2 << 20]);
        let err = msg.validate(DEFAULT_MAX_MESSAGE_SIZE).unwrap_err();
        assert!(
            err.contains("orders") && err.contains("2MiB") && err.contains("1MiB"),
            "{err}"
        );
        assert!(
            NewMessage::new("orders", vec![0u8; 10])
                .validate(DEFAULT_MAX_MESSAGE_SIZE)
                .is_ok()
        );
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(3000))]

        /// Bounded fuzzing: any text is a valid queue name or a clear
        /// error, and what is accepted is plain.
        #[test]
        fn any_text_is_a_plain_queue_name_or_refused(name in "\\PC{0,140}") {
            match validate_queue_name(&name) {
                Ok(()) => proptest::prop_assert!(
                    (1..=128).contains(&name.len())
                        && name.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
                ),
                Err(e) => proptest::prop_assert!(e.starts_with("bad queue name"), "{}", e),
            }
            let _ = crate::topic::validate_topic_name(&name);
            let _ = crate::topic::validate_route(&name);
            if crate::topic::validate_pattern(&name).is_ok() && crate::topic::validate_route(&name).is_ok() {
                proptest::prop_assert!(crate::topic::matches(&name, &name));
            }
        }
    }
}
