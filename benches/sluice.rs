//! The sluice benchmark harness. Run with `cargo bench --bench sluice`
//! (after `scripts/build-guests`). Options after `--`:
//!
//!   --messages N      messages per drain (default 100000)
//!   --calls N         calls per invocation benchmark (default 20000)
//!   --only NAME       run one section: invoke | drain
//!
//! Every figure that has a target is printed next to a baseline measured in
//! the same run (a native no-op handler over the same broker code), because
//! absolute numbers on shared machines drift from run to run.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use sluice::broker::{Broker, SqliteBroker};
use sluice::config::{HandlerSpec, InstanceMode};
use sluice::message::{DEFAULT_MAX_MESSAGE_SIZE, Delivery, NewMessage};
use sluice::policy::Outcome;
use sluice::runtime::{Handler, Invocation, Runtime};
use sluice::worker::{Dispatch, QueueWorker};
use tokio::sync::watch;

struct Args {
    messages: usize,
    calls: usize,
    only: Option<String>,
}

fn args() -> Args {
    let mut a = Args {
        messages: 100_000,
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
    let mut handler = sluice::registry::load_file(runtime, &guest(name), DEFAULT_MAX_MESSAGE_SIZE)
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

/// Preload `n` messages of 100 bytes into a fresh broker file, then time
/// one worker draining them. Returns messages per second.
async fn drain(label: &str, dispatch: Arc<dyn Dispatch>, spec: HandlerSpec, n: usize) -> f64 {
    let dir = tempfile::tempdir().unwrap();
    let broker: Arc<dyn Broker> =
        Arc::new(SqliteBroker::open(dir.path().join("bench.db")).unwrap());
    let payload = vec![b'x'; 100];
    for chunk in (0..n).collect::<Vec<_>>().chunks(5000) {
        let batch = chunk
            .iter()
            .map(|_| NewMessage::new("hello", payload.clone()))
            .collect();
        broker.publish(batch).await.unwrap();
    }
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
    println!(
        "drain   {label:<22} {rate:>9.0} msg/s   ({n} messages in {:.2} s)",
        elapsed.as_secs_f64()
    );
    rate
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
            let spec = load(&runtime, "hello", InstanceMode::Fresh).spec.clone();
            let native = drain(
                "native no-op",
                Arc::new(NativeNoop),
                spec.clone(),
                args.messages,
            )
            .await;
            let mut rates = Vec::new();
            for mode in [InstanceMode::Fresh, InstanceMode::Reuse] {
                let handler = Arc::new(load(&runtime, "hello", mode));
                let spec = handler.spec.clone();
                let label = format!("hello {}", format!("{mode:?}").to_lowercase());
                rates.push((
                    label.clone(),
                    drain(&label, handler, spec, args.messages).await,
                ));
            }
            for (label, rate) in rates {
                println!("ratio   {label:<22} {:>9.2} × native", rate / native);
            }
        }
    });
}
