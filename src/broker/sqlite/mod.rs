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

use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use rusqlite::{Connection, OptionalExtension, params};
use tokio::sync::oneshot;

use super::{
    Broker, BrokerError, ClaimState, DeadLetter, HandlerStatus, KeyClaim, QueueStats,
    ReplaySelector, Result, Settlement,
};
use crate::message::{Delivery, NewMessage, now_ms};

mod kv;
mod migrate;
mod store;
mod topics;

use store::{
    DEAD_COLUMNS, claim, dead_from_row, insert_messages, receive, replay, settle, stats, storage,
};

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
    last_error  TEXT,
    redrives    INTEGER NOT NULL DEFAULT 0
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
    handler_version TEXT,
    redrives        INTEGER NOT NULL DEFAULT 0
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
CREATE TABLE IF NOT EXISTS handler_status (
    host    TEXT NOT NULL,
    handler TEXT NOT NULL,
    status  TEXT NOT NULL,
    PRIMARY KEY (host, handler)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS counters (
    queue      TEXT PRIMARY KEY,
    done       INTEGER NOT NULL DEFAULT 0,
    duplicates INTEGER NOT NULL DEFAULT 0,
    retried    INTEGER NOT NULL DEFAULT 0
) WITHOUT ROWID;
";

/// How often expired idempotency keys and key-value entries are deleted.
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

fn open_connection(path: &Path) -> anyhow::Result<Connection> {
    let conn = Connection::open(path)?;
    conn.busy_timeout(Duration::from_secs(10))?;
    // WAL: readers never block the writer. synchronous=FULL: a commit is on
    // disk before anyone is told it happened, so an acknowledged send or ack
    // survives power loss as well as a killed process. Group commit keeps the
    // cost of that to one fsync per batch.
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", "FULL")?;
    conn.execute_batch(SCHEMA)?;
    conn.execute_batch(kv::SCHEMA)?;
    conn.execute_batch(topics::SCHEMA)?;
    migrate::upgrade(&conn)?;
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
            if let Err(e) = kv::sweep(&conn, now_ms()) {
                tracing::warn!(error = %e, "could not delete expired key-value entries");
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

    async fn settle(&self, settlements: &[Settlement]) -> Result<()> {
        if settlements.is_empty() {
            return Ok(());
        }
        // The broker thread needs its own copy.
        let settlements = settlements.to_vec();
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
        let selector = selector.clone();
        self.call(move |conn| replay(conn, &queue, &selector)).await
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

    async fn put_handler_statuses(&self, host: &str, statuses: Vec<HandlerStatus>) -> Result<()> {
        let host = host.to_string();
        self.call(move |conn| {
            conn.execute("DELETE FROM handler_status WHERE host = ?1", [&host])
                .map_err(storage)?;
            let mut insert = conn
                .prepare_cached(
                    "INSERT INTO handler_status (host, handler, status) VALUES (?1, ?2, ?3)",
                )
                .map_err(storage)?;
            for s in statuses {
                let json = serde_json::to_string(&s).expect("statuses serialize");
                insert
                    .execute(rusqlite::params![host, s.handler, json])
                    .map_err(storage)?;
            }
            Ok(())
        })
        .await
    }

    async fn handler_statuses(&self) -> Result<Vec<HandlerStatus>> {
        self.call(|conn| {
            let mut stmt = conn
                .prepare_cached("SELECT status FROM handler_status ORDER BY handler, host")
                .map_err(storage)?;
            let rows = stmt
                .query_map([], |r| r.get::<_, String>(0))
                .map_err(storage)?;
            let texts = rows
                .collect::<rusqlite::Result<Vec<_>>>()
                .map_err(storage)?;
            Ok(texts
                .iter()
                .filter_map(|t| serde_json::from_str(t).ok())
                .collect())
        })
        .await
    }
}
