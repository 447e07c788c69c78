//! The presence role on SQLite: queue counts computed from `messages`,
//! `counters` and `dead`, and each host's handler statuses in
//! `handler_status`, one JSON row per handler.

use std::collections::BTreeMap;

use async_trait::async_trait;
use rusqlite::{Connection, params};

use super::{SqliteBroker, classify};
use crate::broker::codec::{decode_status, encode_status};
use crate::broker::{HandlerStatus, Presence, QueueStats, Result};
use crate::message::now_ms;

pub(super) const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS handler_status (
    host    TEXT NOT NULL,
    handler TEXT NOT NULL,
    status  TEXT NOT NULL,
    PRIMARY KEY (host, handler)
) WITHOUT ROWID;
";

#[async_trait]
impl Presence for SqliteBroker {
    async fn queue_stats(&self, queue: &str) -> Result<QueueStats> {
        let queue = queue.to_string();
        self.call(move |conn| {
            let all = stats(conn, Some(&queue))?;
            Ok(all
                .into_iter()
                .next()
                .unwrap_or_else(|| QueueStats::empty(&queue)))
        })
        .await
    }

    async fn stats(&self) -> Result<Vec<QueueStats>> {
        self.call(|conn| stats(conn, None)).await
    }

    async fn put_handler_statuses(&self, host: &str, statuses: Vec<HandlerStatus>) -> Result<()> {
        let host = host.to_string();
        self.call(move |conn| {
            conn.execute("DELETE FROM handler_status WHERE host = ?1", [&host])
                .map_err(classify)?;
            let mut insert = conn
                .prepare_cached(
                    "INSERT INTO handler_status (host, handler, status) VALUES (?1, ?2, ?3)",
                )
                .map_err(classify)?;
            for s in statuses {
                insert
                    .execute(params![host, s.handler, encode_status(&s)])
                    .map_err(classify)?;
            }
            Ok(())
        })
        .await
    }

    async fn handler_statuses(&self) -> Result<Vec<HandlerStatus>> {
        self.call(|conn| {
            let mut stmt = conn
                .prepare_cached("SELECT status FROM handler_status ORDER BY handler, host")
                .map_err(classify)?;
            let rows = stmt
                .query_map([], |r| r.get::<_, String>(0))
                .map_err(classify)?;
            let texts = rows
                .collect::<rusqlite::Result<Vec<_>>>()
                .map_err(classify)?;
            Ok(texts
                .iter()
                .filter_map(|t| decode_status(t.as_bytes()))
                .collect())
        })
        .await
    }
}

/// Counts of every queue, or of `only` that one, by queue name.
fn stats(conn: &Connection, only: Option<&str>) -> Result<Vec<QueueStats>> {
    let now = now_ms() as i64;
    let filter = if only.is_some() {
        "WHERE queue = ?1"
    } else {
        "WHERE ?1 IS NULL"
    };
    let mut by_queue: BTreeMap<String, QueueStats> = BTreeMap::new();
    // Each query yields rows of (queue, counts...); `apply` puts the counts
    // where they belong.
    type Apply = fn(&mut QueueStats, &[u64]);
    let queries: [(String, Apply); 3] = [
        (
            format!(
                "SELECT queue, SUM(visible_at <= ?2), SUM(visible_at > ?2 AND leased = 0),
                 SUM(visible_at > ?2 AND leased = 1) FROM messages {filter} GROUP BY queue"
            ),
            |s, c| (s.ready, s.delayed, s.in_flight) = (c[0], c[1], c[2]),
        ),
        (
            format!(
                "SELECT queue, done, duplicates, retried FROM counters {filter} AND ?2 IS NOT NULL"
            ),
            |s, c| (s.done, s.duplicates, s.retried) = (c[0], c[1], c[2]),
        ),
        (
            format!("SELECT queue, COUNT(*) FROM dead {filter} AND ?2 IS NOT NULL GROUP BY queue"),
            |s, c| s.dead = c[0],
        ),
    ];
    for (sql, apply) in queries {
        let mut stmt = conn.prepare_cached(&sql).map_err(classify)?;
        let width = stmt.column_count();
        let mut rows = stmt.query(params![only, now]).map_err(classify)?;
        while let Some(r) = rows.next().map_err(classify)? {
            let queue: String = r.get(0).map_err(classify)?;
            let counts = (1..width)
                .map(|i| r.get::<_, Option<i64>>(i).map(|v| v.unwrap_or(0) as u64))
                .collect::<rusqlite::Result<Vec<_>>>()
                .map_err(classify)?;
            let s = by_queue
                .entry(queue)
                .or_insert_with_key(|q| QueueStats::empty(q));
            apply(s, &counts);
        }
    }
    Ok(by_queue.into_values().collect())
}
