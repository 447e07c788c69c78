//! The presence role on SQLite: queue counts computed from `messages`,
//! `counters` and `dead`, each host's handler statuses in `handler_status`,
//! one JSON row per handler, and the paused queues in `paused`.

use async_trait::async_trait;
use rusqlite::{Connection, OptionalExtension, params};

use super::{SqliteBroker, classify};
use crate::codec::{decode_status, encode_status};
use crate::message::now_ms;
use crate::{HandlerStatus, Presence, QueueStats, Result};

#[async_trait]
impl Presence for SqliteBroker {
    async fn queue_stats(&self, queue: &str) -> Result<QueueStats> {
        let queue = queue.to_string();
        self.read(move |conn| {
            let all = stats(conn, Some(&queue))?;
            Ok(all.into_iter().next().expect("one queue asked, one answer"))
        })
        .await
    }

    async fn stats(&self) -> Result<Vec<QueueStats>> {
        self.read(|conn| stats(conn, None)).await
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

    async fn set_paused(&self, queue: &str, paused: bool) -> Result<()> {
        let queue = queue.to_string();
        self.call(move |conn| {
            if paused {
                // Listed by `stats` even before its first message.
                conn.execute("INSERT OR IGNORE INTO queues (queue) VALUES (?1)", [&queue])
                    .map_err(classify)?;
                conn.execute(
                    "INSERT OR IGNORE INTO paused (queue, paused_at) VALUES (?1, ?2)",
                    params![queue, now_ms() as i64],
                )
            } else {
                conn.execute("DELETE FROM paused WHERE queue = ?1", [&queue])
            }
            .map_err(classify)?;
            Ok(())
        })
        .await
    }

    async fn paused(&self) -> Result<Vec<String>> {
        self.read(|conn| {
            let mut stmt = conn
                .prepare_cached("SELECT queue FROM paused ORDER BY queue")
                .map_err(classify)?;
            let rows = stmt.query_map([], |r| r.get(0)).map_err(classify)?;
            rows.collect::<rusqlite::Result<_>>().map_err(classify)
        })
        .await
    }

    async fn handler_statuses(&self) -> Result<Vec<HandlerStatus>> {
        self.read(|conn| {
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

/// Counts of every queue, or of `only` that one, by queue name. Each count
/// is a range of an index (`messages_due`, `dead_queue`), not a scan of the
/// table: the ready messages of a large backlog are counted from the index
/// alone, and only delayed or leased ones are looked up.
fn stats(conn: &Connection, only: Option<&str>) -> Result<Vec<QueueStats>> {
    let now = now_ms() as i64;
    let queues: Vec<String> = match only {
        Some(q) => vec![q.to_string()],
        None => {
            let mut stmt = conn
                .prepare_cached("SELECT queue FROM queues ORDER BY queue")
                .map_err(classify)?;
            let rows = stmt.query_map([], |r| r.get(0)).map_err(classify)?;
            rows.collect::<rusqlite::Result<_>>().map_err(classify)?
        }
    };
    let mut ready = conn
        .prepare_cached("SELECT COUNT(*) FROM messages WHERE queue = ?1 AND visible_at <= ?2")
        .map_err(classify)?;
    let mut later = conn
        .prepare_cached(
            "SELECT COALESCE(SUM(leased = 0), 0), COALESCE(SUM(leased = 1), 0)
             FROM messages WHERE queue = ?1 AND visible_at > ?2",
        )
        .map_err(classify)?;
    let mut counters = conn
        .prepare_cached(
            "SELECT done, duplicates, retried, lost, ungrouped FROM counters WHERE queue = ?1",
        )
        .map_err(classify)?;
    let mut dead = conn
        .prepare_cached("SELECT COUNT(*) FROM dead WHERE queue = ?1")
        .map_err(classify)?;
    let mut paused = conn
        .prepare_cached("SELECT COUNT(*) FROM paused WHERE queue = ?1")
        .map_err(classify)?;
    let mut out = Vec::with_capacity(queues.len());
    for queue in queues {
        let mut s = QueueStats::empty(&queue);
        let n = |v: i64| v.max(0) as u64;
        s.ready = n(ready
            .query_row(params![queue, now], |r| r.get(0))
            .map_err(classify)?);
        (s.delayed, s.in_flight) = later
            .query_row(params![queue, now], |r| Ok((n(r.get(0)?), n(r.get(1)?))))
            .map_err(classify)?;
        if let Some(c) = counters
            .query_row([&queue], |r| {
                let get = |i| r.get::<_, i64>(i).map(n);
                Ok([get(0)?, get(1)?, get(2)?, get(3)?, get(4)?])
            })
            .optional()
            .map_err(classify)?
        {
            [s.done, s.duplicates, s.retried, s.lost_leases, s.ungrouped] = c;
        }
        s.dead = n(dead.query_row([&queue], |r| r.get(0)).map_err(classify)?);
        s.paused = n(paused.query_row([&queue], |r| r.get(0)).map_err(classify)?) > 0;
        out.push(s);
    }
    Ok(out)
}
