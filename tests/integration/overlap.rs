//! "A message is never inside `handle` twice at the same time", checked
//! end to end: two hosts, a guest that takes almost its whole timeout, a
//! lease barely longer and a prefetch twice the concurrency, so that
//! deliveries wait close to the end of their leases; one host is killed mid-drain and started again,
//! so that its messages are delivered again while their keys are still
//! held. Each handling's start and end are read from the hosts' logs.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Child;
use std::time::Duration;

use sluice_broker::testkit::RedisCluster;

use crate::support::{Backend, Env, wait_until};

const MESSAGES: usize = 60;

fn start_host(env: &Env, log: &Path) -> Child {
    let handlers = env.handlers.to_str().unwrap().to_string();
    let mut cmd = env.command(&["run", "--handlers", &handlers]);
    cmd.env("SLUICE_LOG", "info,sluice::guest=debug")
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(log).unwrap());
    cmd.spawn().unwrap()
}

/// (message id, "sleeping" or "slept", timestamp) of each line of `log`.
fn marks(log: &str) -> Vec<(String, bool, String)> {
    log.lines()
        .filter_map(|l| {
            let time = l.split_whitespace().next()?.to_string();
            let rest = l.split("message ").nth(1)?;
            let (id, what) = rest.split_once(": ")?;
            let start = what.starts_with("sleeping");
            (start || what.starts_with("slept")).then(|| (id.to_string(), start, time))
        })
        .collect()
}

fn no_message_is_handled_twice_at_once(env: Env) {
    env.deploy(
        "sleepy",
        "sleepy",
        Some(
            "lease = \"2s\"\nconcurrency = 4\nprefetch = 8\n[limits]\ntimeout = \"1s\"\n[config]\nsleep_ms = 900\n",
        ),
    );
    env.publish(
        (0..MESSAGES)
            .map(|i| sluice::broker::message::NewMessage::new("sleepy", i.to_string()))
            .collect(),
    );
    let logs = [
        env.dir.path().join("a.log"),
        env.dir.path().join("b.log"),
        env.dir.path().join("a2.log"),
    ];
    let mut hosts: Vec<Child> = logs[..2].iter().map(|l| start_host(&env, l)).collect();
    // Kill host a while it is inside `handle`, once some work is done.
    wait_until(Duration::from_secs(60), "host a handling", || {
        let text = std::fs::read_to_string(&logs[0]).unwrap_or_default();
        let m = marks(&text);
        m.iter().filter(|(_, start, _)| *start).count()
            > m.iter().filter(|(_, start, _)| !*start).count()
    });
    // Kill host a in the middle of its calls; what it had is delivered again.
    hosts[0].kill().unwrap();
    hosts[0].wait().unwrap();
    let killed_at = humantime::format_rfc3339_micros(std::time::SystemTime::now()).to_string();
    hosts.push(start_host(&env, &logs[2]));
    wait_until(Duration::from_secs(120), "every message done", || {
        env.count("sleepy", "done") == MESSAGES as u64
    });
    for h in &mut hosts {
        h.kill().unwrap();
        h.wait().unwrap();
    }
    // Each handling's interval, by message; a host's log is in time order.
    let mut intervals: BTreeMap<String, Vec<(String, String)>> = BTreeMap::new();
    for (n, log) in logs.iter().enumerate() {
        let text = std::fs::read_to_string(log).unwrap();
        let mut open: BTreeMap<String, String> = BTreeMap::new();
        for (id, start, time) in marks(&text) {
            if start {
                open.insert(id, time);
            } else if let Some(began) = open.remove(&id) {
                intervals.entry(id).or_default().push((began, time));
            }
        }
        // A handling cut off by the kill ended with it (host a); one still
        // running at the end of the test ran until then.
        let end = if n == 0 {
            killed_at.clone()
        } else {
            "9".into()
        };
        for (id, began) in open {
            intervals.entry(id).or_default().push((began, end.clone()));
        }
    }
    assert_eq!(intervals.len(), MESSAGES, "every message was handled");
    let handled: usize = intervals.values().map(Vec::len).sum();
    for (id, spans) in &intervals {
        for (i, a) in spans.iter().enumerate() {
            for b in &spans[i + 1..] {
                // RFC 3339 times in UTC compare as text.
                assert!(
                    a.1 <= b.0 || b.1 <= a.0,
                    "message {id} was inside handle twice at once: {a:?} and {b:?}"
                );
            }
        }
    }
    eprintln!("{MESSAGES} messages, {handled} handlings");
    assert!(
        handled > MESSAGES,
        "no message was handled again after the kill: the test proved nothing"
    );
    let s = &env.stats()["sleepy"];
    assert_eq!(s["done"], MESSAGES as u64, "{s}");
}

on_every_backend!(env: no_message_is_handled_twice_at_once);

#[test]
fn no_message_is_handled_twice_at_once_on_a_cluster() {
    no_message_is_handled_twice_at_once(Env::on(Backend::Cluster(RedisCluster::start())));
}
