//! The handlers' key-value stores on PostgreSQL: one row per entry in `kv`.
//!
//! Each call is one statement. An expired row reads as absent at once;
//! there is no sweeper thread, so a set with an expiry deletes a few rows
//! that have expired (skipping any another session holds): every row that
//! can expire is set that way, so the expired ones never pile up. An
//! increment is the schema's `kv_increment`, which locks the row first, so
//! increments of one key from many hosts take turns.

use std::time::Duration;

use async_trait::async_trait;

use super::{PgBroker, classify};
use crate::Result;
use crate::kv::{KvStore, check_ttl, not_an_integer, overflow};

/// The value of a live entry.
const GET: &str = "
SELECT value FROM kv
WHERE scope = $1 AND key = $2 AND (expires_at IS NULL OR expires_at > now_ms())";

/// Set an entry, expiring $4 ms from now (never when NULL). With an expiry,
/// up to 8 other expired entries go too.
const SET: &str = "
WITH swept AS (
    DELETE FROM kv WHERE (scope, key) IN (
        SELECT scope, key FROM kv
        WHERE $4::bigint IS NOT NULL AND expires_at <= now_ms()
          AND NOT (scope = $1 AND key = $2)
        ORDER BY expires_at
        LIMIT 8
        FOR UPDATE SKIP LOCKED
    )
)
INSERT INTO kv (scope, key, value, expires_at)
VALUES ($1, $2, $3, now_ms() + $4::bigint)
ON CONFLICT (scope, key) DO UPDATE SET value = EXCLUDED.value, expires_at = EXCLUDED.expires_at";

/// Delete an entry, expired or not; whether it was live.
const DELETE: &str = "
DELETE FROM kv WHERE scope = $1 AND key = $2
RETURNING expires_at IS NULL OR expires_at > now_ms()";

/// "KEY of SCOPE's store", for error contexts.
fn entry(scope: &str, key: &str) -> String {
    format!("key {key:?} of the key-value store of {scope:?}")
}

#[async_trait]
impl KvStore for PgBroker {
    async fn kv_get(&self, scope: &str, key: &str) -> Result<Option<Vec<u8>>> {
        let context = format!("reading {}", entry(scope, key));
        let conn = self.conn(&context).await?;
        let row = conn
            .query_opt(GET, &[&scope, &key])
            .await
            .map_err(|e| classify(&context, e))?;
        Ok(row.map(|r| r.get(0)))
    }

    async fn kv_set(
        &self,
        scope: &str,
        key: &str,
        value: Vec<u8>,
        ttl: Option<Duration>,
    ) -> Result<()> {
        check_ttl(ttl)?;
        let context = format!("setting {}", entry(scope, key));
        let ttl_ms = ttl.map(|t| t.as_millis() as i64);
        let conn = self.conn(&context).await?;
        conn.execute(SET, &[&scope, &key, &value, &ttl_ms])
            .await
            .map_err(|e| classify(&context, e))?;
        Ok(())
    }

    async fn kv_delete(&self, scope: &str, key: &str) -> Result<bool> {
        let context = format!("deleting {}", entry(scope, key));
        let conn = self.conn(&context).await?;
        let row = conn
            .query_opt(DELETE, &[&scope, &key])
            .await
            .map_err(|e| classify(&context, e))?;
        Ok(row.is_some_and(|r| r.get(0)))
    }

    async fn kv_increment(&self, scope: &str, key: &str, delta: i64) -> Result<i64> {
        let context = format!("incrementing {}", entry(scope, key));
        let conn = self.conn(&context).await?;
        let row = conn
            .query_one(
                "SELECT total, refusal FROM kv_increment($1, $2, $3)",
                &[&scope, &key, &delta],
            )
            .await
            .map_err(|e| classify(&context, e))?;
        match (row.get(0), row.get::<_, Option<&str>>(1)) {
            (Some(total), _) => Ok(total),
            (None, Some("overflow")) => Err(overflow(key, delta)),
            (None, _) => Err(not_an_integer(key)),
        }
    }
}
