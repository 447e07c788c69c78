//! The embedded broker: one SQLite file in WAL mode.
//!
//! A single thread owns the connection. Callers send it jobs; it runs every
//! job that is waiting in one `BEGIN IMMEDIATE` transaction, each inside its
//! own savepoint, commits once and only then answers. Batching commits this
//! way (group commit) is what makes a file-backed queue fast, and a failed job
//! rolls back alone without touching its neighbours.
//!
//! A message is one row of `messages`. `visible_at` is when it may next be
//! received: its due time while it waits, its lease expiry while leased. So
//! an expired lease needs no sweeper: the row is simply due again.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use rusqlite::{Connection, OptionalExtension, params};
use tokio::sync::oneshot;

use super::{
    Broker, BrokerError, ClaimState, DeadLetter, KeyClaim, QueueStats, ReplaySelector, Result,
    Settlement,
};
use crate::message::{Delivery, NewMessage, new_id, now_ms};

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS messages (
    seq         INTEGER PRIMARY KEY AUTOINCREMENT,
    id          TEXT NOT NULL UNIQUE,
    queue       TEXT NOT NULL,
    key         TEXT NOT NULL,
    payload     BLOB NOT NULL,
    headers     TEXT,
    attempt     INTEGER NOT NULL DEFAULT 0,
    enqueued_at INTEGER NOT NULL,
    visible_at  INTEGER NOT NULL,
    leased      INTEGER NOT NULL DEFAULT 0,
    receipt     TEXT,
    last_error  TEXT
);
CREATE INDEX IF NOT EXISTS messages_due ON messages (queue, visible_at);
CREATE TABLE IF NOT EXISTS dead (
    seq             INTEGER PRIMARY KEY AUTOINCREMENT,
    id              TEXT NOT NULL UNIQUE,
    queue           TEXT NOT NULL,
    key             TEXT NOT NULL,
    payload         BLOB NOT NULL,
    headers         TEXT,
    attempts        INTEGER NOT NULL,
    enqueued_at     INTEGER NOT NULL,
    died_at         INTEGER NOT NULL,
    reason          TEXT NOT NULL,
    last_error      TEXT,
    handler_version TEXT
);
CREATE INDEX IF NOT EXISTS dead_queue ON dead (queue, seq);
CREATE TABLE IF NOT EXISTS keys (
    queue      TEXT NOT NULL,
    key        TEXT NOT NULL,
    done       INTEGER NOT NULL,
    holder     TEXT NOT NULL,
    expires_at INTEGER NOT NULL,
    PRIMARY KEY (queue, key)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS keys_expiry ON keys (expires_at);
CREATE TABLE IF NOT EXISTS counters (
    queue      TEXT PRIMARY KEY,
    done       INTEGER NOT NULL DEFAULT 0,
    duplicates INTEGER NOT NULL DEFAULT 0,
    retried    INTEGER NOT NULL DEFAULT 0
) WITHOUT ROWID;
PRAGMA user_version = 1;
";

/// How often expired idempotency keys are deleted.
const KEY_SWEEP_EVERY: Duration = Duration::from_secs(30);
/// Most jobs folded into one transaction.
const MAX_GROUP: usize = 512;

type Reply = Box<dyn FnOnce(std::result::Result<(), String>) + Send>;
/// A job gets the connection inside its savepoint, or `None` when the
/// transaction could not start; either way it hands back how to answer.
type Job = Box<dyn FnOnce(Option<&Connection>) -> Reply + Send>;

pub struct SqliteBroker {
    jobs: mpsc::Sender<Job>,
    path: PathBuf,
}

impl SqliteBroker {
    /// Open (creating if needed) the broker file at `path`.
    pub fn open(path: impl AsRef<Path>) -> anyhow::Result<Self> {
        let path = path.as_ref().to_path_buf();
        let conn = open_connection(&path)
            .map_err(|e| anyhow::anyhow!("cannot open SQLite broker {}: {e}", path.display()))?;
        let (jobs, rx) = mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name("sluice-sqlite".into())
            .spawn(move || run_jobs(conn, rx))?;
        Ok(SqliteBroker { jobs, path })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Run `f` on the broker thread inside the current group transaction and
    /// answer once that transaction has committed.
    async fn call<R, F>(&self, f: F) -> Result<R>
    where
        R: Send + 'static,
        F: FnOnce(&Connection) -> Result<R> + Send + 'static,
    {
        let (tx, rx) = oneshot::channel::<Result<R>>();
        let job: Job = Box::new(move |conn| {
            let outcome = match conn {
                Some(conn) => in_savepoint(conn, f),
                None => Err(BrokerError::Storage("could not begin a transaction".into())),
            };
            Box::new(move |commit| {
                let answer = match commit {
                    Ok(()) => outcome,
                    Err(e) => Err(BrokerError::Storage(format!("commit failed: {e}"))),
                };
                let _ = tx.send(answer);
            })
        });
        self.jobs
            .send(job)
            .map_err(|_| BrokerError::Unavailable("the SQLite broker thread has stopped".into()))?;
        rx.await.map_err(|_| {
            BrokerError::Unavailable("the SQLite broker thread dropped a request".into())
        })?
    }
}

fn open_connection(path: &Path) -> rusqlite::Result<Connection> {
    let conn = Connection::open(path)?;
    conn.busy_timeout(Duration::from_secs(10))?;
    // WAL: readers never block the writer. synchronous=FULL: a commit is on
    // disk before anyone is told it happened, so an acknowledged send or ack
    // survives power loss as well as a killed process. Group commit keeps the
    // cost of that to one fsync per batch.
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", "FULL")?;
    conn.execute_batch(SCHEMA)?;
    Ok(conn)
}

fn in_savepoint<R>(conn: &Connection, f: impl FnOnce(&Connection) -> Result<R>) -> Result<R> {
    conn.execute_batch("SAVEPOINT job").map_err(storage)?;
    let result = f(conn);
    let end = if result.is_ok() {
        "RELEASE job"
    } else {
        "ROLLBACK TO job; RELEASE job"
    };
    conn.execute_batch(end).map_err(storage)?;
    result
}

fn run_jobs(conn: Connection, rx: mpsc::Receiver<Job>) {
    let mut last_sweep = Instant::now();
    while let Ok(first) = rx.recv() {
        let mut group = vec![first];
        while group.len() < MAX_GROUP {
            match rx.try_recv() {
                Ok(job) => group.push(job),
                Err(_) => break,
            }
        }
        if let Err(e) = conn.execute_batch("BEGIN IMMEDIATE") {
            tracing::error!(error = %e, "SQLite broker could not begin a transaction");
            for job in group {
                job(None)(Err(e.to_string()));
            }
            continue;
        }
        let replies: Vec<Reply> = group.into_iter().map(|job| job(Some(&conn))).collect();
        if last_sweep.elapsed() >= KEY_SWEEP_EVERY {
            last_sweep = Instant::now();
            if let Err(e) =
                conn.execute("DELETE FROM keys WHERE expires_at <= ?1", [now_ms() as i64])
            {
                tracing::warn!(error = %e, "could not delete expired idempotency keys");
            }
        }
        let commit = conn.execute_batch("COMMIT").map_err(|e| e.to_string());
        if commit.is_err() {
            let _ = conn.execute_batch("ROLLBACK");
        }
        for reply in replies {
            reply(commit.clone());
        }
    }
}

fn storage(e: rusqlite::Error) -> BrokerError {
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

#[async_trait]
impl Broker for SqliteBroker {
    async fn publish(&self, messages: Vec<NewMessage>) -> Result<Vec<String>> {
        self.call(move |conn| insert_messages(conn, &messages, now_ms()))
            .await
    }

    async fn receive(&self, queue: &str, max: usize, lease: Duration) -> Result<Vec<Delivery>> {
        let queue = queue.to_string();
        self.call(move |conn| receive(conn, &queue, max, lease))
            .await
    }

    async fn claim(
        &self,
        queue: &str,
        claims: &[KeyClaim],
        lease: Duration,
    ) -> Result<Vec<ClaimState>> {
        let queue = queue.to_string();
        let claims = claims.to_vec();
        self.call(move |conn| claim(conn, &queue, &claims, lease))
            .await
    }

    async fn settle(&self, settlements: Vec<Settlement>) -> Result<()> {
        if settlements.is_empty() {
            return Ok(());
        }
        self.call(move |conn| settle(conn, settlements)).await
    }

    async fn queue_stats(&self, queue: &str) -> Result<QueueStats> {
        let queue = queue.to_string();
        self.call(move |conn| {
            let all = stats(conn, Some(&queue))?;
            Ok(all.into_iter().next().unwrap_or(QueueStats {
                queue,
                ..Default::default()
            }))
        })
        .await
    }

    async fn stats(&self) -> Result<Vec<QueueStats>> {
        self.call(|conn| stats(conn, None)).await
    }

    async fn dead_letters(&self, queue: &str, limit: usize) -> Result<Vec<DeadLetter>> {
        let queue = queue.to_string();
        self.call(move |conn| {
            let sql =
                format!("SELECT {DEAD_COLUMNS} FROM dead WHERE queue = ?1 ORDER BY seq LIMIT ?2");
            let mut stmt = conn.prepare_cached(&sql).map_err(storage)?;
            let rows = stmt
                .query_map(params![queue, limit as i64], dead_from_row)
                .map_err(storage)?;
            rows.collect::<rusqlite::Result<Vec<_>>>().map_err(storage)
        })
        .await
    }

    async fn dead_letter(&self, queue: &str, id: &str) -> Result<Option<DeadLetter>> {
        let (queue, id) = (queue.to_string(), id.to_string());
        self.call(move |conn| {
            let sql = format!("SELECT {DEAD_COLUMNS} FROM dead WHERE queue = ?1 AND id = ?2");
            conn.query_row(&sql, params![queue, id], dead_from_row)
                .optional()
                .map_err(storage)
        })
        .await
    }

    async fn replay(&self, queue: &str, selector: &ReplaySelector) -> Result<u64> {
        let queue = queue.to_string();
        let ids = selector.ids.clone();
        self.call(move |conn| replay(conn, &queue, &ids)).await
    }

    async fn purge(&self, queue: &str) -> Result<u64> {
        let queue = queue.to_string();
        self.call(move |conn| {
            let n = conn
                .execute("DELETE FROM dead WHERE queue = ?1", [queue])
                .map_err(storage)?;
            Ok(n as u64)
        })
        .await
    }
}

fn insert_messages(conn: &Connection, messages: &[NewMessage], now: u64) -> Result<Vec<String>> {
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

fn receive(conn: &Connection, queue: &str, max: usize, lease: Duration) -> Result<Vec<Delivery>> {
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

fn claim(
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

fn settle(conn: &Connection, settlements: Vec<Settlement>) -> Result<()> {
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
                let existed = delete_message(conn, &delivery.id, None)?;
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
                delete_message(conn, &delivery.id, None)?;
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
            } => {
                if delete_message(conn, &delivery.id, Some(&delivery.receipt))? {
                    let mut stmt = conn
                        .prepare_cached(
                            "INSERT OR REPLACE INTO dead (id, queue, key, payload, headers, attempts, enqueued_at,
                             died_at, reason, last_error, handler_version)
                             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
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
                        handler_version
                    ])
                    .map_err(storage)?;
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

/// Delete a message row, only if it still carries `receipt` when one is given.
fn delete_message(conn: &Connection, id: &str, receipt: Option<&str>) -> Result<bool> {
    let n = match receipt {
        Some(r) => conn
            .prepare_cached("DELETE FROM messages WHERE id = ?1 AND receipt = ?2")
            .and_then(|mut s| s.execute(params![id, r])),
        None => conn
            .prepare_cached("DELETE FROM messages WHERE id = ?1")
            .and_then(|mut s| s.execute(params![id])),
    }
    .map_err(storage)?;
    Ok(n == 1)
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

fn stats(conn: &Connection, only: Option<&str>) -> Result<Vec<QueueStats>> {
    let now = now_ms() as i64;
    let mut by_queue: std::collections::BTreeMap<String, QueueStats> = Default::default();
    let filter = if only.is_some() {
        "WHERE queue = ?1"
    } else {
        "WHERE ?1 IS NULL"
    };
    let sql = format!(
        "SELECT queue, SUM(visible_at <= ?2), SUM(visible_at > ?2 AND leased = 0), SUM(visible_at > ?2 AND leased = 1)
         FROM messages {filter} GROUP BY queue"
    );
    let mut stmt = conn.prepare_cached(&sql).map_err(storage)?;
    let mut rows = stmt.query(params![only, now]).map_err(storage)?;
    while let Some(r) = rows.next().map_err(storage)? {
        let q: String = r.get(0).map_err(storage)?;
        let s = by_queue.entry(q.clone()).or_insert_with(|| QueueStats {
            queue: q,
            ..Default::default()
        });
        s.ready = r.get::<_, i64>(1).map_err(storage)? as u64;
        s.delayed = r.get::<_, i64>(2).map_err(storage)? as u64;
        s.in_flight = r.get::<_, i64>(3).map_err(storage)? as u64;
    }
    drop(rows);
    let sql = format!("SELECT queue, done, duplicates, retried FROM counters {filter}");
    let mut stmt = conn.prepare_cached(&sql).map_err(storage)?;
    let mut rows = stmt.query(params![only]).map_err(storage)?;
    while let Some(r) = rows.next().map_err(storage)? {
        let q: String = r.get(0).map_err(storage)?;
        let s = by_queue.entry(q.clone()).or_insert_with(|| QueueStats {
            queue: q,
            ..Default::default()
        });
        s.done = r.get::<_, i64>(1).map_err(storage)? as u64;
        s.duplicates = r.get::<_, i64>(2).map_err(storage)? as u64;
        s.retried = r.get::<_, i64>(3).map_err(storage)? as u64;
    }
    drop(rows);
    let sql = format!("SELECT queue, COUNT(*) FROM dead {filter} GROUP BY queue");
    let mut stmt = conn.prepare_cached(&sql).map_err(storage)?;
    let mut rows = stmt.query(params![only]).map_err(storage)?;
    while let Some(r) = rows.next().map_err(storage)? {
        let q: String = r.get(0).map_err(storage)?;
        let s = by_queue.entry(q.clone()).or_insert_with(|| QueueStats {
            queue: q,
            ..Default::default()
        });
        s.dead = r.get::<_, i64>(1).map_err(storage)? as u64;
    }
    Ok(by_queue.into_values().collect())
}

const DEAD_COLUMNS: &str = "id, queue, key, payload, headers, attempts, enqueued_at, died_at, reason, last_error, handler_version";

fn dead_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<DeadLetter> {
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
    })
}

fn replay(conn: &Connection, queue: &str, ids: &[String]) -> Result<u64> {
    let now = now_ms() as i64;
    let move_one = "INSERT INTO messages (id, queue, key, payload, headers, attempt, enqueued_at, visible_at, last_error)
         SELECT id, queue, key, payload, headers, 0, enqueued_at, ?3, last_error FROM dead
         WHERE queue = ?1 AND (?2 IS NULL OR id = ?2)";
    let delete = "DELETE FROM dead WHERE queue = ?1 AND (?2 IS NULL OR id = ?2)";
    let mut moved = 0;
    let targets: Vec<Option<&str>> = if ids.is_empty() {
        vec![None]
    } else {
        ids.iter().map(|s| Some(s.as_str())).collect()
    };
    for id in targets {
        moved += conn
            .execute(move_one, params![queue, id, now])
            .map_err(storage)? as u64;
        conn.execute(delete, params![queue, id]).map_err(storage)?;
    }
    Ok(moved)
}
