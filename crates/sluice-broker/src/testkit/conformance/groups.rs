//! Ordered groups held by the broker: a group's messages are leased one at
//! a time in the order they were published, retries hold the group, a dead
//! one moves it on or blocks it until replayed or purged, alike on every
//! backend. (Hosts handling groups in order is in `groups.rs`.)

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::message::{Delivery, NewMessage};
use crate::{
    Broker, ClaimState, Flow, GroupSource, KeyClaim, OrderedGroups, ReplaySelector, Settlement,
};

use super::{LEASE, msg, stats_until};

/// Order `queue` by the header `g`.
async fn order(b: &dyn Broker, queue: &str, block_on_dead: bool) {
    let ordering = OrderedGroups {
        group: GroupSource::Header("g".into()),
        block_on_dead,
    };
    b.set_ordering(queue, Some(&ordering)).await.unwrap();
}

/// A message of group `g` (none when empty) with `payload`.
fn member(queue: &str, g: &str, payload: &str) -> NewMessage {
    let mut m = msg(queue, payload);
    if !g.is_empty() {
        m.headers = vec![("g".into(), g.into())];
    }
    m
}

/// The payloads a receive of up to 10 gets now, sorted.
async fn take(b: &dyn Broker, queue: &str) -> Vec<Delivery> {
    let mut got = b.receive(queue, 10, LEASE, Flow::default()).await.unwrap();
    got.sort_by(|a, b| a.payload.cmp(&b.payload));
    got
}

fn payloads(got: &[Delivery]) -> Vec<String> {
    got.iter()
        .map(|d| String::from_utf8_lossy(&d.payload).into_owned())
        .collect()
}

/// Receive until the payloads `want` came (sorted), or fail after 5 s; the
/// held publishes of a settle reach their queue through a relay on Redis.
async fn take_until(b: &dyn Broker, queue: &str, want: &[&str]) -> Vec<Delivery> {
    let start = Instant::now();
    let mut got = Vec::new();
    while got.len() < want.len() {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "{queue}: got {:?}, want {want:?}",
            payloads(&got)
        );
        got.extend(take(b, queue).await);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    got.sort_by(|a, b| a.payload.cmp(&b.payload));
    assert_eq!(payloads(&got), want);
    got
}

async fn settle(b: &dyn Broker, s: Settlement) {
    b.settle(&[s]).await.unwrap();
}

/// The ack of `d` with idempotency key `key`, as a host with idempotency
/// on writes it: the key is claimed first, and must be free.
async fn keyed_done(b: &dyn Broker, d: Delivery, key: &str) -> Settlement {
    let claim = KeyClaim {
        key: key.into(),
        holder: d.receipt.clone(),
    };
    assert_eq!(
        b.claim("q", &[claim], LEASE).await.unwrap(),
        [ClaimState::Acquired]
    );
    Settlement::Done {
        delivery: d,
        key: Some((key.into(), Duration::from_secs(60))),
        publishes: vec![],
    }
}

fn done(delivery: Delivery) -> Settlement {
    Settlement::Done {
        delivery,
        key: None,
        publishes: vec![],
    }
}

fn dead(delivery: Delivery) -> Settlement {
    Settlement::Dead {
        delivery,
        reason: "gave up".into(),
        error: None,
        handler_version: None,
        key: None,
        notice: None,
    }
}

/// Two groups and a message without a group: one message of each group at
/// a time, in order; a retry holds its group; the one without a group is
/// not held; waiting messages count as delayed.
pub async fn a_group_is_leased_one_message_at_a_time_in_order(b: Arc<dyn Broker>) {
    order(&*b, "q", false).await;
    let published = [
        ("a", "a1"),
        ("b", "b1"),
        ("a", "a2"),
        ("b", "b2"),
        ("a", "a3"),
        ("", "u"),
    ];
    b.publish(published.iter().map(|(g, p)| member("q", g, p)).collect())
        .await
        .unwrap();
    let s = b.queue_stats("q").await.unwrap();
    assert_eq!((s.ready, s.delayed, s.ungrouped), (3, 3, 1), "{s:?}");
    let mut got = take(&*b, "q").await;
    assert_eq!(payloads(&got), ["a1", "b1", "u"]);
    assert_eq!(got[0].group.as_deref(), Some("a"));
    assert_eq!(got[2].group, None);
    assert!(take(&*b, "q").await.is_empty(), "the groups are held");
    let u = got.pop().unwrap();
    let b1 = got.pop().unwrap();
    let a1 = got.pop().unwrap();
    settle(&*b, done(u)).await;
    settle(&*b, done(a1)).await;
    let a2 = take(&*b, "q").await.pop().expect("a2 follows a1");
    assert_eq!(payloads(std::slice::from_ref(&a2)), ["a2"]);
    // A retry keeps its place at the head of its group.
    settle(
        &*b,
        Settlement::Retry {
            delivery: b1,
            delay: Duration::from_millis(200),
            error: "later".into(),
            key: None,
        },
    )
    .await;
    assert!(take(&*b, "q").await.is_empty(), "b2 waits for b1's retry");
    let b1 = take_until(&*b, "q", &["b1"]).await.pop().unwrap();
    assert_eq!(b1.attempt, 2);
    settle(&*b, done(b1)).await;
    settle(&*b, done(a2)).await;
    let got = take(&*b, "q").await;
    assert_eq!(payloads(&got), ["a3", "b2"]);
    for d in got {
        settle(&*b, done(d)).await;
    }
    let s = stats_until(&*b, "q", |s| s.done == 6).await;
    assert_eq!(s.pending(), 0, "{s:?}");
}

/// A dead message moves its group on; with `block_on_dead` it holds the
/// group until its dead letter is replayed (and goes first) or purged.
pub async fn a_dead_message_moves_its_group_on_or_blocks_it(b: Arc<dyn Broker>) {
    order(&*b, "skip", false).await;
    b.publish(vec![member("skip", "a", "a1"), member("skip", "a", "a2")])
        .await
        .unwrap();
    let a1 = take(&*b, "skip").await.pop().unwrap();
    settle(&*b, dead(a1)).await;
    assert_eq!(payloads(&take(&*b, "skip").await), ["a2"]);

    order(&*b, "block", true).await;
    b.publish(vec![member("block", "c", "c1"), member("block", "c", "c2")])
        .await
        .unwrap();
    let c1 = take(&*b, "block").await.pop().unwrap();
    settle(&*b, dead(c1)).await;
    let dead_letters = b.dead_letters("block", 10).await.unwrap();
    assert_eq!(
        dead_letters[0].group.as_deref(),
        Some("c"),
        "it keeps its group"
    );
    assert!(take(&*b, "block").await.is_empty(), "c2 waits for dead c1");
    // A message published now joins the blocked group.
    b.publish(vec![member("block", "c", "c3")]).await.unwrap();
    assert!(take(&*b, "block").await.is_empty());
    assert_eq!(
        b.replay("block", &ReplaySelector::default()).await.unwrap(),
        1
    );
    let c1 = take(&*b, "block")
        .await
        .pop()
        .expect("the replayed c1 first");
    assert_eq!(payloads(std::slice::from_ref(&c1)), ["c1"]);
    assert!(take(&*b, "block").await.is_empty());
    settle(&*b, done(c1)).await;
    let c2 = take(&*b, "block").await.pop().expect("then c2");
    assert_eq!(payloads(std::slice::from_ref(&c2)), ["c2"]);
    // Dead again: purging its dead letter lets c3 go.
    settle(&*b, dead(c2)).await;
    assert!(take(&*b, "block").await.is_empty());
    assert_eq!(b.purge("block").await.unwrap(), 1);
    assert_eq!(payloads(&take(&*b, "block").await), ["c3"]);
}

/// A publish held with the ack joins its group behind the messages before
/// it; dropping the ordering lets every waiting message go.
pub async fn held_publishes_join_their_group_and_dropping_the_ordering_frees_it(
    b: Arc<dyn Broker>,
) {
    order(&*b, "q", false).await;
    b.publish(vec![member("q", "a", "a1"), member("q", "a", "a2")])
        .await
        .unwrap();
    let a1 = take(&*b, "q").await.pop().unwrap();
    settle(
        &*b,
        Settlement::Done {
            delivery: a1,
            key: None,
            publishes: vec![member("q", "a", "a3"), member("q", "a", "a4")],
        },
    )
    .await;
    let a2 = take_until(&*b, "q", &["a2"]).await.pop().unwrap();
    // The held publishes arrive (on Redis, through the relay) and wait.
    stats_until(&*b, "q", |s| s.delayed == 2).await;
    assert!(take(&*b, "q").await.is_empty());
    settle(&*b, done(a2)).await;
    let a3 = take_until(&*b, "q", &["a3"]).await.pop().unwrap();
    b.set_ordering("q", None).await.unwrap();
    assert_eq!(payloads(&take(&*b, "q").await), ["a4"]);
    settle(&*b, done(a3)).await;
    // Without an ordering nothing is grouped or held.
    b.publish(vec![member("q", "a", "a5"), member("q", "a", "a6")])
        .await
        .unwrap();
    let got = take(&*b, "q").await;
    assert_eq!(payloads(&got), ["a5", "a6"]);
    assert!(got.iter().all(|d| d.group.is_none()));
    assert_eq!(b.queue_stats("q").await.unwrap().ungrouped, 0);
}

/// Acks with idempotency keys (which Redis applies without its settle
/// script) move groups on too, a duplicate's as well as a done's.
pub async fn keyed_acks_move_their_groups_on(b: Arc<dyn Broker>) {
    order(&*b, "q", false).await;
    b.publish(
        ["a1", "a2", "a3"]
            .iter()
            .map(|p| member("q", "a", p))
            .collect(),
    )
    .await
    .unwrap();
    let mut d = take(&*b, "q").await.pop().unwrap();
    for (next, key) in [("a2", "k1"), ("a3", "k1")] {
        let claim = KeyClaim {
            key: key.into(),
            holder: d.receipt.clone(),
        };
        let state = b.claim("q", &[claim], LEASE).await.unwrap();
        let s = if state == [ClaimState::AlreadyDone] {
            Settlement::Duplicate { delivery: d }
        } else {
            Settlement::Done {
                delivery: d,
                key: Some((key.into(), Duration::from_secs(60))),
                publishes: vec![],
            }
        };
        settle(&*b, s).await;
        let got = take(&*b, "q").await;
        assert_eq!(payloads(&got), [next]);
        d = got.into_iter().next().unwrap();
    }
    let s = b.queue_stats("q").await.unwrap();
    assert_eq!(
        (s.done, s.duplicates, s.delayed, s.in_flight),
        (1, 1, 0, 1),
        "{s:?}"
    );
}

/// A batch of settlements written again because its reply was lost (the
/// settler writes until the broker answers) moves each group on once: the
/// second write finds its deliveries settled and activates nothing, so the
/// group still has one message out at a time. Both kinds of ack: a keyed
/// done (which Redis applies without its settle script) and a plain one.
pub async fn a_settlement_written_twice_moves_its_group_on_once(b: Arc<dyn Broker>) {
    order(&*b, "q", false).await;
    b.publish(
        ["a1", "a2", "a3", "a4"]
            .iter()
            .map(|p| member("q", "a", p))
            .collect(),
    )
    .await
    .unwrap();
    let a1 = take(&*b, "q").await.pop().unwrap();
    let keyed = keyed_done(&*b, a1, "k1").await;
    settle(&*b, keyed.clone()).await;
    settle(&*b, keyed).await;
    let got = take(&*b, "q").await;
    assert_eq!(payloads(&got), ["a2"], "one message of the group out");
    let plain = done(got.into_iter().next().unwrap());
    settle(&*b, plain.clone()).await;
    settle(&*b, plain).await;
    let got = take(&*b, "q").await;
    assert_eq!(payloads(&got), ["a3"], "one message of the group out");
    assert!(take(&*b, "q").await.is_empty(), "a4 waits behind a3");
}

/// A batch that repeats an ack already written, beside new ones and with
/// one of them twice, moves each group on once: the new acks move theirs,
/// the repeats move nothing.
pub async fn a_batch_mixing_repeated_acks_moves_each_group_on_once(b: Arc<dyn Broker>) {
    order(&*b, "q", false).await;
    let all = ["a1", "a2", "a3", "b1", "b2", "b3", "c1", "c2", "c3"];
    let msgs = all.iter().map(|p| member("q", &p[..1], p)).collect();
    b.publish(msgs).await.unwrap();
    let firsts = take(&*b, "q").await;
    assert_eq!(payloads(&firsts), ["a1", "b1", "c1"]);
    let mut acks = Vec::new();
    for d in firsts {
        let key = format!("k-{}", String::from_utf8_lossy(&d.payload));
        acks.push(keyed_done(&*b, d, &key).await);
    }
    let [a1, b1, c1] = <[Settlement; 3]>::try_from(acks).unwrap();
    settle(&*b, a1.clone()).await;
    let got = take(&*b, "q").await;
    assert_eq!(payloads(&got), ["a2"], "a1's ack moved its group on");
    // a1 again (its reply lost), b1 once, c1 twice in one batch.
    b.settle(&[a1, b1, c1.clone(), c1]).await.unwrap();
    let got = take(&*b, "q").await;
    assert_eq!(
        payloads(&got),
        ["b2", "c2"],
        "one message of each group out"
    );
    assert!(take(&*b, "q").await.is_empty(), "a3, b3 and c3 wait");
}

/// A delayed message that waits behind its group keeps its due time: when
/// its turn comes before that time, it waits for it (and holds its group
/// meanwhile); when its turn comes after it, it is delivered at once.
pub async fn a_delayed_member_waits_for_its_turn_and_its_time(b: Arc<dyn Broker>) {
    order(&*b, "q", false).await;
    let delayed = |payload: &str, delay_ms: u64| {
        let mut m = member("q", "a", payload);
        m.delay = Duration::from_millis(delay_ms);
        m
    };
    b.publish(vec![
        member("q", "a", "a1"),
        delayed("a2", 600),
        delayed("a3", 1),
        member("q", "a", "a4"),
    ])
    .await
    .unwrap();
    let a1 = take(&*b, "q").await.pop().unwrap();
    let published = Instant::now();
    settle(&*b, done(a1)).await;
    assert!(take(&*b, "q").await.is_empty(), "a2 is not due yet");
    let a2 = take_until(&*b, "q", &["a2"]).await.pop().unwrap();
    assert!(published.elapsed() >= Duration::from_millis(500));
    assert!(take(&*b, "q").await.is_empty(), "a3 waits for a2");
    settle(&*b, done(a2)).await;
    // a3 was due long before its turn: it comes at once.
    let a3 = take(&*b, "q").await.pop().expect("a3 follows a2 at once");
    assert_eq!(payloads(std::slice::from_ref(&a3)), ["a3"]);
    settle(&*b, done(a3)).await;
    let a4 = take(&*b, "q").await.pop().expect("a4 follows a3");
    // A retry writes the message again from what was delivered.
    let retry = Settlement::Retry {
        delivery: a4,
        delay: Duration::ZERO,
        error: "again".into(),
        key: None,
    };
    settle(&*b, retry).await;
    let a4 = take_until(&*b, "q", &["a4"]).await.pop().unwrap();
    assert_eq!((a4.attempt, a4.group.as_deref()), (2, Some("a")));
    assert_eq!(a4.last_error.as_deref(), Some("again"));
    settle(&*b, done(a4)).await;
    let s = stats_until(&*b, "q", |s| s.done == 4).await;
    assert_eq!(s.pending(), 0, "{s:?}");
}
