//! Low load, where users feel latency most: messages published one at a
//! time at [`RATE`] a second by a separate process (a `Client`, as an
//! application publishes), and how long each took from the commit of its
//! publish to the commit of the settle that acked it, on SQLite, Redis and
//! PostgreSQL, for the native no-op and `hello` fresh and reuse; the CPU
//! of an idle `sluice run` serving one queue; and SQLite drains with its
//! wake-ups against the same drains without them.

use std::collections::HashMap;
use std::io::{BufRead, Write};
use std::sync::Mutex;

use sluice_broker::testkit::PgServer;

use super::latency::{AckTimed, Percentiles};
use super::*;

/// Messages a second, published one at a time.
const RATE: f64 = 100.0;
/// Messages published per point, of which the first [`WARMUP`] are left out.
const MESSAGES: usize = 600;
const WARMUP: usize = 100;
/// The variables that make the harness a publisher (see [`publisher`]).
const PUBLISH_TO: &str = "SLUICE_BENCH_PUBLISH_TO";
const PUBLISH_COUNT: &str = "SLUICE_BENCH_PUBLISH_COUNT";

/// Microseconds since the Unix epoch: the one clock both processes read.
fn now_us() -> u64 {
    sluice::broker::message::now_us()
}

/// When the harness was started as a publisher (by [`point`]), publish and
/// exit; otherwise return. The publisher connects to the broker URL in
/// `SLUICE_BENCH_PUBLISH_TO`, publishes `SLUICE_BENCH_PUBLISH_COUNT`
/// messages to `hello`, one every 1/[`RATE`] s on a fixed schedule, and
/// prints each one's id and the time its publish returned.
pub fn publisher() {
    let Ok(url) = std::env::var(PUBLISH_TO) else {
        return;
    };
    let count: usize = std::env::var(PUBLISH_COUNT).unwrap().parse().unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let client = sluice::broker::client::Client::connect(&url).await.unwrap();
        let mut out = std::io::stdout().lock();
        let start = tokio::time::Instant::now();
        for i in 0..count {
            tokio::time::sleep_until(start + Duration::from_secs_f64(i as f64 / RATE)).await;
            let id = client.publish("hello", &[b'x'; 100]).await.unwrap();
            writeln!(out, "{id} {}", now_us()).unwrap();
            out.flush().unwrap();
        }
    });
    std::process::exit(0);
}

/// One point: `dispatch` serving `hello` on `broker` while a publisher
/// process publishes [`MESSAGES`] to `url` at [`RATE`]; the latencies of
/// all but the first [`WARMUP`], in ms.
async fn point(
    url: &str,
    broker: Arc<dyn Broker>,
    dispatch: Arc<dyn Dispatch>,
    spec: HandlerSpec,
) -> Percentiles {
    let settled: Arc<Mutex<HashMap<String, u64>>> = Arc::default();
    let noted = settled.clone();
    let timed = Arc::new(AckTimed {
        inner: broker,
        noted: Box::new(move |d| {
            noted.lock().unwrap().insert(d.id.clone(), now_us());
        }),
    });
    let worker = QueueWorker::new(timed, dispatch, spec);
    let (stop_tx, stop_rx) = watch::channel(false);
    let task = tokio::spawn(worker.serve(stop_rx, Duration::from_secs(10)));
    // The worker goes idle before the first message.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let url = url.to_string();
    let published = tokio::task::spawn_blocking(move || {
        let mut child = std::process::Command::new(std::env::current_exe().unwrap())
            .env(PUBLISH_TO, &url)
            .env(PUBLISH_COUNT, MESSAGES.to_string())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
        let committed: Vec<(String, u64)> = lines
            .map(|l| {
                let l = l.unwrap();
                let (id, at) = l.split_once(' ').unwrap();
                (id.to_string(), at.parse().unwrap())
            })
            .collect();
        assert!(child.wait().unwrap().success(), "the publisher failed");
        committed
    })
    .await
    .unwrap();
    assert_eq!(
        published.len(),
        MESSAGES,
        "the publisher published them all"
    );
    let until = Instant::now() + Duration::from_secs(30);
    while settled.lock().unwrap().len() < MESSAGES {
        assert!(Instant::now() < until, "the low load did not drain");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let _ = stop_tx.send(true);
    task.await.unwrap();
    let settled = settled.lock().unwrap();
    let ms = published[WARMUP..]
        .iter()
        .map(|(id, at)| settled[id].saturating_sub(*at) as f64 / 1000.0)
        .collect();
    Percentiles::of(ms)
}

/// `hello`'s spec with the handler defaults.
fn hello_spec(runtime: &Runtime) -> HandlerSpec {
    tuned(
        load_in(runtime, "rust", "hello", InstanceMode::Fresh)
            .spec
            .clone(),
        Settings {
            concurrency: None,
            prefetch: None,
        },
    )
}

/// The points of each handler on one broker, printed and recorded;
/// `fresh` gives an empty broker and its URL.
async fn on(
    runtime: &Runtime,
    name: &str,
    mut fresh: impl AsyncFnMut() -> (String, Arc<dyn Broker>),
) {
    let spec = hello_spec(runtime);
    let handlers: [(&str, Arc<dyn Dispatch>); 3] = [
        ("native", Arc::new(NativeNoop)),
        (
            "hello fresh",
            Arc::new(super::load(runtime, "hello", InstanceMode::Fresh)),
        ),
        (
            "hello reuse",
            Arc::new(super::load(runtime, "hello", InstanceMode::Reuse)),
        ),
    ];
    for (label, dispatch) in handlers {
        let (url, broker) = fresh().await;
        let p = point(&url, broker, dispatch, spec.clone()).await;
        println!(
            "latency {name:<8} {label:<12} at {RATE:.0} msg/s from another process, publish commit to settle: p50 {:>6.2} ms  p99 {:>6.2} ms  p99.9 {:>6.2} ms  ({} messages; target p50 <= 1 ms, p99 <= 5 ms)",
            p.p50, p.p99, p.p999, p.count
        );
        let group = format!("{} {label}, {RATE:.0} msg/s", broker_name(name));
        record::figure("latency", &group, "p50", "ms", p.p50);
        record::figure("latency", &group, "p99", "ms", p.p99);
    }
}

/// The low-load points on every broker.
pub async fn latencies(runtime: &Runtime) {
    let dir = tempfile::tempdir().unwrap();
    let mut files = 0;
    on(runtime, "sqlite", async || {
        files += 1;
        let path = dir.path().join(format!("low{files}.db"));
        let broker: Arc<dyn Broker> = Arc::new(SqliteBroker::open(&path).unwrap());
        (format!("sqlite://{}", path.display()), broker)
    })
    .await;
    // The baseline: the same point on a broker that polls, as every SQLite
    // host did before the wake-ups.
    let path = dir.path().join("polling.db");
    let polling: Arc<dyn Broker> = Arc::new(SqliteBroker::open_polling(&path).unwrap());
    let reuse = Arc::new(super::load(runtime, "hello", InstanceMode::Reuse));
    let url = format!("sqlite://{}", path.display());
    let p = point(&url, polling, reuse, hello_spec(runtime)).await;
    println!(
        "latency sqlite   hello reuse  at {RATE:.0} msg/s, polling (no wake-ups, the baseline): p50 {:>6.2} ms  p99 {:>6.2} ms  p99.9 {:>6.2} ms  ({} messages)",
        p.p50, p.p99, p.p999, p.count
    );
    let redis = RedisProcess::start();
    on(runtime, "redis", async || {
        (redis.url.clone(), redis.fresh_broker().await)
    })
    .await;
    drop(redis);
    let pg = PgServer::start_durable();
    on(runtime, "postgres", async || {
        pg.psql("DROP SCHEMA IF EXISTS sluice CASCADE");
        let broker: Arc<dyn Broker> = Arc::new(PgBroker::connect(&pg.url()).await.unwrap());
        (pg.url(), broker)
    })
    .await;
}

/// How long an idle host is watched, after [`SETTLE`] to start.
const IDLE_WINDOW: Duration = Duration::from_secs(10);
const SETTLE: Duration = Duration::from_secs(3);

/// CPU seconds (user + system) process `pid` has used, from /proc.
pub(super) fn cpu_of(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // The fields after the command name, which is in parentheses.
    let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..]
        .split_whitespace()
        .collect();
    let ticks: f64 = fields[11].parse::<f64>().unwrap() + fields[12].parse::<f64>().unwrap();
    ticks / unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64
}

/// The share of a core an idle `sluice run` serving `hello` on `url` uses
/// over [`IDLE_WINDOW`], once it has had [`SETTLE`] to start.
fn idle_host_cpu(url: &str) -> f64 {
    let dir = tempfile::tempdir().unwrap();
    let handlers = dir.path().join("handlers");
    std::fs::create_dir(&handlers).unwrap();
    std::fs::copy(guest_in("rust", "hello"), handlers.join("hello.wasm")).unwrap();
    let admin = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let mut host = std::process::Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["--broker", url, "run", "--handlers"])
        .arg(&handlers)
        .args(["--admin", &admin.to_string()])
        .env("XDG_CACHE_HOME", dir.path().join("cache"))
        .current_dir(dir.path())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(SETTLE);
    assert!(host.try_wait().unwrap().is_none(), "the host exited");
    let before = cpu_of(host.id());
    std::thread::sleep(IDLE_WINDOW);
    let used = cpu_of(host.id()) - before;
    let _ = host.kill();
    let _ = host.wait();
    used / IDLE_WINDOW.as_secs_f64()
}

/// Idle CPU per broker, and SQLite drains with and without its wake-ups.
pub async fn wake(runtime: &Runtime, messages: usize, rounds: usize) {
    let dir = tempfile::tempdir().unwrap();
    let sqlite = format!("sqlite://{}", dir.path().join("idle.db").display());
    let redis = RedisProcess::start();
    let pg = PgServer::start_durable();
    for (name, url) in [
        ("sqlite", sqlite),
        ("redis", redis.url.clone()),
        ("postgres", pg.url()),
    ] {
        let share = tokio::task::spawn_blocking(move || idle_host_cpu(&url))
            .await
            .unwrap();
        println!(
            "idle    {name:<8} sluice run serving hello, idle: {:.2}% of a core over {}s (target < 1%)",
            share * 100.0,
            IDLE_WINDOW.as_secs()
        );
        record::figure(
            "idle",
            broker_name(name),
            "idle host",
            "% of a core",
            share * 100.0,
        );
    }
    drop((redis, pg));
    let spec = tuned(
        load_in(runtime, "rust", "hello", InstanceMode::Reuse)
            .spec
            .clone(),
        Settings {
            concurrency: None,
            prefetch: None,
        },
    );
    let dispatch: Arc<dyn Dispatch> = Arc::new(super::load(runtime, "hello", InstanceMode::Reuse));
    let mut ratios = Vec::new();
    for round in 0..rounds.max(3) {
        let mut rates = [0.0; 2];
        // Each round in the other order, so drift weighs on both alike.
        for k in 0..2 {
            let with = (k + round) % 2 == 0;
            let path = dir.path().join(format!("drain{round}-{with}.db"));
            let broker: Arc<dyn Broker> = if with {
                Arc::new(SqliteBroker::open(&path).unwrap())
            } else {
                Arc::new(SqliteBroker::open_polling(&path).unwrap())
            };
            let label = if with {
                "sqlite wake-ups"
            } else {
                "sqlite polling"
            };
            let d = drain(
                label,
                broker,
                dispatch.clone(),
                spec.clone(),
                messages,
                Observed::Off,
            )
            .await;
            rates[usize::from(!with)] = d.rate;
        }
        ratios.push(rates[0] / rates[1]);
    }
    let each = ratios
        .iter()
        .map(|r| format!("{r:.3}"))
        .collect::<Vec<_>>()
        .join(", ");
    println!(
        "ratio   sqlite hello reuse drain with wake-ups / polling: {:.3} (target >= 0.98; rounds: {each})",
        median(&mut ratios)
    );
}
