//! Dead letters going back to their queue: on a handler's schedule
//! (`[retry] redrive_every`, `max_redrives`), through a host run by
//! `sluice::testkit::app::run_with_clock` with a real guest and a clock the
//! test moves on; and by hand, through the binary's `dlq replay` options.
//! On every broker.

use std::time::{Duration, Instant};

use sluice::broker::message::{NewMessage, now_ms};
use sluice::broker::{Broker, DeadLetter};

use crate::clock::{Host, TestClock};
use crate::support::Env;

const EVERY: Duration = Duration::from_secs(600);
/// One host runs on the clock.
const LOOPS: u64 = crate::clock::HOST_LOOPS;

/// Every attempt of these orders asks for a retry, so each dies after two.
const REDRIVEN: &str = r#"
[retry]
max_attempts = 2
delays = ["10ms"]
redrive_every = "10m"
max_redrives = 2
"#;

/// Wait until `orders` has nothing pending and exactly `n` dead letters,
/// each with `redrives`; returns them.
async fn dead_with(b: &dyn Broker, n: usize, redrives: u32) -> Vec<DeadLetter> {
    let start = Instant::now();
    loop {
        let dead = b.dead_letters("orders", 100).await.unwrap();
        let pending = b.queue_stats("orders").await.unwrap().pending();
        if pending == 0 && dead.len() == n && dead.iter().all(|d| d.redrives == redrives) {
            return dead;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "waiting for {n} dead letters with {redrives} redrive(s); {pending} pending, dead: {:?}",
            dead.iter()
                .map(|d| (d.attempts, d.redrives))
                .collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn scheduled_redrive_until_max_redrives(env: Env) {
    env.deploy("orders", "orders", Some(REDRIVEN));
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let broker = sluice::broker::connect(&env.broker_url()).await.unwrap();
        let clock = TestClock::starting_now(LOOPS);
        let payloads = (1..=3).map(|i| format!(r#"{{"id": {i}, "always_retry": true}}"#));
        let mut ids = broker
            .publish(payloads.map(|p| NewMessage::new("orders", p)).collect())
            .await
            .unwrap();
        ids.sort();
        let host = Host::start(&env, broker.clone(), &clock);

        let mut dead = dead_with(&*broker, 3, 0).await;
        let mut died_ids: Vec<String> = dead.iter().map(|d| d.id.clone()).collect();
        died_ids.sort();
        assert_eq!(died_ids, ids);
        assert!(dead.iter().all(|d| d.attempts == 2), "{dead:?}");
        clock.slept(LOOPS).await;
        // Dead for half of redrive_every: a pass leaves them where they are.
        clock.tick(EVERY / 2).await;
        assert_eq!(dead_with(&*broker, 3, 0).await, dead);

        for round in 1..=2u32 {
            clock.tick(EVERY).await;
            // Back with attempts reset: both attempts ran again (a message
            // that kept its attempts would die unhandled, on attempt 3).
            let again = dead_with(&*broker, 3, round).await;
            assert!(again.iter().all(|d| d.attempts == 2), "{again:?}");
            for d in &again {
                let before = dead.iter().find(|b| b.id == d.id).unwrap();
                assert!(d.died_at_ms > before.died_at_ms, "{d:?} died again");
            }
            let retried = broker.queue_stats("orders").await.unwrap().retried;
            assert_eq!(retried, 3 * u64::from(round + 1), "round {round}");
            dead = again;
        }

        // max_redrives used up: they stay dead, however long.
        for _ in 0..3 {
            clock.tick(EVERY).await;
        }
        assert_eq!(dead_with(&*broker, 3, 2).await, dead);
        assert_eq!(broker.queue_stats("orders").await.unwrap().retried, 9);
        host.stop().await;
    });
    // The CLI shows the count.
    for d in env.dead("orders") {
        assert_eq!(d["redrives"], 2, "{d}");
    }
    let id = env.dead("orders")[0]["id"].as_str().unwrap().to_string();
    let shown = env.sluice(&["dlq", "show", "orders", &id]);
    assert!(shown.contains("redrives:  2"), "{shown}");
}

/// The ids of `orders`' dead letters, oldest first.
fn dead_ids(env: &Env) -> Vec<String> {
    env.dead("orders")
        .iter()
        .map(|d| d["id"].as_str().unwrap().to_string())
        .collect()
}

/// Run `sluice ARGS`, which must fail with one line on stderr; returns it.
fn fails(env: &Env, args: &[&str]) -> String {
    let out = env.sluice_raw(args);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "{args:?} succeeded: {err}");
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    err
}

fn replay_takes_older_than_limit_and_ids(env: Env) {
    env.deploy("orders", "orders", Some("[retry]\nmax_attempts = 1\n"));
    // Three dead letters, each dying in a run of its own; the last at least
    // 2 s after the others.
    let mut ids = Vec::new();
    for i in 1..=3 {
        if i == 3 {
            std::thread::sleep(Duration::from_secs(2));
        }
        ids.push(env.send(
            "orders",
            &format!(r#"{{"id": {i}, "always_retry": true}}"#),
            &[],
        ));
        env.run_until_idle();
    }
    assert_eq!(dead_ids(&env), ids);

    let out = env.sluice(&["dlq", "replay", "orders", "--older-than", "1h"]);
    assert!(out.contains("replayed 0 dead letter(s)"), "{out}");
    let out = env.sluice(&["--json", "dlq", "replay", "orders", "--limit", "1"]);
    let out: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(out["replayed"], 1, "{out}");
    assert_eq!(dead_ids(&env), ids[1..], "the one that died first");

    // Older than the last by a second: the second only.
    let last_died = env.dead("orders")[1]["died_at_ms"].as_u64().unwrap();
    let older_than = format!("{}ms", now_ms() - last_died + 1000);
    let out = env.sluice(&["dlq", "replay", "orders", "--older-than", &older_than]);
    assert!(out.contains("replayed 1 dead letter(s)"), "{out}");
    assert_eq!(dead_ids(&env), ids[2..]);

    let err = fails(
        &env,
        &[
            "dlq",
            "replay",
            "orders",
            "--id",
            &ids[2],
            "--older-than",
            "1h",
        ],
    );
    assert!(
        err.contains("replayed 0 of 1") && err.contains("left out by --older-than or --limit"),
        "{err}"
    );
    let out = env.sluice(&["dlq", "replay", "orders", "--id", &ids[2], "--limit", "5"]);
    assert!(out.contains("replayed 1 dead letter(s)"), "{out}");
    assert!(dead_ids(&env).is_empty());

    // Handled again from attempt 1, and dead again: a replay by hand is not
    // a redrive, so the count stays 0.
    assert_eq!(env.count("orders", "ready"), 3);
    env.run_until_idle();
    let dead = env.dead("orders");
    assert_eq!(dead.len(), 3);
    assert!(
        dead.iter()
            .all(|d| d["attempts"] == 1 && d["redrives"] == 0),
        "{dead:?}"
    );
    assert_eq!(env.count("orders", "retried"), 0);

    for (args, flag) in [
        (
            &["--older-than", "soon"][..],
            "error: --older-than: bad duration \"soon\"",
        ),
        (
            &["--older-than", ""][..],
            "error: --older-than: bad duration",
        ),
        (&["--limit", "0"][..], "error: --limit: bad number \"0\""),
        (&["--limit", "-3"][..], "error: --limit: bad number \"-3\""),
        (
            &["--older-than", "-5m"][..],
            "error: --older-than: bad duration \"-5m\"",
        ),
        (
            &["--limit", "some"][..],
            "error: --limit: bad number \"some\"",
        ),
    ] {
        let mut all = vec!["dlq", "replay", "orders"];
        all.extend_from_slice(args);
        let err = fails(&env, &all);
        assert!(err.starts_with(flag), "{args:?}: {err}");
    }
    assert_eq!(
        env.count("orders", "dead"),
        3,
        "a bad option replays nothing"
    );
}

on_every_backend!(env:
    scheduled_redrive_until_max_redrives,
    replay_takes_older_than_limit_and_ids,
);
