//! The fault suite: hosts killed over and over in a drain, and Cluster
//! nodes restarted under a running host. Whatever happens, every message
//! ends done exactly once (counted by the one follow-up each completion
//! commits with its ack), and none is lost. (A single Redis restarted under
//! a host: `redis::redis_restart_mid_drain_the_host_survives`; a hostile
//! guest and a storm of bad files: `hostile` and `bad_input`.)

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use sluice::broker::message::NewMessage;
use sluice_broker::testkit::RedisCluster;

use crate::support::{Backend, Env, wait_until};

const MESSAGES: usize = 3000;

/// Orders that take about a millisecond each, so a drain can be interrupted.
const ORDERS: &str = "lease = \"2s\"\nconcurrency = 8\nprefetch = 16\n[limits]\ntimeout = \"1s\"\n[config]\nfollowup_queue = \"shipping\"\nwork_ms = 1\n";

fn preload(env: &Env) {
    preload_with(env, ORDERS);
}

fn preload_with(env: &Env, sidecar: &str) {
    env.deploy("orders", "orders", Some(sidecar));
    env.publish(
        (0..MESSAGES)
            .map(|i| NewMessage::new("orders", format!(r#"{{"id": {i}, "qty": 1}}"#)))
            .collect(),
    );
}

/// Every order ended done, once, and nothing is left.
fn assert_each_completed_once(env: &Env) {
    let stats = env.stats();
    let orders = &stats["orders"];
    assert_eq!(orders["done"], MESSAGES as u64, "{orders}");
    assert_eq!(orders["dead"], 0, "{orders}");
    assert_eq!(
        orders["ready"].as_u64().unwrap() + orders["in_flight"].as_u64().unwrap(),
        0,
        "{orders}"
    );
    let mut completions: BTreeMap<u64, usize> = BTreeMap::new();
    for d in env.drain("shipping") {
        let body: serde_json::Value = serde_json::from_slice(&d.payload).unwrap();
        *completions
            .entry(body["order"].as_u64().unwrap())
            .or_default() += 1;
    }
    assert_eq!(completions.len(), MESSAGES, "every order has a follow-up");
    let twice: Vec<_> = completions.iter().filter(|&(_, &n)| n > 1).collect();
    assert!(
        twice.is_empty(),
        "orders completed more than once: {twice:?}"
    );
}

/// Twenty SIGKILLs of the host in the middle of a drain: each time a new
/// host takes over what the killed one leased, once its leases run out.
fn twenty_sigkills_lose_nothing_and_complete_each_once(env: Env) {
    preload(&env);
    let (rt, broker) = env.broker();
    let done = || rt.block_on(broker.queue_stats("orders")).unwrap().done;
    let mut kills = 0;
    let started = Instant::now();
    while kills < 20 {
        assert!(
            started.elapsed() < Duration::from_secs(240),
            "{kills} kills in 240 s"
        );
        let before = done();
        if before >= MESSAGES as u64 - 100 {
            break;
        }
        let log = env.dir.path().join(format!("host{kills}.log"));
        let mut host = env.spawn_run(&log);
        // Kill it as soon as it has done some work, or after a second.
        let since = Instant::now();
        while done() < before + 40 && since.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(2));
        }
        unsafe { libc::kill(host.id() as i32, libc::SIGKILL) };
        host.wait().unwrap();
        kills += 1;
    }
    assert_eq!(
        kills, 20,
        "the drain ended after {kills} kills: give it more work"
    );
    env.run_until_idle();
    assert_each_completed_once(&env);
}

on_every_backend!(env: twenty_sigkills_lose_nothing_and_complete_each_once);

/// Every replica of a Redis Cluster takes over from its master in turn (a
/// manual failover, `CLUSTER FAILOVER`, which waits for the replica to
/// catch up) under a draining host: the host follows the slots to their new
/// masters, and every order ends done once with its held publish relayed
/// once. (An unplanned failover can lose a master's last writes: Redis's
/// own guarantee, see the README's "What the relay guarantees".)
#[test]
fn cluster_failovers_mid_drain_lose_nothing_and_double_nothing() {
    let env = Env::on(Backend::Cluster(RedisCluster::start_with_replicas()));
    // Orders of 100 ms, 8 at a time: a drain of 37 s outlasts the failovers,
    // which on a loaded 2-core machine took more than the 15 s that orders
    // of 40 ms gave them.
    drain_through(env, 100, "failover", |env| {
        let Backend::Cluster(cluster) = &env.backend else {
            unreachable!()
        };
        let replicas = cluster.replicas();
        assert_eq!(replicas.len(), 3, "one replica a master");
        for &i in &replicas {
            // Redis gives a manual failover 5 s to agree on the master's
            // last write, and under load it can time out: asked again, as
            // an operator would.
            let started = Instant::now();
            'asking: loop {
                assert_eq!(cluster.nodes[i].cli(&["CLUSTER", "FAILOVER"]), "OK");
                let asked = Instant::now();
                while asked.elapsed() < Duration::from_secs(7) {
                    if cluster.role(i) == "master" {
                        break 'asking;
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
                assert!(
                    started.elapsed() < Duration::from_secs(40),
                    "the replica did not take over in 40 s\n{}",
                    cluster.report(i)
                );
            }
        }
    });
}

/// Each node of a three-master Cluster (with its writes on disk) is killed
/// and started again in turn while a host drains: the host rides it out
/// and every message is done once.
#[test]
fn cluster_nodes_restarted_mid_drain_lose_nothing() {
    let env = Env::on(Backend::Cluster(RedisCluster::start_persistent()));
    // Slower orders (5 ms each, 8 at a time): the drain outlasts the restarts.
    drain_through(env, 5, "restart", |env| {
        let Backend::Cluster(cluster) = &mut env.backend else {
            unreachable!()
        };
        for node in &mut cluster.nodes {
            node.restart();
            std::thread::sleep(Duration::from_millis(300));
        }
    });
}

/// Drain orders of `work_ms` each through one host, doing `fault` to the
/// broker once some are done: the drain must outlast the last `what`, and
/// every order ends done exactly once.
fn drain_through(mut env: Env, work_ms: u32, what: &str, fault: impl FnOnce(&mut Env)) {
    preload_with(
        &env,
        &ORDERS.replace("work_ms = 1", &format!("work_ms = {work_ms}")),
    );
    let log = env.dir.path().join("host.log");
    let mut host = env.spawn_run(&log);
    wait_until(Duration::from_secs(60), "some orders done", || {
        env.count_if_reachable("orders", "done")
            .is_some_and(|done| done > 200)
    });
    fault(&mut env);
    let mut done_after = None;
    wait_until(Duration::from_secs(30), "stats after the faults", || {
        done_after = env.count_if_reachable("orders", "done");
        done_after.is_some()
    });
    wait_until(Duration::from_secs(120), "every order done", || {
        env.count_if_reachable("orders", "done") == Some(MESSAGES as u64)
    });
    unsafe { libc::kill(host.id() as i32, libc::SIGTERM) };
    host.wait().unwrap();
    assert!(
        done_after.unwrap() < MESSAGES as u64,
        "the drain was over before the last {what}: the test proved nothing"
    );
    assert_each_completed_once(&env);
}

/// Replies lost on their way back from the broker (a module of its own: each
/// module calls `on_every_backend!` once).
mod lost_replies {
    use super::*;
    use crate::proxy::Proxy;

    /// The host reaches its broker through a proxy that holds each reply for
    /// 20 ms, and every connection is cut 10 times in a drain, each time while
    /// a reply is held and the host is at work (`proxy.rs`): the writes the broker applied in the
    /// last 20 ms before a cut lose their
    /// replies, and the host writes them again. Every order ends done once,
    /// the settle batches written again are known for what they are (the host
    /// says so) and none of their settlements counts as a lost lease.
    fn lost_replies_apply_once_and_count_no_lost_leases(env: Env) {
        // Leases long enough that no settle, held up by the cuts, comes late.
        preload_with(&env, &ORDERS.replace("lease = \"2s\"", "lease = \"10s\""));
        let (proxy, proxied) = Proxy::in_front_of(&env.broker_url(), Duration::from_millis(20));
        let handlers = env.handlers.to_str().unwrap().to_string();
        let log = env.dir.path().join("host.log");
        let mut host = env
            .command(&["run", "--handlers", &handlers, "--broker", &proxied])
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        wait_until(Duration::from_secs(60), "some orders done", || {
            env.count_if_reachable("orders", "done")
                .is_some_and(|done| done > 200)
        });
        // Each cut once the host is at work again after the one before, so
        // that settles are on their way.
        for _ in 0..10 {
            let before = env.count_if_reachable("orders", "done").unwrap_or(0);
            wait_until(Duration::from_secs(30), "the host at work again", || {
                env.count_if_reachable("orders", "done")
                    .is_some_and(|done| done >= before + 50)
            });
            proxy.cut_a_reply();
        }
        let done_after = env.count_if_reachable("orders", "done").unwrap();
        wait_until(Duration::from_secs(120), "every order done", || {
            env.count_if_reachable("orders", "done") == Some(MESSAGES as u64)
        });
        unsafe { libc::kill(host.id() as i32, libc::SIGTERM) };
        host.wait().unwrap();
        assert!(
            done_after < MESSAGES as u64,
            "the drain was over before the last cut: the test proved nothing"
        );
        assert_each_completed_once(&env);
        let text = std::fs::read_to_string(&log).unwrap();
        assert!(
            text.contains("written again after it had been applied"),
            "no settle lost its reply: the test proved nothing\n{text}"
        );
        assert_eq!(env.stats()["orders"]["lost_leases"], 0, "{text}");
    }

    on_every_backend!(servers: lost_replies_apply_once_and_count_no_lost_leases);
}
