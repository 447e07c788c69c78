//! The handlers' key-value stores on SQLite: one row per entry in `kv`.
//!
//! Every operation is one job on the broker thread, so it runs inside that
//! thread's transaction and is atomic against every other job: an increment
//! reads and writes without any other writer in between. An expired row is
//! treated as absent at once and deleted by the periodic sweep.

use std::time::Duration;

use async_trait::async_trait;
use rusqlite::{Connection, OptionalExtension, params};

use super::SqliteBroker;
use super::classify;
use crate::Result;
use crate::kv::{KvStore, check_ttl, not_an_integer, overflow, parse_integer};
use crate::message::now_ms;

/// Delete the entries that have expired.
pub(super) fn sweep(conn: &Connection, now: u64) -> rusqlite::Result<usize> {
    conn.execute(
        "DELETE FROM kv WHERE expires_at IS NOT NULL AND expires_at <= ?1",
        [now as i64],
    )
}

/// The live value and expiry of one entry.
fn live(conn: &Connection, scope: &str, key: &str) -> Result<Option<(Vec<u8>, Option<i64>)>> {
    conn.prepare_cached(
        "SELECT value, expires_at FROM kv WHERE scope = ?1 AND key = ?2
         AND (expires_at IS NULL OR expires_at > ?3)",
    )
    .and_then(|mut s| {
        s.query_row(params![scope, key, now_ms() as i64], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })
        .optional()
    })
    .map_err(classify)
}

fn put(
    conn: &Connection,
    scope: &str,
    key: &str,
    value: &[u8],
    expires: Option<i64>,
) -> Result<()> {
    conn.prepare_cached(
        "INSERT OR REPLACE INTO kv (scope, key, value, expires_at) VALUES (?1, ?2, ?3, ?4)",
    )
    .and_then(|mut s| s.execute(params![scope, key, value, expires]))
    .map_err(classify)?;
    Ok(())
}

#[async_trait]
impl KvStore for SqliteBroker {
    async fn kv_get(&self, scope: &str, key: &str) -> Result<Option<Vec<u8>>> {
        let (scope, key) = (scope.to_string(), key.to_string());
        self.call(move |conn| Ok(live(conn, &scope, &key)?.map(|(value, _)| value)))
            .await
    }

    async fn kv_set(
        &self,
        scope: &str,
        key: &str,
        value: Vec<u8>,
        ttl: Option<Duration>,
    ) -> Result<()> {
        check_ttl(ttl)?;
        let (scope, key) = (scope.to_string(), key.to_string());
        self.call(move |conn| {
            let expires = ttl.map(|t| (now_ms() + t.as_millis() as u64) as i64);
            put(conn, &scope, &key, &value, expires)
        })
        .await
    }

    async fn kv_delete(&self, scope: &str, key: &str) -> Result<bool> {
        let (scope, key) = (scope.to_string(), key.to_string());
        self.call(move |conn| {
            let was_live = live(conn, &scope, &key)?.is_some();
            // An expired row goes too: it is as good as gone already.
            conn.prepare_cached("DELETE FROM kv WHERE scope = ?1 AND key = ?2")
                .and_then(|mut s| s.execute(params![scope, key]))
                .map_err(classify)?;
            Ok(was_live)
        })
        .await
    }

    async fn kv_increment(&self, scope: &str, key: &str, delta: i64) -> Result<i64> {
        let (scope, key) = (scope.to_string(), key.to_string());
        self.call(move |conn| {
            let (current, expires) = match live(conn, &scope, &key)? {
                Some((value, expires)) => (
                    parse_integer(&value).ok_or_else(|| not_an_integer(&key))?,
                    expires,
                ),
                None => (0, None),
            };
            let sum = current
                .checked_add(delta)
                .ok_or_else(|| overflow(&key, delta))?;
            put(conn, &scope, &key, sum.to_string().as_bytes(), expires)?;
            Ok(sum)
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sweep_deletes_only_expired_entries() {
        let conn = crate::sqlite::connect(":memory:".as_ref()).unwrap();
        super::super::migrate::prepare(&conn).unwrap();
        let now = now_ms();
        for (key, expires) in [
            ("gone", Some(now as i64 - 1)),
            ("later", Some(now as i64 + 60_000)),
            ("never", None),
        ] {
            put(&conn, "a", key, b"v", expires).unwrap();
        }
        assert_eq!(live(&conn, "a", "gone").unwrap(), None, "invisible at once");
        assert_eq!(sweep(&conn, now).unwrap(), 1);
        let mut keys: Vec<String> = conn
            .prepare("SELECT key FROM kv ORDER BY key")
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap();
        keys.sort();
        assert_eq!(keys, ["later", "never"]);
    }
}
