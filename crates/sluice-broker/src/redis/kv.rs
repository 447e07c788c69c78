//! The handlers' key-value stores on Redis: one Redis key per entry,
//! `sluice:kv:{SCOPE}:KEY`, with Redis's own expiry (`SET ... PX`) and
//! atomic `INCRBY`.
//!
//! Every operation touches one key, so none needs a hash tag on Redis
//! Cluster. The scope is a tag all the same, `{SCOPE}`: a handler's entries
//! then share one slot, which keeps a later operation over several of its
//! keys (a script, a batch read) possible, at the price of a single
//! handler's store not spreading over the cluster. Braces and `%` in the
//! scope are percent-escaped, so the tag always ends at our own `}` and no
//! two (scope, key) pairs can name the same Redis key.

use std::time::Duration;

use async_trait::async_trait;
use redis::RedisError;

use super::{RedisBroker, classify};
use crate::kv::{KvStore, check_ttl, not_an_integer, overflow};
use crate::{BrokerError, Result};

/// The Redis key of one entry.
fn entry(scope: &str, key: &str) -> String {
    let mut tag = String::with_capacity(scope.len());
    for c in scope.chars() {
        match c {
            '%' => tag.push_str("%25"),
            '{' => tag.push_str("%7B"),
            '}' => tag.push_str("%7D"),
            c => tag.push(c),
        }
    }
    format!("sluice:kv:{{{tag}}}:{key}")
}

/// `INCRBY`'s refusals, in the words both backends use.
fn increment_error(e: RedisError, key: &str, delta: i64) -> BrokerError {
    let detail = e.detail().unwrap_or_default();
    if detail.contains("not an integer") {
        not_an_integer(key)
    } else if detail.contains("overflow") {
        overflow(key, delta)
    } else {
        classify(e)
    }
}

#[async_trait]
impl KvStore for RedisBroker {
    async fn kv_get(&self, scope: &str, key: &str) -> Result<Option<Vec<u8>>> {
        let mut conn = self.conn.clone();
        redis::cmd("GET")
            .arg(entry(scope, key))
            .query_async(&mut conn)
            .await
            .map_err(classify)
    }

    async fn kv_set(
        &self,
        scope: &str,
        key: &str,
        value: Vec<u8>,
        ttl: Option<Duration>,
    ) -> Result<()> {
        check_ttl(ttl)?;
        let mut conn = self.conn.clone();
        let mut cmd = redis::cmd("SET");
        cmd.arg(entry(scope, key)).arg(value);
        // Without PX, SET also clears an expiry the key had.
        if let Some(ttl) = ttl {
            cmd.arg("PX").arg(ttl.as_millis() as u64);
        }
        cmd.query_async::<()>(&mut conn).await.map_err(classify)
    }

    async fn kv_delete(&self, scope: &str, key: &str) -> Result<bool> {
        let mut conn = self.conn.clone();
        let removed: i64 = redis::cmd("DEL")
            .arg(entry(scope, key))
            .query_async(&mut conn)
            .await
            .map_err(classify)?;
        Ok(removed > 0)
    }

    async fn kv_increment(&self, scope: &str, key: &str, delta: i64) -> Result<i64> {
        let mut conn = self.conn.clone();
        redis::cmd("INCRBY")
            .arg(entry(scope, key))
            .arg(delta)
            .query_async(&mut conn)
            .await
            .map_err(|e| increment_error(e, key, delta))
    }
}

#[cfg(test)]
mod tests {
    use super::entry;

    #[test]
    fn entries_are_tagged_by_scope_and_never_collide() {
        assert_eq!(entry("orders", "count"), "sluice:kv:{orders}:count");
        // Without escaping, both would be `sluice:kv:{a}:x}:k`.
        assert_ne!(entry("a}:x", "k"), entry("a", "x}:k"));
        assert_eq!(entry("a}:x", "k"), "sluice:kv:{a%7D:x}:k");
        assert_ne!(entry("%7D", "k"), entry("}", "k"));
    }
}
