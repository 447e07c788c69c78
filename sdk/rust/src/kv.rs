//! The handler's own key-value store, kept in the broker so that every host
//! serving the handler sees the same one.
//!
//! Granted per handler: `kv = true` under `[capabilities]` in its sidecar.
//! Without the grant, and when the key is empty or over 1024 bytes, the
//! value over 1 MiB or the store out of reach, every call fails with a
//! [`HostError`] saying why (`?` on it retries the message). Writes take
//! effect at once: they are not held until the call returns like publishes,
//! nor undone by a retry.

use std::time::Duration;

use crate::host::{self, HostError};
use crate::outcome::millis;

/// The value of `key`, or `None` when it is not set or has expired.
pub fn get(key: &str) -> Result<Option<Vec<u8>>, HostError> {
    host::kv_get(key).map_err(HostError::new)
}

/// Sets `key` to `value`, replacing its value and expiry. With a `ttl` the
/// key expires that long from now (at least 1 ms, at most 10 years); with
/// `None` it never does.
pub fn set(key: &str, value: impl AsRef<[u8]>, ttl: Option<Duration>) -> Result<(), HostError> {
    host::kv_set(key, value.as_ref(), ttl.map(millis)).map_err(HostError::new)
}

/// Removes `key`; true when it was set (and had not expired).
pub fn delete(key: &str) -> Result<bool, HostError> {
    host::kv_delete(key).map_err(HostError::new)
}

/// Atomically adds `delta` (negative to subtract) to the integer at `key`
/// and returns the new value. A key that is not set counts as 0. The value
/// is kept as decimal text (`get` returns e.g. `b"42"`); the call fails
/// when the stored value is not a decimal `i64` or the sum overflows.
pub fn increment(key: &str, delta: i64) -> Result<i64, HostError> {
    host::kv_increment(key, delta).map_err(HostError::new)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::FakeHost;

    #[test]
    fn calls_reach_the_store() {
        let host = FakeHost::new().with_kv();
        assert_eq!(get("k"), Ok(None));
        set("k", "v", Some(Duration::from_secs(1))).unwrap();
        assert_eq!(get("k"), Ok(Some(b"v".to_vec())));
        assert_eq!(delete("k"), Ok(true));
        assert_eq!(delete("k"), Ok(false));
        assert_eq!(increment("n", 5), Ok(5));
        assert_eq!(increment("n", -7), Ok(-2));
        assert_eq!(host.kv_value("n").as_deref(), Some(&b"-2"[..]));
    }

    #[test]
    fn without_the_grant_every_call_fails() {
        let _host = FakeHost::new();
        let e = increment("n", 1).unwrap_err();
        assert_eq!(e.reason(), "the handler is not granted the key-value store");
        assert!(get("n").is_err() && set("n", "1", None).is_err() && delete("n").is_err());
    }

    #[test]
    fn a_ttl_under_a_millisecond_still_expires_later() {
        let _host = FakeHost::new().with_kv();
        // Rounded up to 1 ms, which the host takes; 0 ms it refuses.
        assert_eq!(set("k", "v", Some(Duration::from_micros(1))), Ok(()));
        assert!(set("k", "v", Some(Duration::ZERO)).is_err());
    }
}
