//! The key-value part of the conformance suite: every backend keeps the
//! handlers' stores with the same semantics. Run against the same backends
//! as the rest of the suite (SQLite, a single Redis, a Redis Cluster).

use std::sync::Arc;
use std::time::Duration;

use crate::{BrokerError, KvStore};

async fn get(b: &dyn KvStore, scope: &str, key: &str) -> Option<Vec<u8>> {
    b.kv_get(scope, key).await.unwrap()
}

/// A set is read back and a second set replaces it; values are any bytes,
/// empty included, and keys any text.
pub async fn kv_set_get_overwrite(b: Arc<dyn KvStore>) {
    assert_eq!(get(&*b, "a", "k").await, None, "a key never set");
    b.kv_set("a", "k", b"one".to_vec(), None).await.unwrap();
    assert_eq!(get(&*b, "a", "k").await.as_deref(), Some(&b"one"[..]));
    b.kv_set("a", "k", b"two".to_vec(), None).await.unwrap();
    assert_eq!(get(&*b, "a", "k").await.as_deref(), Some(&b"two"[..]));
    // Values are bytes, not text, and may be empty.
    let binary = vec![0u8, 0xff, 0xfe, b'\n'];
    b.kv_set("a", "bin", binary.clone(), None).await.unwrap();
    assert_eq!(get(&*b, "a", "bin").await, Some(binary));
    b.kv_set("a", "empty", Vec::new(), None).await.unwrap();
    assert_eq!(get(&*b, "a", "empty").await, Some(Vec::new()));
    // Keys may hold any text, braces and separators included.
    b.kv_set("a", "{x}:y z/é", b"odd".to_vec(), None)
        .await
        .unwrap();
    assert_eq!(
        get(&*b, "a", "{x}:y z/é").await.as_deref(),
        Some(&b"odd"[..])
    );
}

/// A key with a time to live is gone once it passes, and counts as never
/// set; a set without one makes a key permanent again. A time to live of
/// zero or over ten years is refused and writes nothing.
pub async fn kv_ttl_expires_and_set_replaces_it(b: Arc<dyn KvStore>) {
    let short = Some(Duration::from_millis(200));
    b.kv_set("a", "brief", b"v".to_vec(), short).await.unwrap();
    b.kv_set("a", "kept", b"v".to_vec(), short).await.unwrap();
    // Set again without a TTL: the key no longer expires.
    b.kv_set("a", "kept", b"w".to_vec(), None).await.unwrap();
    b.kv_set("a", "long", b"v".to_vec(), Some(Duration::from_secs(60)))
        .await
        .unwrap();
    assert_eq!(get(&*b, "a", "brief").await.as_deref(), Some(&b"v"[..]));
    tokio::time::sleep(Duration::from_millis(350)).await;
    assert_eq!(get(&*b, "a", "brief").await, None, "expired");
    assert_eq!(get(&*b, "a", "kept").await.as_deref(), Some(&b"w"[..]));
    assert_eq!(get(&*b, "a", "long").await.as_deref(), Some(&b"v"[..]));
    assert!(
        !b.kv_delete("a", "brief").await.unwrap(),
        "an expired key counts as not set"
    );
    // An expired key starts again from nothing.
    assert_eq!(b.kv_increment("a", "brief", 3).await.unwrap(), 3);

    for bad in [Duration::ZERO, Duration::from_secs(3651 * 24 * 3600)] {
        let err = b.kv_set("a", "x", b"v".to_vec(), Some(bad)).await;
        assert!(
            matches!(&err, Err(BrokerError::Invalid(m)) if m.contains("time to live")),
            "{bad:?}: {err:?}"
        );
    }
    assert_eq!(
        get(&*b, "a", "x").await,
        None,
        "a refused set writes nothing"
    );
}

/// A delete removes the key and says whether there was one to remove.
pub async fn kv_delete_says_whether_it_was_set(b: Arc<dyn KvStore>) {
    b.kv_set("a", "k", b"v".to_vec(), None).await.unwrap();
    assert!(b.kv_delete("a", "k").await.unwrap());
    assert_eq!(get(&*b, "a", "k").await, None);
    assert!(!b.kv_delete("a", "k").await.unwrap(), "already gone");
    assert!(!b.kv_delete("a", "never").await.unwrap());
}

/// An increment starts a missing key from zero, adds any signed amount to
/// a value that spells a decimal integer, stores the sum as decimal text
/// and keeps the key's expiry.
pub async fn kv_increment_creates_adds_and_keeps_expiry(b: Arc<dyn KvStore>) {
    assert_eq!(b.kv_increment("a", "n", 5).await.unwrap(), 5, "new key");
    assert_eq!(b.kv_increment("a", "n", -7).await.unwrap(), -2);
    assert_eq!(b.kv_increment("a", "n", 0).await.unwrap(), -2);
    assert_eq!(
        get(&*b, "a", "n").await.as_deref(),
        Some(&b"-2"[..]),
        "decimal text"
    );
    // A value set as text is incremented as the integer it spells.
    b.kv_set("a", "s", b"40".to_vec(), None).await.unwrap();
    assert_eq!(b.kv_increment("a", "s", 2).await.unwrap(), 42);
    // A key with an expiry keeps it.
    b.kv_set("a", "t", b"1".to_vec(), Some(Duration::from_millis(200)))
        .await
        .unwrap();
    assert_eq!(b.kv_increment("a", "t", 1).await.unwrap(), 2);
    tokio::time::sleep(Duration::from_millis(350)).await;
    assert_eq!(
        get(&*b, "a", "t").await,
        None,
        "the expiry survived the increment"
    );
}

/// An increment of a value that is not a plain decimal `i64`, or one that
/// would overflow, is refused with the exact error text and changes nothing.
pub async fn kv_increment_refuses_non_integers_and_overflow(b: Arc<dyn KvStore>) {
    for (i, value) in ["abc", "1.5", " 7", "+1", "01", "", "99999999999999999999"]
        .iter()
        .enumerate()
    {
        let key = format!("bad{i}");
        b.kv_set("a", &key, value.as_bytes().to_vec(), None)
            .await
            .unwrap();
        let err = b.kv_increment("a", &key, 1).await.unwrap_err();
        let BrokerError::Invalid(text) = &err else {
            panic!("{value:?}: {err:?}");
        };
        assert_eq!(
            text,
            &format!(
                "the value of key {key:?} is not a decimal integer in the s64 range, so it cannot be incremented"
            ),
            "{value:?}"
        );
        assert_eq!(
            get(&*b, "a", &key).await.as_deref(),
            Some(value.as_bytes()),
            "a refused increment leaves the value alone"
        );
    }
    b.kv_set("a", "max", i64::MAX.to_string().into_bytes(), None)
        .await
        .unwrap();
    let err = b.kv_increment("a", "max", 1).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "incrementing key \"max\" by 1 would overflow a signed 64-bit integer"
    );
    assert_eq!(b.kv_increment("a", "max", -1).await.unwrap(), i64::MAX - 1);
}

/// Increments racing on one key are atomic: each sees a distinct running
/// total, and none is lost.
pub async fn kv_concurrent_increments_sum_exactly(b: Arc<dyn KvStore>) {
    const TASKS: i64 = 8;
    const EACH: i64 = 25;
    let tasks: Vec<_> = (1..=TASKS)
        .map(|t| {
            let b = b.clone();
            tokio::spawn(async move {
                let mut seen = Vec::new();
                for _ in 0..EACH {
                    seen.push(b.kv_increment("a", "hits", t).await.unwrap());
                }
                seen
            })
        })
        .collect();
    let mut results = Vec::new();
    for t in tasks {
        results.extend(t.await.unwrap());
    }
    let total = EACH * TASKS * (TASKS + 1) / 2;
    assert_eq!(b.kv_increment("a", "hits", 0).await.unwrap(), total);
    // Atomic: every increment saw a distinct running total.
    results.sort();
    results.dedup();
    assert_eq!(results.len() as i64, TASKS * EACH);
    assert_eq!(results.last().copied(), Some(total));
}

/// Scopes are separate stores: the same key in two scopes holds two values,
/// even for scopes and keys that would run together if simply joined.
pub async fn kv_scopes_are_isolated(b: Arc<dyn KvStore>) {
    b.kv_set("a", "shared", b"from a".to_vec(), None)
        .await
        .unwrap();
    assert_eq!(get(&*b, "b", "shared").await, None, "b cannot see a's key");
    b.kv_set("b", "shared", b"from b".to_vec(), None)
        .await
        .unwrap();
    assert_eq!(
        get(&*b, "a", "shared").await.as_deref(),
        Some(&b"from a"[..])
    );
    assert_eq!(
        get(&*b, "b", "shared").await.as_deref(),
        Some(&b"from b"[..])
    );
    assert_eq!(b.kv_increment("a", "n", 1).await.unwrap(), 1);
    assert_eq!(b.kv_increment("b", "n", 10).await.unwrap(), 10);
    assert!(b.kv_delete("b", "shared").await.unwrap());
    assert_eq!(
        get(&*b, "a", "shared").await.as_deref(),
        Some(&b"from a"[..])
    );
    // Scopes that could run into each other if scope and key were simply
    // joined stay apart, braces included (a Redis hash tag's delimiters).
    b.kv_set("x}:y", "k", b"1".to_vec(), None).await.unwrap();
    b.kv_set("x", "y}:k", b"2".to_vec(), None).await.unwrap();
    b.kv_set("x:y", "k", b"3".to_vec(), None).await.unwrap();
    b.kv_set("x", "y:k", b"4".to_vec(), None).await.unwrap();
    for (scope, key, want) in [
        ("x}:y", "k", b"1"),
        ("x", "y}:k", b"2"),
        ("x:y", "k", b"3"),
        ("x", "y:k", b"4"),
    ] {
        assert_eq!(
            get(&*b, scope, key).await.as_deref(),
            Some(&want[..]),
            "{scope} {key}"
        );
    }
}
