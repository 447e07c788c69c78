//! What is the PostgreSQL broker's own in its dead-letter and presence
//! roles, beyond the conformance suite (which runs on it too): redrive
//! counts across replays, a long replay split into batches and replays on
//! two hosts at once moving each dead letter once, counts of every queue by
//! state, and each host's handler statuses replacing its own.

use std::sync::Arc;
use std::time::Duration;

use sluice::broker::message::{Delivery, NewMessage};
use sluice::broker::{
    DeadLetters, Flow, HandlerStatus, PgBroker, Presence, Queue, QueueStats, ReplaySelector,
    Settlement,
};
use sluice_broker::testkit::PgServer;

const LEASE: Duration = Duration::from_secs(30);

async fn broker(server: &PgServer) -> PgBroker {
    PgBroker::connect(&server.url()).await.unwrap()
}

fn msg(queue: &str, payload: &str) -> NewMessage {
    NewMessage::new(queue, payload.as_bytes().to_vec())
}

fn dead(delivery: Delivery) -> Settlement {
    Settlement::Dead {
        delivery,
        reason: "rejected: bad".into(),
        error: Some("boom".into()),
        handler_version: Some("v1".into()),
        key: None,
        notice: None,
    }
}

async fn receive_all(b: &PgBroker, queue: &str) -> Vec<Delivery> {
    b.receive(queue, 1000, LEASE, Flow::default())
        .await
        .unwrap()
}

fn ids_of(deliveries: &[Delivery]) -> Vec<String> {
    deliveries.iter().map(|d| d.id.clone()).collect()
}

/// Publish one message per payload and kill each in turn, a few ms apart,
/// so that their times of death differ. Returns their ids.
async fn kill(b: &PgBroker, queue: &str, payloads: &[&str]) -> Vec<String> {
    let mut ids = Vec::new();
    for p in payloads {
        b.publish(vec![msg(queue, p)]).await.unwrap();
        let mut got = receive_all(b, queue).await;
        assert_eq!(got.len(), 1);
        let d = got.remove(0);
        ids.push(d.id.clone());
        b.settle(&[dead(d)]).await.unwrap();
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    ids
}

/// Kill `n` messages of `queue` in batches; their ids in order of death.
async fn kill_many(b: &PgBroker, queue: &str, n: usize) -> Vec<String> {
    let messages: Vec<NewMessage> = (0..n).map(|i| msg(queue, &i.to_string())).collect();
    b.publish(messages).await.unwrap();
    let mut ids = Vec::new();
    while ids.len() < n {
        let got = b.receive(queue, 500, LEASE, Flow::default()).await.unwrap();
        assert!(!got.is_empty(), "{} of {n} received", ids.len());
        ids.extend(ids_of(&got));
        b.settle(&got.into_iter().map(dead).collect::<Vec<_>>())
            .await
            .unwrap();
    }
    ids
}

/// The ids of a queue's dead letters, oldest first, and their times of death.
async fn dead_ids(b: &PgBroker, queue: &str) -> (Vec<String>, Vec<u64>) {
    b.dead_letters(queue, 10_000)
        .await
        .unwrap()
        .into_iter()
        .map(|d| (d.id, d.died_at_ms))
        .unzip()
}

#[tokio::test]
async fn redrives_are_counted_stop_at_the_maximum_and_a_replay_by_hand_keeps_them() {
    let server = PgServer::start();
    let b = broker(&server).await;
    let id = kill(&b, "q", &["x"]).await.remove(0);
    let redrive = ReplaySelector {
        max_redrives: Some(2),
        redrive: true,
        ..ReplaySelector::default()
    };
    for round in 1..=2u32 {
        assert_eq!(b.replay("q", &redrive).await.unwrap(), 1, "round {round}");
        let d = receive_all(&b, "q").await.remove(0);
        assert_eq!((d.id.as_str(), d.attempt, d.snoozes), (id.as_str(), 1, 0));
        b.settle(&[dead(d)]).await.unwrap();
        let letter = b.dead_letter("q", &id).await.unwrap().unwrap();
        assert_eq!(letter.redrives, round);
    }
    assert_eq!(b.replay("q", &redrive).await.unwrap(), 0, "none left");
    assert_eq!(b.replay("q", &ReplaySelector::default()).await.unwrap(), 1);
    let d = receive_all(&b, "q").await.remove(0);
    b.settle(&[dead(d)]).await.unwrap();
    assert_eq!(b.dead_letter("q", &id).await.unwrap().unwrap().redrives, 2);
}

#[tokio::test]
async fn replays_on_two_hosts_at_once_move_a_long_stream_each_once() {
    let server = PgServer::start();
    let (a, b) = (
        Arc::new(broker(&server).await),
        Arc::new(broker(&server).await),
    );
    // Longer than one replay statement moves (1000).
    let ids = kill_many(&a, "q", 2500).await;
    assert_eq!(dead_ids(&a, "q").await.0, ids);
    let across = ReplaySelector {
        limit: Some(1200),
        ..ReplaySelector::default()
    };
    assert_eq!(a.replay("q", &across).await.unwrap(), 1200);
    assert_eq!(dead_ids(&a, "q").await.0, ids[1200..]);
    let mut replays = tokio::task::JoinSet::new();
    for (host, limit) in [(&a, None), (&b, Some(300)), (&a, Some(7)), (&b, None)] {
        let host = host.clone();
        replays.spawn(async move {
            let redrive = ReplaySelector {
                max_redrives: Some(1),
                limit,
                redrive: true,
                ..ReplaySelector::default()
            };
            host.replay("q", &redrive).await.unwrap()
        });
    }
    let moved: u64 = replays.join_all().await.into_iter().sum();
    assert_eq!(moved, 1300, "each dead letter moved by exactly one replay");
    assert!(dead_ids(&a, "q").await.0.is_empty());
    let mut back = Vec::new();
    loop {
        let got = receive_all(&b, "q").await;
        if got.is_empty() {
            break;
        }
        back.extend(ids_of(&got));
    }
    let (mut back, mut want) = (back, ids.clone());
    back.sort();
    want.sort();
    assert_eq!(back, want, "every message back once");
    let redriven =
        server.psql("SELECT redrives, count(*) FROM sluice.messages GROUP BY 1 ORDER BY 1");
    assert_eq!(redriven, "0|1200\n1|1300");
}

#[tokio::test]
async fn stats_count_every_queue_by_state() {
    let server = PgServer::start();
    let b = broker(&server).await;
    let mut later = msg("b", "x");
    later.delay = Duration::from_secs(60);
    let five = (0..5).map(|i| msg("a", &i.to_string()));
    b.publish(five.chain([later]).collect()).await.unwrap();
    let got = b.receive("a", 4, LEASE, Flow::default()).await.unwrap();
    let [done, retried, died, _leased] = <[Delivery; 4]>::try_from(got).unwrap();
    b.settle(&[
        Settlement::Done {
            delivery: done.clone(),
            key: None,
            publishes: vec![],
        },
        Settlement::Retry {
            delivery: retried,
            delay: Duration::from_secs(60),
            error: "later".into(),
            key: None,
        },
        dead(died),
        // Settled already: its lease is gone.
        Settlement::Duplicate { delivery: done },
    ])
    .await
    .unwrap();
    let a = b.queue_stats("a").await.unwrap();
    assert_eq!(
        (a.ready, a.in_flight, a.delayed, a.dead, a.pending()),
        (1, 1, 1, 1, 3),
        "{a:?}"
    );
    assert_eq!(
        (a.done, a.retried, a.lost_leases, a.duplicates),
        (1, 1, 1, 0)
    );
    assert!(!a.paused);
    let all = b.stats().await.unwrap();
    let names: Vec<&str> = all.iter().map(|s| s.queue.as_str()).collect();
    assert_eq!(names, ["a", "b"]);
    assert_eq!(all[0], a);
    assert_eq!((all[1].ready, all[1].delayed, all[1].done), (0, 1, 0));
    assert_eq!(
        b.queue_stats("unknown").await.unwrap(),
        QueueStats::empty("unknown")
    );
}

fn status(host: &str, handler: &str, version: &str) -> HandlerStatus {
    HandlerStatus {
        host: host.into(),
        handler: handler.into(),
        queue: Some("q".into()),
        version: Some(version.into()),
        refusals: 0,
        last_refusal: None,
        worker_restarts: 0,
        last_worker_failure: None,
        dropped_log_lines: 0,
        max_in_flight: None,
        rate: Some("200/s".into()),
        schedules: vec![],
        world: None,
        instances: None,
        pool: None,
        updated_at_ms: 1,
    }
}

#[tokio::test]
async fn each_host_replaces_its_own_handler_statuses() {
    let server = PgServer::start();
    let (one, two) = (broker(&server).await, broker(&server).await);
    one.put_handler_statuses("h1", vec![status("h1", "b", "v1"), status("h1", "a", "v1")])
        .await
        .unwrap();
    two.put_handler_statuses("h2", vec![status("h2", "a", "v2")])
        .await
        .unwrap();
    let seen: Vec<(String, String)> = one
        .handler_statuses()
        .await
        .unwrap()
        .into_iter()
        .map(|s| (s.handler, s.host))
        .collect();
    let pairs = |p: &[(&str, &str)]| -> Vec<(String, String)> {
        p.iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    };
    assert_eq!(seen, pairs(&[("a", "h1"), ("a", "h2"), ("b", "h1")]));
    // A new report replaces the host's old one, and no other host's.
    one.put_handler_statuses("h1", vec![status("h1", "c", "v3")])
        .await
        .unwrap();
    let all = two.handler_statuses().await.unwrap();
    assert_eq!(all, vec![status("h2", "a", "v2"), status("h1", "c", "v3")]);
    one.put_handler_statuses("h1", vec![]).await.unwrap();
    assert_eq!(
        two.handler_statuses().await.unwrap(),
        vec![status("h2", "a", "v2")]
    );
}
