//! The sluice benchmark harness. Run with `cargo bench --bench sluice`
//! (after `scripts/build-guests`); its options, after `--`, are in
//! [`usage`] (`-- --help` prints them).
//!
//! Every figure that has a target is printed next to a baseline measured in
//! the same run (a native no-op handler over the same broker code), because
//! absolute numbers on shared machines drift from run to run.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use sluice::broker::message::{DEFAULT_MAX_MESSAGE_SIZE, Delivery, NewMessage};
use sluice::broker::policy::Outcome;
use sluice::broker::{Broker, GroupSource, OrderedGroups, PgBroker, RedisBroker, SqliteBroker};
use sluice::testkit::config::{HandlerSpec, InstanceMode};
use sluice::testkit::metrics::Metrics;
use sluice::testkit::pause::Paused;
use sluice::testkit::runtime::{Deadline, Handler, Invocation, Ready, Runtime};
use sluice::testkit::worker::{Dispatch, Observe, QueueWorker};
use tokio::sync::watch;

// The host's allocator (see src/main.rs), so the drains measure what runs.
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

// The PostgreSQL sections run on the test suite's servers
// (`sluice_broker::testkit::PgServer`: initdb into a temporary directory,
// run as the `postgres` user when this is root).
#[path = "sluice/limited.rs"]
mod limited;
#[path = "sluice/lowload.rs"]
mod lowload;
#[path = "sluice/postgres.rs"]
mod postgres;
#[path = "sluice/record.rs"]
mod record;
#[path = "sluice/scale.rs"]
mod scale;
#[path = "sluice/watchdog.rs"]
mod watchdog;

struct Args {
    lang: String,
    messages: usize,
    redis_messages: usize,
    pg_messages: usize,
    calls: usize,
    only: Option<String>,
    rounds: usize,
    json: Option<PathBuf>,
}

/// The options, as `--help` prints them.
fn usage() -> String {
    format!(
        "\
usage: cargo bench --bench sluice -- [OPTIONS]

  --messages N       messages per embedded-broker drain (default 100000)
  --redis-messages N messages per Redis drain (default 200000)
  --pg-messages N    messages per PostgreSQL drain (default 50000)
  --calls N          calls per invocation benchmark (default 20000)
  --lang L           the guest language of the invocation benchmark: rust (the
                     default), c, python or js
  --only NAMES       run only these sections, comma-separated: {}
  --rounds N         rounds of the metrics-cost drains (default 1): reuse with
                     metrics off, on, and scraped, in rotating order each
                     round; the medians of the per-round ratios. The latency
                     section runs its handlers N times alike, and the
                     watchdog section max(N, 3) rounds of its host drains
  --json FILE        also write the figures the book's charts show (drain
                     rates, call costs per language, latency percentiles)
                     to FILE as JSON, with the machine and the date;
                     scripts/charts renders the charts from it
  --help             print this and exit
",
        SECTIONS.join(", ")
    )
}

/// The sections, in the order they run: what `--only` takes (`main` runs
/// no other).
const SECTIONS: [&str; 16] = [
    "invoke",
    "cli",
    "trace",
    "drain",
    "languages",
    "batch",
    "latency",
    "wake",
    "scale",
    "restart",
    "redis",
    "postgres",
    "bloat",
    "limited",
    "watchdog",
    "reload",
];

/// Exit with `message` and the usage: a mistyped option or section would
/// otherwise run the whole harness, or nothing at all.
fn refuse(message: &str) -> ! {
    eprintln!("sluice bench: {message}\n\n{}", usage());
    std::process::exit(2)
}

fn args() -> Args {
    let mut a = Args {
        lang: "rust".into(),
        messages: 100_000,
        redis_messages: 200_000,
        pg_messages: 50_000,
        calls: 20_000,
        only: None,
        rounds: 1,
        json: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--messages" => a.messages = number(&mut it, &arg),
            "--redis-messages" => a.redis_messages = number(&mut it, &arg),
            "--pg-messages" => a.pg_messages = number(&mut it, &arg),
            "--calls" => a.calls = number(&mut it, &arg),
            "--rounds" => {
                a.rounds = number(&mut it, &arg);
                if a.rounds == 0 {
                    refuse("--rounds takes 1 or more");
                }
            }
            "--lang" => {
                a.lang = it
                    .next()
                    .filter(|l| ["rust", "c", "python", "js"].contains(&l.as_str()))
                    .unwrap_or_else(|| refuse("--lang takes rust, c, python or js"))
            }
            "--only" => {
                let names = it
                    .next()
                    .unwrap_or_else(|| refuse("--only takes section names"));
                if let Some(unknown) = names.split(',').find(|n| !SECTIONS.contains(n)) {
                    refuse(&format!(
                        "--only {names}: there is no section {unknown:?}; the sections are {}",
                        SECTIONS.join(", ")
                    ));
                }
                a.only = Some(names);
            }
            "--json" => {
                let file = it
                    .next()
                    .unwrap_or_else(|| refuse("--json takes a file name"));
                a.json = Some(PathBuf::from(file));
            }
            "--help" | "-h" => {
                print!("{}", usage());
                std::process::exit(0)
            }
            "--bench" => {} // cargo passes it
            other => refuse(&format!("unknown argument {other:?}")),
        }
    }
    a
}

/// The number after `option`.
fn number(args: &mut impl Iterator<Item = String>, option: &str) -> usize {
    args.next()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| refuse(&format!("{option} takes a number")))
}

fn guest(name: &str) -> PathBuf {
    guest_in("rust", name)
}

fn guest_in(lang: &str, name: &str) -> PathBuf {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("guests/out")
        .join(lang)
        .join(format!("{name}.wasm"));
    assert!(
        path.is_file(),
        "{} is missing: run scripts/build-guests",
        path.display()
    );
    path
}

fn load(runtime: &Runtime, name: &str, mode: InstanceMode) -> Handler {
    load_in(runtime, "rust", name, mode)
}

/// The compiled components of every run, on disk under `target/`: a
/// guest is compiled once, not once per load (and a profile of a run shows
/// the handler, not the compiler).
fn compiled(runtime: &Runtime) -> &'static sluice::testkit::cache::CompileCache {
    static CACHE: std::sync::OnceLock<sluice::testkit::cache::CompileCache> =
        std::sync::OnceLock::new();
    CACHE.get_or_init(|| {
        let target = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target");
        let files = sluice::CacheFiles {
            dir: target.join("bench-compiled-cache"),
            key: target.join("bench-compiled-cache.key"),
        };
        sluice::testkit::cache::CompileCache::on_disk(runtime, &files, &target.join("no-handlers"))
            .expect("the bench's compile cache")
    })
}

fn load_in(runtime: &Runtime, lang: &str, name: &str, mode: InstanceMode) -> Handler {
    let cache = compiled(runtime);
    let mut handler = sluice::testkit::loader::load_file(
        runtime,
        cache,
        name,
        &guest_in(lang, name),
        DEFAULT_MAX_MESSAGE_SIZE,
    )
    .expect("loading guest");
    handler.spec.instance_mode = mode;
    // Reuse an instance for the whole run unless told otherwise.
    handler.spec.max_messages_per_instance = std::env::var("SLUICE_BENCH_MAX_PER_INSTANCE")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(u32::MAX);
    handler
}

/// A call's deadline for `handler`, made as the worker makes it.
fn deadline(handler: &Handler) -> Deadline {
    Deadline::new(handler.spec.timeout, handler.spec.max_extend)
}

fn delivery(i: usize) -> Delivery {
    Delivery {
        id: format!("{i:032x}"),
        queue: "hello".into(),
        key: format!("{i:032x}"),
        payload: vec![b'x'; 100],
        headers: Vec::new(),
        attempt: 1,
        enqueued_at_us: 0,
        last_error: None,
        receipt: String::new(),
        lease_until_ms: u64::MAX,
        group: None,
        snoozes: 0,
    }
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i].as_secs_f64() * 1e6
}

/// Medians of one handler's calls, in µs.
#[derive(Clone, Copy)]
struct Costs {
    /// Fresh, on the message path: the call with a spare instance ready.
    fresh: f64,
    /// Fresh, whole: the call and the work a caller does after passing the
    /// settlement on (dropping the used instance, making the next spare).
    fresh_whole: f64,
    reuse: f64,
}

/// Median and p99 per call, fresh and reuse, on the message path and whole
/// (with [`Handler::tidy`], which a caller runs after each call).
async fn invoke_costs(
    runtime: &Runtime,
    lang: &str,
    name: &str,
    fresh_calls: usize,
    reuse_calls: usize,
) -> Costs {
    let mut medians = Vec::new();
    for (mode, calls) in [
        (InstanceMode::Fresh, fresh_calls),
        (InstanceMode::Reuse, reuse_calls),
    ] {
        let handler = load_in(runtime, lang, name, mode);
        let d = delivery(0);
        for _ in 0..calls / 10 {
            let r = handler.invoke(&d, &deadline(&handler)).await;
            assert_eq!(r.result, Ok(Outcome::Done));
            handler.tidy().await;
        }
        let mut path = Vec::with_capacity(calls);
        let mut whole = Vec::with_capacity(calls);
        for _ in 0..calls {
            let start = Instant::now();
            let r = handler.invoke(&d, &deadline(&handler)).await;
            path.push(start.elapsed());
            assert_eq!(r.result, Ok(Outcome::Done));
            handler.tidy().await;
            whole.push(start.elapsed());
        }
        path.sort();
        whole.sort();
        println!(
            "invoke  {lang:<6} {name:<8} {:<6} median {:>8.2} µs   p99 {:>8.2} µs   whole {:>8.2} µs   ({calls} calls)",
            format!("{mode:?}").to_lowercase(),
            percentile(&path, 0.5),
            percentile(&path, 0.99),
            percentile(&whole, 0.5),
        );
        medians.push((percentile(&path, 0.5), percentile(&whole, 0.5)));
    }
    let costs = Costs {
        fresh: medians[0].0,
        fresh_whole: medians[0].1,
        reuse: medians[1].0,
    };
    println!(
        "invoke  {lang:<6} {name:<8} fresh is {:.2} × reuse on the message path, {:.2} × whole",
        costs.fresh / costs.reuse,
        costs.fresh_whole / costs.reuse
    );
    costs
}

/// `sluice invoke` of the Rust `hello` as a user runs it, the whole
/// process, from a warm compiled cache (target: under 100 ms), next to
/// `sluice --version` in the same run: the cost of starting the binary.
fn bench_cli_invoke(runs: usize) {
    let dir = tempfile::tempdir().unwrap();
    let hello = guest_in("rust", "hello");
    let time = |args: &[&str]| {
        let start = Instant::now();
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_sluice"))
            .args(args)
            .env("XDG_CACHE_HOME", dir.path().join("cache"))
            .env("XDG_CONFIG_HOME", dir.path().join("config"))
            .current_dir(dir.path())
            .output()
            .unwrap();
        assert!(out.status.success(), "sluice {args:?}: {out:?}");
        start.elapsed()
    };
    let invoke = ["invoke", hello.to_str().unwrap(), "--payload", "x"];
    // The first run compiles the component into the cache.
    let cold = time(&invoke);
    let median = |args: &[&str]| {
        let mut all: Vec<Duration> = (0..runs).map(|_| time(args)).collect();
        all.sort();
        all[runs / 2].as_secs_f64() * 1000.0
    };
    let warm = median(&invoke);
    let start = median(&["--version"]);
    println!(
        "cli     sluice invoke rust hello: cold {:.0} ms, warm median {warm:.1} ms (target < 100 ms); sluice --version {start:.1} ms; invoke is {:.2} × --version",
        cold.as_secs_f64() * 1000.0,
        warm / start
    );
}

/// Per language: compile time, size, per-message cost in both modes, and
/// embedded-broker throughput for `hello` in the language's mode; and what
/// the language's SDK adds, against the raw-bindings `hello_raw`.
async fn bench_languages(runtime: &Runtime, messages: usize) {
    let rust = invoke_costs(runtime, "rust", "hello", 5000, 5000).await;
    let mut rows = Vec::new();
    let mut sdk = Vec::new();
    for lang in ["rust", "c", "python", "js"] {
        let path = guest_in(lang, "hello");
        let bytes = std::fs::read(&path).unwrap();
        let start = Instant::now();
        sluice::testkit::check::compile(runtime, &bytes).expect("compiles");
        let compile = start.elapsed();
        let big = matches!(lang, "python" | "js");
        // A fresh interpreter is slow to make: fewer calls for those.
        let fresh_calls = if big { 200 } else { 5000 };
        let costs = invoke_costs(runtime, lang, "hello", fresh_calls, 5000).await;
        let mode = if big {
            InstanceMode::Reuse
        } else {
            InstanceMode::Fresh
        };
        let handler = Arc::new(load_in(runtime, lang, "hello", mode));
        let spec = handler.spec.clone();
        let dir = tempfile::tempdir().unwrap();
        let broker: Arc<dyn Broker> =
            Arc::new(SqliteBroker::open(dir.path().join("bench.db")).unwrap());
        let label = format!("sqlite {lang} hello {}", format!("{mode:?}").to_lowercase());
        let rate = drain(&label, broker, handler, spec, messages, Observed::Off)
            .await
            .rate;
        rows.push((lang, bytes.len(), compile, costs, mode, rate));
        let raw = invoke_costs(runtime, lang, "hello_raw", fresh_calls, 5000).await;
        sdk.push((lang, costs, raw));
        let name = lang_name(lang);
        record::figure("invoke", name, "fresh", "µs", costs.fresh);
        record::figure("invoke", name, "fresh, whole", "µs", costs.fresh_whole);
        record::figure("invoke", name, "reuse", "µs", costs.reuse);
    }
    println!("lang    size        compile   fresh µs/msg (whole)   reuse µs/msg  drain (mode)");
    for (lang, size, compile, costs, mode, rate) in rows {
        println!(
            "{lang:<7} {:>8.1} KiB {:>7.0} ms {:>12.2} ({:>7.2}) {:>13.2}  {rate:>8.0} msg/s ({})",
            size as f64 / 1024.0,
            compile.as_secs_f64() * 1000.0,
            costs.fresh,
            costs.fresh_whole,
            costs.reuse,
            format!("{mode:?}").to_lowercase()
        );
        println!(
            "        fresh cost is {:.2} × the Rust hello figure on the message path, {:.2} × whole",
            costs.fresh / rust.fresh,
            costs.fresh_whole / rust.fresh_whole
        );
    }
    for (lang, on_sdk, raw) in sdk {
        let target = if matches!(lang, "rust" | "c") {
            " (target ≤ 1.05 ×)"
        } else {
            ""
        };
        println!(
            "sdk     {lang:<6} hello on the SDK: reuse {:.3} × hello_raw{target}, fresh {:.3} ×",
            on_sdk.reuse / raw.reuse,
            on_sdk.fresh / raw.fresh
        );
        record::figure(
            "invoke",
            lang_name(lang),
            "reuse, raw bindings",
            "µs",
            raw.reuse,
        );
    }
}

/// The language's name as the book's charts show it.
fn lang_name(lang: &str) -> &'static str {
    match lang {
        "rust" => "Rust",
        "c" => "C",
        "python" => "Python",
        _ => "JavaScript",
    }
}

/// Messages one call of a batch handler takes in the `batch` section.
const BATCH_SIZE: usize = 64;

/// The batch world against single calls: drains of the Python and
/// JavaScript `hello` in fresh mode, one message a call, then of their
/// `hello_batch` with `batch_size = 64`, on the same settings otherwise.
/// First on SQLite, then on Redis: a fresh JavaScript call is fast enough
/// that the batch drain meets the SQLite broker's own ceiling, which Redis
/// sits far above.
async fn bench_batches(runtime: &Runtime, messages: usize) {
    batch_ratios(runtime, "sqlite", messages, async || temp_sqlite()).await;
    let server = RedisProcess::start();
    batch_ratios(runtime, "redis", 2 * messages, async || {
        server.fresh_broker().await
    })
    .await;
}

/// [`bench_batches`] over one broker kind, a new broker for each drain.
async fn batch_ratios(
    runtime: &Runtime,
    broker_name: &str,
    messages: usize,
    mut fresh_broker: impl AsyncFnMut() -> Arc<dyn Broker>,
) {
    for lang in ["python", "js"] {
        let mut rates = Vec::new();
        for (name, size) in [("hello", 1), ("hello_batch", BATCH_SIZE)] {
            let mut handler = load_in(runtime, lang, name, InstanceMode::Fresh);
            handler.spec.queue = "hello".into();
            handler.spec.prefetch = 4 * BATCH_SIZE;
            handler.spec.batch.size = size;
            let spec = handler.spec.clone();
            let label = format!("{broker_name} {lang} {name} fresh");
            let drained = drain(
                &label,
                fresh_broker().await,
                Arc::new(handler),
                spec,
                messages,
                Observed::Off,
            )
            .await;
            rates.push(drained.rate);
        }
        println!(
            "batch   {broker_name} {lang}: batch_size {BATCH_SIZE} drains {:.1} × the single-call rate (fresh; target ≥ 5 ×)",
            rates[1] / rates[0]
        );
    }
}

/// A new SQLite broker in a temporary directory of its own, kept until the
/// process ends.
fn temp_sqlite() -> Arc<dyn Broker> {
    let dir = tempfile::tempdir().unwrap().keep();
    Arc::new(SqliteBroker::open(dir.join("bench.db")).unwrap())
}

/// How many ordered groups the `grouped` drains spread their messages over.
const GROUPS: usize = 1000;

/// A native handler that does nothing: the baseline for the WASM tax.
struct NativeNoop;

#[async_trait]
impl Dispatch for NativeNoop {
    async fn invoke(&self, _: Ready, _: &Delivery, _: &Deadline) -> Invocation {
        Invocation::ended(Ok(Outcome::Done), Vec::new())
    }

    fn version(&self) -> &str {
        "native"
    }
}

/// What a drain's worker has besides the handler, against plain reuse:
/// nothing, metrics (as a host with its admin endpoint on has), metrics
/// scraped every second meanwhile, or a rate limit too high to bind
/// (`1000000/s`), which the broker still keeps; or its queue ordered in
/// [`GROUPS`] groups, the messages published round-robin over them.
#[derive(Clone, Copy, PartialEq)]
enum Observed {
    Off,
    Metrics,
    Scraped,
    UnusedRate,
    Grouped,
}

/// Preload `n` messages of 100 bytes into `broker`, then time one worker
/// draining them. Besides the rate it prints the CPU this process spent
/// per message (the sluice side) and what the server did per message: on
/// Redis its commands, CPU and costliest commands; on PostgreSQL its CPU,
/// the WAL it wrote and its commits.
async fn drain(
    label: &str,
    broker: Arc<dyn Broker>,
    dispatch: Arc<dyn Dispatch>,
    spec: HandlerSpec,
    n: usize,
    observed: Observed,
) -> Drained {
    let payload = vec![b'x'; 100];
    let grouped = observed == Observed::Grouped;
    let mut spec = spec;
    if grouped {
        // As a sidecar's `[ordering]` does: in the handler's spec, and set
        // on the queue (which a host does when it binds the handler).
        let ordering = OrderedGroups {
            group: GroupSource::Header("g".into()),
            block_on_dead: false,
        };
        broker.set_ordering("hello", Some(&ordering)).await.unwrap();
        spec.ordering = Some(ordering);
    }
    for chunk in (0..n).collect::<Vec<_>>().chunks(5000) {
        let batch = chunk
            .iter()
            .map(|i| {
                let mut m = NewMessage::new("hello", payload.clone());
                if grouped {
                    m.headers = vec![("g".into(), (i % GROUPS).to_string())];
                }
                m
            })
            .collect();
        broker.publish(batch).await.unwrap();
    }
    let url = REDIS_URL.with(|u| u.borrow().clone());
    let before = RedisSnapshot::take(&url).await;
    let pg_before = postgres::PgSnapshot::take().await;
    let cpu_before = process_cpu();
    let metrics = matches!(observed, Observed::Metrics | Observed::Scraped).then(Metrics::new);
    if observed == Observed::UnusedRate {
        spec.flow.rate = Some("1000000/s".parse().unwrap());
    }
    let worker = match &metrics {
        None => QueueWorker::new(broker.clone(), dispatch, spec),
        Some(m) => {
            let observe = Observe {
                metrics: Some(m.handler("hello", dispatch.version(), "hello")),
                exporter: None,
                paused: Paused::never("hello"),
                broker_timeout: sluice::testkit::worker::DEFAULT_BROKER_TIMEOUT,
            };
            QueueWorker::new(m.metered(broker.clone()), dispatch, spec).with_observe(observe)
        }
    };
    let scraper = match (&metrics, observed) {
        (Some(m), Observed::Scraped) => {
            let (m, broker) = (m.clone(), broker.clone());
            Some(tokio::spawn(async move {
                loop {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    let text = m
                        .encode(&*broker, sluice::testkit::metrics::PoolCounts::default())
                        .await;
                    assert!(text.contains("sluice_messages_done_total"));
                }
            }))
        }
        _ => None,
    };
    let stats = worker.stats.clone();
    let (stop_tx, stop_rx) = watch::channel(false);
    let start = Instant::now();
    let task = tokio::spawn(worker.serve(stop_rx, Duration::from_secs(10)));
    while stats.handled.load(Ordering::Relaxed) < n as u64 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let elapsed = start.elapsed();
    let cpu = process_cpu() - cpu_before;
    let after = RedisSnapshot::take(&url).await;
    let pg_cpu = pg_before.as_ref().map(|b| b.cpu_now());
    let _ = stop_tx.send(true);
    task.await.unwrap();
    if let Some(s) = scraper {
        s.abort();
    }
    let q = broker.queue_stats("hello").await.unwrap();
    assert_eq!(
        (q.done, q.pending()),
        (n as u64, 0),
        "{label}: every message done"
    );
    let rate = n as f64 / elapsed.as_secs_f64();
    let per_msg = |x: f64| x * 1e6 / n as f64;
    let mut line = format!(
        "drain   {label:<28} {rate:>9.0} msg/s   ({n} messages in {:.2} s; sluice CPU {:.1} µs/msg)",
        elapsed.as_secs_f64(),
        per_msg(cpu)
    );
    if let (Some(b), Some(a)) = (before, after) {
        let all = (a.calls - b.calls) as f64 / n as f64;
        line += &format!(
            "\n        redis: {all:.2} commands/msg (every command: batch reads, MULTI/EXEC and those inside scripts), server CPU {:.1} µs/msg",
            per_msg(a.cpu - b.cpu)
        );
        let mut costs: Vec<(String, f64, f64)> = a
            .usec
            .iter()
            .map(|(name, (us, calls))| {
                let (us0, calls0) = b.usec.get(name).copied().unwrap_or_default();
                (name.clone(), us - us0, calls - calls0)
            })
            .filter(|(_, us, _)| *us > 0.0)
            .collect();
        costs.sort_by(|x, y| y.1.total_cmp(&x.1));
        let costs: Vec<String> = costs
            .iter()
            .take(8)
            .map(|(name, us, calls)| {
                format!("{name} {:.2} ({:.3})", us / n as f64, calls / n as f64)
            })
            .collect();
        line += &format!(
            "\n        redis µs/msg by command, and calls/msg (scripts include their calls): {}",
            costs.join(", ")
        );
    }
    if let (Some(b), Some(cpu)) = (pg_before, pg_cpu) {
        line += &b.since(cpu, n).await;
    }
    println!("{line}");
    Drained {
        rate,
        cpu_per_msg: per_msg(cpu),
    }
}

/// What one drain measured: messages per second, and the CPU (µs) this
/// process spent per message.
#[derive(Clone, Copy)]
struct Drained {
    rate: f64,
    cpu_per_msg: f64,
}

thread_local! {
    static REDIS_URL: std::cell::RefCell<Option<String>> = const { std::cell::RefCell::new(None) };
}

/// CPU seconds (user + system) this process has used.
fn process_cpu() -> f64 {
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    secs(usage.ru_utime) + secs(usage.ru_stime)
}

/// What a Redis server has done so far, from `INFO commandstats` and `INFO cpu`.
struct RedisSnapshot {
    /// Every command, including those run inside scripts.
    calls: u64,
    /// Microseconds spent and calls made, per command name.
    usec: std::collections::HashMap<String, (f64, f64)>,
    /// CPU seconds of the server process.
    cpu: f64,
}

impl RedisSnapshot {
    async fn take(url: &Option<String>) -> Option<Self> {
        let client = redis::Client::open(url.as_ref()?.as_str()).ok()?;
        let mut conn = client.get_multiplexed_async_connection().await.ok()?;
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .arg("cpu")
            .query_async(&mut conn)
            .await
            .ok()?;
        let mut snap = RedisSnapshot {
            calls: 0,
            usec: Default::default(),
            cpu: 0.0,
        };
        for line in info.lines() {
            if let Some(v) = line
                .strip_prefix("used_cpu_sys:")
                .or(line.strip_prefix("used_cpu_user:"))
            {
                snap.cpu += v.trim().parse::<f64>().ok()?;
            }
            let Some(rest) = line.strip_prefix("cmdstat_") else {
                continue;
            };
            let (name, fields) = rest.split_once(':')?;
            let field = |key: &str| -> Option<f64> {
                fields
                    .split(',')
                    .find_map(|f| f.strip_prefix(key))?
                    .parse()
                    .ok()
            };
            let calls = field("calls=")? as u64;
            snap.calls += calls;
            snap.usec
                .insert(name.to_string(), (field("usec=")?, calls as f64));
        }
        Some(snap)
    }
}

/// A `redis-server` of the benchmark's own, persistence off, on a free port.
struct RedisProcess {
    child: std::process::Child,
    url: String,
    _dir: tempfile::TempDir,
}

impl RedisProcess {
    fn start() -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let dir = tempfile::tempdir().unwrap();
        let child = std::process::Command::new("redis-server")
            .args([
                "--port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .arg("--dir")
            .arg(dir.path())
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("redis-server is not installed: apt-get install redis-server");
        let url = format!("redis://127.0.0.1:{port}");
        for _ in 0..100 {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        RedisProcess {
            child,
            url,
            _dir: dir,
        }
    }

    /// A broker on this server, emptied first.
    async fn fresh_broker(&self) -> Arc<dyn Broker> {
        self.flush().await;
        Arc::new(RedisBroker::connect(&self.url).await.unwrap())
    }

    async fn flush(&self) {
        let client = redis::Client::open(self.url.as_str()).unwrap();
        let mut conn = client.get_multiplexed_async_connection().await.unwrap();
        let _: () = redis::cmd("FLUSHALL").query_async(&mut conn).await.unwrap();
    }
}

impl Drop for RedisProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Sidecar settings for a drain: `concurrency` and `prefetch`, `None` for
/// the handler defaults.
#[derive(Clone, Copy)]
struct Settings {
    concurrency: Option<usize>,
    prefetch: Option<usize>,
}

/// The handler settings of the drains: `base` (the defaults, or what a
/// section chooses), unless `SLUICE_BENCH_PREFETCH` /
/// `SLUICE_BENCH_CONCURRENCY` / `SLUICE_BENCH_IDEMPOTENCY` say otherwise.
fn tuned(mut spec: HandlerSpec, base: Settings) -> HandlerSpec {
    let var = |name: &str| std::env::var(name).ok().and_then(|v| v.parse().ok());
    if let Some(c) = var("SLUICE_BENCH_CONCURRENCY").or(base.concurrency) {
        spec.concurrency = c;
    }
    if let Some(p) = var("SLUICE_BENCH_PREFETCH").or(base.prefetch) {
        spec.prefetch = p;
    }
    if let Some(on) = idempotency_setting() {
        spec.idempotency.enabled = on;
    }
    spec
}

/// `SLUICE_BENCH_IDEMPOTENCY=on|off`: whether the drains take and record
/// idempotency keys, whatever the handler's sidecar says (on, the default,
/// for `hello`). None when unset.
fn idempotency_setting() -> Option<bool> {
    match std::env::var("SLUICE_BENCH_IDEMPOTENCY").as_deref() {
        Err(_) => None,
        Ok("on") => Some(true),
        Ok("off") => Some(false),
        Ok(other) => panic!(
            "SLUICE_BENCH_IDEMPOTENCY is {other:?}: set it to \"on\" or \"off\", or unset it"
        ),
    }
}

/// Every mode of [`drains`]: native, `hello` fresh and reuse, then reuse
/// with what it may cost.
const ALL_MODES: &str = "native,fresh,reuse,metrics,scraped,rated,grouped";

/// Native, `hello` fresh and `hello` reuse over one broker kind, then what
/// metrics cost there: `modes` of them unless `SLUICE_BENCH_MODES` names
/// others. Returns the first three's figures, by mode.
async fn drains(
    runtime: &Runtime,
    name: &str,
    n: usize,
    base: Settings,
    rounds: usize,
    modes: &str,
    mut fresh_broker: impl AsyncFnMut() -> Arc<dyn Broker>,
) -> Vec<(&'static str, Drained)> {
    // SLUICE_BENCH_MODES=reuse (say) runs only some of them, e.g. to profile
    // one; the ratios need the native one. `metrics`, `scraped`, `rated`
    // and `grouped` are reuse with metrics on, scraped every second, with a
    // rate limit too high to bind, or in ordered groups, against plain
    // reuse.
    let modes = std::env::var("SLUICE_BENCH_MODES").unwrap_or(modes.into());
    let wanted = |m: &str| modes.split(',').any(|w| w.trim() == m);
    let spec = tuned(
        load(runtime, "hello", InstanceMode::Fresh).spec.clone(),
        base,
    );
    println!(
        "drains  {name}: concurrency {}, prefetch {}, idempotency {}",
        spec.concurrency,
        spec.prefetch,
        if spec.idempotency.enabled {
            "on"
        } else {
            "off"
        }
    );
    let mut native = None;
    if wanted("native") {
        let label = format!("{name} native no-op");
        native = Some(
            drain(
                &label,
                fresh_broker().await,
                Arc::new(NativeNoop),
                spec,
                n,
                Observed::Off,
            )
            .await,
        );
    }
    let mut rates = Vec::new();
    for (mode, mode_name) in [
        (InstanceMode::Fresh, "fresh"),
        (InstanceMode::Reuse, "reuse"),
    ] {
        if !wanted(mode_name) {
            continue;
        }
        let handler = Arc::new(load(runtime, "hello", mode));
        let spec = tuned(handler.spec.clone(), base);
        let label = format!("{name} hello {mode_name}");
        rates.push((
            mode_name,
            label.clone(),
            drain(
                &label,
                fresh_broker().await,
                handler,
                spec,
                n,
                Observed::Off,
            )
            .await,
        ));
    }
    if let Some(native) = native {
        for (_, label, d) in &rates {
            println!("ratio   {label:<28} {:>9.2} × native", d.rate / native.rate);
        }
    }
    let observed: Vec<_> = [
        ("metrics", Observed::Metrics),
        ("scraped", Observed::Scraped),
        ("rated", Observed::UnusedRate),
        ("grouped", Observed::Grouped),
    ]
    .into_iter()
    .filter(|(mode, _)| wanted(mode))
    .collect();
    if !observed.is_empty() {
        metrics_cost(runtime, name, n, base, rounds, &observed, &mut fresh_broker).await;
    }
    let mut figures: Vec<_> = native.map(|d| ("native", d)).into_iter().collect();
    figures.extend(rates.into_iter().map(|(mode, _, d)| (mode, d)));
    for (mode, d) in &figures {
        let series = if *mode == "native" {
            "native no-op".to_string()
        } else {
            format!("hello {mode}")
        };
        record::figure("drain", broker_name(name), &series, "msg/s", d.rate);
    }
    figures
}

/// How the charts name a broker the harness calls `name`.
fn broker_name(name: &str) -> &str {
    match name {
        "sqlite" => "SQLite",
        "redis" => "Redis",
        "postgres" => "PostgreSQL",
        other => other,
    }
}

/// What metrics, an unused rate limit and ordered groups cost: `hello`
/// reuse drains with none (the baseline), then with each of `observed`, `rounds` times, each round in a rotated
/// order so that drift in a noisy machine falls on every mode alike. Prints
/// each mode's median ratio to the baseline of its own round, by rate and
/// by CPU per message.
async fn metrics_cost(
    runtime: &Runtime,
    name: &str,
    n: usize,
    base: Settings,
    rounds: usize,
    observed: &[(&str, Observed)],
    mut fresh_broker: impl AsyncFnMut() -> Arc<dyn Broker>,
) {
    let mut modes = vec![("off", Observed::Off)];
    modes.extend_from_slice(observed);
    // ratios[i] = (rate ratios, CPU ratios) of observed[i], one per round.
    let mut ratios = vec![(Vec::new(), Vec::new()); observed.len()];
    for round in 0..rounds {
        let mut order = modes.clone();
        order.rotate_left(round % modes.len());
        let mut results = Vec::new();
        for (mode, how) in order {
            let handler = Arc::new(load(runtime, "hello", InstanceMode::Reuse));
            let spec = tuned(handler.spec.clone(), base);
            let label = format!("{name} hello reuse+{mode}");
            let d = drain(&label, fresh_broker().await, handler, spec, n, how).await;
            results.push((mode, d));
        }
        let of = |m: &str| results.iter().find(|(mode, _)| *mode == m).unwrap().1;
        let off = of("off");
        for (i, (mode, _)) in observed.iter().enumerate() {
            let d = of(mode);
            ratios[i].0.push(d.rate / off.rate);
            ratios[i].1.push(d.cpu_per_msg / off.cpu_per_msg);
        }
    }
    for ((mode, _), (rate, cpu)) in observed.iter().zip(&mut ratios) {
        let label = format!("{name} hello reuse+{mode}");
        println!(
            "ratio   {label:<28} {:>9.3} × plain reuse (CPU/msg {:.3} ×; median of {rounds} round{})",
            median(rate),
            median(cpu),
            if rounds == 1 { "" } else { "s" }
        );
    }
}

/// The median of per-round ratios (the upper one of an even count),
/// sorting them.
fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// What carrying the trace context costs per delivery with export off (as
/// every drain above does): the attempt's span context made from the
/// delivery's `traceparent` (or a new root), stamped on one publish, ended.
fn trace_context_cost(n: usize) {
    use sluice::testkit::trace::{Attempt, AttemptFields};
    let fields = || AttemptFields {
        queue: "hello",
        handler: "hello",
        version: "v1",
        attempt: 1,
        message_id: "0190a5b2-0000-7000-8000-000000000000",
    };
    let parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    // The loop makes a delivery's headers and one publish, as a call does;
    // the figure is the time beyond that loop with no trace context at all.
    let run = |with_parent: bool, traced: bool| {
        let start = Instant::now();
        for _ in 0..n {
            let mut headers = vec![("content-type".to_string(), "text/plain".to_string())];
            if with_parent {
                headers.push(("traceparent".into(), parent.into()));
            }
            let mut publishes = [NewMessage::new("next", b"x".to_vec())];
            if traced {
                let attempt = Attempt::begin(&mut headers, None, fields());
                attempt.stamp(&mut publishes);
                attempt.end("done", None);
            }
            std::hint::black_box((headers, publishes));
        }
        start.elapsed().as_nanos() as f64 / n as f64
    };
    for (label, with_parent) in [("new root", false), ("child of a parent", true)] {
        let bare = run(with_parent, false);
        let traced = run(with_parent, true);
        println!(
            "trace   context per delivery, {label:<18} {:>7.0} ns (export off; {traced:.0} ns a loop with it, {bare:.0} ns without)",
            traced - bare
        );
    }
}

/// Records when each handler version first handled a message, from the
/// worker's `handled` debug events.
#[derive(Clone, Default)]
struct FirstHandled(Arc<std::sync::Mutex<std::collections::HashMap<String, Instant>>>);

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for FirstHandled {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        struct Fields {
            version: Option<String>,
            handled: bool,
        }
        impl tracing::field::Visit for Fields {
            fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
                if field.name() == "version" {
                    self.version = Some(value.to_string());
                }
            }
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                if field.name() == "message" && format!("{value:?}") == "handled" {
                    self.handled = true;
                }
            }
        }
        let mut f = Fields {
            version: None,
            handled: false,
        };
        event.record(&mut f);
        if let (true, Some(v)) = (f.handled, f.version) {
            self.0.lock().unwrap().entry(v).or_insert_with(Instant::now);
        }
    }
}

/// `bytes` with a custom section appended: same behaviour, new content hash.
fn variant(bytes: &[u8], tag: &str) -> Vec<u8> {
    let name = format!("sluice-bench-{tag}");
    let mut out = bytes.to_vec();
    out.push(0);
    out.push((name.len() + 1) as u8);
    out.push(name.len() as u8);
    out.extend_from_slice(name.as_bytes());
    out
}

/// Reload latency: from the rename of a new `hello` version into place to
/// the first message that version handles, with messages flowing.
async fn bench_reload(rounds: usize) {
    let seen = FirstHandled::default();
    {
        use tracing_subscriber::layer::SubscriberExt;
        let filter = tracing_subscriber::filter::Targets::new()
            .with_target("sluice::serve::worker", tracing::Level::DEBUG);
        let subscriber = tracing_subscriber::registry()
            .with(tracing_subscriber::Layer::with_filter(seen.clone(), filter));
        tracing::subscriber::set_global_default(subscriber)
            .expect("the reload bench sets the global subscriber once");
    }
    let dir = tempfile::tempdir().unwrap();
    let handlers = dir.path().join("handlers");
    std::fs::create_dir(&handlers).unwrap();
    let hello = std::fs::read(guest("hello")).unwrap();
    std::fs::write(handlers.join("hello.wasm"), &hello).unwrap();
    let broker: Arc<dyn Broker> =
        Arc::new(SqliteBroker::open(dir.path().join("bench.db")).unwrap());
    let options = sluice::RunOptions {
        handlers: handlers.clone(),
        until_idle: false,
        grace: Duration::from_secs(5),
        max_message_size: DEFAULT_MAX_MESSAGE_SIZE,
        max_component_size: sluice::testkit::files::DEFAULT_MAX_COMPONENT_SIZE,
        cache: Some(sluice::CacheFiles {
            dir: dir.path().join("cache"),
            key: dir.path().join("cache.key"),
        }),
        watch: true,
        admin: None,
        otlp_endpoint: None,
        broker_timeout: None,
        stall_after: None,
        exit_on_stall: false,
        max_instances: None,
    };
    let (stop_tx, mut stop_rx) = watch::channel(false);
    let host = tokio::spawn(sluice::run(broker.clone(), options, async move {
        let _ = stop_rx.wait_for(|s| *s).await;
    }));
    // A steady flow: a message every millisecond.
    let flow = {
        let broker = broker.clone();
        tokio::spawn(async move {
            loop {
                broker
                    .publish(vec![NewMessage::new("hello", "tick")])
                    .await
                    .unwrap();
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut latencies = Vec::new();
    for i in 0..rounds {
        let v = variant(&hello, &i.to_string());
        let version = sluice::testkit::loader::content_hash(&v);
        let tmp = handlers.join("hello.wasm.tmp");
        std::fs::write(&tmp, &v).unwrap();
        let renamed = Instant::now();
        std::fs::rename(&tmp, handlers.join("hello.wasm")).unwrap();
        let first = loop {
            if let Some(t) = seen.0.lock().unwrap().get(&version) {
                break *t;
            }
            assert!(
                renamed.elapsed() < Duration::from_secs(10),
                "version {version} never handled a message"
            );
            tokio::time::sleep(Duration::from_millis(1)).await;
        };
        latencies.push(first - renamed);
    }
    flow.abort();
    let _ = stop_tx.send(true);
    host.await.unwrap().unwrap();
    latencies.sort();
    println!(
        "reload  hello rename -> first message on it: median {:.0} ms   p90 {:.0} ms   ({rounds} swaps)",
        percentile(&latencies, 0.5) / 1000.0,
        percentile(&latencies, 0.9) / 1000.0
    );
}

/// Restart: time until a guest serves its first message with an empty and
/// with a warm compiled cache.
async fn bench_restart(lang: &str, name: &str) {
    let cache_dir = tempfile::tempdir().unwrap();
    let mut times = Vec::new();
    for label in ["cold", "warm"] {
        let start = Instant::now();
        let runtime = Runtime::new().unwrap();
        let files = sluice::CacheFiles {
            dir: cache_dir.path().join("cache"),
            key: cache_dir.path().join("cache.key"),
        };
        let cache = sluice::testkit::cache::CompileCache::on_disk(
            &runtime,
            &files,
            &cache_dir.path().join("handlers"),
        )
        .unwrap();
        let handler = sluice::testkit::loader::load_file(
            &runtime,
            &cache,
            name,
            &guest_in(lang, name),
            DEFAULT_MAX_MESSAGE_SIZE,
        )
        .unwrap();
        let r = handler.invoke(&delivery(0), &deadline(&handler)).await;
        let elapsed = start.elapsed();
        assert!(r.result.is_ok(), "{name}: {:?}", r.result);
        times.push(elapsed);
        println!(
            "restart {lang:<6} {name:<10} {label} cache: first message after {:>8.1} ms   ({} bytes)",
            elapsed.as_secs_f64() * 1000.0,
            std::fs::metadata(guest_in(lang, name)).unwrap().len()
        );
    }
    println!(
        "restart {lang:<6} {name:<10} warm is {:.1} × faster than cold",
        times[0].as_secs_f64() / times[1].as_secs_f64()
    );
}

fn main() {
    // Started by the low-load points as their publisher: publish, and exit.
    lowload::publisher();
    let args = args();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let runtime = Runtime::new().unwrap();
        let run = |s: &str| {
            assert!(
                SECTIONS.contains(&s),
                "section {s:?} is missing from SECTIONS"
            );
            args.only
                .as_deref()
                .is_none_or(|o| o.split(',').any(|o| o == s))
        };
        if run("invoke") {
            invoke_costs(&runtime, &args.lang, "hello", args.calls, args.calls).await;
        }
        if run("cli") {
            bench_cli_invoke(20);
        }
        if run("trace") {
            trace_context_cost(1_000_000);
        }
        if run("drain") {
            let defaults = Settings {
                concurrency: None,
                prefetch: None,
            };
            drains(
                &runtime,
                "sqlite",
                args.messages,
                defaults,
                args.rounds,
                ALL_MODES,
                async || temp_sqlite(),
            )
            .await;
        }
        if run("languages") {
            bench_languages(&runtime, 20_000).await;
        }
        if run("batch") {
            bench_batches(&runtime, 5_000).await;
        }
        if run("latency") {
            lowload::latencies(&runtime).await;
            latency::bench(&runtime, args.rounds).await;
        }
        if run("wake") {
            lowload::wake(&runtime, args.messages / 2, args.rounds).await;
        }
        if run("scale") {
            scale::bench().await;
        }
        if run("restart") {
            // The largest guest in guests/ (Python orders), and the Rust ones.
            bench_restart("python", "orders").await;
            bench_restart("js", "orders").await;
            bench_restart("rust", "wasi_probe").await;
            bench_restart("rust", "orders").await;
        }
        if run("redis") {
            let server = RedisProcess::start();
            REDIS_URL.with(|u| *u.borrow_mut() = Some(server.url.clone()));
            let n = args.redis_messages;
            // A sidecar for a fast handler on Redis: many batches in flight
            // hide the round trips (see "Brokers" in the README).
            let fast = Settings {
                concurrency: Some(64),
                prefetch: Some(4096),
            };
            drains(
                &runtime,
                "redis",
                n,
                fast,
                args.rounds,
                ALL_MODES,
                async || server.fresh_broker().await,
            )
            .await;
            REDIS_URL.with(|u| *u.borrow_mut() = None);
        }
        if run("postgres") {
            postgres::drains(&runtime, &args).await;
        }
        if run("bloat") {
            postgres::bloat(&runtime).await;
        }
        if run("limited") {
            limited::bench().await;
        }
        if run("watchdog") {
            watchdog::bench(args.rounds.max(3)).await;
        }
        // Last: it installs a global tracing subscriber.
        if run("reload") {
            bench_reload(20).await;
        }
    });
    if let Some(path) = &args.json {
        let options: Vec<String> = std::env::args()
            .skip(1)
            .filter(|a| a != "--bench")
            .collect();
        record::write(path, &options);
    }
}

/// Latency: how long a message takes from its publish to its ack as done,
/// at a low rate from another process (`lowload.rs`), and under an
/// open-loop load at 50% and 80% of the maximum rate (measured by a drain
/// of the same handler just before), on SQLite and Redis, for the native
/// no-op, `hello` fresh and `hello` reuse.
mod latency {
    use super::*;
    use sluice::broker::{ClaimState, Flow, KeyClaim, KeyOf, Lease, Queue, Received, Settlement};

    /// How long each load runs, and how much of its start is left out.
    const LOAD: Duration = Duration::from_secs(4);
    const WARMUP: Duration = Duration::from_millis(500);
    /// Messages of the drain that measures the maximum rate.
    const DRAIN: usize = 50_000;

    /// The queue role, noting each done settlement once it is written:
    /// `noted` is given its delivery.
    pub(super) struct AckTimed {
        pub(super) inner: Arc<dyn Broker>,
        pub(super) noted: Box<dyn Fn(&Delivery) + Send + Sync>,
    }

    /// For each done settlement, how long its message took since its
    /// publish: the nanoseconds since `origin` that the publisher wrote at
    /// the start of the payload, and how long after that it was settled.
    type Samples = Arc<std::sync::Mutex<Vec<(u64, u64)>>>;

    fn stamped(inner: Arc<dyn Broker>, origin: Instant, samples: Samples) -> AckTimed {
        AckTimed {
            inner,
            noted: Box::new(move |delivery| {
                let now = origin.elapsed().as_nanos() as u64;
                let sent = std::str::from_utf8(&delivery.payload[..20])
                    .ok()
                    .and_then(|t| t.parse::<u64>().ok())
                    .expect("a payload stamped by the publisher");
                samples
                    .lock()
                    .unwrap()
                    .push((sent, now.saturating_sub(sent)));
            }),
        }
    }

    #[async_trait]
    impl Queue for AckTimed {
        async fn publish(&self, m: Vec<NewMessage>) -> sluice::broker::Result<Vec<String>> {
            self.inner.publish(m).await
        }
        async fn receive(
            &self,
            q: &str,
            max: usize,
            lease: Duration,
            flow: Flow,
        ) -> sluice::broker::Result<Vec<Delivery>> {
            self.inner.receive(q, max, lease, flow).await
        }
        async fn claim(
            &self,
            q: &str,
            claims: &[KeyClaim],
            lease: Duration,
        ) -> sluice::broker::Result<Vec<ClaimState>> {
            self.inner.claim(q, claims, lease).await
        }
        async fn receive_claiming(
            &self,
            q: &str,
            max: usize,
            lease: Duration,
            flow: Flow,
            key_of: &KeyOf,
        ) -> sluice::broker::Result<Received> {
            self.inner
                .receive_claiming(q, max, lease, flow, key_of)
                .await
        }
        fn claims_with_receive(&self) -> bool {
            self.inner.claims_with_receive()
        }
        fn settle_writes(&self, ordered: bool) -> usize {
            self.inner.settle_writes(ordered)
        }
        async fn settle(&self, settlements: &[Settlement]) -> sluice::broker::Result<()> {
            self.inner.settle(settlements).await?;
            for s in settlements {
                if let Settlement::Done { delivery, .. } = s {
                    (self.noted)(delivery);
                }
            }
            Ok(())
        }

        async fn idle(&self, q: &str, up_to: Duration) {
            self.inner.idle(q, up_to).await
        }
        async fn extend(
            &self,
            q: &str,
            leases: &[Lease],
            lease: Duration,
        ) -> sluice::broker::Result<Vec<bool>> {
            self.inner.extend(q, leases, lease).await
        }
        async fn set_ordering(
            &self,
            q: &str,
            o: Option<&OrderedGroups>,
        ) -> sluice::broker::Result<()> {
            self.inner.set_ordering(q, o).await
        }
    }

    /// p50, p99 and p99.9 of one load, in ms.
    pub(super) struct Percentiles {
        pub(super) p50: f64,
        pub(super) p99: f64,
        pub(super) p999: f64,
        pub(super) count: usize,
    }

    impl Percentiles {
        /// Of `ms`, sorted here.
        pub(super) fn of(mut ms: Vec<f64>) -> Percentiles {
            ms.sort_by(f64::total_cmp);
            let at = |p: f64| ms[((ms.len() - 1) as f64 * p).round() as usize];
            Percentiles {
                p50: at(0.50),
                p99: at(0.99),
                p999: at(0.999),
                count: ms.len(),
            }
        }
    }

    /// Publish to `hello` at `rate` a second for [`LOAD`], a batch every
    /// millisecond, while `dispatch` serves it; the latencies of the
    /// messages published after [`WARMUP`].
    async fn load(
        broker: Arc<dyn Broker>,
        dispatch: Arc<dyn Dispatch>,
        spec: HandlerSpec,
        rate: f64,
    ) -> Percentiles {
        let origin = Instant::now();
        let samples = Samples::default();
        let timed = Arc::new(stamped(broker.clone(), origin, samples.clone()));
        let worker = QueueWorker::new(timed.clone(), dispatch, spec);
        let (stop_tx, stop_rx) = watch::channel(false);
        let task = tokio::spawn(worker.serve(stop_rx, Duration::from_secs(10)));
        let mut tick = tokio::time::interval(Duration::from_millis(1));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
        let (mut owed, mut sent) = (0.0, 0usize);
        while origin.elapsed() < LOAD {
            tick.tick().await;
            owed += rate / 1000.0;
            let n = owed as usize;
            owed -= n as f64;
            if n == 0 {
                continue;
            }
            let stamp = format!("{:020}", origin.elapsed().as_nanos());
            let payload = format!("{stamp:x<100}").into_bytes();
            let batch = (0..n)
                .map(|_| NewMessage::new("hello", payload.clone()))
                .collect();
            broker.publish(batch).await.unwrap();
            sent += n;
        }
        let until = Instant::now() + Duration::from_secs(30);
        while samples.lock().unwrap().len() < sent {
            assert!(Instant::now() < until, "the load did not drain");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let _ = stop_tx.send(true);
        task.await.unwrap();
        let warm = WARMUP.as_nanos() as u64;
        let ms: Vec<f64> = samples
            .lock()
            .unwrap()
            .iter()
            .filter(|(sent, _)| *sent >= warm)
            .map(|(_, took)| *took as f64 / 1e6)
            .collect();
        Percentiles::of(ms)
    }

    /// Each handler's maximum rate over `name`'s broker, then its latencies
    /// at 50% and 80% of it; `rounds` times, the handlers in a rotated
    /// order each round (so that a drifting machine weighs on each alike),
    /// then each Wasm handler's p99 at 50% load against native's of the
    /// same round: the median over the rounds, and every round's.
    async fn on(
        runtime: &Runtime,
        name: &str,
        base: Settings,
        rounds: usize,
        mut fresh_broker: impl AsyncFnMut() -> Arc<dyn Broker>,
    ) {
        let spec = tuned(
            load_in(runtime, "rust", "hello", InstanceMode::Fresh)
                .spec
                .clone(),
            base,
        );
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
        // Per round, each handler's p99 at 50% load, in `handlers` order.
        let mut p99s = Vec::with_capacity(rounds);
        for round in 0..rounds {
            let mut p99_at_half = [0.0; 3];
            for k in 0..handlers.len() {
                let i = (k + round) % handlers.len();
                let (label, dispatch) = &handlers[i];
                let max = drain(
                    &format!("{name} {label}"),
                    fresh_broker().await,
                    dispatch.clone(),
                    spec.clone(),
                    DRAIN,
                    Observed::Off,
                )
                .await
                .rate;
                for share in [0.5, 0.8] {
                    let rate = max * share;
                    let p = load(fresh_broker().await, dispatch.clone(), spec.clone(), rate).await;
                    println!(
                        "latency {name:<6} {label:<12} {:>3.0}% ({rate:>7.0} msg/s): p50 {:>7.2} ms  p99 {:>7.2} ms  p99.9 {:>7.2} ms  ({} messages)",
                        share * 100.0,
                        p.p50,
                        p.p99,
                        p.p999,
                        p.count
                    );
                    let group = format!(
                        "{} {label}, {:.0}% load",
                        super::broker_name(name),
                        share * 100.0
                    );
                    super::record::figure("latency", &group, "p50", "ms", p.p50);
                    super::record::figure("latency", &group, "p99", "ms", p.p99);
                    if share == 0.5 {
                        p99_at_half[i] = p.p99;
                    }
                }
            }
            p99s.push(p99_at_half);
        }
        for (i, (label, _)) in handlers.iter().enumerate().skip(1) {
            let mut ratios: Vec<f64> = p99s.iter().map(|p| p[i] / p[0]).collect();
            let each = ratios
                .iter()
                .map(|r| format!("{r:.2}"))
                .collect::<Vec<_>>()
                .join(", ");
            let median = median(&mut ratios);
            let of = if rounds == 1 {
                String::new()
            } else {
                format!("; median of {rounds} rounds: {each}")
            };
            println!(
                "ratio   {name} {label}: p99 at 50% load is {median:.2} × native's (target ≤ 1.10 ×{of})"
            );
        }
    }

    pub async fn bench(runtime: &Runtime, rounds: usize) {
        let defaults = Settings {
            concurrency: None,
            prefetch: None,
        };
        on(runtime, "sqlite", defaults, rounds, async || temp_sqlite()).await;
        let server = RedisProcess::start();
        REDIS_URL.with(|u| *u.borrow_mut() = Some(server.url.clone()));
        let fast = Settings {
            concurrency: Some(64),
            prefetch: Some(4096),
        };
        on(runtime, "redis", fast, rounds, async || {
            server.fresh_broker().await
        })
        .await;
        REDIS_URL.with(|u| *u.borrow_mut() = None);
    }
}
