//! The dead-letter role on PostgreSQL: one row per dead letter in `dead`
//! (made with the queue's tables, since the queue's `settle` buries into
//! it in the same statement that deletes the message). A replay moves rows back the
//! other way, a batch per statement: the statement that deletes a batch
//! from `dead` inserts it into `messages`, so a batch moves whole or not at
//! all, and replays on several hosts at once skip each other's rows
//! (`FOR UPDATE SKIP LOCKED`) instead of moving one twice.
//!
//! A dead letter of an ordered group takes its group back: a replayed one
//! leads its group again if it blocked it (`on_dead = "block"`), or waits
//! behind the group's messages; purging lets the groups its dead letters
//! blocked move on (`rejoin` and `unblock`, the schema's functions). The
//! schema's `replay_dead` and `purge_dead` do the moving.

use async_trait::async_trait;
use tokio_postgres::Row;

use super::{PgBroker, classify};
use crate::codec::decode_headers;
use crate::{DeadLetter, DeadLetters, ReplaySelector, Result};

/// Most dead letters one replay statement moves: a long replay is many
/// short transactions, not one that holds its locks for minutes.
const REPLAY_BATCH: i64 = 1000;

const COLUMNS: &str = "id, queue, key, payload, headers, attempts, enqueued_at, died_at, \
                       reason, last_error, handler_version, redrives, grp";

#[async_trait]
impl DeadLetters for PgBroker {
    async fn dead_letters(&self, queue: &str, limit: usize) -> Result<Vec<DeadLetter>> {
        let context = format!("listing the dead letters of queue {queue:?}");
        let conn = self.conn(&context).await?;
        let rows = conn
            .query(
                &format!("SELECT {COLUMNS} FROM dead WHERE queue = $1 ORDER BY seq LIMIT $2"),
                &[&queue, &clamp(limit)],
            )
            .await
            .map_err(|e| classify(&context, e))?;
        Ok(rows.iter().map(from_row).collect())
    }

    async fn dead_letter(&self, queue: &str, id: &str) -> Result<Option<DeadLetter>> {
        let context = format!("reading dead letter {id:?} of queue {queue:?}");
        let conn = self.conn(&context).await?;
        let row = conn
            .query_opt(
                &format!("SELECT {COLUMNS} FROM dead WHERE queue = $1 AND id = $2"),
                &[&queue, &id],
            )
            .await
            .map_err(|e| classify(&context, e))?;
        Ok(row.as_ref().map(from_row))
    }

    async fn replay(&self, queue: &str, selector: &ReplaySelector) -> Result<u64> {
        let moved = self.replay_batches(queue, selector).await?;
        if moved > 0 {
            // The schema's replay notifies nobody: idle receivers on every
            // host are woken here.
            self.wake_everywhere(queue).await;
        }
        Ok(moved)
    }

    async fn purge(&self, queue: &str) -> Result<u64> {
        let context = format!("purging the dead letters of queue {queue:?}");
        let conn = self.conn(&context).await?;
        let row = conn
            .query_one("SELECT purge_dead($1)", &[&queue])
            .await
            .map_err(|e| classify(&context, e))?;
        Ok(row.get::<_, i64>(0).max(0) as u64)
    }
}

impl PgBroker {
    /// Move the dead letters `selector` picks back to `queue`, in batches;
    /// how many moved.
    async fn replay_batches(&self, queue: &str, selector: &ReplaySelector) -> Result<u64> {
        let context = format!("replaying the dead letters of queue {queue:?}");
        let conn = self.conn(&context).await?;
        let died_by = selector
            .died_before_ms
            .map(|ms| ms.min(i64::MAX as u64) as i64);
        let max_redrives = selector.max_redrives.map(|n| n.min(i32::MAX as u32) as i32);
        let ids = (!selector.ids.is_empty()).then_some(&selector.ids);
        let redrive = i32::from(selector.redrive);
        // Batches walk up the queue's dead letters from seq 0 to the newest
        // when the replay began, so a message that dies again meanwhile is
        // not moved twice by the same replay.
        let (mut after, mut upto) = (0i64, None::<i64>);
        let mut moved = 0u64;
        loop {
            let take = match selector.limit {
                Some(limit) => REPLAY_BATCH.min(clamp(limit) - moved as i64),
                None => REPLAY_BATCH,
            };
            if take <= 0 {
                return Ok(moved);
            }
            let row = conn
                .query_one(
                    "SELECT * FROM replay_dead($1, $2, $3, $4, $5, $6, $7, $8)",
                    &[
                        &queue,
                        &died_by,
                        &max_redrives,
                        &ids,
                        &take,
                        &redrive,
                        &after,
                        &upto,
                    ],
                )
                .await
                .map_err(|e| classify(&context, e))?;
            let n: i64 = row.get(0);
            moved += n as u64;
            match row.get::<_, Option<i64>>(1) {
                Some(last) if n == take => (after, upto) = (last, row.get(2)),
                _ => return Ok(moved),
            }
        }
    }

    /// Wake the idle receivers of `queue` on every host (a notification);
    /// one that is not heard is made up for by their next look.
    pub(super) async fn wake_everywhere(&self, queue: &str) {
        self.wakes.wake(queue);
        let Ok(conn) = self.conn("waking receivers").await else {
            return;
        };
        if let Err(e) = conn.execute("SELECT wake($1)", &[&vec![queue]]).await {
            tracing::debug!(queue, error = %e, "could not notify the queue's receivers; they look again within 30 s");
        }
    }
}

/// A count as SQL takes it.
fn clamp(n: usize) -> i64 {
    n.min(i64::MAX as usize) as i64
}

/// A row of [`COLUMNS`] as a dead letter.
fn from_row(r: &Row) -> DeadLetter {
    let headers: Option<String> = r.get(4);
    DeadLetter {
        id: r.get(0),
        queue: r.get(1),
        key: r.get(2),
        payload: r.get(3),
        headers: headers.map_or_else(Vec::new, |h| decode_headers(h.as_bytes())),
        attempts: r.get::<_, i32>(5).max(0) as u32,
        enqueued_at_ms: r.get::<_, i64>(6).max(0) as u64 / 1000,
        died_at_ms: r.get::<_, i64>(7).max(0) as u64,
        reason: r.get(8),
        last_error: r.get(9),
        handler_version: r.get(10),
        redrives: r.get::<_, i32>(11).max(0) as u32,
        group: r.get(12),
    }
}
