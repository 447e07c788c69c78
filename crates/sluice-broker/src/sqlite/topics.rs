//! Topic bindings on SQLite: one row per binding in `bindings`, and the
//! count of unmatched publishes per topic in `topic_counts`. Each operation
//! is one job on the broker thread, so a replacement of a handler's set is
//! atomic.

use async_trait::async_trait;
use rusqlite::{Connection, params};

use super::SqliteBroker;
use super::classify;
use crate::topic::{Binding, TopicStats};
use crate::{Result, TopicStore};

/// A catch-all binding is stored with this pattern: no valid pattern is empty.
const CATCH_ALL: &str = "";

fn row(topic: String, queue: String, pattern: String, origin: String) -> Binding {
    Binding {
        topic,
        queue,
        pattern: Some(pattern).filter(|p| p != CATCH_ALL),
        origin,
    }
}

fn select(conn: &Connection, topic: Option<&str>) -> Result<Vec<Binding>> {
    let mut stmt = conn
        .prepare_cached(
            "SELECT topic, queue, pattern, origin FROM bindings
             WHERE ?1 IS NULL OR topic = ?1 ORDER BY topic, queue, pattern",
        )
        .map_err(classify)?;
    let rows = stmt
        .query_map([topic], |r| {
            Ok(row(r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
        })
        .map_err(classify)?;
    rows.collect::<rusqlite::Result<_>>().map_err(classify)
}

fn upsert(conn: &Connection, bindings: &[Binding]) -> Result<()> {
    let mut stmt = conn
        .prepare_cached(
            "INSERT INTO bindings (topic, queue, pattern, origin) VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT (topic, queue, pattern) DO UPDATE SET origin = excluded.origin",
        )
        .map_err(classify)?;
    for b in bindings {
        let pattern = b.pattern.as_deref().unwrap_or(CATCH_ALL);
        stmt.execute(params![b.topic, b.queue, pattern, b.origin])
            .map_err(classify)?;
    }
    Ok(())
}

#[async_trait]
impl TopicStore for SqliteBroker {
    async fn bindings(&self, topic: &str) -> Result<Vec<Binding>> {
        let topic = topic.to_string();
        self.read(move |conn| select(conn, Some(&topic))).await
    }

    async fn bind(&self, bindings: &[Binding]) -> Result<()> {
        let bindings = bindings.to_vec();
        self.call(move |conn| upsert(conn, &bindings)).await
    }

    async fn unbind(
        &self,
        topic: &str,
        queue: &str,
        pattern: Option<&str>,
        all: bool,
    ) -> Result<u64> {
        let (topic, queue) = (topic.to_string(), queue.to_string());
        let pattern = pattern.unwrap_or(CATCH_ALL).to_string();
        self.call(move |conn| {
            let n = conn
                .execute(
                    "DELETE FROM bindings WHERE topic = ?1 AND queue = ?2 AND (?3 OR pattern = ?4)",
                    params![topic, queue, all, pattern],
                )
                .map_err(classify)?;
            Ok(n as u64)
        })
        .await
    }

    async fn replace_bindings(&self, origin: &str, bindings: &[Binding]) -> Result<()> {
        let origin = origin.to_string();
        let bindings = bindings.to_vec();
        self.call(move |conn| {
            conn.execute("DELETE FROM bindings WHERE origin = ?1", [&origin])
                .map_err(classify)?;
            upsert(conn, &bindings)
        })
        .await
    }

    async fn count_unmatched(&self, topic: &str, n: u64) -> Result<()> {
        let topic = topic.to_string();
        self.call(move |conn| {
            conn.execute(
                "INSERT INTO topic_counts (topic, unmatched) VALUES (?1, ?2)
                 ON CONFLICT (topic) DO UPDATE SET unmatched = unmatched + excluded.unmatched",
                params![topic, n as i64],
            )
            .map_err(classify)?;
            Ok(())
        })
        .await
    }

    async fn topic_stats(&self) -> Result<Vec<TopicStats>> {
        self.read(|conn| {
            let mut out: Vec<TopicStats> = Vec::new();
            let mut stmt = conn
                .prepare_cached("SELECT topic, unmatched FROM topic_counts")
                .map_err(classify)?;
            let counts = stmt
                .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)))
                .map_err(classify)?;
            for c in counts {
                let (topic, unmatched) = c.map_err(classify)?;
                out.push(TopicStats {
                    topic,
                    unmatched: unmatched as u64,
                    bindings: Vec::new(),
                });
            }
            for b in select(conn, None)? {
                match out.iter_mut().find(|t| t.topic == b.topic) {
                    Some(t) => t.bindings.push(b),
                    None => out.push(TopicStats {
                        topic: b.topic.clone(),
                        unmatched: 0,
                        bindings: vec![b],
                    }),
                }
            }
            out.sort_by(|a, b| a.topic.cmp(&b.topic));
            Ok(out)
        })
        .await
    }
}
