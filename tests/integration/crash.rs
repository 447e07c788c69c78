//! A host killed with SIGKILL loses nothing: its leases expire and a new
//! host finishes the work, and no completed message is handled again.

use std::collections::BTreeMap;
use std::time::Duration;

use sluice::broker::message::NewMessage;

use crate::support::Env;

const MESSAGES: usize = 2000;

#[test]
fn sigkill_mid_drain_loses_nothing_and_completes_each_once() {
    let env = Env::new();
    // A short lease so the killed host's messages come back quickly.
    env.deploy(
        "orders",
        "orders",
        Some("lease = \"2s\"\nconcurrency = 4\nprefetch = 8\n[limits]\ntimeout = \"1s\"\n# every line is counted: none may be dropped\nlog_rate = 1000000\n[config]\nfollowup_queue = \"shipping\"\nwork_ms = 1\n"),
    );
    let (rt, broker) = env.broker();
    rt.block_on(async {
        let batch = (0..MESSAGES)
            .map(|i| NewMessage::new("orders", format!(r#"{{"id": {i}, "qty": 1}}"#)))
            .collect();
        broker.publish(batch).await.unwrap();
    });

    let first_log = env.dir.path().join("first.log");
    let mut host = env.spawn_run(&first_log);
    // Poll in-process (a CLI call per poll is too slow: the host drains
    // thousands of messages a second) and kill as soon as some are done.
    let done = || rt.block_on(broker.queue_stats("orders")).unwrap().done;
    let start = std::time::Instant::now();
    while done() < 100 {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the first host completed nothing"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    unsafe { libc::kill(host.id() as i32, libc::SIGKILL) };
    host.wait().unwrap();
    let done_at_kill = env.count("orders", "done");
    assert!(
        done_at_kill < MESSAGES as u64,
        "the host finished before it was killed; kill it earlier"
    );

    let second_log = env.run_until_idle();
    let first_log = std::fs::read_to_string(&first_log).unwrap();

    // Every message ended done or dead, none lost.
    let stats = env.stats();
    assert_eq!(
        stats["orders"]["done"].as_u64().unwrap() + stats["orders"]["dead"].as_u64().unwrap(),
        MESSAGES as u64
    );
    assert_eq!(stats["orders"]["dead"], 0);
    assert_eq!(stats["orders"]["ready"], 0);
    assert_eq!(stats["orders"]["in_flight"], 0);

    // Each order completed exactly once: one follow-up per order, committed
    // with its ack.
    let mut completions: BTreeMap<u64, usize> = BTreeMap::new();
    for d in env.drain("shipping") {
        let body: serde_json::Value = serde_json::from_slice(&d.payload).unwrap();
        *completions
            .entry(body["order"].as_u64().unwrap())
            .or_default() += 1;
    }
    assert_eq!(completions.len(), MESSAGES, "every order has a follow-up");
    assert!(
        completions.values().all(|&n| n == 1),
        "an order completed twice"
    );

    // Handlings counted from the guest's own log lines: every order was
    // handled, and only those in flight at the kill were handled again.
    let mut handlings: BTreeMap<u64, usize> = BTreeMap::new();
    for line in first_log.lines().chain(second_log.lines()) {
        if let Some(rest) = line.split("order ").nth(1)
            && line.contains("forwarded to shipping")
            && let Some(id) = rest.split_whitespace().next().and_then(|s| s.parse().ok())
        {
            *handlings.entry(id).or_default() += 1;
        }
    }
    assert_eq!(handlings.len(), MESSAGES, "every order was handled");
    let twice = handlings.values().filter(|&&n| n > 1).count();
    assert!(
        twice <= 8,
        "{twice} orders were handled again; only the prefetch in flight at the kill may be"
    );
}
