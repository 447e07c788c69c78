//! Ordered groups through hosts: a group's messages are handled one at a
//! time in the order they were published, whichever host takes them, with
//! retries along the way and a host killed in the middle.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::support::{Env, lines_with, wait_until};

const GROUPS: usize = 10;
const PER_GROUP: usize = 200;

/// The `sequence` guest on queue `seq`, grouped by `/g`.
const SIDECAR: &str = r#"
concurrency = 16
lease = "3s"
[limits]
timeout = "1s"
[retry]
max_attempts = 5
delays = ["20ms"]
[ordering]
group_pointer = "/g"
[capabilities]
kv = true
"#;

/// 10 groups × 200 messages with sequence numbers, published interleaved,
/// one in ten asking for a retry on its first attempt, handled by two
/// hosts, one of them killed with SIGKILL part way: every message of every
/// group is finished once, in sequence (the guest rejects one that comes
/// before its predecessor finished), and none is dead.
fn groups_are_handled_in_sequence_across_hosts_and_a_kill(env: Env) {
    env.deploy("sequence", "seq", Some(SIDECAR));
    let lines: String = (1..=PER_GROUP)
        .flat_map(|seq| {
            (0..GROUPS).map(move |g| {
                let retry = (seq * 7 + g) % 10 == 0;
                format!("{{\"g\":\"g{g}\",\"seq\":{seq},\"retry\":{retry}}}\n")
            })
        })
        .collect();
    let total = (GROUPS * PER_GROUP) as u64;
    let logs: Vec<_> = (0..2)
        .map(|i| env.dir.path().join(format!("host{i}.log")))
        .collect();
    let mut hosts: Vec<_> = logs.iter().map(|log| env.spawn_run(log)).collect();
    // The queue is ordered once a host has loaded the sidecar: messages
    // published before then are not grouped.
    wait_until(Duration::from_secs(60), "both hosts serving", || {
        for (host, log) in hosts.iter_mut().zip(&logs) {
            if let Some(status) = host.try_wait().unwrap() {
                let log = std::fs::read_to_string(log).unwrap();
                panic!("a host exited at start ({status}):\n{log}");
            }
        }
        env.sluice(&["--json", "stats", "--handlers"])
            .lines()
            .count()
            == 2
    });
    let file = env.dir.path().join("seq.lines");
    std::fs::write(&file, lines).unwrap();
    env.sluice(&["send", "seq", "--lines", file.to_str().unwrap()]);
    wait_until(Duration::from_secs(60), "a quarter done", || {
        assert_eq!(env.count("seq", "dead"), 0, "a message came out of order");
        env.count("seq", "done") >= total / 4
    });
    // The host that has handled more is killed (one host may well have
    // taken every group's head so far).
    let handled = |log: &std::path::PathBuf| {
        lines_with(&std::fs::read_to_string(log).unwrap(), "in order: ").len()
    };
    let killed = if handled(&logs[0]) >= handled(&logs[1]) {
        0
    } else {
        1
    };
    assert!(handled(&logs[killed]) > 0, "no host logged a message");
    unsafe { libc::kill(hosts[killed].id() as i32, libc::SIGKILL) };
    hosts[killed].wait().unwrap();
    let at_kill = env.count("seq", "done");
    assert!(at_kill < total, "everything was done before the kill");
    wait_until(Duration::from_secs(120), "every message done", || {
        env.count("seq", "done") == total
    });
    let survivor = 1 - killed;
    unsafe { libc::kill(hosts[survivor].id() as i32, libc::SIGTERM) };
    hosts[survivor].wait().unwrap();

    let stats = env.stats()["seq"].clone();
    assert_eq!(stats["dead"], 0, "{stats}");
    // One in ten asks for a retry on its first attempt; those whose first
    // attempt was cut short by the kill come back on a second.
    let retried = stats["retried"].as_u64().unwrap();
    assert!(
        (total / 10 - 32..=total / 10).contains(&retried),
        "one in ten retried: {stats}"
    );
    assert_eq!(stats["ungrouped"], 0, "{stats}");
    // The text table has each count under its name, as --json gives it.
    let text = env.sluice(&["stats"]);
    let mut rows = text.lines();
    let header: Vec<&str> = rows.next().unwrap().split_whitespace().collect();
    let row: Vec<&str> = rows
        .find(|l| l.starts_with("seq "))
        .unwrap_or_else(|| panic!("no row for seq:\n{text}"))
        .split_whitespace()
        .collect();
    for (column, field) in [
        ("DONE", "done"),
        ("RETRIED", "retried"),
        ("LOST_LEASES", "lost_leases"),
        ("UNGROUPED", "ungrouped"),
    ] {
        let at = header.iter().position(|h| *h == column).unwrap();
        assert_eq!(row[at], stats[field].to_string(), "{column}:\n{text}");
    }
    let log: String = logs
        .iter()
        .map(|l| std::fs::read_to_string(l).unwrap())
        .collect();
    assert!(
        lines_with(&log, "OUT OF ORDER").is_empty(),
        "{}",
        lines_with(&log, "OUT OF ORDER").join("\n")
    );
    // Each message was finished in sequence once; one that a killed host
    // finished but did not ack came again and was taken for done (`again`).
    let mut finished: BTreeMap<(String, usize), usize> = BTreeMap::new();
    let mut again = BTreeMap::new();
    for (needle, seen) in [("in order: ", &mut finished), ("again: ", &mut again)] {
        for line in lines_with(&log, needle) {
            let rest = line.split(needle).nth(1).unwrap();
            let mut words = rest.split_whitespace();
            let group = words.next().unwrap().to_string();
            let seq: usize = words.next().unwrap().trim_end_matches('"').parse().unwrap();
            *seen.entry((group, seq)).or_default() += 1;
        }
    }
    assert!(finished.values().all(|n| *n == 1), "each once");
    assert!(
        again.len() <= 16,
        "more came again than one host had in flight: {again:?}"
    );
    let mut all: Vec<_> = finished.keys().chain(again.keys()).collect();
    all.sort();
    all.dedup();
    assert_eq!(all.len(), GROUPS * PER_GROUP, "every message in sequence");
}

on_every_backend!(env: groups_are_handled_in_sequence_across_hosts_and_a_kill);
