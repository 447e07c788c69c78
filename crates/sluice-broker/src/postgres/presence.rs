//! The presence role on PostgreSQL: queue counts from `messages`, `counters`
//! and `dead` in one statement for any number of queues, each host's
//! handler statuses as one JSON row in `handler_statuses` (replaced whole,
//! as Redis keeps them), and the paused queues in `paused`.
//!
//! Queue names sort bytewise (`COLLATE "C"`), as on the other backends,
//! whatever the database's locale.

use async_trait::async_trait;
use tokio_postgres::Row;

use super::{PgBroker, classify};
use crate::codec::{decode_statuses, encode_statuses};
use crate::{HandlerStatus, Presence, QueueStats, Result};

/// The counts of the queues $1 names, or of every known queue when $1 is
/// NULL. Each count is a range of an index: ready messages (due, or leased
/// with their lease run out) are counted from `messages_due` alone, and
/// only the ones due later are looked up, to tell delayed from in flight.
const STATS: &str = r#"
WITH now AS (SELECT now_ms() AS t)
SELECT q.queue, ready.n, later.delayed, later.in_flight,
       coalesce(c.done, 0), coalesce(c.duplicates, 0), coalesce(c.retried, 0),
       coalesce(c.lost, 0), coalesce(c.ungrouped, 0), dead.n, p.queue IS NOT NULL
FROM unnest(coalesce($1::text[], ARRAY(SELECT queue FROM queues))) AS q(queue)
CROSS JOIN now
CROSS JOIN LATERAL (
    SELECT count(*) AS n FROM messages m WHERE m.queue = q.queue AND m.visible_at <= now.t
) ready
CROSS JOIN LATERAL (
    SELECT count(*) FILTER (WHERE NOT m.leased) AS delayed,
           count(*) FILTER (WHERE m.leased) AS in_flight
    FROM messages m WHERE m.queue = q.queue AND m.visible_at > now.t
) later
CROSS JOIN LATERAL (SELECT count(*) AS n FROM dead d WHERE d.queue = q.queue) dead
LEFT JOIN counters c ON c.queue = q.queue
LEFT JOIN paused p ON p.queue = q.queue
ORDER BY q.queue COLLATE "C""#;

#[async_trait]
impl Presence for PgBroker {
    async fn queue_stats(&self, queue: &str) -> Result<QueueStats> {
        let context = format!("counting the messages of queue {queue:?}");
        let all = self.stats_of(&context, Some(vec![queue])).await?;
        Ok(all
            .into_iter()
            .next()
            .unwrap_or_else(|| QueueStats::empty(queue)))
    }

    async fn stats(&self) -> Result<Vec<QueueStats>> {
        self.stats_of("counting the messages of every queue", None)
            .await
    }

    async fn put_handler_statuses(&self, host: &str, statuses: Vec<HandlerStatus>) -> Result<()> {
        let context = format!("reporting the handler statuses of host {host:?}");
        let conn = self.conn(&context).await?;
        conn.execute(
            "INSERT INTO handler_statuses (host, statuses) VALUES ($1, $2)
             ON CONFLICT (host) DO UPDATE SET statuses = EXCLUDED.statuses",
            &[&host, &encode_statuses(&statuses)],
        )
        .await
        .map_err(|e| classify(&context, e))?;
        Ok(())
    }

    async fn handler_statuses(&self) -> Result<Vec<HandlerStatus>> {
        let context = "reading the handler statuses hosts reported";
        let conn = self.conn(context).await?;
        let rows = conn
            .query("SELECT statuses FROM handler_statuses", &[])
            .await
            .map_err(|e| classify(context, e))?;
        let mut out: Vec<HandlerStatus> = rows
            .iter()
            .flat_map(|r| decode_statuses(r.get::<_, &str>(0).as_bytes()))
            .collect();
        out.sort_by(|a, b| (&a.handler, &a.host).cmp(&(&b.handler, &b.host)));
        Ok(out)
    }

    async fn set_paused(&self, queue: &str, paused: bool) -> Result<()> {
        let context = format!(
            "{} queue {queue:?}",
            if paused { "pausing" } else { "resuming" }
        );
        let conn = self.conn(&context).await?;
        let sql = if paused {
            // Known, so listed by `stats`, even before its first message.
            "WITH known AS (INSERT INTO queues (queue) VALUES ($1) ON CONFLICT DO NOTHING)
             INSERT INTO paused (queue, paused_at) VALUES ($1, now_ms()) ON CONFLICT DO NOTHING"
        } else {
            "DELETE FROM paused WHERE queue = $1"
        };
        conn.execute(sql, &[&queue])
            .await
            .map_err(|e| classify(&context, e))?;
        Ok(())
    }

    async fn paused(&self) -> Result<Vec<String>> {
        let context = "listing the paused queues";
        let conn = self.conn(context).await?;
        let rows = conn
            .query(
                r#"SELECT queue FROM paused ORDER BY queue COLLATE "C""#,
                &[],
            )
            .await
            .map_err(|e| classify(context, e))?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }
}

impl PgBroker {
    /// The counts of `queues`, or of every known queue when `None`, by name.
    async fn stats_of(&self, context: &str, queues: Option<Vec<&str>>) -> Result<Vec<QueueStats>> {
        let conn = self.conn(context).await?;
        let rows = conn
            .query(STATS, &[&queues])
            .await
            .map_err(|e| classify(context, e))?;
        Ok(rows.iter().map(stats_row).collect())
    }
}

/// A row of [`STATS`] as a queue's counts.
fn stats_row(r: &Row) -> QueueStats {
    let n = |i: usize| r.get::<_, i64>(i).max(0) as u64;
    QueueStats {
        queue: r.get(0),
        ready: n(1),
        delayed: n(2),
        in_flight: n(3),
        done: n(4),
        duplicates: n(5),
        retried: n(6),
        lost_leases: n(7),
        ungrouped: n(8),
        dead: n(9),
        paused: r.get(10),
    }
}
