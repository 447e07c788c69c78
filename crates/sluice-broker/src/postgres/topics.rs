//! Topic bindings on PostgreSQL: one row per binding in `bindings`, and the
//! count of unmatched publishes per topic in `topic_counts`. Binding and
//! replacing an origin's set are one statement each, so a replacement is
//! atomic. Lists are in byte order (`COLLATE "C"`), as on the other
//! backends, whatever the database's collation.

use async_trait::async_trait;
use tokio_postgres::Row;

use super::{PgBroker, classify};
use crate::topic::{Binding, TopicStats};
use crate::{Result, TopicStore};

/// A catch-all binding is stored with this pattern: no valid pattern is empty.
const CATCH_ALL: &str = "";

/// Upsert bindings (one array per column; the last of duplicates wins) and,
/// when $5 is not NULL, delete the bindings of origin $5 that are not among
/// them. The two touch different rows, so they can share a statement.
const PUT: &str = r#"
WITH new AS (
    SELECT DISTINCT ON (topic, queue, pattern) topic, queue, pattern, origin
    FROM unnest($1::text[], $2::text[], $3::text[], $4::text[])
         WITH ORDINALITY AS b(topic, queue, pattern, origin, n)
    ORDER BY topic, queue, pattern, n DESC
), gone AS (
    DELETE FROM bindings b WHERE b.origin = $5 AND NOT EXISTS (
        SELECT 1 FROM new
        WHERE new.topic = b.topic AND new.queue = b.queue AND new.pattern = b.pattern)
)
INSERT INTO bindings (topic, queue, pattern, origin)
SELECT topic, queue, pattern, origin FROM new
ON CONFLICT (topic, queue, pattern) DO UPDATE SET origin = EXCLUDED.origin"#;

/// Every topic with its unmatched count and bindings, a row per binding (a
/// topic without any has one row with NULLs), in byte order.
const STATS: &str = r#"
SELECT coalesce(c.topic, b.topic) AS topic, coalesce(c.unmatched, 0), b.queue, b.pattern,
       b.origin
FROM topic_counts c FULL JOIN bindings b ON b.topic = c.topic
ORDER BY coalesce(c.topic, b.topic) COLLATE "C", b.queue COLLATE "C", b.pattern COLLATE "C""#;

fn binding(topic: String, queue: String, pattern: String, origin: String) -> Binding {
    Binding {
        topic,
        queue,
        pattern: Some(pattern).filter(|p| p != CATCH_ALL),
        origin,
    }
}

impl PgBroker {
    /// Run [`PUT`]: upsert `bindings`, and drop `origin`'s other bindings.
    async fn put_bindings(
        &self,
        context: &str,
        bindings: &[Binding],
        origin: Option<&str>,
    ) -> Result<()> {
        let topics: Vec<&str> = bindings.iter().map(|b| b.topic.as_str()).collect();
        let queues: Vec<&str> = bindings.iter().map(|b| b.queue.as_str()).collect();
        let patterns: Vec<&str> = bindings
            .iter()
            .map(|b| b.pattern.as_deref().unwrap_or(CATCH_ALL))
            .collect();
        let origins: Vec<&str> = bindings.iter().map(|b| b.origin.as_str()).collect();
        let conn = self.conn(context).await?;
        conn.execute(PUT, &[&topics, &queues, &patterns, &origins, &origin])
            .await
            .map_err(|e| classify(context, e))?;
        Ok(())
    }
}

#[async_trait]
impl TopicStore for PgBroker {
    async fn bindings(&self, topic: &str) -> Result<Vec<Binding>> {
        let context = format!("reading the bindings of topic {topic:?}");
        let conn = self.conn(&context).await?;
        let rows = conn
            .query(
                r#"SELECT topic, queue, pattern, origin FROM bindings WHERE topic = $1
                   ORDER BY queue COLLATE "C", pattern COLLATE "C""#,
                &[&topic],
            )
            .await
            .map_err(|e| classify(&context, e))?;
        Ok(rows
            .iter()
            .map(|r| binding(r.get(0), r.get(1), r.get(2), r.get(3)))
            .collect())
    }

    async fn bind(&self, bindings: &[Binding]) -> Result<()> {
        if bindings.is_empty() {
            return Ok(());
        }
        self.put_bindings("binding queues to topics", bindings, None)
            .await
    }

    async fn unbind(
        &self,
        topic: &str,
        queue: &str,
        pattern: Option<&str>,
        all: bool,
    ) -> Result<u64> {
        let context = format!("unbinding queue {queue:?} from topic {topic:?}");
        let pattern = pattern.unwrap_or(CATCH_ALL);
        let conn = self.conn(&context).await?;
        conn.execute(
            "DELETE FROM bindings WHERE topic = $1 AND queue = $2 AND ($3 OR pattern = $4)",
            &[&topic, &queue, &all, &pattern],
        )
        .await
        .map_err(|e| classify(&context, e))
    }

    async fn replace_bindings(&self, origin: &str, bindings: &[Binding]) -> Result<()> {
        let context = format!("replacing the topic bindings of {origin}");
        self.put_bindings(&context, bindings, Some(origin)).await
    }

    async fn count_unmatched(&self, topic: &str, n: u64) -> Result<()> {
        let context = format!("counting unmatched publishes to topic {topic:?}");
        let conn = self.conn(&context).await?;
        conn.execute(
            "INSERT INTO topic_counts AS c (topic, unmatched) VALUES ($1, $2)
             ON CONFLICT (topic) DO UPDATE SET unmatched = c.unmatched + EXCLUDED.unmatched",
            &[&topic, &(n as i64)],
        )
        .await
        .map_err(|e| classify(&context, e))?;
        Ok(())
    }

    async fn topic_stats(&self) -> Result<Vec<TopicStats>> {
        let context = "reading topic statistics";
        let conn = self.conn(context).await?;
        let rows = conn
            .query(STATS, &[])
            .await
            .map_err(|e| classify(context, e))?;
        Ok(group_stats(&rows))
    }
}

/// [`STATS`]' rows, one [`TopicStats`] per run of rows of one topic.
fn group_stats(rows: &[Row]) -> Vec<TopicStats> {
    let mut out: Vec<TopicStats> = Vec::new();
    for r in rows {
        let topic: String = r.get(0);
        if out.last().is_none_or(|t| t.topic != topic) {
            out.push(TopicStats {
                topic: topic.clone(),
                unmatched: r.get::<_, i64>(1) as u64,
                bindings: Vec::new(),
            });
        }
        if let Some(queue) = r.get::<_, Option<String>>(2) {
            let b = binding(topic, queue, r.get(3), r.get(4));
            out.last_mut().expect("pushed above").bindings.push(b);
        }
    }
    out
}
