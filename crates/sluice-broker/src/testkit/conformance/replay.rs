//! The replay part of the conformance suite: which dead letters a
//! `ReplaySelector` takes (a cut-off on the time of death, a limit, ids,
//! redrives left, and every combination), what a replayed message looks
//! like, how the redrive count travels with a message, and that concurrent
//! replays never move a dead letter twice. Run against the same backends as
//! the rest of the suite (SQLite, a single Redis, a Redis Cluster).

use std::sync::Arc;
use std::time::Duration;

use crate::message::{Delivery, NewMessage};
use crate::{Broker, Flow, ReplaySelector, Settlement};

use super::{LEASE, msg, receive_n, receive_one};

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

fn retry(delivery: Delivery) -> Settlement {
    Settlement::Retry {
        delivery,
        delay: Duration::ZERO,
        error: "again".into(),
        key: None,
    }
}

/// Publish one message per payload and kill each in turn, in that order and
/// a few ms apart, so that their times of death differ. Returns their ids.
async fn kill(b: &dyn Broker, queue: &str, payloads: &[&str]) -> Vec<String> {
    let mut ids = Vec::new();
    for p in payloads {
        b.publish(vec![msg(queue, p)]).await.unwrap();
        let d = receive_one(b, queue, LEASE).await;
        ids.push(d.id.clone());
        b.settle(&[dead(d)]).await.unwrap();
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    ids
}

/// The ids of a queue's dead letters, oldest first, and their times of death.
async fn dead_ids(b: &dyn Broker, queue: &str) -> (Vec<String>, Vec<u64>) {
    b.dead_letters(queue, 10_000)
        .await
        .unwrap()
        .into_iter()
        .map(|d| (d.id, d.died_at_ms))
        .unzip()
}

fn ids_of(deliveries: &[Delivery]) -> Vec<String> {
    deliveries.iter().map(|d| d.id.clone()).collect()
}

fn died_by(ms: u64) -> ReplaySelector {
    ReplaySelector {
        died_before_ms: Some(ms),
        ..ReplaySelector::default()
    }
}

/// A cut-off on the time of death takes the dead letters that died by it,
/// its own millisecond included, and no later ones.
pub async fn replay_cut_off_takes_only_those_dead_long_enough(b: Arc<dyn Broker>) {
    let ids = kill(&*b, "q", &["a", "b", "c"]).await;
    let (listed, died) = dead_ids(&*b, "q").await;
    assert_eq!(listed, ids);
    assert!(died[0] < died[1] && died[1] < died[2], "{died:?}");
    assert_eq!(b.replay("q", &died_by(died[0] - 1)).await.unwrap(), 0);
    assert_eq!(
        b.replay("q", &died_by(died[1])).await.unwrap(),
        2,
        "the cut-off includes its own millisecond"
    );
    let back = receive_n(&*b, "q", 2).await;
    assert_eq!(ids_of(&back), ids[..2]);
    assert_eq!(dead_ids(&*b, "q").await.0, ids[2..]);
}

/// A limit takes that many dead letters, those that died first.
pub async fn replay_limit_takes_those_that_died_first(b: Arc<dyn Broker>) {
    let ids = kill(&*b, "q", &["a", "b", "c", "d"]).await;
    let limit = |n| ReplaySelector {
        limit: Some(n),
        ..ReplaySelector::default()
    };
    assert_eq!(b.replay("q", &limit(2)).await.unwrap(), 2);
    assert_eq!(ids_of(&receive_n(&*b, "q", 2).await), ids[..2]);
    assert_eq!(dead_ids(&*b, "q").await.0, ids[2..]);
    assert_eq!(b.replay("q", &limit(10)).await.unwrap(), 2, "all there are");
    assert!(dead_ids(&*b, "q").await.0.is_empty());
}

/// Ids combine with a cut-off and a limit: those given that pass both, the
/// first to die first whatever the order given; an unknown id, or one of
/// another queue, takes nothing.
pub async fn replay_ids_combine_with_cut_off_and_limit(b: Arc<dyn Broker>) {
    let ids = kill(&*b, "q", &["a", "b", "c", "d"]).await;
    let (_, died) = dead_ids(&*b, "q").await;
    // Given ids that died by the cut-off; an unknown id takes nothing.
    let by_id_and_time = ReplaySelector {
        ids: vec![ids[0].clone(), ids[2].clone(), "nope".into()],
        died_before_ms: Some(died[1]),
        ..ReplaySelector::default()
    };
    assert_eq!(b.replay("q", &by_id_and_time).await.unwrap(), 1);
    // Given ids, at most two, those that died first whatever the order given.
    let by_id_and_limit = ReplaySelector {
        ids: vec![ids[3].clone(), ids[2].clone(), ids[1].clone()],
        limit: Some(2),
        ..ReplaySelector::default()
    };
    assert_eq!(b.replay("q", &by_id_and_limit).await.unwrap(), 2);
    assert_eq!(ids_of(&receive_n(&*b, "q", 3).await), ids[..3]);
    assert_eq!(dead_ids(&*b, "q").await.0, ids[3..]);
    let elsewhere = ReplaySelector {
        ids: vec![ids[3].clone()],
        ..ReplaySelector::default()
    };
    assert_eq!(
        b.replay("other", &elsewhere).await.unwrap(),
        0,
        "never another queue's dead letters"
    );
}

/// Receive the one message of `queue`, which must be `id` on its first
/// attempt; fail it once, then kill it on its second attempt.
async fn fail_twice(b: &dyn Broker, queue: &str, id: &str) {
    let d = receive_one(b, queue, LEASE).await;
    assert_eq!((d.id.as_str(), d.attempt), (id, 1), "attempts start again");
    b.settle(&[retry(d)]).await.unwrap();
    let d = receive_one(b, queue, LEASE).await;
    assert_eq!(d.attempt, 2);
    b.settle(&[dead(d)]).await.unwrap();
}

/// A redrive counts itself on the message through retries and deaths, and
/// stops at `max_redrives`; a replay by hand still takes it and is not
/// counted. The rest of the message stays as it was sent.
pub async fn redrives_stop_at_max_and_manual_replay_keeps_the_count(b: Arc<dyn Broker>) {
    let mut m = msg("q", "x");
    m.key = Some("order-1".into());
    m.headers = vec![("h".into(), "v".into())];
    let id = b.publish(vec![m]).await.unwrap().remove(0);
    let first = receive_one(&*b, "q", LEASE).await;
    let enqueued_at_ms = first.enqueued_at_ms();
    b.settle(&[dead(first)]).await.unwrap();
    let redrive = ReplaySelector {
        max_redrives: Some(2),
        redrive: true,
        ..ReplaySelector::default()
    };
    for round in 1..=2u32 {
        assert_eq!(b.replay("q", &redrive).await.unwrap(), 1, "round {round}");
        // Through a retry and a second death the count stays with it.
        fail_twice(&*b, "q", &id).await;
        let d = b.dead_letter("q", &id).await.unwrap().unwrap();
        assert_eq!((d.redrives, d.attempts), (round, 2), "round {round}");
        // The rest of the message is as it was sent.
        assert_eq!(
            (d.key.as_str(), d.payload.as_slice()),
            ("order-1", &b"x"[..])
        );
        assert_eq!(d.headers, vec![("h".to_string(), "v".to_string())]);
        assert_eq!(d.enqueued_at_ms, enqueued_at_ms);
    }
    assert_eq!(
        b.replay("q", &redrive).await.unwrap(),
        0,
        "no redrives left"
    );
    assert_eq!(b.dead_letter("q", &id).await.unwrap().unwrap().redrives, 2);

    // A replay by hand still takes it, and is not counted.
    assert_eq!(b.replay("q", &ReplaySelector::default()).await.unwrap(), 1);
    let d = receive_one(&*b, "q", LEASE).await;
    assert_eq!(d.attempt, 1);
    b.settle(&[dead(d)]).await.unwrap();
    assert_eq!(b.dead_letter("q", &id).await.unwrap().unwrap().redrives, 2);
}

/// `max_redrives` combines with a cut-off and a limit: a dead letter is
/// taken only when it passes all three.
pub async fn max_redrives_combines_with_cut_off_and_limit(b: Arc<dyn Broker>) {
    let ids = kill(&*b, "q", &["a", "b", "c"]).await;
    // Redrive a once, and let it die again: a has 1 redrive and died last.
    let a_only = ReplaySelector {
        ids: vec![ids[0].clone()],
        redrive: true,
        ..ReplaySelector::default()
    };
    assert_eq!(b.replay("q", &a_only).await.unwrap(), 1);
    let a = receive_one(&*b, "q", LEASE).await;
    b.settle(&[dead(a)]).await.unwrap();
    let (order, died) = dead_ids(&*b, "q").await;
    assert_eq!(order, [ids[1].clone(), ids[2].clone(), ids[0].clone()]);

    let fewer_than_one = |died_before_ms, limit| ReplaySelector {
        max_redrives: Some(1),
        died_before_ms,
        limit,
        ..ReplaySelector::default()
    };
    // The oldest with no redrive yet.
    assert_eq!(
        b.replay("q", &fewer_than_one(None, Some(1))).await.unwrap(),
        1
    );
    assert_eq!(ids_of(&receive_n(&*b, "q", 1).await), [ids[1].clone()]);
    // A cut-off that a passes, but a has a redrive: only c.
    assert_eq!(
        b.replay("q", &fewer_than_one(Some(died[2]), None))
            .await
            .unwrap(),
        1
    );
    assert_eq!(ids_of(&receive_n(&*b, "q", 1).await), [ids[2].clone()]);
    let fewer_than_two = |died_before_ms| ReplaySelector {
        max_redrives: Some(2),
        died_before_ms: Some(died_before_ms),
        ..ReplaySelector::default()
    };
    assert_eq!(
        b.replay("q", &fewer_than_two(died[2] - 1)).await.unwrap(),
        0
    );
    assert_eq!(b.replay("q", &fewer_than_two(died[2])).await.unwrap(), 1);
    assert_eq!(ids_of(&receive_n(&*b, "q", 1).await), [ids[0].clone()]);
}

/// Kill `n` messages of `queue` in batches; returns their ids in order of death.
async fn kill_many(b: &dyn Broker, queue: &str, n: usize) -> Vec<String> {
    let messages: Vec<NewMessage> = (0..n).map(|i| msg(queue, &i.to_string())).collect();
    b.publish(messages).await.unwrap();
    let mut ids = Vec::new();
    while ids.len() < n {
        let got = b.receive(queue, 500, LEASE, Flow::default()).await.unwrap();
        ids.extend(ids_of(&got));
        b.settle(&got.into_iter().map(dead).collect::<Vec<_>>())
            .await
            .unwrap();
    }
    ids
}

/// Replays by id and by limit reach across thousands of dead letters
/// (more than one Redis script looks at in one go).
pub async fn replay_walks_a_long_dead_letter_stream(b: Arc<dyn Broker>) {
    // Longer than one Redis script looks at in one go (1000).
    let ids = kill_many(&*b, "q", 2500).await;
    assert_eq!(dead_ids(&*b, "q").await.0, ids);
    let scattered = ReplaySelector {
        ids: vec![ids[2400].clone(), ids[5].clone(), ids[1500].clone()],
        ..ReplaySelector::default()
    };
    assert_eq!(b.replay("q", &scattered).await.unwrap(), 3);
    let across = ReplaySelector {
        limit: Some(1200),
        ..ReplaySelector::default()
    };
    assert_eq!(b.replay("q", &across).await.unwrap(), 1200);
    let mut back = Vec::new();
    while back.len() < 1203 {
        let got = b.receive("q", 1000, LEASE, Flow::default()).await.unwrap();
        assert!(!got.is_empty(), "{} of 1203 came back", back.len());
        back.extend(ids_of(&got));
    }
    let mut expected: Vec<String> = vec![ids[5].clone(), ids[1500].clone(), ids[2400].clone()];
    expected.extend(
        ids.iter()
            .enumerate()
            .filter(|(i, _)| *i != 5)
            .take(1200)
            .map(|(_, id)| id.clone()),
    );
    back.sort();
    expected.sort();
    assert_eq!(back, expected, "the scattered three, then the oldest 1200");
}

/// Redrives running at once move each dead letter exactly once.
pub async fn concurrent_redrives_move_each_dead_letter_once(b: Arc<dyn Broker>) {
    let ids = kill_many(&*b, "q", 60).await;
    let mut replays = tokio::task::JoinSet::new();
    for limit in [None, Some(7), Some(25), None] {
        let b = b.clone();
        replays.spawn(async move {
            let redrive = ReplaySelector {
                max_redrives: Some(1),
                limit,
                redrive: true,
                ..ReplaySelector::default()
            };
            b.replay("q", &redrive).await.unwrap()
        });
    }
    let moved: u64 = replays.join_all().await.into_iter().sum();
    assert_eq!(moved, 60, "each dead letter moved by exactly one replay");
    let mut back = ids_of(&receive_n(&*b, "q", 60).await);
    back.sort();
    let mut want = ids.clone();
    want.sort();
    assert_eq!(back, want);
    assert!(dead_ids(&*b, "q").await.0.is_empty());
}
