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
//! Reads that only look (counts, dead letters, statuses, bindings) do not
//! go through that thread: they run in read transactions on connections of
//! their own ([`SqliteBroker::read`]). In WAL mode a reader never blocks the
//! writer, so `sluice stats` on a large file does not hold up a single
//! receive or settle.
//!
//! The roles are one file each (`queue.rs`, `dead.rs`, `presence.rs`,
//! `kv.rs`, `topics.rs`); their tables are made by the SQL files in
//! `migrations/`, one a schema version, which `migrate.rs` runs to create a
//! file or upgrade one written by an earlier version.

use std::path::{Path, PathBuf};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use rusqlite::{Connection, ErrorCode};
use tokio::sync::oneshot;

use super::{BrokerError, Result};
use crate::message::now_ms;

mod dead;
mod groups;
mod kv;
mod memory;
mod migrate;
mod presence;
mod queue;
mod schedules;
mod topics;
mod wake;

/// How often expired idempotency keys and key-value entries are deleted.
const KEY_SWEEP_EVERY: Duration = Duration::from_secs(30);
/// Most jobs folded into one transaction.
const MAX_GROUP: usize = 512;

/// Why a group transaction did not begin or commit, shared by its jobs.
type GroupError = Arc<rusqlite::Error>;
type Reply = Box<dyn FnOnce(std::result::Result<(), GroupError>) + Send>;
/// A job gets the connection inside its savepoint, or the error that kept
/// the transaction from starting; either way it hands back how to answer.
type Run = Box<dyn FnOnce(std::result::Result<&Connection, GroupError>) -> Reply + Send>;

/// One caller's work on the broker thread.
struct Job {
    run: Run,
    /// Whether the job's writes must be on disk before it is answered. Only
    /// writes that matter while the hosts on this machine run need not be:
    /// a lease (with the attempt it counts), its extension, a key claim.
    /// A crash of the process loses no commit (it is in the kernel's
    /// cache). A crash of the machine stops every host that shares the file
    /// (a WAL file is never shared across machines), and an unsynced commit
    /// it loses only gives back what that commit took: the message is due
    /// again, at the attempt it had, and the key is free. Of each group,
    /// such jobs commit first, in a transaction of their own, without an
    /// fsync (`synchronous = NORMAL`), and are answered; the other jobs
    /// then commit with one, which puts every commit before it on disk too.
    synced: bool,
}

/// The embedded broker: a handle to the thread that owns the SQLite file.
/// Every role's calls become jobs on that thread, committed in groups.
pub struct SqliteBroker {
    jobs: mpsc::Sender<Job>,
    path: PathBuf,
    /// Idle read connections, opened as they are needed.
    readers: Arc<std::sync::Mutex<Vec<Connection>>>,
    /// The last settle writes that committed (see `Queue::settle`).
    settled: std::sync::Mutex<queue::Settled>,
    /// The file's wake-ups (see `wake.rs`).
    bells: Arc<wake::Bells>,
    /// How many times each queue had rung when it was last received: a
    /// receiver that found nothing waits only if it has not rung since.
    seen: std::sync::Mutex<std::collections::HashMap<String, u64>>,
}

impl SqliteBroker {
    /// Open (creating if needed) the broker file at `path`.
    pub fn open(path: impl AsRef<Path>) -> anyhow::Result<Self> {
        Self::open_with(path.as_ref(), true)
    }

    /// [`open`](Self::open) without the wake-ups of `wake.rs`: commits ring
    /// nothing and idle receivers poll, as before there were any. For
    /// measuring what the wake-ups cost.
    pub fn open_polling(path: impl AsRef<Path>) -> anyhow::Result<Self> {
        Self::open_with(path.as_ref(), false)
    }

    fn open_with(path: &Path, wakes: bool) -> anyhow::Result<Self> {
        let path = path.to_path_buf();
        let conn = open_connection(&path)
            .map_err(|e| anyhow::anyhow!("cannot open SQLite broker {}: {e}", path.display()))?;
        // Once the file exists: the bells are the file's, by its real path.
        let bells = if wakes {
            wake::bells(&path)
        } else {
            Arc::new(wake::Bells::off())
        };
        let (jobs, rx) = mpsc::channel::<Job>();
        let rings = bells.clone();
        std::thread::Builder::new()
            .name("sluice-sqlite".into())
            .spawn(move || run_jobs(conn, rx, &rings))?;
        Ok(SqliteBroker {
            jobs,
            path,
            readers: Arc::default(),
            settled: Default::default(),
            bells,
            seen: Default::default(),
        })
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
        self.send(job(f, true)).await
    }

    /// [`call`](Self::call) for writes that need not reach the disk before
    /// they are answered (see [`Job::synced`]).
    async fn call_unsynced<R, F>(&self, f: F) -> Result<R>
    where
        R: Send + 'static,
        F: FnOnce(&Connection) -> Result<R> + Send + 'static,
    {
        self.send(job(f, false)).await
    }

    async fn send<R>(&self, (job, rx): (Job, oneshot::Receiver<Result<R>>)) -> Result<R> {
        let stopped = || BrokerError::Unavailable {
            context: "the SQLite broker thread has stopped".into(),
            source: None,
        };
        self.jobs.send(job).map_err(|_| stopped())?;
        rx.await.map_err(|_| stopped())?
    }
}

impl SqliteBroker {
    /// Run `f` in a read transaction of its own, off the writer thread and
    /// off the async threads: it sees what has committed when it starts,
    /// and never waits for the writer nor makes it wait.
    async fn read<R, F>(&self, f: F) -> Result<R>
    where
        R: Send + 'static,
        F: FnOnce(&Connection) -> Result<R> + Send + 'static,
    {
        let (path, readers) = (self.path.clone(), self.readers.clone());
        tokio::task::spawn_blocking(move || {
            let pooled = readers.lock().expect("readers lock").pop();
            let conn = match pooled {
                Some(conn) => conn,
                None => open_reader(&path)?,
            };
            conn.execute_batch("BEGIN").map_err(classify)?;
            let result = f(&conn);
            let ended = conn.execute_batch("COMMIT").map_err(classify);
            if ended.is_ok() {
                readers.lock().expect("readers lock").push(conn);
            }
            let value = result?;
            ended.map(|()| value)
        })
        .await
        .map_err(|e| BrokerError::unavailable("a SQLite read did not finish", e))?
    }
}

/// A connection for reads only.
fn open_reader(path: &Path) -> Result<Connection> {
    let conn = connect(path).map_err(classify)?;
    conn.busy_timeout(Duration::from_secs(10))
        .map_err(classify)?;
    conn.pragma_update(None, "query_only", true)
        .map_err(classify)?;
    Ok(conn)
}

/// `f` as a job, and where its answer will come.
fn job<R, F>(f: F, synced: bool) -> (Job, oneshot::Receiver<Result<R>>)
where
    R: Send + 'static,
    F: FnOnce(&Connection) -> Result<R> + Send + 'static,
{
    let (tx, rx) = oneshot::channel::<Result<R>>();
    let run: Run = Box::new(move |conn| {
        let outcome = match conn {
            Ok(conn) => in_savepoint(conn, f),
            Err(e) => Err(classify_group("beginning a transaction", e)),
        };
        Box::new(move |commit| {
            // A job that failed says why itself; one that did its part
            // fails only if its transaction did not commit.
            let answer = match commit {
                Ok(()) => outcome,
                Err(e) => outcome.and_then(|_| Err(classify_group("committing", e))),
            };
            let _ = tx.send(answer);
        })
    });
    (Job { run, synced }, rx)
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
            ErrorCode::OperationAborted
                | ErrorCode::DatabaseBusy
                | ErrorCode::DatabaseLocked
                | ErrorCode::CannotOpen
                | ErrorCode::SystemIoFailure
                | ErrorCode::DiskFull
                | ErrorCode::ReadOnly
                | ErrorCode::OutOfMemory
        )
    )
}

/// A connection to `path`, opened once SQLite's allocator is set (see
/// `memory.rs`). Every connection of this broker, and of its tests, is
/// opened here.
fn connect(path: &Path) -> rusqlite::Result<Connection> {
    memory::use_jemalloc();
    Connection::open(path)
}

fn open_connection(path: &Path) -> anyhow::Result<Connection> {
    let conn = connect(path)?;
    conn.busy_timeout(Duration::from_secs(10))?;
    // WAL: readers never block the writer. synchronous=FULL: a commit is on
    // disk before anyone is told it happened, so an acknowledged send or ack
    // survives power loss as well as a killed process. Group commit keeps the
    // cost of that to one fsync per batch; leases and key claims commit
    // without one (see `Job::synced`).
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
    // When the end fails too (an error rolled the whole transaction back),
    // the job's own error says more.
    let ended = conn.execute_batch(end).map_err(classify);
    match (result, ended) {
        (Err(e), _) => Err(e),
        (Ok(_), Err(e)) => Err(e),
        (ok, Ok(())) => ok,
    }
}

fn run_jobs(conn: Connection, rx: mpsc::Receiver<Job>, bells: &wake::Bells) {
    wake::rings_here(bells.on());
    let mut last_sweep = Instant::now();
    // The connection's `synchronous` level: FULL as it was opened, or
    // NORMAL; None when setting it failed and it is not known.
    let mut synced_now = Some(true);
    while let Ok(first) = rx.recv() {
        let mut group = vec![first];
        while group.len() < MAX_GROUP {
            match rx.try_recv() {
                Ok(job) => group.push(job),
                Err(_) => break,
            }
        }
        let sweep_now = last_sweep.elapsed() >= KEY_SWEEP_EVERY;
        if sweep_now {
            last_sweep = Instant::now();
        }
        // The jobs that need no fsync commit first, on their own, and are
        // answered at once: a lease or a key claim never waits for the
        // fsync of the sends and acks beside it (see `Job::synced`).
        // The key sweep goes with the last transaction.
        let (unsynced, synced): (Vec<Job>, Vec<Job>) = group.into_iter().partition(|j| !j.synced);
        let sweep_first = sweep_now && synced.is_empty();
        for (jobs, level, sweep) in [(unsynced, false, sweep_first), (synced, true, sweep_now)] {
            if jobs.is_empty() {
                continue;
            }
            if let Err(e) = set_synchronous(&conn, level, &mut synced_now) {
                // Nothing commits at a level it was not meant for: the jobs
                // answer with the error, and the callers try again.
                let e = Arc::new(e);
                for job in jobs {
                    (job.run)(Err(e.clone()))(Ok(()));
                }
                continue;
            }
            run_group(&conn, jobs, sweep, bells);
        }
    }
}

/// Make the connection commit with an fsync (`synchronous = FULL`) when
/// `synced`, and without one (`NORMAL`) otherwise, unless `now` says it
/// already does; `now` is then what is set, or None when setting failed.
fn set_synchronous(
    conn: &Connection,
    synced: bool,
    now: &mut Option<bool>,
) -> rusqlite::Result<()> {
    if *now == Some(synced) {
        return Ok(());
    }
    let level = if synced { "FULL" } else { "NORMAL" };
    let set = conn.pragma_update(None, "synchronous", level);
    if let Err(e) = &set {
        tracing::error!(error = %e, level, "SQLite broker could not set synchronous");
    }
    *now = set.is_ok().then_some(synced);
    set
}

/// Run `group` in one transaction, or in as many as errors make it take,
/// and answer each job only with what is true of it. Some errors (a full
/// disk, an I/O error, no memory) can make SQLite roll the whole transaction
/// back inside one job: then every job before it in that transaction is
/// answered as not written, and the jobs after it run in a new transaction.
/// Once the jobs are answered, the queues they rang are rung (see
/// `wake.rs`).
fn run_group(conn: &Connection, group: Vec<Job>, sweep_now: bool, bells: &wake::Bells) {
    let mut open: Vec<Reply> = Vec::new();
    let mut in_transaction = false;
    for job in group {
        if !in_transaction {
            if let Err(e) = conn.execute_batch("BEGIN IMMEDIATE") {
                tracing::error!(error = %e, "SQLite broker could not begin a transaction");
                // The job answers with this error; there is nothing to commit.
                (job.run)(Err(Arc::new(e)))(Ok(()));
                continue;
            }
            in_transaction = true;
        }
        let reply = (job.run)(Ok(conn));
        if conn.is_autocommit() {
            let lost = Arc::new(rolled_back());
            for earlier in open.drain(..) {
                earlier(Err(lost.clone()));
            }
            reply(Err(lost));
            in_transaction = false;
            continue;
        }
        open.push(reply);
    }
    if !in_transaction {
        wake::take_rung();
        return;
    }
    if sweep_now {
        sweep(conn);
    }
    let commit = conn.execute_batch("COMMIT").map_err(Arc::new);
    if commit.is_err() && !conn.is_autocommit() {
        let _ = conn.execute_batch("ROLLBACK");
    }
    let committed = commit.is_ok();
    for reply in open {
        reply(commit.clone());
    }
    // A queue rung by a job that was rolled back with an earlier
    // transaction of the group rings too: a receiver looks once more.
    let rung = wake::take_rung();
    if committed && !rung.is_empty() {
        bells.ring(&rung);
    }
}

/// The error of a job whose transaction another job's error rolled back.
fn rolled_back() -> rusqlite::Error {
    rusqlite::Error::SqliteFailure(
        rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_ABORT_ROLLBACK),
        Some("the group transaction was rolled back by another job's error; nothing of this job was written".into()),
    )
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

#[cfg(test)]
mod tests {
    use rusqlite::params;

    use super::*;

    #[test]
    fn errors_that_may_clear_up_are_unavailable_and_the_rest_refused() {
        let failure = |code| rusqlite::Error::SqliteFailure(rusqlite::ffi::Error::new(code), None);
        for code in [
            rusqlite::ffi::SQLITE_BUSY,
            rusqlite::ffi::SQLITE_LOCKED,
            rusqlite::ffi::SQLITE_FULL,
            rusqlite::ffi::SQLITE_IOERR,
            rusqlite::ffi::SQLITE_READONLY,
            rusqlite::ffi::SQLITE_CANTOPEN,
        ] {
            assert!(classify(failure(code)).is_unavailable(), "code {code}");
        }
        for code in [
            rusqlite::ffi::SQLITE_CONSTRAINT,
            rusqlite::ffi::SQLITE_MISMATCH,
            rusqlite::ffi::SQLITE_CORRUPT,
        ] {
            let e = classify(failure(code));
            assert!(!e.is_unavailable(), "code {code}");
            assert!(std::error::Error::source(&e).is_some(), "code {code}");
        }
        assert!(!classify(rusqlite::Error::QueryReturnedNoRows).is_unavailable());
    }

    /// A job that stores `value` under `key` in the key-value table.
    fn put(key: usize, value: Vec<u8>) -> (Job, oneshot::Receiver<Result<()>>) {
        job(
            move |c| {
                c.execute(
                    "INSERT INTO kv (scope, key, value) VALUES ('t', ?1, ?2)",
                    params![key.to_string(), value],
                )
                .map_err(classify)?;
                Ok(())
            },
            true,
        )
    }

    fn written(conn: &Connection, key: usize) -> bool {
        conn.query_row(
            "SELECT COUNT(*) FROM kv WHERE scope = 't' AND key = ?1",
            [key.to_string()],
            |r| r.get::<_, i64>(0),
        )
        .unwrap()
            == 1
    }

    /// Run `jobs` as one group and check that each job's answer says
    /// exactly whether it was written. Returns the answers.
    fn run_and_check(
        conn: &Connection,
        jobs: Vec<(Job, oneshot::Receiver<Result<()>>)>,
    ) -> Vec<Result<()>> {
        let (jobs, answers): (Vec<Job>, Vec<_>) = jobs.into_iter().unzip();
        run_group(conn, jobs, false, &wake::Bells::off());
        answers
            .into_iter()
            .enumerate()
            .map(|(i, mut rx)| {
                let answer = rx.try_recv().expect("every job is answered");
                assert_eq!(answer.is_ok(), written(conn, i), "job {i}: {answer:?}");
                answer
            })
            .collect()
    }

    /// The `synchronous` level each of `jobs` (true: synced) commits at,
    /// and the order they ran in, run by the broker thread's loop as one
    /// group.
    fn levels_in_one_group(jobs: &[bool]) -> Vec<(i64, usize)> {
        let dir = tempfile::tempdir().unwrap();
        let conn = open_connection(&dir.path().join("b.db")).unwrap();
        let ran = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let (tx, rx) = mpsc::channel();
        let answers: Vec<_> = jobs
            .iter()
            .map(|&synced| {
                let ran = ran.clone();
                let (job, answer) = job(
                    move |c| {
                        let level = c
                            .query_row("PRAGMA synchronous", [], |r| r.get::<_, i64>(0))
                            .map_err(classify)?;
                        Ok((level, ran.fetch_add(1, std::sync::atomic::Ordering::SeqCst)))
                    },
                    synced,
                );
                tx.send(job).unwrap();
                answer
            })
            .collect();
        drop(tx);
        // Every job is waiting before the loop starts, so they make one
        // group, and the loop ends when the channel is empty.
        run_jobs(conn, rx, &wake::Bells::off());
        answers
            .into_iter()
            .map(|mut a| a.try_recv().unwrap().unwrap())
            .collect()
    }

    #[test]
    fn the_jobs_that_need_no_fsync_commit_first_without_one() {
        const NORMAL: i64 = 1;
        const FULL: i64 = 2;
        assert_eq!(
            levels_in_one_group(&[false, false]),
            [(NORMAL, 0), (NORMAL, 1)]
        );
        // Unsynced jobs run first, in their order, then the synced ones.
        assert_eq!(
            levels_in_one_group(&[true, false, true, false]),
            [(FULL, 2), (NORMAL, 0), (FULL, 3), (NORMAL, 1)]
        );
        assert_eq!(levels_in_one_group(&[true]), [(FULL, 0)]);
    }

    #[test]
    fn a_job_that_rolls_the_transaction_back_takes_only_what_came_before() {
        let dir = tempfile::tempdir().unwrap();
        let conn = open_connection(&dir.path().join("b.db")).unwrap();
        let rollback = job(|c| c.execute_batch("ROLLBACK").map_err(classify), true);
        let jobs = vec![
            put(0, vec![1]),
            put(1, vec![1]),
            (rollback.0, rollback.1),
            put(3, vec![1]),
            put(4, vec![1]),
        ];
        let answers = run_and_check(&conn, jobs);
        let ok: Vec<bool> = answers.iter().map(Result::is_ok).collect();
        assert_eq!(ok, [false, false, false, true, true]);
        let lost = crate::error::chain(answers[0].as_ref().unwrap_err());
        assert!(
            lost.contains("rolled back by another job's error"),
            "{lost}"
        );
    }

    #[test]
    fn a_group_in_which_the_disk_fills_answers_every_job_truthfully() {
        let dir = tempfile::tempdir().unwrap();
        let conn = open_connection(&dir.path().join("b.db")).unwrap();
        let pages: i64 = conn
            .query_row("PRAGMA page_count", [], |r| r.get(0))
            .unwrap();
        conn.pragma_update(None, "max_page_count", pages + 16)
            .unwrap();
        let sizes = [100, 100, 4 << 20, 100, 100];
        let jobs = sizes
            .iter()
            .enumerate()
            .map(|(i, &n)| put(i, vec![7; n]))
            .collect();
        let answers = run_and_check(&conn, jobs);
        let full = crate::error::chain(answers[2].as_ref().unwrap_err());
        assert!(full.contains("full"), "{full}");
        assert!(answers[4].is_ok(), "the jobs after it still commit");
    }
}
