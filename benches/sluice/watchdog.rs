//! `watchdog`: what the stall watchdog costs a drain. A whole host
//! (`app::run` with `until_idle`) drains `hello` on SQLite with the watchdog
//! off, then on with `stall_after` at its lowest (1 s, so it reads the
//! broker's counts every 250 ms, the most it ever does), in a rotated order
//! each round; prints the median of the per-round ratios of the rates.

use super::*;

/// The messages of one drain.
const MESSAGES: usize = 20_000;

pub async fn bench(rounds: usize) {
    let cache = tempfile::tempdir().unwrap();
    let modes = [("off", None), ("on", Some(Duration::from_secs(1)))];
    let mut ratios = Vec::new();
    for round in 0..rounds.max(1) {
        let mut order = modes.to_vec();
        order.rotate_left(round % modes.len());
        let mut rates = Vec::new();
        for (mode, stall_after) in order {
            let rate = drain(cache.path(), stall_after).await;
            println!(
                "watchdog {mode:<3} host drain of {MESSAGES} hello messages (SQLite): {rate:>9.0} msg/s"
            );
            rates.push((mode, rate));
        }
        let of = |m: &str| rates.iter().find(|(mode, _)| *mode == m).unwrap().1;
        ratios.push(of("on") / of("off"));
    }
    println!(
        "ratio   watchdog on (stall_after 1s)      {:>9.3} × off (median of {} round{})",
        median(&mut ratios),
        ratios.len(),
        if ratios.len() == 1 { "" } else { "s" }
    );
}

/// One host drain of [`MESSAGES`] preloaded messages; the rate from the
/// host's start to its return when the queue is idle. The compiled `hello`
/// comes from `cache` (warm after the first drain).
async fn drain(cache: &std::path::Path, stall_after: Option<Duration>) -> f64 {
    let dir = tempfile::tempdir().unwrap();
    let handlers = dir.path().join("handlers");
    std::fs::create_dir(&handlers).unwrap();
    std::fs::copy(guest("hello"), handlers.join("hello.wasm")).unwrap();
    let broker: Arc<dyn Broker> =
        Arc::new(SqliteBroker::open(dir.path().join("bench.db")).unwrap());
    for start in (0..MESSAGES).step_by(5000) {
        let batch = (start..MESSAGES.min(start + 5000))
            .map(|_| NewMessage::new("hello", vec![b'x'; 100]))
            .collect();
        broker.publish(batch).await.unwrap();
    }
    let options = sluice::RunOptions {
        handlers,
        until_idle: true,
        grace: Duration::from_secs(5),
        max_message_size: DEFAULT_MAX_MESSAGE_SIZE,
        max_component_size: sluice::testkit::files::DEFAULT_MAX_COMPONENT_SIZE,
        cache: Some(sluice::CacheFiles {
            dir: cache.join("cache"),
            key: cache.join("cache.key"),
        }),
        watch: false,
        admin: None,
        otlp_endpoint: None,
        broker_timeout: None,
        stall_after,
        exit_on_stall: false,
        max_instances: None,
    };
    let start = Instant::now();
    sluice::run(broker.clone(), options, std::future::pending())
        .await
        .unwrap();
    let elapsed = start.elapsed();
    let q = broker.queue_stats("hello").await.unwrap();
    assert_eq!(
        (q.done, q.pending()),
        (MESSAGES as u64, 0),
        "every message done"
    );
    MESSAGES as f64 / elapsed.as_secs_f64()
}
