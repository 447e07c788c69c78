//! The broker conformance suite: the semantics every backend must share,
//! written against the [`Broker`] trait alone. Each check is an
//! `async fn(Arc<dyn Broker>)` that panics on the first thing the broker
//! gets wrong; give each a fresh, empty broker (checks use queues such as
//! `q`, `a` and `next`, and expect nothing else in them) inside a Tokio
//! runtime with timers. The checks here are the core of delivery; the
//! modules hold the rest, one area each.
//!
//! sluice's own tests run every check on every backend, one test each
//! (`tests/integration/conformance.rs`): a new check is listed there, and a
//! new backend is one more line there.

use std::sync::Arc;
use std::time::Duration;

use crate::message::{Delivery, NewMessage};
use crate::{Broker, ClaimState, Flow, KeyClaim, QueueStats, ReplaySelector, Settlement};

const LEASE: Duration = Duration::from_secs(30);
/// A lease short enough to watch expire. A queue's consumers share one lease
/// setting, so a test uses the same lease for every receive of a queue.
const SHORT: Duration = Duration::from_millis(100);

/// Receive from `queue` until `want` deliveries came, or fail after 5 s.
/// Publishes held by a handler reach their queue with the ack on SQLite, and
/// through the outbox relay shortly after it on Redis.
async fn receive_n(b: &dyn Broker, queue: &str, want: usize) -> Vec<Delivery> {
    let start = std::time::Instant::now();
    let mut got = Vec::new();
    while got.len() < want {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "{queue}: got {} of {want}",
            got.len()
        );
        got.extend(b.receive(queue, 10, LEASE, Flow::default()).await.unwrap());
        if got.len() < want {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    // Nothing more arrives later.
    tokio::time::sleep(Duration::from_millis(300)).await;
    got.extend(b.receive(queue, 10, LEASE, Flow::default()).await.unwrap());
    assert_eq!(got.len(), want, "{queue}: more deliveries than expected");
    got
}

/// Poll a queue's counts until `check` holds, or fail after 5 s.
async fn stats_until(
    b: &dyn Broker,
    queue: &str,
    check: impl Fn(&QueueStats) -> bool,
) -> QueueStats {
    let start = std::time::Instant::now();
    loop {
        let s = b.queue_stats(queue).await.unwrap();
        if check(&s) {
            return s;
        }
        assert!(start.elapsed() < Duration::from_secs(5), "{queue}: {s:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn msg(queue: &str, payload: &str) -> NewMessage {
    NewMessage::new(queue, payload.as_bytes().to_vec())
}

async fn receive_one(b: &dyn Broker, queue: &str, lease: Duration) -> Delivery {
    let mut got = b.receive(queue, 10, lease, Flow::default()).await.unwrap();
    assert_eq!(got.len(), 1, "expected exactly one delivery on {queue}");
    got.remove(0)
}

/// A publish is received in order with its payload and headers, keyed by
/// its id, on attempt 1; a leased message is invisible to other receives,
/// and queues are separate.
pub async fn publish_and_receive_in_order(b: Arc<dyn Broker>) {
    let mut m = msg("q", "first");
    m.headers = vec![("h".into(), "v".into())];
    let ids = b.publish(vec![m, msg("q", "second")]).await.unwrap();
    let got = b.receive("q", 10, LEASE, Flow::default()).await.unwrap();
    assert_eq!(got.len(), 2);
    assert_eq!(got[0].id, ids[0]);
    assert_eq!(got[0].payload, b"first");
    assert_eq!(got[0].headers, vec![("h".to_string(), "v".to_string())]);
    assert_eq!(got[0].key, ids[0], "the key defaults to the id");
    assert_eq!(got[0].attempt, 1);
    assert_eq!(got[1].payload, b"second");
    assert!(
        b.receive("q", 10, LEASE, Flow::default())
            .await
            .unwrap()
            .is_empty(),
        "leased messages are invisible"
    );
    assert!(
        b.receive("other", 10, LEASE, Flow::default())
            .await
            .unwrap()
            .is_empty(),
        "queues are separate"
    );
}

/// A receive leases at most the batch size it asks for.
pub async fn receive_respects_batch_size(b: Arc<dyn Broker>) {
    b.publish((0..5).map(|i| msg("q", &i.to_string())).collect())
        .await
        .unwrap();
    assert_eq!(
        b.receive("q", 3, LEASE, Flow::default())
            .await
            .unwrap()
            .len(),
        3
    );
    assert_eq!(
        b.receive("q", 3, LEASE, Flow::default())
            .await
            .unwrap()
            .len(),
        2
    );
}

/// A message whose lease expired is delivered again as the next attempt,
/// with a "lease expired" error; the first holder's late retry is ignored.
pub async fn expired_lease_redelivers_and_counts_an_attempt(b: Arc<dyn Broker>) {
    b.publish(vec![msg("q", "x")]).await.unwrap();
    let first = receive_one(&*b, "q", SHORT).await;
    tokio::time::sleep(Duration::from_millis(250)).await;
    let again = receive_one(&*b, "q", SHORT).await;
    assert_eq!(again.id, first.id);
    assert_eq!(again.attempt, 2);
    assert!(
        again
            .last_error
            .as_deref()
            .unwrap()
            .contains("lease expired")
    );
    // The first holder lost its lease: its retry is ignored.
    b.settle(&[Settlement::Retry {
        delivery: first,
        delay: Duration::ZERO,
        error: "late".into(),
        key: None,
    }])
    .await
    .unwrap();
    assert_eq!(b.queue_stats("q").await.unwrap().in_flight, 1);
}

/// `done` acks the message and commits its publishes with it, a delayed one
/// as delayed.
pub async fn done_commits_publishes_with_the_ack(b: Arc<dyn Broker>) {
    b.publish(vec![msg("q", "x")]).await.unwrap();
    let d = receive_one(&*b, "q", LEASE).await;
    let mut delayed = msg("later", "p2");
    delayed.delay = Duration::from_secs(60);
    b.settle(&[Settlement::Done {
        delivery: d,
        key: None,
        publishes: vec![msg("next", "p1"), delayed],
    }])
    .await
    .unwrap();
    let s = stats_until(&*b, "q", |s| s.pending() == 0).await;
    assert_eq!(s.done, 1);
    assert_eq!(receive_n(&*b, "next", 1).await[0].payload, b"p1");
    stats_until(&*b, "later", |s| s.delayed == 1).await;
}

/// A retry is delivered again after its delay and not before, as the next
/// attempt with the error it gave.
pub async fn retry_waits_for_its_delay(b: Arc<dyn Broker>) {
    b.publish(vec![msg("q", "x")]).await.unwrap();
    let d = receive_one(&*b, "q", LEASE).await;
    b.settle(&[Settlement::Retry {
        delivery: d,
        delay: Duration::from_millis(300),
        error: "boom".into(),
        key: None,
    }])
    .await
    .unwrap();
    let s = b.queue_stats("q").await.unwrap();
    assert_eq!((s.delayed, s.ready, s.retried), (1, 0, 1));
    assert!(
        b.receive("q", 10, LEASE, Flow::default())
            .await
            .unwrap()
            .is_empty(),
        "not before its delay"
    );
    tokio::time::sleep(Duration::from_millis(400)).await;
    let again = receive_one(&*b, "q", LEASE).await;
    assert_eq!(again.attempt, 2);
    assert_eq!(again.last_error.as_deref(), Some("boom"));
}

/// A delayed publish is not delivered before its delay.
pub async fn delayed_publish_is_not_early(b: Arc<dyn Broker>) {
    let mut m = msg("q", "x");
    m.delay = Duration::from_millis(300);
    b.publish(vec![m]).await.unwrap();
    assert!(
        b.receive("q", 10, LEASE, Flow::default())
            .await
            .unwrap()
            .is_empty()
    );
    tokio::time::sleep(Duration::from_millis(400)).await;
    receive_one(&*b, "q", LEASE).await;
}

/// A defer puts the message back without spending an attempt and lets its
/// key go.
pub async fn defer_does_not_count_an_attempt_and_lets_its_key_go(b: Arc<dyn Broker>) {
    b.publish(vec![msg("q", "x")]).await.unwrap();
    let d = receive_one(&*b, "q", LEASE).await;
    let claim = |holder: &str| KeyClaim {
        key: "k".into(),
        holder: holder.into(),
    };
    let taken = b.claim("q", &[claim(&d.receipt)], LEASE).await.unwrap();
    assert_eq!(taken, [ClaimState::Acquired]);
    b.settle(&[Settlement::Defer {
        delivery: d,
        delay: Duration::ZERO,
        key: Some("k".into()),
    }])
    .await
    .unwrap();
    let again = receive_one(&*b, "q", LEASE).await;
    assert_eq!(again.attempt, 1);
    assert_eq!(
        b.claim("q", &[claim(&again.receipt)], LEASE).await.unwrap(),
        [ClaimState::Acquired],
        "the deferred delivery let its key go"
    );
}

/// The settlement [`every_settlement_of_a_lost_lease_is_refused`] sends
/// for a stale delivery, by its payload: each kind once.
fn late_settlement(d: Delivery) -> Settlement {
    match String::from_utf8_lossy(&d.payload).as_ref() {
        "done" => Settlement::Done {
            delivery: d,
            key: None,
            publishes: vec![msg("next", "from a lost lease")],
        },
        "dup" => Settlement::Duplicate { delivery: d },
        "retry" => Settlement::Retry {
            delivery: d,
            delay: Duration::ZERO,
            error: "late".into(),
            key: None,
        },
        "defer" => Settlement::Defer {
            delivery: d,
            delay: Duration::ZERO,
            key: None,
        },
        _ => Settlement::Dead {
            delivery: d,
            reason: "late".into(),
            error: None,
            handler_version: None,
            key: None,
            notice: None,
        },
    }
}

/// Every kind of settlement from a delivery that lost its lease (the
/// message was delivered again since) is refused: nothing of it applies,
/// and it is counted in `lost_leases`.
pub async fn every_settlement_of_a_lost_lease_is_refused(b: Arc<dyn Broker>) {
    let payloads = ["done", "dup", "retry", "defer", "dead"];
    b.publish(payloads.iter().map(|p| msg("q", p)).collect())
        .await
        .unwrap();
    let stale = b.receive("q", 10, SHORT, Flow::default()).await.unwrap();
    assert_eq!(stale.len(), 5);
    tokio::time::sleep(Duration::from_millis(250)).await;
    let fresh = b.receive("q", 10, SHORT, Flow::default()).await.unwrap();
    assert_eq!(fresh.len(), 5, "every message delivered again");
    let refused: Vec<Settlement> = stale.into_iter().map(late_settlement).collect();
    b.settle(&refused).await.unwrap();
    let s = b.queue_stats("q").await.unwrap();
    assert_eq!(
        (s.done, s.duplicates, s.retried, s.dead, s.lost_leases),
        (0, 0, 0, 0, 5),
        "{s:?}"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        b.receive("next", 10, LEASE, Flow::default())
            .await
            .unwrap()
            .is_empty()
    );
    // The fresh deliveries settle as usual.
    let done: Vec<Settlement> = fresh
        .into_iter()
        .map(|d| Settlement::Done {
            delivery: d,
            key: None,
            publishes: vec![],
        })
        .collect();
    b.settle(&done).await.unwrap();
    let s = stats_until(&*b, "q", |s| s.pending() == 0).await;
    assert_eq!((s.done, s.lost_leases), (5, 5), "{s:?}");
}

/// Dead letters are listed, shown with their reason,
/// attempts, last error and handler version, replayed by id with attempts
/// reset, and purged.
pub async fn dead_letters_list_show_replay_purge(b: Arc<dyn Broker>) {
    b.publish(vec![msg("q", "a"), msg("q", "b")]).await.unwrap();
    let got = b.receive("q", 10, LEASE, Flow::default()).await.unwrap();
    let ids: Vec<String> = got.iter().map(|d| d.id.clone()).collect();
    let dead: Vec<Settlement> = got
        .into_iter()
        .map(|d| Settlement::Dead {
            delivery: d,
            reason: "rejected: bad".into(),
            error: Some("last".into()),
            handler_version: Some("v1".into()),
            key: None,
            notice: None,
        })
        .collect();
    b.settle(&dead).await.unwrap();
    let list = b.dead_letters("q", 10).await.unwrap();
    assert_eq!(list.iter().map(|d| d.id.clone()).collect::<Vec<_>>(), ids);
    let one = b.dead_letter("q", &ids[0]).await.unwrap().unwrap();
    assert_eq!(
        (one.attempts, one.reason.as_str(), one.payload.as_slice()),
        (1, "rejected: bad", &b"a"[..])
    );
    assert_eq!(one.last_error.as_deref(), Some("last"));
    assert_eq!(one.handler_version.as_deref(), Some("v1"));
    assert!(b.dead_letter("other", &ids[0]).await.unwrap().is_none());
    assert_eq!(b.queue_stats("q").await.unwrap().dead, 2);

    let replayed = b
        .replay(
            "q",
            &ReplaySelector {
                ids: vec![ids[0].clone()],
                ..ReplaySelector::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(replayed, 1);
    let back = receive_one(&*b, "q", LEASE).await;
    assert_eq!(
        (back.id.as_str(), back.attempt),
        (ids[0].as_str(), 1),
        "attempts reset"
    );
    assert_eq!(one.redrives, 0, "a message never redriven");
    assert_eq!(b.purge("q").await.unwrap(), 1);
    assert!(b.dead_letters("q", 10).await.unwrap().is_empty());
}

/// Idempotency keys per queue: the first holder acquires a key, others find
/// it busy; a retry releases it; `done` records it as done for its
/// retention, after which it can be acquired again.
pub async fn keys_acquire_busy_done_and_release(b: Arc<dyn Broker>) {
    let states = b
        .claim(
            "q",
            &[claim("k", "m1"), claim("k", "m2"), claim("k", "m1")],
            LEASE,
        )
        .await
        .unwrap();
    assert_eq!(
        states,
        [ClaimState::Acquired, ClaimState::Busy, ClaimState::Acquired]
    );
    assert_eq!(
        b.claim("other", &[claim("k", "m9")], LEASE).await.unwrap(),
        [ClaimState::Acquired],
        "keys are per queue"
    );

    a_retry_releases_its_key(&*b).await;
    done_keeps_its_key_for_its_retention(&*b).await;
}

/// A claim of `key` by `holder`.
fn claim(key: &str, holder: &str) -> KeyClaim {
    KeyClaim {
        key: key.into(),
        holder: holder.into(),
    }
}

/// Part of [`keys_acquire_busy_done_and_release`].
async fn a_retry_releases_its_key(b: &dyn Broker) {
    // A retry releases the key.
    b.publish(vec![msg("q", "x")]).await.unwrap();
    let d = receive_one(b, "q", LEASE).await;
    assert_eq!(
        b.claim("q", &[claim("r", &d.receipt)], LEASE)
            .await
            .unwrap(),
        [ClaimState::Acquired]
    );
    b.settle(&[Settlement::Retry {
        delivery: d,
        delay: Duration::from_secs(60),
        error: "e".into(),
        key: Some("r".into()),
    }])
    .await
    .unwrap();
    assert_eq!(
        b.claim("q", &[claim("r", "other")], LEASE).await.unwrap(),
        [ClaimState::Acquired]
    );
}

/// Part of [`keys_acquire_busy_done_and_release`].
async fn done_keeps_its_key_for_its_retention(b: &dyn Broker) {
    // Done records the key for its retention, then it expires.
    b.publish(vec![msg("q", "y")]).await.unwrap();
    let d = receive_one(b, "q", LEASE).await;
    b.claim("q", &[claim("d", &d.receipt)], LEASE)
        .await
        .unwrap();
    b.settle(&[Settlement::Done {
        delivery: d,
        key: Some(("d".into(), Duration::from_millis(300))),
        publishes: vec![],
    }])
    .await
    .unwrap();
    assert_eq!(
        b.claim("q", &[claim("d", "again")], LEASE).await.unwrap(),
        [ClaimState::AlreadyDone]
    );
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(
        b.claim("q", &[claim("d", "again")], LEASE).await.unwrap(),
        [ClaimState::Acquired]
    );
}

/// Two messages with one key: the second to finish is a duplicate, and its
/// publishes are dropped. A late done of a delivery that lost its lease is
/// refused, publishes and all.
pub async fn second_done_for_a_key_is_a_duplicate_without_publishes(b: Arc<dyn Broker>) {
    b.publish(vec![msg("q", "x"), msg("q", "y")]).await.unwrap();
    let got = b.receive("q", 10, LEASE, Flow::default()).await.unwrap();
    let key = Some(("k".to_string(), Duration::from_secs(60)));
    for (d, p) in got.into_iter().zip(["1", "2"]) {
        b.settle(&[Settlement::Done {
            delivery: d,
            key: key.clone(),
            publishes: vec![msg("next", p)],
        }])
        .await
        .unwrap();
    }
    let s = stats_until(&*b, "q", |s| s.pending() == 0).await;
    assert_eq!((s.done, s.duplicates), (1, 1));
    let next = receive_n(&*b, "next", 1).await;
    assert_eq!(next[0].payload, b"1");

    b.publish(vec![msg("q", "z")]).await.unwrap();
    let first = receive_one(&*b, "q", SHORT).await;
    tokio::time::sleep(Duration::from_millis(250)).await;
    let second = receive_one(&*b, "q", SHORT).await;
    let key = Some(("z".to_string(), Duration::from_secs(60)));
    b.settle(&[Settlement::Done {
        delivery: second,
        key: key.clone(),
        publishes: vec![msg("next", "3")],
    }])
    .await
    .unwrap();
    // The first holder finishes late: its publishes must not be committed.
    b.settle(&[Settlement::Done {
        delivery: first,
        key,
        publishes: vec![msg("next", "4")],
    }])
    .await
    .unwrap();
    let s = stats_until(&*b, "q", |s| s.pending() == 0).await;
    assert_eq!((s.done, s.duplicates, s.lost_leases), (2, 1, 1));
    assert_eq!(receive_n(&*b, "next", 1).await[0].payload, b"3");
}

/// A duplicate settlement acks the message and counts a duplicate, not a
/// done.
pub async fn duplicate_settlement_acks_without_counting_done(b: Arc<dyn Broker>) {
    b.publish(vec![msg("q", "x")]).await.unwrap();
    let d = receive_one(&*b, "q", LEASE).await;
    b.settle(&[Settlement::Duplicate { delivery: d }])
        .await
        .unwrap();
    let s = b.queue_stats("q").await.unwrap();
    assert_eq!((s.done, s.duplicates, s.pending()), (0, 1, 0));
}

/// A dead letter's notice is published with it, and only when the dead
/// letter is stored: a settlement from a lost lease sends neither.
pub async fn dead_notice_is_published_with_the_dead_letter(b: Arc<dyn Broker>) {
    b.publish(vec![msg("q", "x"), msg("q", "y")]).await.unwrap();
    let first = b
        .receive("q", 1, SHORT, Flow::default())
        .await
        .unwrap()
        .remove(0);
    let dead = |d: Delivery, note: &str| Settlement::Dead {
        delivery: d,
        reason: "rejected: bad".into(),
        error: None,
        handler_version: None,
        key: None,
        notice: Some(msg("alerts", note)),
    };
    // A lease lost to another consumer: neither the dead letter nor its notice.
    tokio::time::sleep(Duration::from_millis(250)).await;
    let mut again = b.receive("q", 10, SHORT, Flow::default()).await.unwrap();
    again.sort_by_key(|d| d.payload.clone());
    assert_eq!(again.len(), 2, "x came back after its lease, y is new");
    b.settle(&[dead(first, "stale")]).await.unwrap();
    assert_eq!(b.queue_stats("q").await.unwrap().dead, 0);
    let notices: Vec<Settlement> = again.into_iter().map(|d| dead(d, "notice")).collect();
    b.settle(&notices).await.unwrap();
    assert_eq!(b.queue_stats("q").await.unwrap().dead, 2);
    let notices = receive_n(&*b, "alerts", 2).await;
    assert!(
        notices.iter().all(|n| n.payload == b"notice"),
        "only the stored dead letters sent notices"
    );
}

/// `stats` counts every queue: ready, in flight and delayed.
pub async fn stats_cover_every_queue(b: Arc<dyn Broker>) {
    let mut later = msg("b", "x");
    later.delay = Duration::from_secs(60);
    b.publish(vec![msg("a", "1"), msg("a", "2"), later])
        .await
        .unwrap();
    assert_eq!(
        b.receive("a", 10, LEASE, Flow::default())
            .await
            .unwrap()
            .len(),
        2
    );
    let all = b.stats().await.unwrap();
    let a = all.iter().find(|s| s.queue == "a").unwrap();
    let bq = all.iter().find(|s| s.queue == "b").unwrap();
    assert_eq!((a.ready, a.in_flight, a.delayed), (0, 2, 0));
    assert_eq!((bq.ready, bq.in_flight, bq.delayed), (0, 0, 1));
}

pub mod flow;
pub mod groups;
pub mod keys;
pub mod kv;
pub mod leases;
pub mod pause;
pub mod replay;
pub mod schedules;
pub mod topics;
