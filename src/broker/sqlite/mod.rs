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
//!
//! The roles are one file each (`queue.rs`, `dead.rs`, `presence.rs`,
//! `kv.rs`, `topics.rs`), each with the tables it owns; `migrate.rs`
//! creates them and upgrades files written by earlier versions.

use std::path::{Path, PathBuf};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use rusqlite::{Connection, ErrorCode};
use tokio::sync::oneshot;

use super::{BrokerError, Result};
use crate::message::now_ms;

mod dead;
mod kv;
mod migrate;
mod presence;
mod queue;
mod topics;

/// How often expired idempotency keys and key-value entries are deleted.
const KEY_SWEEP_EVERY: Duration = Duration::from_secs(30);
/// Most jobs folded into one transaction.
const MAX_GROUP: usize = 512;

/// Why a group transaction did not begin or commit, shared by its jobs.
type GroupError = Arc<rusqlite::Error>;
type Reply = Box<dyn FnOnce(std::result::Result<(), GroupError>) + Send>;
/// A job gets the connection inside its savepoint, or the error that kept
/// the transaction from starting; either way it hands back how to answer.
type Job = Box<dyn FnOnce(std::result::Result<&Connection, GroupError>) -> Reply + Send>;

/// The embedded broker: a handle to the thread that owns the SQLite file.
/// Every role's calls become jobs on that thread, committed in groups.
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

    /// The broker file.
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
                Ok(conn) => in_savepoint(conn, f),
                Err(e) => Err(classify_group("beginning a transaction", e)),
            };
            Box::new(move |commit| {
                let answer = match commit {
                    Ok(()) => outcome,
                    Err(e) => Err(classify_group("committing", e)),
                };
                let _ = tx.send(answer);
            })
        });
        let stopped = || BrokerError::Unavailable {
            context: "the SQLite broker thread has stopped".into(),
            source: None,
        };
        self.jobs.send(job).map_err(|_| stopped())?;
        rx.await.map_err(|_| stopped())?
    }
}

/// A SQLite error as a broker error: a file that is busy, locked, read-only,
/// cannot be opened or written, or a full disk may clear up, so the call may
/// be made again; anything else is this call's own failure.
pub(super) fn classify(e: rusqlite::Error) -> BrokerError {
    if transient(&e) {
        BrokerError::unavailable("SQLite", e)
    } else {
        BrokerError::refused("SQLite", e)
    }
}

fn classify_group(what: &str, e: GroupError) -> BrokerError {
    let context = format!("SQLite, {what}");
    if transient(&e) {
        BrokerError::unavailable(context, e)
    } else {
        BrokerError::refused(context, e)
    }
}

fn transient(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(
            ErrorCode::DatabaseBusy
                | ErrorCode::DatabaseLocked
                | ErrorCode::CannotOpen
                | ErrorCode::SystemIoFailure
                | ErrorCode::DiskFull
                | ErrorCode::ReadOnly
                | ErrorCode::OutOfMemory
        )
    )
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
    migrate::prepare(&conn)?;
    Ok(conn)
}

fn in_savepoint<R>(conn: &Connection, f: impl FnOnce(&Connection) -> Result<R>) -> Result<R> {
    conn.execute_batch("SAVEPOINT job").map_err(classify)?;
    let result = f(conn);
    let end = if result.is_ok() {
        "RELEASE job"
    } else {
        "ROLLBACK TO job; RELEASE job"
    };
    conn.execute_batch(end).map_err(classify)?;
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
            // Each job answers with this error; there is nothing to commit.
            let e = Arc::new(e);
            for job in group {
                job(Err(e.clone()))(Ok(()));
            }
            continue;
        }
        let replies: Vec<Reply> = group.into_iter().map(|job| job(Ok(&conn))).collect();
        if last_sweep.elapsed() >= KEY_SWEEP_EVERY {
            last_sweep = Instant::now();
            sweep(&conn);
        }
        let commit = conn.execute_batch("COMMIT").map_err(Arc::new);
        if commit.is_err() {
            let _ = conn.execute_batch("ROLLBACK");
        }
        for reply in replies {
            reply(commit.clone());
        }
    }
}

/// Delete expired idempotency keys and key-value entries.
fn sweep(conn: &Connection) {
    if let Err(e) = queue::sweep_keys(conn, now_ms()) {
        tracing::warn!(error = %e, "could not delete expired idempotency keys");
    }
    if let Err(e) = kv::sweep(conn, now_ms()) {
        tracing::warn!(error = %e, "could not delete expired key-value entries");
    }
}
