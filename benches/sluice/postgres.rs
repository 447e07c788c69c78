//! The PostgreSQL broker in the harness, on a server of the harness's own
//! as durable as a production one (`fsync` and `synchronous_commit` on):
//!
//! * `postgres`: its drains (native, `hello` fresh and reuse; idempotency
//!   on, as by default) next to the Redis and SQLite `hello` reuse drains of
//!   the same run, with the ratios the targets name.
//! * `bloat`: whether deleting done messages keeps the hot table small: its
//!   size after a long drain against its size early in the same drain.

use sluice_broker::testkit::PgServer;

use super::*;

/// The drains' settings: many calls and a deep prefetch, as on Redis, so
/// that round trips to the server overlap.
const FAST: Settings = Settings {
    concurrency: Some(64),
    prefetch: Some(4096),
};

/// An empty broker on `server`: its schema dropped, then made again by
/// connecting.
async fn fresh(server: &PgServer) -> Arc<dyn Broker> {
    server.psql("DROP SCHEMA IF EXISTS sluice CASCADE");
    Arc::new(PgBroker::connect(&server.url()).await.unwrap())
}

pub async fn drains(runtime: &Runtime, args: &Args) {
    let n = args.pg_messages;
    let server = PgServer::start_durable();
    println!(
        "postgres: {}; synchronous_commit {}, fsync {}",
        server.psql("SELECT version()"),
        server.psql("SHOW synchronous_commit"),
        server.psql("SHOW fsync"),
    );
    SERVER.with(|s| *s.borrow_mut() = Some((server.pid(), server.url())));
    let pg = super::drains(
        runtime,
        "postgres",
        n,
        FAST,
        args.rounds,
        "native,fresh,reuse",
        async || fresh(&server).await,
    )
    .await;
    SERVER.with(|s| *s.borrow_mut() = None);
    let reuse = |figures: &[(&str, Drained)]| {
        figures
            .iter()
            .find(|(mode, _)| *mode == "reuse")
            .map(|(_, d)| d.rate)
    };
    let Some(pg_reuse) = reuse(&pg) else {
        return;
    };
    // The baselines, at the same number of messages.
    let redis = RedisProcess::start();
    let redis_reuse = one_reuse(runtime, "redis", n, FAST, async || {
        redis.fresh_broker().await
    })
    .await;
    let defaults = Settings {
        concurrency: None,
        prefetch: None,
    };
    let sqlite_reuse = one_reuse(runtime, "sqlite", n, defaults, async || {
        super::temp_sqlite()
    })
    .await;
    println!(
        "ratio   postgres hello reuse {:>9.2} × redis hello reuse (target ≥ 0.5 ×)",
        pg_reuse / redis_reuse
    );
    println!(
        "ratio   postgres hello reuse {:>9.2} × sqlite hello reuse (target ≥ 3 ×)",
        pg_reuse / sqlite_reuse
    );
}

/// One `hello` reuse drain of `n` messages on the broker `open` makes.
async fn one_reuse(
    runtime: &Runtime,
    name: &str,
    n: usize,
    base: Settings,
    open: impl AsyncFnOnce() -> Arc<dyn Broker>,
) -> f64 {
    let handler = Arc::new(load(runtime, "hello", InstanceMode::Reuse));
    let spec = tuned(handler.spec.clone(), base);
    let label = format!("{name} hello reuse");
    drain(&label, open().await, handler, spec, n, Observed::Off)
        .await
        .rate
}

/// Messages the bloat check drains in all, and how many are waiting at
/// any time (the publisher tops the queue up to this).
const BLOAT_TOTAL: u64 = 1_000_000;
const BLOAT_BACKLOG: u64 = 10_000;

/// Drain [`BLOAT_TOTAL`] messages through a native no-op while a publisher
/// keeps [`BLOAT_BACKLOG`] waiting, and print the size of the hot table
/// (`messages`, with its indexes and TOAST) once the first backlog's worth
/// is done and again at the end, with what autovacuum did meanwhile.
pub async fn bloat(runtime: &Runtime) {
    let server = PgServer::start_durable();
    let broker = fresh(&server).await;
    let mut spec = tuned(
        load(runtime, "hello", InstanceMode::Reuse).spec.clone(),
        FAST,
    );
    // The idempotency keys are remembered for their retention by design;
    // this measures the messages alone.
    spec.idempotency.enabled = false;
    let worker = QueueWorker::new(broker.clone(), Arc::new(NativeNoop), spec);
    let stats = worker.stats.clone();
    let handled = &stats.handled;
    let (stop_tx, stop_rx) = watch::channel(false);
    let task = tokio::spawn(worker.serve(stop_rx, Duration::from_secs(10)));
    let size = || {
        server
            .psql("SELECT pg_total_relation_size('sluice.messages')")
            .parse::<u64>()
            .unwrap()
    };
    let start = Instant::now();
    let (mut published, mut early) = (0u64, None);
    let payload = vec![b'x'; 100];
    while handled.load(Ordering::Relaxed) < BLOAT_TOTAL {
        let done = handled.load(Ordering::Relaxed);
        if published < BLOAT_TOTAL && published - done < BLOAT_BACKLOG {
            let batch = (published - done).min(BLOAT_TOTAL - published).max(1000);
            let messages = (0..batch)
                .map(|_| NewMessage::new("hello", payload.clone()))
                .collect();
            broker.publish(messages).await.unwrap();
            published += batch;
        } else {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        if early.is_none() && done >= BLOAT_BACKLOG {
            early = Some(size());
        }
    }
    let elapsed = start.elapsed();
    let _ = stop_tx.send(true);
    task.await.unwrap();
    let late = size();
    let early = early.unwrap();
    let vacuums = server.psql(
        "SELECT autovacuum_count, vacuum_count, n_dead_tup FROM pg_stat_user_tables
         WHERE schemaname = 'sluice' AND relname = 'messages'",
    );
    println!(
        "bloat   postgres: {BLOAT_TOTAL} messages in {:.1} s, {BLOAT_BACKLOG} waiting at a time; \
         messages table {} KiB after {BLOAT_BACKLOG} done, {} KiB after {BLOAT_TOTAL}: {:.2} × \
         (autovacuums | vacuums | dead rows now: {vacuums})",
        elapsed.as_secs_f64(),
        early / 1024,
        late / 1024,
        late as f64 / early as f64
    );
}

thread_local! {
    /// The server the drains of this thread run on, while they do: its
    /// postmaster's pid and the broker's URL.
    static SERVER: std::cell::RefCell<Option<(u32, String)>> =
        const { std::cell::RefCell::new(None) };
}

/// What the PostgreSQL server of the drains running now has done so far:
/// the CPU its processes used (from `/proc`), and the WAL it wrote and the
/// transactions it committed (from `pg_stat_wal` and `pg_stat_database`).
pub struct PgSnapshot {
    pid: u32,
    url: String,
    cpu: f64,
    wal: Wal,
}

/// Counters of `pg_stat_wal` and `pg_stat_database`.
#[derive(Clone, Copy)]
struct Wal {
    records: i64,
    fpi: i64,
    bytes: f64,
    commits: i64,
}

impl PgSnapshot {
    /// `None` outside the PostgreSQL drains.
    pub async fn take() -> Option<Self> {
        let (pid, url) = SERVER.with(|s| s.borrow().clone())?;
        let wal = wal(&url).await;
        Some(PgSnapshot {
            cpu: server_cpu(pid),
            pid,
            url,
            wal,
        })
    }

    /// What the server did since `self`, per message of `n`, as a line for
    /// the drain's report. `cpu` is the server's CPU when the drain ended:
    /// the statistics are read later, once the server's sessions have
    /// reported theirs (each does at most once a second, when idle).
    pub async fn since(&self, cpu: f64, n: usize) -> String {
        tokio::time::sleep(Duration::from_millis(2500)).await;
        let now = wal(&self.url).await;
        let per = |x: f64| x / n as f64;
        format!(
            "\n        postgres: server CPU {:.1} µs/msg, WAL {:.1} records/msg, {:.0} bytes/msg \
             ({:.3} full-page images/msg), {:.3} commits/msg",
            per((cpu - self.cpu) * 1e6),
            per((now.records - self.wal.records) as f64),
            per(now.bytes - self.wal.bytes),
            per((now.fpi - self.wal.fpi) as f64),
            per((now.commits - self.wal.commits) as f64),
        )
    }

    /// The server's CPU now, for [`PgSnapshot::since`].
    pub fn cpu_now(&self) -> f64 {
        server_cpu(self.pid)
    }
}

async fn wal(url: &str) -> Wal {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap_or_else(|e| panic!("connecting to {url} for its statistics: {e}"));
    let connection = tokio::spawn(connection);
    let row = client
        .query_one(
            "SELECT wal_records, wal_fpi, wal_bytes::float8,
                    (SELECT xact_commit FROM pg_stat_database WHERE datname = current_database())
             FROM pg_stat_wal",
            &[],
        )
        .await
        .unwrap_or_else(|e| panic!("reading the WAL statistics of {url}: {e}"));
    drop(client);
    let _ = connection.await;
    Wal {
        records: row.get(0),
        fpi: row.get(1),
        bytes: row.get(2),
        commits: row.get(3),
    }
}

/// CPU seconds used by a postmaster and its processes: those alive now,
/// and those that have ended (which it has waited for: its children's
/// times in `/proc/PID/stat`).
fn server_cpu(postmaster: u32) -> f64 {
    // Fields after the command's closing parenthesis, counted from 0 for
    // the state: ppid is 1, utime 11, stime 12, cutime 13, cstime 14.
    let fields = |pid: &str| -> Option<Vec<u64>> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        let rest = &stat[stat.rfind(')')? + 2..];
        Some(rest.split(' ').map(|f| f.parse().unwrap_or(0)).collect())
    };
    let own = fields(&postmaster.to_string())
        .unwrap_or_else(|| panic!("the postmaster {postmaster} is not running"));
    let mut ticks = own[11] + own[12] + own[13] + own[14];
    for entry in std::fs::read_dir("/proc").expect("reading /proc") {
        let name = entry.expect("an entry of /proc").file_name();
        let Some(pid) = name
            .to_str()
            .filter(|p| p.bytes().all(|b| b.is_ascii_digit()))
        else {
            continue;
        };
        if let Some(f) = fields(pid).filter(|f| f[1] == postmaster as u64) {
            ticks += f[11] + f[12];
        }
    }
    ticks as f64 / unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64
}
