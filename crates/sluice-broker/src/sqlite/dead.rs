//! The dead-letter role on SQLite: one row per dead letter in `dead`. A
//! message is buried by the queue's settle, in the same savepoint that
//! deletes its row from `messages`; a replay moves rows back the other way.

use async_trait::async_trait;
use rusqlite::{Connection, OptionalExtension, params};

use super::{SqliteBroker, classify, groups, wake};
use crate::codec::{decode_headers, encode_headers};
use crate::message::{Delivery, now_ms};
use crate::{DeadLetter, DeadLetters, ReplaySelector, Result};

const COLUMNS: &str = "id, queue, key, payload, headers, attempts, enqueued_us, died_at, reason, last_error, handler_version, redrives, grp";

#[async_trait]
impl DeadLetters for SqliteBroker {
    async fn dead_letters(&self, queue: &str, limit: usize) -> Result<Vec<DeadLetter>> {
        let queue = queue.to_string();
        self.read(move |conn| {
            let sql = format!("SELECT {COLUMNS} FROM dead WHERE queue = ?1 ORDER BY seq LIMIT ?2");
            let mut stmt = conn.prepare_cached(&sql).map_err(classify)?;
            let rows = stmt
                .query_map(params![queue, limit as i64], from_row)
                .map_err(classify)?;
            rows.collect::<rusqlite::Result<Vec<_>>>().map_err(classify)
        })
        .await
    }

    async fn dead_letter(&self, queue: &str, id: &str) -> Result<Option<DeadLetter>> {
        let (queue, id) = (queue.to_string(), id.to_string());
        self.read(move |conn| {
            let sql = format!("SELECT {COLUMNS} FROM dead WHERE queue = ?1 AND id = ?2");
            conn.query_row(&sql, params![queue, id], from_row)
                .optional()
                .map_err(classify)
        })
        .await
    }

    async fn replay(&self, queue: &str, selector: &ReplaySelector) -> Result<u64> {
        let queue = queue.to_string();
        let selector = selector.clone();
        self.call(move |conn| replay(conn, &queue, &selector)).await
    }

    async fn purge(&self, queue: &str) -> Result<u64> {
        let queue = queue.to_string();
        self.call(move |conn| {
            let n = conn
                .execute("DELETE FROM dead WHERE queue = ?1", [&queue])
                .map_err(classify)?;
            // The groups their dead letters blocked move on.
            groups::unblock_all(conn, &queue, now_ms() as i64)?;
            Ok(n as u64)
        })
        .await
    }
}

/// Why and when a delivery died, as its dead letter records it.
pub(super) struct Death<'a> {
    pub(super) reason: &'a str,
    pub(super) error: Option<&'a str>,
    pub(super) handler_version: Option<&'a str>,
    /// Scheduled redrives the message had been through.
    pub(super) redrives: u32,
    /// When it died, in ms since the epoch.
    pub(super) at: i64,
}

/// Store `delivery`, of group `grp`, as a dead letter. The caller has taken
/// its row out of `messages` in the same savepoint.
pub(super) fn bury(
    conn: &Connection,
    delivery: &Delivery,
    grp: Option<&str>,
    death: &Death<'_>,
) -> Result<()> {
    conn.prepare_cached(
        "INSERT OR REPLACE INTO dead (id, queue, key, payload, headers, attempts, enqueued_us,
         died_at, reason, last_error, handler_version, redrives, grp)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)",
    )
    .and_then(|mut s| {
        s.execute(params![
            delivery.id,
            delivery.queue,
            delivery.key,
            delivery.payload,
            encode_headers(&delivery.headers),
            delivery.attempt,
            delivery.enqueued_at_us as i64,
            death.at,
            death.reason,
            death.error,
            death.handler_version,
            death.redrives,
            grp
        ])
    })
    .map_err(classify)?;
    Ok(())
}

fn from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<DeadLetter> {
    let headers: Option<String> = r.get(4)?;
    Ok(DeadLetter {
        id: r.get(0)?,
        queue: r.get(1)?,
        key: r.get(2)?,
        payload: r.get(3)?,
        headers: headers.map_or_else(Vec::new, |h| decode_headers(h.as_bytes())),
        attempts: r.get(5)?,
        enqueued_at_ms: r.get::<_, i64>(6)? as u64 / 1000,
        died_at_ms: r.get::<_, i64>(7)? as u64,
        reason: r.get(8)?,
        last_error: r.get(9)?,
        handler_version: r.get(10)?,
        redrives: r.get(11)?,
        group: r.get(12)?,
    })
}

/// Move the dead letters `sel` takes back to `queue`, oldest death first.
/// Picking and moving run in one savepoint on the one writer, so a dead
/// letter is never moved twice, even by hosts sharing the file. A dead
/// letter of an ordered group leads its group again if it blocked it, and
/// otherwise waits behind the group's messages.
fn replay(conn: &Connection, queue: &str, sel: &ReplaySelector) -> Result<u64> {
    let picked = pick(conn, queue, sel)?;
    let mut back = conn
        .prepare_cached(
            "INSERT INTO messages (id, queue, key, payload, headers, attempt, enqueued_us, visible_at,
             last_error, redrives, grp, held_due)
             SELECT id, queue, key, payload, headers, 0, enqueued_us, ?2, last_error, redrives + ?3,
             grp, ?4
             FROM dead WHERE seq = ?1",
        )
        .map_err(classify)?;
    let mut delete = conn
        .prepare_cached("DELETE FROM dead WHERE seq = ?1")
        .map_err(classify)?;
    let now = now_ms() as i64;
    for (seq, id, grp) in &picked {
        let waits = match grp {
            Some(grp) => !groups::replayed(conn, queue, grp, id)?,
            None => false,
        };
        let (visible_at, held_due) = groups::placement(waits, now);
        back.execute(params![seq, visible_at, i64::from(sel.redrive), held_due])
            .map_err(classify)?;
        delete.execute([seq]).map_err(classify)?;
    }
    if !picked.is_empty() {
        wake::ring_later(queue);
    }
    Ok(picked.len() as u64)
}

/// The row numbers, ids and groups of the dead letters of `queue` that
/// `sel` takes.
fn pick(
    conn: &Connection,
    queue: &str,
    sel: &ReplaySelector,
) -> Result<Vec<(i64, String, Option<String>)>> {
    let ids = (!sel.ids.is_empty())
        .then(|| serde_json::to_string(&sel.ids).expect("strings always serialize"));
    // LIMIT -1 is SQLite for no limit.
    let limit = sel.limit.map_or(-1, |n| n.min(i64::MAX as usize) as i64);
    let mut pick = conn
        .prepare_cached(
            "SELECT seq, id, grp FROM dead WHERE queue = ?1
             AND (?2 IS NULL OR died_at <= ?2)
             AND (?3 IS NULL OR redrives < ?3)
             AND (?4 IS NULL OR id IN (SELECT value FROM json_each(?4)))
             ORDER BY seq LIMIT ?5",
        )
        .map_err(classify)?;
    pick.query_map(
        params![
            queue,
            sel.died_before_ms.map(|ms| ms.min(i64::MAX as u64) as i64),
            sel.max_redrives,
            ids,
            limit
        ],
        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
    )
    .map_err(classify)?
    .collect::<rusqlite::Result<Vec<_>>>()
    .map_err(classify)
}
