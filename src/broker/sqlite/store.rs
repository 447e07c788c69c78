//! The SQL behind each broker operation. Every function runs inside the
//! caller's savepoint on the broker thread, so each is atomic on its own.

use std::collections::HashMap;
use std::time::Duration;

use rusqlite::{Connection, OptionalExtension, params};

use crate::broker::{
    BrokerError, ClaimState, DeadLetter, KeyClaim, QueueStats, ReplaySelector, Result, Settlement,
};
use crate::message::{Delivery, NewMessage, new_id, now_ms};

pub(super) fn storage(e: rusqlite::Error) -> BrokerError {
    BrokerError::Storage(e.to_string())
}

fn encode_headers(headers: &[(String, String)]) -> Option<String> {
    (!headers.is_empty())
        .then(|| serde_json::to_string(headers).expect("string pairs always serialize"))
}

fn decode_headers(text: Option<String>) -> Vec<(String, String)> {
    text.and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_default()
}

#[derive(Default)]
struct Counts {
    done: i64,
    duplicates: i64,
    retried: i64,
}

pub(super) fn insert_messages(
    conn: &Connection,
    messages: &[NewMessage],
    now: u64,
) -> Result<Vec<String>> {
    let mut stmt = conn
        .prepare_cached(
            "INSERT INTO messages (id, queue, key, payload, headers, enqueued_at, visible_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        )
        .map_err(storage)?;
    let mut ids = Vec::with_capacity(messages.len());
    for m in messages {
        let id = new_id();
        let key = m.key.as_deref().unwrap_or(&id);
        let visible_at = now + m.delay.as_millis() as u64;
        stmt.execute(params![
            id,
            m.queue,
            key,
            m.payload,
            encode_headers(&m.headers),
            now as i64,
            visible_at as i64
        ])
        .map_err(storage)?;
        ids.push(id);
    }
    Ok(ids)
}

pub(super) fn receive(
    conn: &Connection,
    queue: &str,
    max: usize,
    lease: Duration,
) -> Result<Vec<Delivery>> {
    let now = now_ms();
    let lease_until = now + lease.as_millis() as u64;
    let mut select = conn
        .prepare_cached(
            "SELECT seq, id, key, payload, headers, attempt, enqueued_at, leased, last_error
             FROM messages WHERE queue = ?1 AND visible_at <= ?2
             ORDER BY visible_at, seq LIMIT ?3",
        )
        .map_err(storage)?;
    let mut rows = select
        .query(params![queue, now as i64, max as i64])
        .map_err(storage)?;
    let mut picked = Vec::new();
    while let Some(row) = rows.next().map_err(storage)? {
        let seq: i64 = row.get(0).map_err(storage)?;
        let attempt: u32 = row.get(5).map_err(storage)?;
        let was_leased: bool = row.get(7).map_err(storage)?;
        let mut last_error: Option<String> = row.get(8).map_err(storage)?;
        if was_leased {
            last_error = Some(format!(
                "lease expired: attempt {attempt} was not settled in time (host stopped or lost)"
            ));
        }
        let delivery = Delivery {
            id: row.get(1).map_err(storage)?,
            queue: queue.to_string(),
            key: row.get(2).map_err(storage)?,
            payload: row.get(3).map_err(storage)?,
            headers: decode_headers(row.get(4).map_err(storage)?),
            attempt: attempt + 1,
            enqueued_at_ms: row.get::<_, i64>(6).map_err(storage)? as u64,
            last_error,
            receipt: format!("{:016x}", rand::random::<u64>()),
            lease_until_ms: lease_until,
        };
        picked.push((seq, delivery));
    }
    drop(rows);
    let mut update = conn
        .prepare_cached(
            "UPDATE messages SET leased = 1, visible_at = ?2, receipt = ?3, attempt = ?4, last_error = ?5
             WHERE seq = ?1",
        )
        .map_err(storage)?;
    let mut out = Vec::with_capacity(picked.len());
    for (seq, d) in picked {
        update
            .execute(params![
                seq,
                lease_until as i64,
                d.receipt,
                d.attempt,
                d.last_error
            ])
            .map_err(storage)?;
        out.push(d);
    }
    Ok(out)
}

pub(super) fn claim(
    conn: &Connection,
    queue: &str,
    claims: &[KeyClaim],
    lease: Duration,
) -> Result<Vec<ClaimState>> {
    let now = now_ms() as i64;
    let mut get = conn
        .prepare_cached("SELECT done, holder, expires_at FROM keys WHERE queue = ?1 AND key = ?2")
        .map_err(storage)?;
    let mut put = conn
        .prepare_cached(
            "INSERT OR REPLACE INTO keys (queue, key, done, holder, expires_at) VALUES (?1, ?2, 0, ?3, ?4)",
        )
        .map_err(storage)?;
    let lease_until = now + lease.as_millis() as i64;
    let mut out = Vec::with_capacity(claims.len());
    for c in claims {
        let row: Option<(bool, String, i64)> = get
            .query_row(params![queue, c.key], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?))
            })
            .optional()
            .map_err(storage)?;
        let state = match row {
            Some((true, _, expires)) if expires > now => ClaimState::AlreadyDone,
            Some((false, holder, expires)) if expires > now && holder != c.message_id => {
                ClaimState::Busy
            }
            _ => {
                put.execute(params![queue, c.key, c.message_id, lease_until])
                    .map_err(storage)?;
                ClaimState::Acquired
            }
        };
        out.push(state);
    }
    Ok(out)
}

pub(super) fn settle(conn: &Connection, settlements: Vec<Settlement>) -> Result<()> {
    let now = now_ms() as i64;
    let mut counts: HashMap<String, Counts> = HashMap::new();
    for s in settlements {
        let queue = s.delivery().queue.clone();
        let c = counts.entry(queue).or_default();
        match s {
            Settlement::Done {
                delivery,
                key,
                publishes,
            } => {
                let existed = delete_message(conn, &delivery.id)?;
                let first = match &key {
                    Some((key, retention)) => record_done(conn, &delivery, key, *retention, now)?,
                    None => existed,
                };
                if first {
                    insert_messages(conn, &publishes, now as u64)?;
                    c.done += 1;
                } else {
                    c.duplicates += 1;
                }
            }
            Settlement::Duplicate { delivery } => {
                delete_message(conn, &delivery.id)?;
                c.duplicates += 1;
            }
            Settlement::Retry {
                delivery,
                delay,
                error,
                key,
            } => {
                let mut stmt = conn
                    .prepare_cached(
                        "UPDATE messages SET leased = 0, visible_at = ?3, last_error = ?4
                         WHERE id = ?1 AND receipt = ?2",
                    )
                    .map_err(storage)?;
                let at = now + delay.as_millis() as i64;
                if stmt
                    .execute(params![delivery.id, delivery.receipt, at, error])
                    .map_err(storage)?
                    == 1
                {
                    c.retried += 1;
                }
                release_key(conn, &delivery, key.as_deref())?;
            }
            Settlement::Defer { delivery, delay } => {
                let mut stmt = conn
                    .prepare_cached(
                        "UPDATE messages SET leased = 0, visible_at = ?3, attempt = MAX(attempt - 1, 0)
                         WHERE id = ?1 AND receipt = ?2",
                    )
                    .map_err(storage)?;
                let at = now + delay.as_millis() as i64;
                stmt.execute(params![delivery.id, delivery.receipt, at])
                    .map_err(storage)?;
            }
            Settlement::Dead {
                delivery,
                reason,
                error,
                handler_version,
                key,
                notice,
            } => {
                if let Some(redrives) = take_leased(conn, &delivery)? {
                    let mut stmt = conn
                        .prepare_cached(
                            "INSERT OR REPLACE INTO dead (id, queue, key, payload, headers, attempts, enqueued_at,
                             died_at, reason, last_error, handler_version, redrives)
                             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
                        )
                        .map_err(storage)?;
                    stmt.execute(params![
                        delivery.id,
                        delivery.queue,
                        delivery.key,
                        delivery.payload,
                        encode_headers(&delivery.headers),
                        delivery.attempt,
                        delivery.enqueued_at_ms as i64,
                        now,
                        reason,
                        error,
                        handler_version,
                        redrives
                    ])
                    .map_err(storage)?;
                    insert_messages(conn, notice.as_slice(), now as u64)?;
                }
                release_key(conn, &delivery, key.as_deref())?;
            }
        }
    }
    let mut bump = conn
        .prepare_cached(
            "INSERT INTO counters (queue, done, duplicates, retried) VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT (queue) DO UPDATE SET done = done + ?2, duplicates = duplicates + ?3, retried = retried + ?4",
        )
        .map_err(storage)?;
    for (queue, c) in counts {
        bump.execute(params![queue, c.done, c.duplicates, c.retried])
            .map_err(storage)?;
    }
    Ok(())
}

/// Delete a message row, whoever holds it: a done message is done.
fn delete_message(conn: &Connection, id: &str) -> Result<bool> {
    let n = conn
        .prepare_cached("DELETE FROM messages WHERE id = ?1")
        .and_then(|mut s| s.execute(params![id]))
        .map_err(storage)?;
    Ok(n == 1)
}

/// Delete the row of a delivery that still holds its lease, and return the
/// redrives the message carries (which only the row knows); `None` when the
/// lease was lost.
fn take_leased(conn: &Connection, d: &Delivery) -> Result<Option<u32>> {
    conn.prepare_cached("DELETE FROM messages WHERE id = ?1 AND receipt = ?2 RETURNING redrives")
        .and_then(|mut s| {
            s.query_row(params![d.id, d.receipt], |r| r.get(0))
                .optional()
        })
        .map_err(storage)
}

/// Mark `key` done for this delivery. False when it was already done (by
/// another message with the key, or by an earlier delivery of this one whose
/// lease ran out), which makes this delivery a duplicate.
fn record_done(
    conn: &Connection,
    d: &Delivery,
    key: &str,
    retention: Duration,
    now: i64,
) -> Result<bool> {
    let done_until: Option<i64> = conn
        .prepare_cached("SELECT expires_at FROM keys WHERE queue = ?1 AND key = ?2 AND done = 1")
        .and_then(|mut s| s.query_row(params![d.queue, key], |r| r.get(0)).optional())
        .map_err(storage)?;
    if done_until.is_some_and(|expires| expires > now) {
        return Ok(false);
    }
    conn.prepare_cached("INSERT OR REPLACE INTO keys (queue, key, done, holder, expires_at) VALUES (?1, ?2, 1, ?3, ?4)")
        .and_then(|mut s| s.execute(params![d.queue, key, d.id, now + retention.as_millis() as i64]))
        .map_err(storage)?;
    Ok(true)
}

fn release_key(conn: &Connection, d: &Delivery, key: Option<&str>) -> Result<()> {
    if let Some(key) = key {
        conn.prepare_cached(
            "DELETE FROM keys WHERE queue = ?1 AND key = ?2 AND done = 0 AND holder = ?3",
        )
        .and_then(|mut s| s.execute(params![d.queue, key, d.id]))
        .map_err(storage)?;
    }
    Ok(())
}

pub(super) fn stats(conn: &Connection, only: Option<&str>) -> Result<Vec<QueueStats>> {
    let now = now_ms() as i64;
    let filter = if only.is_some() {
        "WHERE queue = ?1"
    } else {
        "WHERE ?1 IS NULL"
    };
    let mut by_queue: std::collections::BTreeMap<String, QueueStats> = Default::default();
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
        let mut stmt = conn.prepare_cached(&sql).map_err(storage)?;
        let width = stmt.column_count();
        let mut rows = stmt.query(params![only, now]).map_err(storage)?;
        while let Some(r) = rows.next().map_err(storage)? {
            let queue: String = r.get(0).map_err(storage)?;
            let counts = (1..width)
                .map(|i| r.get::<_, Option<i64>>(i).map(|v| v.unwrap_or(0) as u64))
                .collect::<rusqlite::Result<Vec<_>>>()
                .map_err(storage)?;
            let s = by_queue.entry(queue.clone()).or_insert_with(|| QueueStats {
                queue,
                ..Default::default()
            });
            apply(s, &counts);
        }
    }
    Ok(by_queue.into_values().collect())
}

pub(super) const DEAD_COLUMNS: &str = "id, queue, key, payload, headers, attempts, enqueued_at, died_at, reason, last_error, handler_version, redrives";

pub(super) fn dead_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<DeadLetter> {
    Ok(DeadLetter {
        id: r.get(0)?,
        queue: r.get(1)?,
        key: r.get(2)?,
        payload: r.get(3)?,
        headers: decode_headers(r.get(4)?),
        attempts: r.get(5)?,
        enqueued_at_ms: r.get::<_, i64>(6)? as u64,
        died_at_ms: r.get::<_, i64>(7)? as u64,
        reason: r.get(8)?,
        last_error: r.get(9)?,
        handler_version: r.get(10)?,
        redrives: r.get(11)?,
    })
}

/// Move the dead letters `sel` takes back to `queue`, oldest death first.
/// Picking and moving run in one savepoint on the one writer, so a dead
/// letter is never moved twice, even by hosts sharing the file.
pub(super) fn replay(conn: &Connection, queue: &str, sel: &ReplaySelector) -> Result<u64> {
    let ids = (!sel.ids.is_empty())
        .then(|| serde_json::to_string(&sel.ids).expect("strings always serialize"));
    // LIMIT -1 is SQLite for no limit.
    let limit = sel.limit.map_or(-1, |n| n.min(i64::MAX as usize) as i64);
    let mut pick = conn
        .prepare_cached(
            "SELECT seq FROM dead WHERE queue = ?1
             AND (?2 IS NULL OR died_at <= ?2)
             AND (?3 IS NULL OR redrives < ?3)
             AND (?4 IS NULL OR id IN (SELECT value FROM json_each(?4)))
             ORDER BY seq LIMIT ?5",
        )
        .map_err(storage)?;
    let seqs = pick
        .query_map(
            params![
                queue,
                sel.died_before_ms.map(|ms| ms.min(i64::MAX as u64) as i64),
                sel.max_redrives,
                ids,
                limit
            ],
            |r| r.get::<_, i64>(0),
        )
        .map_err(storage)?
        .collect::<rusqlite::Result<Vec<_>>>()
        .map_err(storage)?;
    let mut back = conn
        .prepare_cached(
            "INSERT INTO messages (id, queue, key, payload, headers, attempt, enqueued_at, visible_at,
             last_error, redrives)
             SELECT id, queue, key, payload, headers, 0, enqueued_at, ?2, last_error, redrives + ?3
             FROM dead WHERE seq = ?1",
        )
        .map_err(storage)?;
    let mut delete = conn
        .prepare_cached("DELETE FROM dead WHERE seq = ?1")
        .map_err(storage)?;
    let now = now_ms() as i64;
    for seq in &seqs {
        back.execute(params![seq, now, i64::from(sel.redrive)])
            .map_err(storage)?;
        delete.execute([seq]).map_err(storage)?;
    }
    Ok(seqs.len() as u64)
}
