//! The Redis backend under faults and scale-out beyond what it shares with
//! PostgreSQL (`scale`): Redis Cluster, the outbox relay, claims that fail.

use std::time::{Duration, Instant};

use sluice::broker::message::NewMessage;
use sluice_broker::testkit::{RedisCluster, RedisServer};

use crate::scale::stop;
use crate::support::{Backend, Env, wait_until};

#[test]
fn cluster_runs_the_cli_end_to_end() {
    let env = Env::on(Backend::Cluster(RedisCluster::start()));
    env.deploy("orders", "orders", Some("[retry]\nmax_attempts = 2\ndelays = [\"10ms\"]\n[config]\nfollowup_queue = \"shipping\"\n"));
    env.deploy("hello", "hello", None);
    for i in 0..50 {
        env.send("orders", &format!(r#"{{"id": {i}}}"#), &[]);
        env.send("hello", &format!("{i}"), &[]);
    }
    env.send("orders", "not json", &[]);
    env.send("orders", r#"{"id": 1000, "always_retry": true}"#, &[]);
    env.send("hello", "later", &["--delay", "1s"]);
    env.run_until_idle();
    let stats = env.stats();
    assert_eq!(stats["orders"]["done"], 50);
    assert_eq!(stats["orders"]["dead"], 2);
    assert_eq!(stats["hello"]["done"], 51);
    // Follow-ups crossed hash slots through the outbox.
    assert_eq!(stats["shipping"]["ready"], 50);
    let dead = env.dead("orders");
    assert_eq!(dead.len(), 2);
    let replayed = env.sluice(&["dlq", "replay", "orders"]);
    assert!(replayed.contains("replayed 2"), "{replayed}");
    assert_eq!(env.count("orders", "ready"), 2);
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(
            &env.sluice(&["--json", "dlq", "purge", "orders"])
        )
        .unwrap()["purged"],
        0
    );
}

#[test]
fn held_publishes_of_a_queue_no_host_serves_are_relayed() {
    let env = Env::redis();
    // A follow-up committed to the outbox of `gone`, whose handler was
    // removed before its relay ran (written here in the broker's own format).
    let client = redis::Client::open(env.broker_url()).unwrap();
    let mut conn = client.get_connection().unwrap();
    redis::cmd("XADD")
        .arg("sluice:{gone}:outbox")
        .arg("*")
        .arg(&[
            "q",
            "shipping",
            "i",
            "0123456789abcdef0123456789abcdef",
            "k",
            "",
            "p",
            "late",
            "h",
            "",
            "d",
            "0",
        ])
        .query::<String>(&mut conn)
        .unwrap();
    redis::cmd("SADD")
        .arg("sluice:queues")
        .arg("gone")
        .query::<()>(&mut conn)
        .unwrap();
    // A host that serves only `hello` relays it all the same.
    env.deploy("hello", "hello", None);
    let log = env.dir.path().join("run.log");
    let host = env.spawn_run(&log);
    // Stopped once it serves (its signal handlers are in place by then).
    wait_until(Duration::from_secs(10), "hello serving", || {
        std::fs::read_to_string(&log).is_ok_and(|l| l.contains("handler serving"))
    });
    wait_until(Duration::from_secs(10), "the follow-up in shipping", || {
        env.count("shipping", "ready") == 1
    });
    stop(host);
    let shipped = env.drain("shipping");
    assert_eq!(shipped.len(), 1);
    assert_eq!(shipped[0].payload, b"late");
    assert_eq!(shipped[0].id, "0123456789abcdef0123456789abcdef");
    assert_eq!(env.count("gone", "in_flight"), 0);
}

#[test]
fn a_failed_key_claim_hands_the_batch_back() {
    let env = Env::redis();
    // A lease far longer than the test: only a batch handed back, not one
    // left to its lease, is handled in time.
    env.deploy("hello", "hello", Some("lease = \"10m\"\n"));
    for i in 0..3 {
        env.send("hello", &format!("m{i}"), &[]);
    }
    let client = redis::Client::open(env.broker_url()).unwrap();
    let mut conn = client.get_connection().unwrap();
    let acl = |rule: &str, conn: &mut redis::Connection| {
        redis::cmd("ACL")
            .arg("SETUSER")
            .arg("default")
            .arg(rule)
            .query::<()>(conn)
            .unwrap();
    };
    // The host's key claims (SET NX GET) are refused; its reads are not.
    acl("-set", &mut conn);
    let log = env.dir.path().join("run.log");
    let handlers = env.handlers.to_str().unwrap().to_string();
    let mut cmd = env.command(&["run", "--handlers", &handlers, "--until-idle"]);
    cmd.stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap());
    let mut host = cmd.spawn().unwrap();
    let read_log = || std::fs::read_to_string(&log).unwrap_or_default();
    wait_until(Duration::from_secs(20), "a failed key claim", || {
        read_log().contains("could not take idempotency keys")
    });
    acl("+set", &mut conn);
    // Every message is done, and nothing is left counted as in flight, so
    // --until-idle ends.
    let started = Instant::now();
    let status = loop {
        if let Some(status) = host.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > Duration::from_secs(30) {
            host.kill().unwrap();
            panic!("run --until-idle did not end:\n{}", read_log());
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "{}", read_log());
    assert_eq!(env.count("hello", "done"), 3, "{}", read_log());
}

/// Outbox entries the relay cannot read (here 600, more than one relay
/// page) go to their queue's dead letters with why, and the held publish
/// behind them still reaches its queue. `dlq show` finds a dead letter by
/// its id without reading the dead stream.
#[tokio::test]
async fn unreadable_outbox_entries_are_dead_lettered_and_the_rest_relayed() {
    use sluice::broker::{DeadLetters, Presence, RedisBroker};

    let server = RedisServer::start();
    let mut c = server.conn().await;
    let outbox = "sluice:{src}:outbox";
    let mut pipe = redis::pipe();
    for i in 0..600 {
        pipe.cmd("XADD")
            .arg(outbox)
            .arg("*")
            .arg("junk")
            .arg(i)
            .ignore();
    }
    pipe.cmd("XADD")
        .arg(outbox)
        .arg("*")
        .arg(&[
            "q", "dst", "i", "good-1", "k", "", "p", "hello", "h", "", "d", "0",
        ])
        .ignore();
    pipe.cmd("SADD").arg("sluice:queues").arg("src").ignore();
    pipe.query_async::<()>(&mut c).await.unwrap();

    let broker = RedisBroker::connect(&server.url()).await.unwrap();
    let start = Instant::now();
    loop {
        let (dst, src) = (
            broker.queue_stats("dst").await.unwrap(),
            broker.queue_stats("src").await.unwrap(),
        );
        if dst.ready == 1 && src.dead == 600 {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(30), "{dst:?} {src:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let dead = broker.dead_letters("src", 1).await.unwrap();
    assert!(
        dead[0]
            .reason
            .contains("unreadable held publish in the outbox of queue src"),
        "{:?}",
        dead[0]
    );
    let shown = broker
        .dead_letter("src", &dead[0].id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&shown.payload), r#"{"junk":"0"}"#);
    let indexed: u64 = redis::cmd("HLEN")
        .arg("sluice:{src}:deadidx")
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(indexed, 600, "every dead letter is in the index");
}

/// Hosts reclaim a message by the longest lease any live host of its queue
/// leases for, not by their own: a host with a short lease never takes a
/// message another host leased for longer and is still handling.
#[tokio::test]
async fn a_short_lease_host_does_not_take_a_long_lease_hosts_message() {
    use sluice::broker::{Queue, RedisBroker};

    let server = RedisServer::start();
    let long = RedisBroker::connect(&server.url()).await.unwrap();
    let short = RedisBroker::connect(&server.url()).await.unwrap();
    long.publish(vec![NewMessage::new("q", "x")]).await.unwrap();
    let got = long
        .receive(
            "q",
            10,
            Duration::from_secs(30),
            sluice::broker::Flow::default(),
        )
        .await
        .unwrap();
    assert_eq!(got.len(), 1);
    let start = Instant::now();
    while start.elapsed() < Duration::from_millis(800) {
        let taken = short
            .receive(
                "q",
                10,
                Duration::from_millis(100),
                sluice::broker::Flow::default(),
            )
            .await
            .unwrap();
        assert!(taken.is_empty(), "taken after {:?}", start.elapsed());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The long lease is what the queue's consumers see.
    drop(long);
    let mut c = server.conn().await;
    let leases: Vec<String> = redis::cmd("HVALS")
        .arg("sluice:{q}:leases")
        .query_async(&mut c)
        .await
        .unwrap();
    assert!(leases.iter().any(|l| l.starts_with("30000 ")), "{leases:?}");
}

/// Queue `q`'s ordering in the group its header `g` names.
fn by_header_g() -> sluice::broker::OrderedGroups {
    sluice::broker::OrderedGroups {
        group: sluice::broker::GroupSource::Header("g".into()),
        block_on_dead: false,
    }
}

/// A message to `q` in group `a` (by its header `g`).
fn in_group_a(payload: &str) -> NewMessage {
    let mut m = NewMessage::new("q", payload);
    m.headers = vec![("g".into(), "a".into())];
    m
}

/// A host that published to a queue before another set its ordering still
/// groups what it publishes next: the script finds the ordering it took
/// the groups with is not the queue's, and it takes them again.
#[tokio::test]
async fn a_publisher_that_missed_an_ordering_change_groups_by_the_new_one() {
    use sluice::broker::{Flow, Presence, Queue};

    let server = RedisServer::start();
    let publisher = sluice::broker::RedisBroker::connect(&server.url())
        .await
        .unwrap();
    let host = sluice::broker::RedisBroker::connect(&server.url())
        .await
        .unwrap();
    // The publisher sees the queue unordered...
    publisher.publish(vec![in_group_a("a0")]).await.unwrap();
    // ... then another host orders it.
    host.set_ordering("q", Some(&by_header_g())).await.unwrap();
    publisher
        .publish(vec![in_group_a("a1"), in_group_a("a2")])
        .await
        .unwrap();
    let lease = Duration::from_secs(30);
    let got = host.receive("q", 10, lease, Flow::default()).await.unwrap();
    let payloads: Vec<&[u8]> = got.iter().map(|d| d.payload.as_slice()).collect();
    assert_eq!(
        payloads,
        [b"a0".as_slice(), b"a1"],
        "a0 is in no group; a2 waits for a1"
    );
    assert_eq!(got[1].group.as_deref(), Some("a"));
    let stats = host.queue_stats("q").await.unwrap();
    assert_eq!((stats.delayed, stats.ungrouped), (1, 0), "{stats:?}");
}

/// Groups that an earlier version wrote move on: it kept each group's count
/// of unsettled messages where this one keeps a mark, and each waiting
/// message after its due time; both still read as they were meant.
#[tokio::test]
async fn groups_written_by_an_earlier_version_move_on_in_order() {
    use sluice::broker::{Flow, Presence, Queue, Settlement};

    let server = RedisServer::start();
    let host = sluice::broker::RedisBroker::connect(&server.url())
        .await
        .unwrap();
    host.set_ordering("q", Some(&by_header_g())).await.unwrap();
    // a1 leads group a, a2 and a3 wait behind it: the group counts 3.
    let mut c = server.conn().await;
    let fields = |id: &str| {
        let header = r#"[["g","a"]]"#;
        ["i", id, "p", id, "h", header, "g", "a"].map(String::from)
    };
    redis::cmd("XADD")
        .arg("sluice:{q}:stream")
        .arg("*")
        .arg(&fields("a1"))
        .query_async::<String>(&mut c)
        .await
        .unwrap();
    for id in ["a2", "a3"] {
        redis::Script::new(
            "return redis.call('RPUSH', KEYS[1], ARGV[1] .. ' ' .. cmsgpack.pack({unpack(ARGV, 2)}))",
        )
        .key("sluice:{q}:waiting:a")
        .arg("1700000000000")
        .arg(&fields(id)[..])
        .invoke_async::<i64>(&mut c)
        .await
        .unwrap();
    }
    redis::cmd("HSET")
        .arg("sluice:{q}:groups")
        .arg("a")
        .arg(3)
        .arg("\0w")
        .arg(2)
        .query_async::<()>(&mut c)
        .await
        .unwrap();
    let lease = Duration::from_secs(30);
    let mut order = Vec::new();
    let mut published_a4 = false;
    loop {
        let got = host.receive("q", 10, lease, Flow::default()).await.unwrap();
        let Some(d) = got.into_iter().next() else {
            break;
        };
        assert_eq!(d.group.as_deref(), Some("a"));
        order.push(String::from_utf8(d.payload.clone()).unwrap());
        if !published_a4 {
            // Published while the group is held: it waits behind a3.
            host.publish(vec![in_group_a("a4")]).await.unwrap();
            published_a4 = true;
        }
        let done = Settlement::Done {
            delivery: d,
            key: None,
            publishes: vec![],
        };
        host.settle(&[done]).await.unwrap();
    }
    assert_eq!(order, ["a1", "a2", "a3", "a4"]);
    let held: bool = redis::cmd("HEXISTS")
        .arg("sluice:{q}:groups")
        .arg("a")
        .query_async(&mut c)
        .await
        .unwrap();
    assert!(!held, "the group is let go once its last message is done");
    let stats = host.queue_stats("q").await.unwrap();
    assert_eq!((stats.done, stats.pending()), (4, 0), "{stats:?}");
}

/// A replay moves only the dead letters there were when it began. Redis
/// moves them a thousand at a time, and a message replayed in one step can
/// die again before the last: its new dead letter must not be moved too.
#[tokio::test]
async fn a_replay_does_not_move_a_message_that_died_again_meanwhile() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    use sluice::broker::{DeadLetters, Flow, Queue, ReplaySelector, Settlement};

    const DEAD: usize = 5000;
    let server = RedisServer::start();
    let b = Arc::new(
        sluice::broker::RedisBroker::connect(&server.url())
            .await
            .unwrap(),
    );
    let lease = Duration::from_secs(60);
    let kill = |d| Settlement::Dead {
        delivery: d,
        reason: "gave up".into(),
        error: None,
        handler_version: None,
        key: None,
        notice: None,
    };
    b.publish(
        (0..DEAD)
            .map(|i| NewMessage::new("q", i.to_string()))
            .collect(),
    )
    .await
    .unwrap();
    let mut killed = 0;
    while killed < DEAD {
        let got = b.receive("q", 1000, lease, Flow::default()).await.unwrap();
        killed += got.len();
        b.settle(&got.into_iter().map(kill).collect::<Vec<_>>())
            .await
            .unwrap();
    }
    // Meanwhile, whatever the replay brings back dies again at once. (It
    // failed before replays were bounded by the last dead letter at their
    // start: 3,500 of the 5,000 had been moved twice.)
    let done = Arc::new(AtomicBool::new(false));
    let killer = tokio::spawn({
        let (b, done) = (b.clone(), done.clone());
        async move {
            let mut again = 0;
            while again == 0 || !done.load(Ordering::Relaxed) {
                let got = b.receive("q", 500, lease, Flow::default()).await.unwrap();
                again += got.len();
                b.settle(&got.into_iter().map(kill).collect::<Vec<_>>())
                    .await
                    .unwrap();
            }
            again
        }
    });
    let moved = b.replay("q", &ReplaySelector::default()).await.unwrap();
    done.store(true, Ordering::Relaxed);
    let again = killer.await.unwrap();
    assert_eq!(moved, DEAD as u64, "{again} died again during the replay");
}
