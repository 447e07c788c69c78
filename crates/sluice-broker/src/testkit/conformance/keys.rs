//! Idempotency keys under races, and publishing through `sluice::Client`:
//! more of the conformance suite, on the same backends.

use std::sync::Arc;
use std::time::Duration;

use crate::client::{Client, PublishError, PublishOptions};
use crate::message::Delivery;
use crate::{Broker, ClaimState, Flow, KeyClaim, KeyOf, Settlement};

use super::{LEASE, SHORT, msg, receive_n, receive_one, stats_until};

/// Two deliveries of one message both end `done` without publishes (the
/// first lost its lease while it ran): the message is done once, and the
/// late one is refused as a lost lease, not counted as a duplicate.
pub async fn a_late_plain_done_is_refused(b: Arc<dyn Broker>) {
    b.publish(vec![msg("q", "x")]).await.unwrap();
    let first = receive_one(&*b, "q", SHORT).await;
    tokio::time::sleep(Duration::from_millis(250)).await;
    let second = receive_one(&*b, "q", SHORT).await;
    let key = Some(("k".to_string(), Duration::from_secs(60)));
    for d in [second, first] {
        b.settle(&[Settlement::Done {
            delivery: d,
            key: key.clone(),
            publishes: vec![],
        }])
        .await
        .unwrap();
    }
    let s = stats_until(&*b, "q", |s| s.pending() == 0).await;
    assert_eq!((s.done, s.duplicates, s.lost_leases), (1, 0, 1), "{s:?}");
    let again = KeyClaim {
        key: "k".into(),
        holder: "other".into(),
    };
    assert_eq!(
        b.claim("q", &[again], LEASE).await.unwrap(),
        [ClaimState::AlreadyDone]
    );
}

/// A done whose host believed its lease still held but reached the broker
/// only after the lease had passed to another delivery (a host stalled
/// between its check and the broker running the ack), either before or
/// after that delivery settled: the message is done once, and the other
/// ending is counted as a lost lease, never as a second done or a
/// duplicate. (On Redis such an ack goes without the settle script.)
pub async fn a_done_stalled_past_its_lease_is_counted_once(b: Arc<dyn Broker>) {
    for (queue, stalled_first) in [("q1", true), ("q2", false)] {
        b.publish(vec![msg(queue, "x")]).await.unwrap();
        let claim = |holder: &str| KeyClaim {
            key: "k".into(),
            holder: holder.into(),
        };
        let mut stalled = receive_one(&*b, queue, SHORT).await;
        let taken = b.claim(queue, &[claim(&stalled.receipt)], SHORT).await;
        assert_eq!(taken.unwrap(), [ClaimState::Acquired]);
        tokio::time::sleep(Duration::from_millis(250)).await;
        let current = receive_one(&*b, queue, SHORT).await;
        let taken = b.claim(queue, &[claim(&current.receipt)], LEASE).await;
        assert_eq!(taken.unwrap(), [ClaimState::Acquired], "{queue}");
        // What the stalled host believed when it checked.
        stalled.lease_until_ms = crate::message::now_ms() + 60_000;
        let done = |delivery| Settlement::Done {
            delivery,
            key: Some(("k".to_string(), Duration::from_secs(60))),
            publishes: vec![],
        };
        let order = if stalled_first {
            [stalled, current]
        } else {
            [current, stalled]
        };
        for d in order {
            b.settle(&[done(d)]).await.unwrap();
        }
        let s = stats_until(&*b, queue, |s| s.pending() == 0).await;
        assert_eq!(
            (s.done, s.duplicates, s.lost_leases),
            (1, 0, 1),
            "{queue}: {s:?}"
        );
    }
}

/// A key is held by one delivery at a time: the holder may claim it again
/// (which renews its lease), another delivery of the same message finds
/// it busy until that lease ends.
pub async fn a_key_is_held_by_one_delivery_at_a_time(b: Arc<dyn Broker>) {
    let claim = |holder: &str| KeyClaim {
        key: "k".into(),
        holder: holder.into(),
    };
    let short = Duration::from_millis(300);
    assert_eq!(
        b.claim("q", &[claim("r1")], short).await.unwrap(),
        [ClaimState::Acquired]
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    // r1 again, before its first lease on the key ended: a fresh lease.
    assert_eq!(
        b.claim("q", &[claim("r1")], short).await.unwrap(),
        [ClaimState::Acquired]
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    // 400 ms after the first claim, 200 ms into the second lease: another
    // delivery of the message waits.
    assert_eq!(
        b.claim("q", &[claim("r2")], short).await.unwrap(),
        [ClaimState::Busy],
        "the second claim renewed the lease"
    );
    tokio::time::sleep(Duration::from_millis(250)).await;
    assert_eq!(
        b.claim("q", &[claim("r2")], short).await.unwrap(),
        [ClaimState::Acquired],
        "and it ran out in its turn"
    );
}

/// [`Client`] publishes one message, one with a key, a header and a delay,
/// and several at once; a bad queue name or an oversized payload is refused.
pub async fn the_client_publishes_with_options(b: Arc<dyn Broker>) {
    let client = Client::from_broker(b.clone()).with_max_message_size(64);
    let id = client.publish("q", b"plain").await.unwrap();
    let options = PublishOptions::default()
        .key("order-7")
        .header("source", "shop")
        .delay(Duration::from_millis(300));
    let later = client.publish_with("q", b"later", options).await.unwrap();
    let now = b.receive("q", 10, LEASE, Flow::default()).await.unwrap();
    assert_eq!(now.len(), 1, "the delayed one is not due yet");
    assert_eq!(
        (now[0].id.as_str(), now[0].key.as_str()),
        (id.as_str(), id.as_str())
    );
    tokio::time::sleep(Duration::from_millis(400)).await;
    let d = receive_one(&*b, "q", LEASE).await;
    assert_eq!((d.id.as_str(), d.key.as_str()), (later.as_str(), "order-7"));
    assert_eq!(d.header("source"), Some("shop"));
    assert_eq!(d.payload, b"later");

    let ids = client
        .publish_all(vec![msg("a", "1"), msg("b", "2")])
        .await
        .unwrap();
    assert_eq!(ids.len(), 2);
    assert_eq!(receive_n(&*b, "b", 1).await[0].id, ids[1]);
    for bad in [
        client.publish("a/b", b"x").await,
        client.publish("q", &[0; 65]).await,
    ] {
        assert!(matches!(bad, Err(PublishError::Refused(_))), "{bad:?}");
    }
}

/// Messages `a` to `e` of queue `q`, received: `a` to `d` on their first
/// attempt, sorted by payload, and `e` on its second (after a retry).
async fn four_and_a_second_attempt(b: &dyn Broker) -> (Vec<Delivery>, Delivery) {
    b.publish(vec![
        msg("q", "a"),
        msg("q", "b"),
        msg("q", "c"),
        msg("q", "d"),
        msg("q", "e"),
    ])
    .await
    .unwrap();
    let mut ds = receive_n(b, "q", 5).await;
    ds.sort_by(|x, y| x.payload.cmp(&y.payload));
    // "e" is on its second attempt when it is deferred.
    let e = ds.pop().unwrap();
    b.settle(&[Settlement::Retry {
        delivery: e,
        delay: Duration::ZERO,
        error: "first".into(),
        key: None,
    }])
    .await
    .unwrap();
    let e = receive_one(b, "q", LEASE).await;
    assert_eq!((e.payload.as_slice(), e.attempt), (&b"e"[..], 2));
    (ds, e)
}

/// The batch [`a_settle_written_again_applies_nothing_twice`] writes twice:
/// a done holding key `k` for `ds[0]`, a retry for `ds[1]`, a dead letter
/// for `ds[2]`, a done with a publish for `ds[3]`, and a defer for `e`.
fn one_of_each(ds: &[Delivery], e: Delivery) -> Vec<Settlement> {
    vec![
        Settlement::Done {
            delivery: ds[0].clone(),
            key: Some(("k".to_string(), Duration::from_secs(60))),
            publishes: vec![],
        },
        Settlement::Retry {
            delivery: ds[1].clone(),
            delay: Duration::from_secs(60),
            error: "again".into(),
            key: None,
        },
        Settlement::Dead {
            delivery: ds[2].clone(),
            reason: "r".into(),
            error: None,
            handler_version: None,
            key: None,
            notice: None,
        },
        Settlement::Done {
            delivery: ds[3].clone(),
            key: None,
            publishes: vec![msg("next", "once")],
        },
        Settlement::Defer {
            delivery: e,
            delay: Duration::ZERO,
            key: None,
        },
    ]
}

/// A batch of settlements written again after its reply was lost (the
/// broker had applied it: the connection dropped after the commit, and the
/// worker writes a batch again until the broker takes it) applies nothing
/// twice: the retry is counted once, the defer gives back one attempt, the
/// dead letter, the dones and the publish stay one each, and nothing is
/// counted again: the broker knows the second write for the first one's
/// (the same settlements, with the same receipts), so it counts no lost
/// leases either. A write of other settlements is applied as usual.
pub async fn a_settle_written_again_applies_nothing_twice(b: Arc<dyn Broker>) {
    let (ds, e) = four_and_a_second_attempt(&*b).await;
    let claim = KeyClaim {
        key: "k".into(),
        holder: ds[0].receipt.clone(),
    };
    let taken = b.claim("q", &[claim], LEASE).await.unwrap();
    assert_eq!(taken, [ClaimState::Acquired]);
    let e_deferred = e.clone();
    let batch = one_of_each(&ds, e);
    b.settle(&batch).await.unwrap();
    let once = b.queue_stats("q").await.unwrap();
    assert_eq!(
        (once.done, once.retried, once.dead, once.lost_leases),
        (2, 2, 1, 0),
        "{once:?}"
    );
    b.settle(&batch).await.unwrap();
    let s = b.queue_stats("q").await.unwrap();
    assert_eq!(
        (s.done, s.duplicates, s.retried, s.dead, s.lost_leases),
        (2, 0, 2, 1, 0),
        "{s:?}"
    );
    assert_eq!((s.ready, s.delayed, s.in_flight), (1, 1, 0), "{s:?}");
    // The deferred message gave back its second attempt, and only that.
    let again = receive_one(&*b, "q", LEASE).await;
    assert_eq!((again.payload.as_slice(), again.attempt), (&b"e"[..], 2));
    // The done's publish was made once.
    assert_eq!(receive_n(&*b, "next", 1).await[0].payload, b"once");
    // Another write of the same delivery (a retry where the first was a
    // defer) is a write of its own: refused, as its lease was given up.
    b.settle(&[Settlement::Retry {
        delivery: e_deferred,
        delay: Duration::ZERO,
        error: "late".into(),
        key: None,
    }])
    .await
    .unwrap();
    let s = b.queue_stats("q").await.unwrap();
    assert_eq!((s.retried, s.lost_leases), (2, 1), "{s:?}");
}

/// In queue `q`, key `done` finished and key `busy` held by another
/// delivery.
async fn key_done_and_key_busy(b: &dyn Broker) {
    // "done" was finished before, "busy" is held by another delivery.
    let other = KeyClaim {
        key: "busy".into(),
        holder: "another delivery".into(),
    };
    assert_eq!(
        b.claim("q", &[other], LEASE).await.unwrap(),
        [ClaimState::Acquired]
    );
    b.publish(vec![msg("q", "done")]).await.unwrap();
    let first = receive_one(b, "q", LEASE).await;
    b.settle(&[Settlement::Done {
        delivery: first,
        key: Some(("done".to_string(), Duration::from_secs(60))),
        publishes: vec![],
    }])
    .await
    .unwrap();
}

/// Leasing and taking keys in one call (`receive_claiming`, in one step
/// where the broker can): each delivery comes with the key `key_of` gave
/// it, and one answer per key, as `claim` would give, held by its receipt.
pub async fn a_receive_takes_the_keys_it_is_given(b: Arc<dyn Broker>) {
    key_done_and_key_busy(&*b).await;
    let payloads = ["free", "none", "done", "busy"];
    b.publish(payloads.iter().map(|p| msg("q", p)).collect())
        .await
        .unwrap();
    // The key is the payload, except for "none", which takes no key.
    let key_of: KeyOf = Arc::new(|d: &Delivery| {
        let p = String::from_utf8(d.payload.clone()).unwrap();
        (p != "none").then_some(p)
    });
    let got = b
        .receive_claiming("q", 10, LEASE, Flow::default(), &key_of)
        .await
        .unwrap();
    let sent: Vec<&[u8]> = got
        .deliveries
        .iter()
        .map(|d| d.payload.as_slice())
        .collect();
    assert_eq!(sent, [&b"free"[..], b"none", b"done", b"busy"]);
    let keys: Vec<Option<&str>> = got.keys.iter().map(|k| k.as_deref()).collect();
    assert_eq!(keys, [Some("free"), None, Some("done"), Some("busy")]);
    assert_eq!(
        got.claims.unwrap(),
        [
            ClaimState::Acquired,
            ClaimState::AlreadyDone,
            ClaimState::Busy
        ]
    );
    // "free" is held by its delivery's receipt: that one may take it
    // again, another delivery finds it busy.
    let holder = got.deliveries[0].receipt.clone();
    let claim = |holder: &str| KeyClaim {
        key: "free".into(),
        holder: holder.into(),
    };
    assert_eq!(
        b.claim("q", &[claim(&holder)], LEASE).await.unwrap(),
        [ClaimState::Acquired]
    );
    assert_eq!(
        b.claim("q", &[claim("someone else")], LEASE).await.unwrap(),
        [ClaimState::Busy]
    );
    // The deliveries are leased as a receive leases them.
    let s = b.queue_stats("q").await.unwrap();
    assert_eq!((s.ready, s.in_flight), (0, 4), "{s:?}");
}
