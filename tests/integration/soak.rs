//! The soak: two hosts drain a steady offered load of orders (half the
//! rate one host was measured to drain, in the same run) for a while, with
//! follow-ups, while faults land on a schedule: one host SIGKILLed and
//! started again, the broker's server restarted, every connection cut
//! (through a proxy), the handler hot-swapped between its Rust and
//! JavaScript builds. Then nothing may be lost, nothing completed twice,
//! every stall the watchdog reported must have cleared, and the host that
//! was never killed must hold its open files flat after warm-up, and its
//! memory too on a run of ten minutes or more.
//!
//! `SLUICE_SOAK_MINUTES` sets the length (default 1, what `scripts/test`
//! runs); `SLUICE_SOAK_FAULTS` narrows the faults to a comma-separated list
//! of `kill`, `restart`, `cut`, `swap`, or `none`. Each run writes its
//! samples (time, done, ready, RSS and open files of the steady host) to
//! `soak-BROKER.csv` in the target directory. `scripts/soak --minutes M --broker KIND` runs
//! one.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use sluice::broker::message::NewMessage;
use sluice_broker::testkit::RedisServer;

use crate::proxy::Proxy;
use crate::support::{Backend, Env, guest, repo_root, wait_until};

/// Orders that take about a millisecond, with follow-ups in `shipping`.
const ORDERS: &str = "lease = \"5s\"\nconcurrency = 8\nprefetch = 32\n[limits]\ntimeout = \"2s\"\n[config]\nfollowup_queue = \"shipping\"\nwork_ms = 1\n";
/// The watchdog's bound in the soak.
const STALL_AFTER: &str = "10s";

/// A host process and its log; killed when dropped.
struct Host {
    child: Child,
    log: PathBuf,
}

impl Host {
    fn start(env: &Env, url: &str, log: PathBuf) -> Host {
        let handlers = env.handlers.to_str().unwrap().to_string();
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .unwrap();
        let child = env
            .command(&["run", "--handlers", &handlers, "--broker", url])
            .stdout(Stdio::null())
            .stderr(file)
            .spawn()
            .expect("spawning sluice run");
        Host { child, log }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        self.kill();
    }
}

/// What the soak is run on, and how its faults reach it.
struct Rig {
    env: Env,
    /// Between the hosts and a server broker; none on SQLite.
    proxy: Option<Proxy>,
    url: String,
}

impl Rig {
    fn new(env: Env) -> Rig {
        let url = env.broker_url();
        if matches!(env.backend, Backend::Sqlite) {
            return Rig {
                env,
                proxy: None,
                url,
            };
        }
        let (proxy, through) = Proxy::in_front_of(&url, Duration::ZERO);
        Rig {
            env,
            proxy: Some(proxy),
            url: through,
        }
    }

    /// The faults this broker can take, narrowed by `SLUICE_SOAK_FAULTS`.
    fn faults(&self) -> Vec<&'static str> {
        let all: &[&str] = if self.proxy.is_some() {
            &["kill", "restart", "cut", "swap"]
        } else {
            &["kill", "swap"]
        };
        let wanted = std::env::var("SLUICE_SOAK_FAULTS").unwrap_or_default();
        if wanted.trim().is_empty() {
            return all.to_vec();
        }
        let wanted: Vec<&str> = wanted.split(',').map(str::trim).collect();
        for w in &wanted {
            assert!(
                *w == "none" || ["kill", "restart", "cut", "swap"].contains(w),
                "SLUICE_SOAK_FAULTS: unknown fault {w:?}; use kill, restart, cut, swap or none"
            );
        }
        all.iter().copied().filter(|f| wanted.contains(f)).collect()
    }

    /// Restart the broker's server in place.
    fn restart_broker(&mut self) {
        match &mut self.env.backend {
            Backend::Redis(server) => {
                server.kill();
                std::thread::sleep(Duration::from_millis(300));
                server.restart();
            }
            Backend::Postgres(server) => server.restart(),
            _ => unreachable!("no server to restart"),
        }
    }
}

/// Resident memory and open files of a process.
fn usage(pid: u32) -> (u64, usize) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let rss_kib = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        .unwrap_or(0);
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count());
    (rss_kib * 1024, fds)
}

/// The least-squares slope of `points` (seconds, bytes), in bytes a second.
fn slope(points: &[(f64, f64)]) -> f64 {
    let n = points.len() as f64;
    if n < 2.0 {
        return 0.0;
    }
    let (mx, my) = points
        .iter()
        .fold((0.0, 0.0), |(x, y), (a, b)| (x + a / n, y + b / n));
    let (num, den) = points.iter().fold((0.0, 0.0), |(num, den), (x, y)| {
        (num + (x - mx) * (y - my), den + (x - mx) * (x - mx))
    });
    if den == 0.0 { 0.0 } else { num / den }
}

/// Ids whose publish failed and was made again: the failed one may have
/// been written all the same, so each may be completed twice.
type Uncertain = Arc<std::sync::Mutex<std::collections::BTreeSet<u64>>>;

/// Publish `rate` orders a second, numbered from `next`, until `stop`.
fn offer(
    url: String,
    rate: u64,
    next: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    uncertain: Uncertain,
) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let broker = rt.block_on(sluice::broker::connect(&url)).unwrap();
    let tick = Duration::from_millis(100);
    let per_tick = (rate / 10).max(1);
    let mut due = Instant::now();
    while !stop.load(Ordering::SeqCst) {
        let first = next.load(Ordering::SeqCst);
        let batch = (first..first + per_tick)
            .map(|i| NewMessage::new("orders", format!(r#"{{"id": {i}, "qty": 1}}"#)))
            .collect();
        // The broker may be restarting: the same batch is offered again.
        if rt.block_on(broker.publish(batch)).is_ok() {
            next.fetch_add(per_tick, Ordering::SeqCst);
        } else {
            uncertain.lock().unwrap().extend(first..first + per_tick);
        }
        due += tick;
        std::thread::sleep(due.saturating_duration_since(Instant::now()));
    }
}

/// Orders a second one host drains: 2,000 preloaded, timed.
fn measure_max(rig: &Rig, dir: &Path) -> u64 {
    const N: u64 = 2000;
    rig.env.publish(
        (0..N)
            .map(|i| NewMessage::new("orders", format!(r#"{{"id": {i}, "qty": 1}}"#)))
            .collect(),
    );
    let started = Instant::now();
    let _host = Host::start(&rig.env, &rig.url, dir.join("measure.log"));
    wait_until(Duration::from_secs(120), "the measuring drain", || {
        rig.env.count("orders", "done") >= N
    });
    (N as f64 / started.elapsed().as_secs_f64()) as u64
}

fn soak(env: Env, name: &str) {
    let minutes: f64 = std::env::var("SLUICE_SOAK_MINUTES")
        .ok()
        .map(|m| m.parse().expect("SLUICE_SOAK_MINUTES: a number of minutes"))
        .unwrap_or(1.0);
    let run = Duration::from_secs_f64(minutes * 60.0);
    let mut rig = Rig::new(env);
    rig.env.deploy("orders", "orders", Some(ORDERS));
    std::fs::write(
        rig.env.dir.path().join("sluice.toml"),
        format!("stall_after = \"{STALL_AFTER}\"\nshutdown_grace = \"5s\"\n"),
    )
    .unwrap();
    let dir = rig.env.dir.path().to_path_buf();
    let max = measure_max(&rig, &dir);
    let rate = (max / 2).clamp(20, 5000);
    let next = Arc::new(AtomicU64::new(2000));
    let stop = Arc::new(AtomicBool::new(false));
    let uncertain = Uncertain::default();
    let publisher = {
        let (url, next, stop) = (rig.env.broker_url(), next.clone(), stop.clone());
        let uncertain = uncertain.clone();
        std::thread::spawn(move || offer(url, rate, next, stop, uncertain))
    };
    let mut hosts = [
        Host::start(&rig.env, &rig.url, dir.join("host-a.log")),
        Host::start(&rig.env, &rig.url, dir.join("host-b.log")),
    ];
    let faults = rig.faults();
    let every = (run / 6).clamp(Duration::from_secs(8), Duration::from_secs(30));
    let samples = run_faults(&mut rig, &mut hosts, &faults, run, every);
    stop.store(true, Ordering::SeqCst);
    publisher.join().unwrap();
    let offered = next.load(Ordering::SeqCst);
    wait_until(Duration::from_secs(180), "the backlog drained", || {
        rig.env.stats_if_reachable().is_some_and(|s| {
            let q = &s["orders"];
            q["done"].as_u64() >= Some(offered) && q["ready"] == 0 && q["in_flight"] == 0
        })
    });
    let uncertain = uncertain.lock().unwrap().clone();
    let logs: Vec<String> = hosts
        .iter()
        .map(|h| std::fs::read_to_string(&h.log).unwrap_or_default())
        .collect();
    drop(hosts);
    let run = Run {
        name,
        offered,
        uncertain,
        max,
        rate,
        minutes,
    };
    verdict(&rig.env, &run, &samples, &logs);
}

/// A sample: seconds since the start, done, ready, RSS and open files of
/// the steady host.
type Sample = (f64, u64, u64, u64, usize);

/// Serve for `run`, a fault every `every` (in turn), sampling every second.
fn run_faults(
    rig: &mut Rig,
    hosts: &mut [Host; 2],
    faults: &[&str],
    run: Duration,
    every: Duration,
) -> Vec<Sample> {
    let started = Instant::now();
    let mut samples = Vec::new();
    let mut next_fault = every;
    let mut turn = 0;
    let mut rust = true;
    while started.elapsed() < run {
        std::thread::sleep(Duration::from_secs(1));
        let (rss, fds) = usage(hosts[1].pid());
        let counts = rig.env.stats_if_reachable().map(|s| {
            let q = &s["orders"];
            (
                q["done"].as_u64().unwrap_or(0),
                q["ready"].as_u64().unwrap_or(0),
            )
        });
        let (done, ready) = counts.unwrap_or((0, 0));
        samples.push((started.elapsed().as_secs_f64(), done, ready, rss, fds));
        if faults.is_empty() || started.elapsed() < next_fault {
            continue;
        }
        next_fault += every;
        match faults[turn % faults.len()] {
            "kill" => {
                let log = hosts[0].log.clone();
                hosts[0].kill();
                hosts[0] = Host::start(&rig.env, &rig.url, log);
            }
            "restart" => rig.restart_broker(),
            "cut" => rig.proxy.as_ref().unwrap().cut(),
            "swap" => {
                rust = !rust;
                let file = if rust {
                    guest("orders")
                } else {
                    repo_root().join("guests/out/js/orders.wasm")
                };
                let to = rig.env.handlers.join("orders.wasm");
                let tmp = rig.env.handlers.join(".orders.wasm.new");
                std::fs::copy(&file, &tmp).unwrap();
                std::fs::rename(&tmp, &to).unwrap();
            }
            other => unreachable!("{other}"),
        }
        turn += 1;
    }
    samples
}

/// What a soak offered.
struct Run<'a> {
    name: &'a str,
    offered: u64,
    uncertain: std::collections::BTreeSet<u64>,
    max: u64,
    rate: u64,
    minutes: f64,
}

/// Check and report the run.
fn verdict(env: &Env, run: &Run, samples: &[Sample], logs: &[String]) {
    let Run {
        name,
        offered,
        max,
        rate,
        minutes,
        ..
    } = *run;
    let stats = env.stats();
    let orders = &stats["orders"];
    let mut completions: BTreeMap<u64, usize> = BTreeMap::new();
    for d in env.drain("shipping") {
        let body: serde_json::Value = serde_json::from_slice(&d.payload).unwrap();
        *completions
            .entry(body["order"].as_u64().unwrap())
            .or_default() += 1;
    }
    let lost = (0..offered)
        .filter(|i| !completions.contains_key(i))
        .count();
    let twice = completions
        .iter()
        .filter(|&(id, &n)| n > 1 && !run.uncertain.contains(id))
        .count();
    let stalls: usize = logs.iter().map(|l| l.matches("is stalled").count()).sum();
    let cleared: usize = logs.iter().map(|l| l.matches("moves again").count()).sum();
    let warm = samples.len() / 5;
    let (warm_fds, after_fds) = (
        samples[..warm.max(1)]
            .iter()
            .map(|s| s.4)
            .max()
            .unwrap_or(0),
        samples[warm..].iter().map(|s| s.4).max().unwrap_or(0),
    );
    let points: Vec<(f64, f64)> = samples[warm..].iter().map(|s| (s.0, s.3 as f64)).collect();
    let per_10_min = slope(&points) * 600.0 / (1 << 20) as f64;
    let csv: String = std::iter::once("seconds,done,ready,rss_bytes,open_files\n".to_string())
        .chain(
            samples
                .iter()
                .map(|s| format!("{:.1},{},{},{},{}\n", s.0, s.1, s.2, s.3, s.4)),
        )
        .collect();
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| repo_root().join("target"), PathBuf::from);
    let _ = std::fs::create_dir_all(&target);
    let _ = std::fs::write(target.join(format!("soak-{name}.csv")), csv);
    eprintln!(
        "soak {name}: {minutes} min, measured max {max}/s, offered {rate}/s, {offered} orders ({} published twice after a failed publish), done {}, dead {}, lost {lost}, twice {twice}, stalls {stalls} (cleared {cleared}), open files {warm_fds} after warm-up max {after_fds}, RSS slope {per_10_min:.2} MiB/10 min",
        run.uncertain.len(),
        orders["done"],
        orders["dead"]
    );
    assert_eq!(lost, 0, "orders lost");
    assert_eq!(twice, 0, "orders completed twice");
    assert_eq!(orders["dead"], 0, "{orders}");
    assert_eq!(stalls, cleared, "a stall that never cleared");
    for log in logs {
        assert!(!log.contains("panicked"), "{log}");
    }
    assert!(
        after_fds <= warm_fds + 8,
        "open files grew from {warm_fds} to {after_fds}"
    );
    if minutes >= 10.0 {
        assert!(
            per_10_min < 1.0,
            "RSS grows {per_10_min:.2} MiB per 10 minutes"
        );
    }
}

#[test]
fn soak_sqlite() {
    soak(Env::new(), "sqlite");
}

#[test]
fn soak_redis() {
    let env = Env::on(Backend::Redis(RedisServer::start_with(&[
        "--appendonly",
        "yes",
        "--appendfsync",
        "always",
    ])));
    soak(env, "redis");
}

#[test]
fn soak_postgres() {
    soak(Env::postgres(), "postgres");
}
