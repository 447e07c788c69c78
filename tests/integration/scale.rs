//! Many hosts on a server broker, and faults under them, alike on Redis and
//! PostgreSQL: a host killed mid-drain, three hosts sharing one queue with
//! exact totals, and the server itself restarted under a draining host.
//! (Redis Cluster and what only Redis has: `redis`.)

use std::collections::BTreeMap;
use std::process::Child;
use std::time::{Duration, Instant};

use sluice::broker::message::NewMessage;
use sluice_broker::testkit::RedisServer;

use crate::support::{Backend, Env, lines_with, wait_until, wait_until_or};

/// An `orders` handler that takes about 1 ms per message, so a drain can be
/// interrupted, and whose follow-ups record each completion in `shipping`.
const ORDERS: &str = "lease = \"2s\"\nconcurrency = 8\nprefetch = 16\n[limits]\ntimeout = \"1s\"\n# every line is counted: none may be dropped\nlog_rate = 1000000\n[config]\nfollowup_queue = \"shipping\"\nwork_ms = 1\n";

fn preload(env: &Env, n: usize) {
    let batch = (0..n)
        .map(|i| NewMessage::new("orders", format!(r#"{{"id": {i}, "qty": 1}}"#)))
        .collect();
    env.publish(batch);
}

/// Completions per order id, from the follow-ups in `shipping`.
fn completions_of(follow_ups: &[sluice::broker::message::Delivery]) -> BTreeMap<u64, usize> {
    let mut out = BTreeMap::new();
    for d in follow_ups {
        *out.entry(order_of(d)).or_default() += 1;
    }
    out
}

/// The order a follow-up is for.
fn order_of(follow_up: &sluice::broker::message::Delivery) -> u64 {
    let body: serde_json::Value = serde_json::from_slice(&follow_up.payload).unwrap();
    body["order"].as_u64().unwrap()
}

/// Handlings per order id, from the guest's own log lines.
fn handlings(logs: &[String]) -> BTreeMap<u64, usize> {
    let mut out = BTreeMap::new();
    for line in logs.iter().flat_map(|l| l.lines()) {
        if line.contains("forwarded to shipping")
            && let Some(id) = line
                .split("order ")
                .nth(1)
                .and_then(|r| r.split_whitespace().next())
            && let Ok(id) = id.parse()
        {
            *out.entry(id).or_default() += 1;
        }
    }
    out
}

pub fn stop(mut host: Child) {
    unsafe { libc::kill(host.id() as i32, libc::SIGTERM) };
    let status = host.wait().unwrap();
    assert!(status.success(), "host exited with {status}");
}

fn assert_each_completed_once(env: &Env, n: usize) {
    let follow_ups = env.drain("shipping");
    let c = completions_of(&follow_ups);
    assert_eq!(c.len(), n, "every order has a follow-up");
    let twice: Vec<_> = c.iter().filter(|&(_, &k)| k > 1).collect();
    if twice.is_empty() {
        return;
    }
    // What a reader needs to tell a follow-up relayed twice (one id) from
    // an order handled twice (two ids), and the hosts' logs of the orders.
    let doubled: Vec<&sluice::broker::message::Delivery> = follow_ups
        .iter()
        .filter(|d| twice.iter().any(|&(&o, _)| order_of(d) == o))
        .collect();
    let ids: Vec<String> = doubled
        .iter()
        .map(|d| {
            format!(
                "order {} -> follow-up {} (attempt {})",
                order_of(d),
                d.id,
                d.attempt
            )
        })
        .collect();
    let logs: Vec<String> = std::fs::read_dir(env.dir.path())
        .unwrap()
        .filter_map(|e| {
            let path = e.ok()?.path();
            (path.extension()? == "log").then(|| std::fs::read_to_string(path).ok())?
        })
        .collect();
    let related: Vec<&str> = logs
        .iter()
        .flat_map(|l| l.lines())
        .filter(|l| {
            twice
                .iter()
                .any(|(o, _)| l.contains(&format!("order {o} ")))
                || doubled.iter().any(|d| l.contains(&d.id))
                || ["written again", "lost", "ERROR", "WARN"]
                    .iter()
                    .any(|w| l.contains(w))
        })
        .collect();
    panic!(
        "orders completed more than once: {twice:?}\n{ids:#?}\nlog lines of those orders, and warnings:\n{}",
        related.join("\n")
    );
}

/// A host SIGKILLed mid-drain: a second host takes over what the first
/// had leased once the leases run out, and finishes with nothing lost.
fn sigkill_mid_drain_a_second_host_finishes(env: Env) {
    const N: usize = 5000;
    env.deploy("orders", "orders", Some(ORDERS));
    preload(&env, N);
    let first_log = env.dir.path().join("first.log");
    let host = env.spawn_run(&first_log);
    wait_until(
        Duration::from_secs(60),
        "the first host to complete some orders",
        || env.count("orders", "done") >= 300,
    );
    let mut host = host;
    unsafe { libc::kill(host.id() as i32, libc::SIGKILL) };
    host.wait().unwrap();
    let at_kill = env.count("orders", "done");
    assert!(
        at_kill < N as u64,
        "the first host finished before it was killed"
    );

    // The second host reclaims what the first left pending once the lease
    // has run out, and drains the rest.
    let second_log = env.run_until_idle();
    let stats = env.stats();
    assert_eq!(stats["orders"]["done"], N as u64, "{stats:?}");
    assert_eq!(stats["orders"]["dead"], 0);
    assert_eq!(stats["orders"]["in_flight"], 0);
    assert_each_completed_once(&env, N);
    let first_log = std::fs::read_to_string(first_log).unwrap();
    let h = handlings(&[first_log, second_log]);
    assert_eq!(h.len(), N, "every order was handled");
    let again = h.values().filter(|&&k| k > 1).count();
    assert!(
        again <= 16,
        "{again} orders handled again; only the 16 leased at the kill may be"
    );
}

#[test]
fn redis_restart_mid_drain_the_host_survives() {
    let env = Env::on(Backend::Redis(RedisServer::start_with(&[
        "--appendonly",
        "yes",
        "--appendfsync",
        "always",
    ])));
    restart_mid_drain_the_host_survives(env, "Redis", |env| {
        env.redis_server().kill();
        std::thread::sleep(Duration::from_secs(1));
        env.redis_server().restart();
    });
}

/// `pg_ctl restart -m fast` ends every session of the host's pool and its
/// listening connection; committed work stays.
#[test]
fn postgres_restart_mid_drain_the_host_survives() {
    restart_mid_drain_the_host_survives(Env::postgres(), "PostgreSQL", |env| {
        env.pg_server().restart();
    });
}

/// The broker's server goes away under a draining host (`restart`) and
/// comes back: the host logs it, rides it out and finishes, every order
/// done once.
fn restart_mid_drain_the_host_survives(mut env: Env, server: &str, restart: fn(&mut Env)) {
    const N: usize = 2000;
    env.deploy("orders", "orders", Some(ORDERS));
    preload(&env, N);
    let log = env.dir.path().join("run.log");
    let host = env.spawn_run(&log);
    wait_until(Duration::from_secs(60), "some orders done", || {
        env.count("orders", "done") >= 200
    });
    restart(&mut env);
    let start = Instant::now();
    loop {
        // The server may still be loading its data: a poll that cannot
        // reach it waits for the next.
        let stats = env.stats_if_reachable();
        let q = stats.as_ref().map(|s| &s["orders"]);
        if let Some(q) = q {
            let settled = q["done"].as_u64().unwrap() + q["dead"].as_u64().unwrap();
            if settled == N as u64 && q["in_flight"] == 0 && q["ready"] == 0 {
                break;
            }
        }
        assert!(
            start.elapsed() < Duration::from_secs(90),
            "not drained after the restart: {q:?}\n{}",
            std::fs::read_to_string(&log).unwrap()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    stop(host);
    let log = std::fs::read_to_string(&log).unwrap();
    assert!(
        !lines_with(&log, "retrying").is_empty(),
        "the host noticed {server} going away:\n{log}"
    );
    assert_eq!(env.count("orders", "dead"), 0);
    assert_each_completed_once(&env, N);
}

/// Redis killed and started again twenty times under one draining host: the
/// host lives through every one (a write to a socket the server closed
/// once killed it, silently, with SIGPIPE) and finishes.
#[test]
fn redis_restarted_twenty_times_mid_drain_the_host_survives() {
    let env = Env::on(Backend::Redis(RedisServer::start_with(&[
        "--appendonly",
        "yes",
        "--appendfsync",
        "always",
    ])));
    restarted_many_times(env, |env| {
        env.redis_server().kill();
        std::thread::sleep(Duration::from_millis(200));
        env.redis_server().restart();
    });
}

/// PostgreSQL restarted twenty times under one draining host.
#[test]
fn postgres_restarted_twenty_times_mid_drain_the_host_survives() {
    restarted_many_times(Env::postgres(), |env| env.pg_server().restart());
}

/// `restart` twenty times, each once the host has done more work since the
/// last; after each the host must still be running. Then the drain ends
/// with every order done once.
fn restarted_many_times(mut env: Env, restart: fn(&mut Env)) {
    const N: usize = 6000;
    // Twenty restarts in a few seconds can outlast one message's 2 s lease
    // five times over (each lease taken just before a restart runs out);
    // with the default five attempts such an order would die, which is not
    // what this test is about.
    let sidecar = format!("{ORDERS}[retry]\nmax_attempts = 100\n");
    env.deploy("orders", "orders", Some(&sidecar));
    std::fs::write(env.dir.path().join("sluice.toml"), "stall_after = \"5s\"\n").unwrap();
    preload(&env, N);
    let log = env.dir.path().join("run.log");
    let mut host = env.spawn_run(&log);
    let text = |log: &std::path::Path| std::fs::read_to_string(log).unwrap_or_default();
    let mut restarts = 0;
    while restarts < 20 {
        let before = env.count_if_reachable("orders", "done").unwrap_or(0);
        if before + 150 >= N as u64 {
            break;
        }
        wait_until(Duration::from_secs(60), "the host at work again", || {
            env.count_if_reachable("orders", "done")
                .is_some_and(|done| done >= before + 50)
        });
        restart(&mut env);
        restarts += 1;
        std::thread::sleep(Duration::from_millis(300));
        let status = host.try_wait().unwrap();
        assert!(
            status.is_none(),
            "the host died at restart {restarts} ({status:?}):\n{}",
            text(&log)
        );
    }
    assert!(
        restarts >= 10,
        "only {restarts} restarts before the drain ended"
    );
    wait_until_or(
        Duration::from_secs(120),
        || env.count_if_reachable("orders", "done") == Some(N as u64),
        || {
            // What a reader needs to tell a slow drain from a stuck one.
            let log = text(&log);
            let tail: Vec<&str> = log.lines().rev().take(40).collect();
            format!(
                "timed out after 120 s waiting for every order done; stats: {:?}\nthe host's warnings and errors:\n{}\nits last lines:\n{}",
                env.stats(),
                log.lines()
                    .filter(|l| l.contains("WARN") || l.contains("ERROR"))
                    .collect::<Vec<_>>()
                    .join("\n"),
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            )
        },
    );
    stop(host);
    assert_each_completed_once(&env, N);
    let log = text(&log);
    assert!(!log.contains("panicked"), "{log}");
}

/// Three hosts on one queue: each does some of the work, and the totals
/// (handlings in their logs, completions) are exact.
fn three_hosts_share_one_queue(env: Env) {
    const N: usize = 3000;
    env.deploy("orders", "orders", Some(ORDERS));
    preload(&env, N);
    let logs: Vec<_> = (0..3)
        .map(|i| env.dir.path().join(format!("host{i}.log")))
        .collect();
    let hosts: Vec<Child> = logs.iter().map(|l| env.spawn_run(l)).collect();
    // Done, and every follow-up relayed out of the outbox (counted in flight
    // until then), before the hosts stop.
    wait_until(
        Duration::from_secs(120),
        "all orders done and relayed",
        || {
            let stats = env.stats();
            stats["orders"]["done"] == N as u64 && stats["orders"]["in_flight"] == 0
        },
    );
    for host in hosts {
        stop(host);
    }
    let texts: Vec<String> = logs
        .iter()
        .map(|l| std::fs::read_to_string(l).unwrap())
        .collect();
    let per_host: Vec<usize> = texts
        .iter()
        .map(|t| handlings(std::slice::from_ref(t)).values().sum())
        .collect();
    assert!(
        per_host.iter().all(|&n| n > 0),
        "every host did some of the work: {per_host:?}"
    );
    assert_eq!(
        per_host.iter().sum::<usize>(),
        N,
        "the total is exact: {per_host:?}"
    );
    assert_each_completed_once(&env, N);
}

on_every_backend!(servers:
    sigkill_mid_drain_a_second_host_finishes,
    three_hosts_share_one_queue,
);
