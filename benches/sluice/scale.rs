//! Many handlers on one host: `sluice run` serving 10, 100 and 1,000
//! copies of Rust `hello`, each on a queue of its own, from a warm compile
//! cache, in reuse and fresh mode, on SQLite and Redis. For each: how long
//! until every handler serves, the host's resident memory then, its CPU
//! while idle, and a drain of [`DRAIN`] messages spread evenly over all
//! its queues against the same drain on one queue, in the same run.

use std::io::BufRead;
use std::process::{Child, Command, Stdio};

use super::lowload::cpu_of;
use super::*;

/// Handlers per point.
const COUNTS: [usize; 3] = [10, 100, 1000];
/// Messages per drain.
const DRAIN: usize = 100_000;
/// How long an idle host is watched, after [`SETTLE`].
const IDLE_WINDOW: Duration = Duration::from_secs(10);
const SETTLE: Duration = Duration::from_secs(3);

/// A host serving `n` copies of `hello` (`h0000`...) in `mode`, its log
/// in `dir`.
struct Host {
    child: Child,
    log: PathBuf,
}

impl Drop for Host {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn queue(i: usize) -> String {
    format!("h{i:04}")
}

/// A handlers directory in `dir` with `n` copies of `hello` in `mode`.
fn handlers(dir: &std::path::Path, n: usize, mode: &str) -> PathBuf {
    let handlers = dir.join(format!("handlers-{n}-{mode}"));
    std::fs::create_dir_all(&handlers).unwrap();
    let hello = guest_in("rust", "hello");
    for i in 0..n {
        std::fs::copy(&hello, handlers.join(format!("{}.wasm", queue(i)))).unwrap();
        std::fs::write(
            handlers.join(format!("{}.toml", queue(i))),
            format!("instance_mode = \"{mode}\"\n"),
        )
        .unwrap();
    }
    handlers
}

/// Start `sluice run` on `url` serving the `n` handlers in `handlers`, the
/// compile cache in `cache`, logging to `log`; returns once every handler
/// serves, with how long that took.
fn start(
    url: &str,
    handlers: &std::path::Path,
    cache: &std::path::Path,
    log: PathBuf,
    n: usize,
) -> (Host, Duration) {
    let started = Instant::now();
    let child = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["--broker", url, "run", "--handlers"])
        .arg(handlers)
        .args(["--admin", "127.0.0.1:0"])
        .env("XDG_CACHE_HOME", cache)
        .env("RUST_LOG", "info")
        .current_dir(handlers.parent().unwrap())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let mut host = Host { child, log };
    while serving(&host.log) < n {
        assert!(
            host.child.try_wait().unwrap().is_none(),
            "the host exited; see {}",
            host.log.display()
        );
        assert!(
            started.elapsed() < Duration::from_secs(300),
            "{} of {n} handlers serving after 300 s",
            serving(&host.log)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    (host, started.elapsed())
}

/// Lines of `log` saying a handler serves.
fn serving(log: &std::path::Path) -> usize {
    let Ok(file) = std::fs::File::open(log) else {
        return 0;
    };
    std::io::BufReader::new(file)
        .lines()
        .map_while(Result::ok)
        .filter(|l| l.contains("handler serving"))
        .count()
}

/// Resident memory of process `pid`, in MiB.
fn rss_mib(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    kib / 1024.0
}

/// Publish [`DRAIN`] messages over the first `queues` queues
/// (round-robin), then start a host serving the `n` handlers in `handlers`
/// and time it until every message is done: messages a second, the host's
/// start included (its handlers drain as they load).
async fn drain_rate(
    broker: &Arc<dyn Broker>,
    (url, handlers, cache, log): (&str, &std::path::Path, &std::path::Path, PathBuf),
    n: usize,
    queues: usize,
) -> f64 {
    let done_before = done(broker, n).await;
    for chunk in (0..DRAIN).collect::<Vec<_>>().chunks(1000) {
        let batch = chunk
            .iter()
            .map(|&i| NewMessage::new(queue(i % queues), format!("message {i}")))
            .collect();
        broker.publish(batch).await.unwrap();
    }
    let (url, handlers, cache) = (url.to_string(), handlers.to_path_buf(), cache.to_path_buf());
    let started = Instant::now();
    let (host, _) = tokio::task::spawn_blocking(move || start(&url, &handlers, &cache, log, n))
        .await
        .unwrap();
    let target = done_before + DRAIN as u64;
    loop {
        let now = done(broker, n).await;
        if now >= target {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(600),
            "{} of {DRAIN} done after 600 s; see {}",
            now - done_before,
            host.log.display()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    DRAIN as f64 / started.elapsed().as_secs_f64()
}

/// Messages done over the first `queues` queues.
async fn done(broker: &Arc<dyn Broker>, queues: usize) -> u64 {
    let names: std::collections::HashSet<String> = (0..queues).map(queue).collect();
    broker
        .stats()
        .await
        .unwrap()
        .iter()
        .filter(|s| names.contains(&s.queue))
        .map(|s| s.done)
        .sum()
}

/// The resident memory (MiB) of a host that has just started serving, and
/// the share of a core (%) it then uses while idle over [`IDLE_WINDOW`].
async fn at_rest(host: &Host) -> (f64, f64) {
    let pid = host.child.id();
    tokio::time::sleep(SETTLE).await;
    let rss = rss_mib(pid);
    let before = cpu_of(pid);
    tokio::time::sleep(IDLE_WINDOW).await;
    let idle = (cpu_of(pid) - before) / IDLE_WINDOW.as_secs_f64() * 100.0;
    (rss, idle)
}

/// One point: `n` handlers in `mode` on `url`, through `broker`: a host
/// started to measure it at rest, then one per drain.
async fn point(
    name: &str,
    broker: Arc<dyn Broker>,
    url: &str,
    dir: &std::path::Path,
    cache: &std::path::Path,
    n: usize,
    mode: &str,
) {
    let handlers = handlers(dir, n, mode);
    let log = |what: &str| dir.join(format!("host-{name}-{n}-{mode}-{what}.log"));
    let (u, h, c, l) = (
        url.to_string(),
        handlers.clone(),
        cache.to_path_buf(),
        log("rest"),
    );
    let (host, ready) = tokio::task::spawn_blocking(move || start(&u, &h, &c, l, n))
        .await
        .unwrap();
    let (rss, idle) = at_rest(&host).await;
    drop(host);
    let spread = drain_rate(&broker, (url, &handlers, cache, log("spread")), n, n).await;
    let one = drain_rate(&broker, (url, &handlers, cache, log("one")), n, 1).await;
    println!(
        "scale   {name:<6} {n:>5} hello {mode:<5}: ready in {:>6.2} s, RSS {rss:>6.1} MiB, idle {idle:>5.2}% of a core; drain of {DRAIN} over {n} queues {spread:>7.0}/s, on one {one:>7.0}/s, ratio {:.2} (targets at 1000: ready <= 5 s, RSS <= 512 MiB, idle <= 2%, ratio >= 0.8)",
        ready.as_secs_f64(),
        spread / one
    );
    let group = format!("{n} {mode}");
    record::figure(
        "scale ready",
        broker_name(name),
        &group,
        "s",
        ready.as_secs_f64(),
    );
    record::figure("scale rss", broker_name(name), &group, "MiB", rss);
    record::figure("scale idle", broker_name(name), &group, "% of a core", idle);
    record::figure(
        "scale drain ratio",
        broker_name(name),
        &group,
        "x",
        spread / one,
    );
}

/// 1,000 handlers in reuse mode on PostgreSQL: ready, resident memory and
/// idle CPU (no drains).
async fn postgres_idle(dir: &std::path::Path, cache: &std::path::Path) {
    let pg = sluice_broker::testkit::PgServer::start_durable();
    let n = *COUNTS.last().unwrap();
    let handlers = handlers(&dir.join("pg"), n, "reuse");
    let (url, log, cache2) = (pg.url(), dir.join("host-postgres.log"), cache.to_path_buf());
    let (host, ready) =
        tokio::task::spawn_blocking(move || start(&url, &handlers, &cache2, log, n))
            .await
            .unwrap();
    let (rss, idle) = at_rest(&host).await;
    println!(
        "scale   postgres {n:>5} hello reuse: ready in {:>6.2} s, RSS {rss:>6.1} MiB, idle {idle:>5.2}% of a core (targets: ready <= 5 s, RSS <= 512 MiB, idle <= 2%)",
        ready.as_secs_f64()
    );
    let group = format!("{n} reuse");
    record::figure(
        "scale ready",
        broker_name("postgres"),
        &group,
        "s",
        ready.as_secs_f64(),
    );
    record::figure("scale rss", broker_name("postgres"), &group, "MiB", rss);
    record::figure(
        "scale idle",
        broker_name("postgres"),
        &group,
        "% of a core",
        idle,
    );
}

/// The section: every count and mode, on SQLite and Redis, then 1,000
/// handlers idle on PostgreSQL. The compile cache is warmed by a first
/// host serving one copy.
pub async fn bench() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let redis = RedisProcess::start();
    for name in ["sqlite", "redis"] {
        for &n in &COUNTS {
            for mode in ["reuse", "fresh"] {
                let (url, broker): (String, Arc<dyn Broker>) = match name {
                    "sqlite" => {
                        let path = dir.path().join(format!("scale-{n}-{mode}.db"));
                        let url = format!("sqlite://{}", path.display());
                        (url, Arc::new(SqliteBroker::open(&path).unwrap()))
                    }
                    _ => (redis.url.clone(), redis.fresh_broker().await),
                };
                if n == COUNTS[0] && mode == "reuse" && name == "sqlite" {
                    // Warm the compile cache.
                    let warm = dir.path().join("warm");
                    let (url, h, c) = (url.clone(), handlers(&warm, 1, "reuse"), cache.clone());
                    let log = warm.join("host.log");
                    tokio::task::spawn_blocking(move || drop(start(&url, &h, &c, log, 1)))
                        .await
                        .unwrap();
                }
                point(name, broker, &url, dir.path(), &cache, n, mode).await;
            }
        }
    }
    postgres_idle(dir.path(), &cache).await;
}
