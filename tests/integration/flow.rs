//! Flow limits across hosts: `max_in_flight` and `rate` in a sidecar hold
//! for the queue however many hosts serve it.

use std::path::Path;
use std::process::Child;
use std::time::{Duration, Instant};

use crate::support::{Env, lines_with, wait_until};

/// `n` one-line messages sent to `queue` in one bulk send.
fn send_many(env: &Env, queue: &str, n: usize) {
    let file = env.dir.path().join(format!("{queue}.lines"));
    let lines: String = (0..n).map(|i| format!("{i}\n")).collect();
    std::fs::write(&file, lines).unwrap();
    env.sluice(&["send", queue, "--lines", file.to_str().unwrap()]);
}

fn spawn_hosts(env: &Env, n: usize) -> Vec<(Child, std::path::PathBuf)> {
    (0..n)
        .map(|i| {
            let log = env.dir.path().join(format!("host{i}.log"));
            (env.spawn_run(&log), log)
        })
        .collect()
}

fn stop(hosts: Vec<(Child, std::path::PathBuf)>) -> Vec<String> {
    hosts
        .into_iter()
        .map(|(mut child, log)| {
            unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
            child.wait().unwrap();
            read(&log)
        })
        .collect()
}

fn read(log: &Path) -> String {
    std::fs::read_to_string(log).unwrap()
}

/// Three hosts with `concurrency = 8` each serve a queue with
/// `max_in_flight = 4`: the guest counts the calls in progress on every
/// host together (in its key-value store) and never sees more than 4.
fn max_in_flight_holds_across_three_hosts(env: Env) {
    const N: usize = 60;
    env.deploy(
        "sleepy",
        "slow",
        Some(
            "concurrency = 8\nmax_in_flight = 4\n\
             [config]\nsleep_ms = \"100\"\ncount_key = \"in_handle\"\n\
             [capabilities]\nkv = true\n",
        ),
    );
    send_many(&env, "slow", N);
    let hosts = spawn_hosts(&env, 3);
    wait_until(Duration::from_secs(90), "every message done", || {
        env.count("slow", "done") == N as u64
    });
    // `stats` shows the limit beside each host's handler.
    let reported = env.sluice(&["--json", "stats", "--handlers"]);
    let limits: Vec<serde_json::Value> = reported
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["max_in_flight"].clone())
        .collect();
    assert_eq!(limits, vec![serde_json::json!(4); 3], "{reported}");
    let stats = env.sluice(&["stats"]);
    assert_eq!(lines_with(&stats, " max 4 ").len(), 3, "{stats}");
    let logs = stop(hosts);
    let counts: Vec<u64> = logs
        .iter()
        .flat_map(|log| lines_with(log, "in handle: "))
        .map(|l| {
            let n = l.split("in handle: ").nth(1).unwrap();
            n.split_whitespace().next().unwrap().parse().unwrap()
        })
        .collect();
    assert_eq!(counts.len(), N, "one count per call:\n{}", logs.join("\n"));
    let most = *counts.iter().max().unwrap();
    assert!(most <= 4, "{most} calls in handle at once across the hosts");
    assert!(
        most >= 2,
        "the calls never overlapped ({most} at most): the limit was not exercised"
    );
    let served = logs
        .iter()
        .filter(|log| !lines_with(log, "in handle: ").is_empty())
        .count();
    assert!(served >= 2, "{served} of 3 hosts handled messages");
}

/// `rate = "100/s"` on a queue served by two hosts: 1,000 messages take no
/// less than 9 s (a full bucket of 100, then 100 a second), and they all
/// complete.
fn rate_holds_across_two_hosts(env: Env) {
    const N: usize = 1000;
    env.deploy("hello", "hello", Some("rate = \"100/s\"\n"));
    send_many(&env, "hello", N);
    let started = Instant::now();
    let hosts = spawn_hosts(&env, 2);
    wait_until(Duration::from_secs(60), "every message done", || {
        env.count("hello", "done") == N as u64
    });
    let took = started.elapsed();
    stop(hosts);
    assert!(
        took >= Duration::from_secs(9),
        "1,000 messages at 100/s drained in {took:?}"
    );
    assert!(
        took < Duration::from_secs(30),
        "1,000 messages at 100/s took {took:?}"
    );
}

on_every_backend!(env:
    max_in_flight_holds_across_three_hosts,
    rate_holds_across_two_hosts,
);
