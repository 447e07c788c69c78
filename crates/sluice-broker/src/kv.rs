//! The key-value store behind the `sluice:handler/kv` capability: a role of
//! its own, kept in the broker's storage so that every host sees the same
//! values. Every entry belongs to a scope (the handler's name); scopes never
//! see each other's keys.
//!
//! Writes take effect when the call returns: they are not tied to a
//! message's settlement the way held publishes are.

use std::time::Duration;

use async_trait::async_trait;

use super::{BrokerError, Result};

/// The longest expiry a key may be given, so that "now + ttl" fits every
/// backend's clock arithmetic with room to spare.
pub(crate) const MAX_TTL: Duration = Duration::from_secs(3650 * 24 * 3600);

/// The handlers' key-value stores, one scope per handler.
#[async_trait]
pub trait KvStore: Send + Sync {
    /// The value of `key` in `scope`; `None` when it is not set or expired.
    async fn kv_get(&self, scope: &str, key: &str) -> Result<Option<Vec<u8>>>;

    /// Set `key`, replacing its value and expiry. With `ttl` it expires that
    /// long from now, without it never.
    async fn kv_set(
        &self,
        scope: &str,
        key: &str,
        value: Vec<u8>,
        ttl: Option<Duration>,
    ) -> Result<()>;

    /// Remove `key`. True when it was set and not expired.
    async fn kv_delete(&self, scope: &str, key: &str) -> Result<bool>;

    /// Atomically add `delta` to the decimal integer at `key` (0 when not
    /// set) and return the result, stored as decimal text. A key's expiry
    /// is kept; a new key never expires. Fails with [`BrokerError::Invalid`]
    /// when the value is not an integer or the sum would overflow.
    async fn kv_increment(&self, scope: &str, key: &str, delta: i64) -> Result<i64>;
}

/// Refuse an expiry that no backend can store.
pub(crate) fn check_ttl(ttl: Option<Duration>) -> Result<()> {
    match ttl {
        Some(t) if t < Duration::from_millis(1) => Err(BrokerError::Invalid(
            "a key's time to live must be at least 1 ms (or none, for no expiry)".into(),
        )),
        Some(t) if t > MAX_TTL => Err(BrokerError::Invalid(format!(
            "a key's time to live may be at most {} ms (10 years)",
            MAX_TTL.as_millis()
        ))),
        _ => Ok(()),
    }
}

/// The error for a value that `increment` cannot add to. Both backends use
/// these words, so a handler sees the same error on either.
pub(crate) fn not_an_integer(key: &str) -> BrokerError {
    BrokerError::Invalid(format!(
        "the value of key {key:?} is not a decimal integer in the s64 range, so it cannot be incremented"
    ))
}

pub(crate) fn overflow(key: &str, delta: i64) -> BrokerError {
    BrokerError::Invalid(format!(
        "incrementing key {key:?} by {delta} would overflow a signed 64-bit integer"
    ))
}

/// Parse a stored value the way Redis's `INCRBY` does: an optional `-`,
/// then digits without leading zeros (a lone `0` is fine), within i64.
#[cfg(any(test, feature = "sqlite"))]
pub(crate) fn parse_integer(value: &[u8]) -> Option<i64> {
    let text = std::str::from_utf8(value).ok()?;
    let n: i64 = text.parse().ok()?;
    (n.to_string() == text).then_some(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_parse_like_redis() {
        for (text, want) in [
            ("0", Some(0)),
            ("42", Some(42)),
            ("-7", Some(-7)),
            ("9223372036854775807", Some(i64::MAX)),
            ("-9223372036854775808", Some(i64::MIN)),
            ("9223372036854775808", None),
            ("+1", None),
            ("01", None),
            ("-0", None),
            (" 1", None),
            ("1.0", None),
            ("", None),
            ("abc", None),
        ] {
            assert_eq!(parse_integer(text.as_bytes()), want, "{text:?}");
        }
        assert_eq!(parse_integer(&[0xff]), None);
    }

    #[test]
    fn ttl_bounds() {
        assert!(check_ttl(None).is_ok());
        assert!(check_ttl(Some(Duration::from_millis(1))).is_ok());
        assert!(check_ttl(Some(MAX_TTL)).is_ok());
        assert!(check_ttl(Some(Duration::ZERO)).is_err());
        assert!(check_ttl(Some(MAX_TTL + Duration::from_millis(1))).is_err());
    }
}
