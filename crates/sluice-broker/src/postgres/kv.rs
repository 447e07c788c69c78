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

/// The kv role's part of version 1 of the schema.
pub(super) const SCHEMA: &str = r#"
-- One row per entry of a handler's store (scope). expires_at is in ms
-- (now_ms), NULL for never; a row at or past it is as good as gone.
CREATE TABLE kv (
    scope      text NOT NULL,
    key        text NOT NULL,
    value      bytea NOT NULL,
    expires_at bigint,
    PRIMARY KEY (scope, key)
);
CREATE INDEX kv_expiry ON kv (expires_at) WHERE expires_at IS NOT NULL;

-- Add delta to the decimal integer at (s, k), 0 when it is not set or has
-- expired, keeping the entry's expiry. Values parse the way Redis's INCRBY
-- parses them: an optional '-', then digits without leading zeros, within
-- bigint. Returns the sum, or NULL and why not ('not an integer' or
-- 'overflow'), leaving the value alone.
CREATE FUNCTION kv_increment(s text, k text, delta bigint, OUT total bigint, OUT refusal text)
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
  now bigint := now_ms();
  old text;
  added numeric;
BEGIN
  -- Make the entry exist and hold its row lock (ON CONFLICT locks the row
  -- even where WHERE declines the update), so increments take turns.
  INSERT INTO kv AS e (scope, key, value, expires_at) VALUES (s, k, '\x30', NULL)
  ON CONFLICT (scope, key) DO UPDATE SET value = EXCLUDED.value, expires_at = NULL
    WHERE e.expires_at <= now;
  SELECT encode(value, 'escape') INTO old FROM kv WHERE scope = s AND key = k;
  -- Two steps: only text that passed the pattern may be cast.
  IF old !~ '^(0|-?[1-9][0-9]{0,18})$' THEN
    refusal := 'not an integer';
    RETURN;
  END IF;
  IF old::numeric NOT BETWEEN -9223372036854775808 AND 9223372036854775807 THEN
    refusal := 'not an integer';
    RETURN;
  END IF;
  added := old::numeric + delta;
  IF added NOT BETWEEN -9223372036854775808 AND 9223372036854775807 THEN
    refusal := 'overflow';
    RETURN;
  END IF;
  total := added::bigint;
  UPDATE kv SET value = convert_to(total::text, 'UTF8') WHERE scope = s AND key = k;
END
$$;
"#;

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
