//! The key-value store behind the `sluice:handler/kv` capability: a role of
//! its own, kept in the broker's storage so that every host sees the same
//! values. Every entry belongs to a scope (the handler's name); scopes never
//! see each other's keys.
//!
//! Writes take effect when the call returns: they are not tied to a
//! message's settlement the way held publishes are.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;

use super::{BrokerError, Result};
use crate::message::now_ms;

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
pub(crate) fn parse_integer(value: &[u8]) -> Option<i64> {
    let text = std::str::from_utf8(value).ok()?;
    let n: i64 = text.parse().ok()?;
    (n.to_string() == text).then_some(n)
}

/// A key-value store kept in memory, with the semantics of the brokers'
/// stores (the conformance suite runs on it too): for one call of a handler
/// outside a host (`sluice invoke`, which loads and saves it as a file) and
/// for tests.
#[derive(Debug, Default)]
pub struct MemoryKv {
    entries: Mutex<BTreeMap<(String, String), MemoryEntry>>,
}

/// One value of a [`MemoryKv`], and when it expires.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemoryEntry {
    /// The value, any bytes.
    pub value: Vec<u8>,
    /// When it expires, in milliseconds since the Unix epoch; `None` for never.
    pub expires_at_ms: Option<u64>,
}

impl MemoryEntry {
    fn live(&self, now: u64) -> bool {
        self.expires_at_ms.is_none_or(|at| at > now)
    }
}

impl MemoryKv {
    /// An empty store.
    pub fn new() -> Self {
        MemoryKv::default()
    }

    /// Put `entry` under `key` in `scope` as it is, expiry included: a
    /// store loaded from what [`MemoryKv::entries`] gave.
    pub fn insert(&self, scope: &str, key: &str, entry: MemoryEntry) {
        self.lock()
            .insert((scope.to_string(), key.to_string()), entry);
    }

    /// Every entry of `scope` that has not expired, by key.
    pub fn entries(&self, scope: &str) -> BTreeMap<String, MemoryEntry> {
        let now = now_ms();
        self.lock()
            .iter()
            .filter(|((s, _), e)| s == scope && e.live(now))
            .map(|((_, k), e)| (k.clone(), e.clone()))
            .collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<(String, String), MemoryEntry>> {
        self.entries.lock().expect("kv lock")
    }
}

#[async_trait]
impl KvStore for MemoryKv {
    async fn kv_get(&self, scope: &str, key: &str) -> Result<Option<Vec<u8>>> {
        let now = now_ms();
        let entries = self.lock();
        let entry = entries.get(&(scope.to_string(), key.to_string()));
        Ok(entry.filter(|e| e.live(now)).map(|e| e.value.clone()))
    }

    async fn kv_set(
        &self,
        scope: &str,
        key: &str,
        value: Vec<u8>,
        ttl: Option<Duration>,
    ) -> Result<()> {
        check_ttl(ttl)?;
        let expires_at_ms = ttl.map(|t| now_ms() + t.as_millis() as u64);
        self.insert(
            scope,
            key,
            MemoryEntry {
                value,
                expires_at_ms,
            },
        );
        Ok(())
    }

    async fn kv_delete(&self, scope: &str, key: &str) -> Result<bool> {
        let now = now_ms();
        let removed = self.lock().remove(&(scope.to_string(), key.to_string()));
        Ok(removed.is_some_and(|e| e.live(now)))
    }

    async fn kv_increment(&self, scope: &str, key: &str, delta: i64) -> Result<i64> {
        let now = now_ms();
        let mut entries = self.lock();
        let slot = (scope.to_string(), key.to_string());
        let (current, expires_at_ms) = match entries.get(&slot).filter(|e| e.live(now)) {
            Some(e) => (
                parse_integer(&e.value).ok_or_else(|| not_an_integer(key))?,
                e.expires_at_ms,
            ),
            None => (0, None),
        };
        let sum = current
            .checked_add(delta)
            .ok_or_else(|| overflow(key, delta))?;
        entries.insert(
            slot,
            MemoryEntry {
                value: sum.to_string().into_bytes(),
                expires_at_ms,
            },
        );
        Ok(sum)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The store kept in memory keeps the brokers' semantics.
    #[cfg(feature = "testkit")]
    #[tokio::test]
    async fn the_memory_store_passes_the_kv_conformance_suite() {
        use std::sync::Arc;

        use crate::testkit::conformance::kv::*;
        let fresh = || -> Arc<dyn KvStore> { Arc::new(MemoryKv::new()) };
        kv_set_get_overwrite(fresh()).await;
        kv_ttl_expires_and_set_replaces_it(fresh()).await;
        kv_delete_says_whether_it_was_set(fresh()).await;
        kv_increment_creates_adds_and_keeps_expiry(fresh()).await;
        kv_increment_refuses_non_integers_and_overflow(fresh()).await;
        kv_concurrent_increments_sum_exactly(fresh()).await;
        kv_scopes_are_isolated(fresh()).await;
    }

    #[test]
    fn memory_entries_round_trip_with_their_expiry() {
        let kv = MemoryKv::new();
        let later = now_ms() + 60_000;
        let kept = MemoryEntry {
            value: vec![0, 0xff],
            expires_at_ms: Some(later),
        };
        kv.insert("h", "bin", kept.clone());
        kv.insert(
            "h",
            "gone",
            MemoryEntry {
                value: b"x".to_vec(),
                expires_at_ms: Some(1),
            },
        );
        kv.insert("other", "k", kept.clone());
        let entries = kv.entries("h");
        assert_eq!(entries.len(), 1, "{entries:?}");
        assert_eq!(entries["bin"], kept);
    }

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
