//! The sluice benchmark harness. Run with `cargo bench --bench sluice`
//! (after `scripts/build-guests`). Options after `--`:
//!
//!   --messages N      messages per embedded-broker drain (default 100000)
//!   --redis-messages N messages per Redis drain (default 200000)
//!   --calls N         calls per invocation benchmark (default 20000)
//!   --only NAME       run one section: invoke | drain | redis
//!
//! Every figure that has a target is printed next to a baseline measured in
//! the same run (a native no-op handler over the same broker code), because
//! absolute numbers on shared machines drift from run to run.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use sluice::broker::{Broker, RedisBroker, SqliteBroker};
use sluice::config::{HandlerSpec, InstanceMode};
use sluice::message::{DEFAULT_MAX_MESSAGE_SIZE, Delivery, NewMessage};
use sluice::policy::Outcome;
use sluice::runtime::{Handler, Invocation, Runtime};
use sluice::worker::{Dispatch, QueueWorker};
use tokio::sync::watch;

struct Args {
    messages: usize,
    redis_messages: usize,
    calls: usize,
    only: Option<String>,
}

fn args() -> Args {
    let mut a = Args {
        messages: 100_000,
        redis_messages: 200_000,
        calls: 20_000,
        only: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--messages" => {
                a.messages = it
                    .next()
                    .and_then(|v| v.parse().ok())
                    .expect("--messages N")
            }
            "--redis-messages" => {
                a.redis_messages = it
                    .next()
                    .and_then(|v| v.parse().ok())
                    .expect("--redis-messages N")
            }
            "--calls" => a.calls = it.next().and_then(|v| v.parse().ok()).expect("--calls N"),
            "--only" => a.only = it.next(),
            _ => {} // cargo passes --bench
        }
    }
    a
}

fn guest(name: &str) -> PathBuf {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("guests/out/rust")
        .join(format!("{name}.wasm"));
    assert!(
        path.is_file(),
        "{} is missing: run scripts/build-guests",
        path.display()
    );
    path
}

fn load(runtime: &Runtime, name: &str, mode: InstanceMode) -> Handler {
    let cache = sluice::cache::CompileCache::new(runtime, None);
    let mut handler = sluice::registry::load_file(
        runtime,
        &cache,
        name,
        &guest(name),
        DEFAULT_MAX_MESSAGE_SIZE,
    )
    .expect("loading guest");
    handler.spec.instance_mode = mode;
    handler.spec.max_messages_per_instance = u32::MAX;
    handler
}

fn delivery(i: usize) -> Delivery {
    Delivery {
        id: format!("{i:032x}"),
        queue: "hello".into(),
        key: format!("{i:032x}"),
        payload: vec![b'x'; 100],
        headers: Vec::new(),
        attempt: 1,
        enqueued_at_ms: 0,
        last_error: None,
        receipt: String::new(),
        lease_until_ms: u64::MAX,
    }
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i].as_secs_f64() * 1e6
}

/// Instantiate-and-call (fresh) and warm-call (reuse) cost of one guest, one
/// call at a time.
async fn bench_invoke(runtime: &Runtime, name: &str, calls: usize) {
    for mode in [InstanceMode::Fresh, InstanceMode::Reuse] {
        let handler = load(runtime, name, mode);
        let d = delivery(0);
        for _ in 0..calls / 10 {
            let r = handler.invoke(&d).await;
            assert_eq!(r.result, Ok(Outcome::Done));
        }
        let mut times = Vec::with_capacity(calls);
        for _ in 0..calls {
            let start = Instant::now();
            let r = handler.invoke(&d).await;
            times.push(start.elapsed());
            assert_eq!(r.result, Ok(Outcome::Done));
        }
        times.sort();
        println!(
            "invoke  {name:<8} {:<6} median {:>7.2} µs   p99 {:>7.2} µs   ({calls} calls)",
            format!("{mode:?}").to_lowercase(),
            percentile(&times, 0.5),
            percentile(&times, 0.99)
        );
    }
}

/// A native handler that does nothing: the baseline for the WASM tax.
struct NativeNoop;

#[async_trait]
impl Dispatch for NativeNoop {
    async fn invoke(&self, _: &Delivery) -> Invocation {
        Invocation {
            result: Ok(Outcome::Done),
            publishes: Vec::new(),
        }
    }

    fn version(&self) -> &str {
        "native"
    }
}

/// Preload `n` messages of 100 bytes into `broker`, then time one worker
/// draining them. Returns messages per second.
async fn drain(
    label: &str,
    broker: Arc<dyn Broker>,
    dispatch: Arc<dyn Dispatch>,
    spec: HandlerSpec,
    n: usize,
) -> f64 {
    let payload = vec![b'x'; 100];
    for chunk in (0..n).collect::<Vec<_>>().chunks(5000) {
        let batch = chunk
            .iter()
            .map(|_| NewMessage::new("hello", payload.clone()))
            .collect();
        broker.publish(batch).await.unwrap();
    }
    let before = redis_commands(&broker_url_of(&broker)).await;
    let cpu_before = redis_cpu(&broker_url_of(&broker)).await;
    let worker = QueueWorker::new(broker.clone(), dispatch, spec);
    let stats = worker.stats.clone();
    let (stop_tx, stop_rx) = watch::channel(false);
    let start = Instant::now();
    let task = tokio::spawn(worker.serve(stop_rx, Duration::from_secs(10)));
    while stats.handled.load(Ordering::Relaxed) < n as u64 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let elapsed = start.elapsed();
    let _ = stop_tx.send(true);
    task.await.unwrap();
    let q = broker.queue_stats("hello").await.unwrap();
    assert_eq!(
        (q.done, q.pending()),
        (n as u64, 0),
        "{label}: every message done"
    );
    let rate = n as f64 / elapsed.as_secs_f64();
    let mut line = format!(
        "drain   {label:<28} {rate:>9.0} msg/s   ({n} messages in {:.2} s)",
        elapsed.as_secs_f64()
    );
    if let (Some(before), Some(after)) = (before, redis_commands(&broker_url_of(&broker)).await) {
        let top = (after.0 - before.0) as f64 / n as f64;
        let all = (after.1 - before.1) as f64 / n as f64;
        line += &format!(
            "   redis commands/msg: {top:.3} sent by sluice, {all:.2} counting those inside scripts"
        );
    }
    if let (Some(a), Some(b)) = (cpu_before, redis_cpu(&broker_url_of(&broker)).await) {
        line += &format!(", redis-server CPU {:.1} µs/msg", (b - a) * 1e6 / n as f64);
    }
    println!("{line}");
    rate
}

thread_local! {
    static REDIS_URL: std::cell::RefCell<Option<String>> = const { std::cell::RefCell::new(None) };
}

fn broker_url_of(_: &Arc<dyn Broker>) -> Option<String> {
    REDIS_URL.with(|u| u.borrow().clone())
}

/// CPU seconds the Redis server has used, from `INFO cpu`.
async fn redis_cpu(url: &Option<String>) -> Option<f64> {
    let client = redis::Client::open(url.as_ref()?.as_str()).ok()?;
    let mut conn = client.get_multiplexed_async_connection().await.ok()?;
    let info: String = redis::cmd("INFO")
        .arg("cpu")
        .query_async(&mut conn)
        .await
        .ok()?;
    let field = |name: &str| -> Option<f64> {
        info.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':')?.trim().parse().ok())
    };
    Some(field("used_cpu_sys")? + field("used_cpu_user")?)
}

/// (commands sent by sluice, all commands) from `INFO commandstats`. A
/// script's own `redis.call`s are counted by Redis too; the first figure
/// leaves them out by counting only the commands sluice sends itself on the
/// hot path (scripts, reads, registration). The relay's `XRANGE`/`XDEL`
/// cannot be told apart from the scripts' and count only in the second.
async fn redis_commands(url: &Option<String>) -> Option<(u64, u64)> {
    let url = url.as_ref()?;
    let client = redis::Client::open(url.as_str()).ok()?;
    let mut conn = client.get_multiplexed_async_connection().await.ok()?;
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut conn)
        .await
        .ok()?;
    let (mut top, mut all) = (0, 0);
    for line in info.lines() {
        let Some(rest) = line.strip_prefix("cmdstat_") else {
            continue;
        };
        let (name, fields) = rest.split_once(':')?;
        let calls: u64 = fields
            .split(',')
            .find_map(|f| f.strip_prefix("calls="))?
            .parse()
            .ok()?;
        all += calls;

        // What sluice sends itself; everything else runs inside its scripts.
        if matches!(
            name,
            "evalsha"
                | "eval"
                | "xreadgroup"
                | "script|load"
                | "sadd"
                | "xgroup|create"
                | "info"
                | "smembers"
                | "ping"
                | "client|setinfo"
                | "hello"
        ) {
            top += calls;
        }
    }
    Some((top, all))
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

/// The handler settings of the drains: the defaults, unless
/// `SLUICE_BENCH_PREFETCH` / `SLUICE_BENCH_CONCURRENCY` say otherwise.
fn tuned(mut spec: HandlerSpec) -> HandlerSpec {
    let var = |name: &str| std::env::var(name).ok().and_then(|v| v.parse().ok());
    if let Some(c) = var("SLUICE_BENCH_CONCURRENCY") {
        spec.concurrency = c;
    }
    if let Some(p) = var("SLUICE_BENCH_PREFETCH") {
        spec.prefetch = p;
    }
    spec
}

/// Native, `hello` fresh and `hello` reuse over one broker kind.
async fn drains(
    runtime: &Runtime,
    name: &str,
    n: usize,
    mut fresh_broker: impl AsyncFnMut() -> Arc<dyn Broker>,
) {
    let spec = tuned(load(runtime, "hello", InstanceMode::Fresh).spec.clone());
    let native = drain(
        &format!("{name} native no-op"),
        fresh_broker().await,
        Arc::new(NativeNoop),
        spec,
        n,
    )
    .await;
    let mut rates = Vec::new();
    for mode in [InstanceMode::Fresh, InstanceMode::Reuse] {
        let handler = Arc::new(load(runtime, "hello", mode));
        let spec = tuned(handler.spec.clone());
        let label = format!("{name} hello {}", format!("{mode:?}").to_lowercase());
        rates.push((
            label.clone(),
            drain(&label, fresh_broker().await, handler, spec, n).await,
        ));
    }
    for (label, rate) in rates {
        println!("ratio   {label:<28} {:>9.2} × native", rate / native);
    }
}

fn main() {
    let args = args();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let runtime = Runtime::new().unwrap();
        let run = |s: &str| args.only.as_deref().is_none_or(|o| o == s);
        if run("invoke") {
            bench_invoke(&runtime, "hello", args.calls).await;
        }
        if run("drain") {
            drains(&runtime, "sqlite", args.messages, async || {
                let dir = tempfile::tempdir().unwrap().keep();
                Arc::new(SqliteBroker::open(dir.join("bench.db")).unwrap()) as Arc<dyn Broker>
            })
            .await;
        }
        if run("redis") {
            let server = RedisProcess::start();
            REDIS_URL.with(|u| *u.borrow_mut() = Some(server.url.clone()));
            let n = args.redis_messages;
            drains(&runtime, "redis", n, async || {
                server.flush().await;
                Arc::new(RedisBroker::connect(&server.url).await.unwrap()) as Arc<dyn Broker>
            })
            .await;
            REDIS_URL.with(|u| *u.borrow_mut() = None);
        }
    });
}
