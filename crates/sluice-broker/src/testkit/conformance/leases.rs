//! What the `sluice:handler@0.2.0` outcomes and imports need of a broker,
//! alike on every backend: a snooze puts a message back without spending
//! an attempt and counts it, and a lease (with the key it holds) can be
//! kept past its end while its call runs.

use std::sync::Arc;
use std::time::Duration;

use crate::message::Delivery;
use crate::{Broker, ClaimState, Flow, KeyClaim, Lease, ReplaySelector, Settlement};

use super::{LEASE, msg, receive_one};

fn claim(holder: &str) -> KeyClaim {
    KeyClaim {
        key: "k".into(),
        holder: holder.into(),
    }
}

/// A snooze puts a message back after its delay without spending an
/// attempt, counts itself on the delivery and lets the key go; a retry
/// after it keeps the count, and a replayed dead letter starts from none.
pub async fn a_snooze_spends_no_attempt_counts_itself_and_lets_its_key_go(b: Arc<dyn Broker>) {
    b.publish(vec![msg("q", "x")]).await.unwrap();
    let mut d = receive_one(&*b, "q", LEASE).await;
    assert_eq!((d.attempt, d.snoozes), (1, 0));
    for snoozes in 1..=2 {
        let taken = b.claim("q", &[claim(&d.receipt)], LEASE).await.unwrap();
        assert_eq!(taken, [ClaimState::Acquired], "the snooze let its key go");
        b.settle(&[Settlement::Snooze {
            delivery: d,
            delay: Duration::ZERO,
            key: Some("k".into()),
        }])
        .await
        .unwrap();
        d = receive_one(&*b, "q", LEASE).await;
        assert_eq!(
            (d.attempt, d.snoozes),
            (1, snoozes),
            "snoozed {snoozes} time(s)"
        );
    }
    // A snooze waits for its delay, like a retry.
    b.settle(&[Settlement::Snooze {
        delivery: d,
        delay: Duration::from_millis(400),
        key: None,
    }])
    .await
    .unwrap();
    assert!(
        b.receive("q", 10, LEASE, Flow::default())
            .await
            .unwrap()
            .is_empty(),
        "not before its delay"
    );
    tokio::time::sleep(Duration::from_millis(600)).await;
    let d = receive_one(&*b, "q", LEASE).await;
    assert_eq!((d.attempt, d.snoozes), (1, 3));
    // A retry spends an attempt and keeps the snoozes.
    b.settle(&[Settlement::Retry {
        delivery: d,
        delay: Duration::ZERO,
        error: "again".into(),
        key: None,
    }])
    .await
    .unwrap();
    let d = receive_one(&*b, "q", LEASE).await;
    assert_eq!((d.attempt, d.snoozes), (2, 3));
    assert_eq!(
        b.queue_stats("q").await.unwrap().retried,
        1,
        "snoozes are not retries"
    );
    a_replayed_dead_letter_has_no_snoozes(&*b, d).await;
}

/// A lease extended in time, and the key it holds, outlive their first
/// end; one not extended again ends, the message comes back, and the lost
/// lease can no longer be extended.
pub async fn a_lease_and_its_key_are_kept_past_their_end(b: Arc<dyn Broker>) {
    // A queue's consumers share one lease: receive and extend with the same.
    let lease = Duration::from_millis(600);
    b.publish(vec![msg("q", "x")]).await.unwrap();
    let d = receive_one(&*b, "q", lease).await;
    let taken = b.claim("q", &[claim(&d.receipt)], lease).await.unwrap();
    assert_eq!(taken, [ClaimState::Acquired]);
    tokio::time::sleep(Duration::from_millis(400)).await;
    let held = Lease {
        id: d.id.clone(),
        receipt: d.receipt.clone(),
        key: Some("k".into()),
    };
    let kept = b
        .extend("q", std::slice::from_ref(&held), lease)
        .await
        .unwrap();
    assert_eq!(kept, [true]);
    // Past the lease's first end: neither the message nor its key is free.
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(
        b.receive("q", 10, lease, Flow::default())
            .await
            .unwrap()
            .is_empty(),
        "a kept lease is not delivered again"
    );
    assert_eq!(
        b.claim("q", &[claim("someone else")], lease).await.unwrap(),
        [ClaimState::Busy],
        "the key's lease was kept with the message's"
    );
    // Not kept again: it ends, and the message comes back.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let again = receive_one(&*b, "q", lease).await;
    assert_eq!(again.attempt, 2);
    let kept = b.extend("q", &[held], lease).await.unwrap();
    assert_eq!(
        kept,
        [false],
        "a lease lost to another delivery is not kept"
    );
    b.settle(&[Settlement::Done {
        delivery: again,
        key: None,
        publishes: Vec::new(),
    }])
    .await
    .unwrap();
    assert_eq!(b.queue_stats("q").await.unwrap().done, 1);
}

/// Part of [`a_snooze_spends_no_attempt_counts_itself_and_lets_its_key_go`]:
/// `d`, snoozed before, dies and is replayed.
async fn a_replayed_dead_letter_has_no_snoozes(b: &dyn Broker, d: Delivery) {
    // A replayed dead letter starts again from none.
    b.settle(&[Settlement::Dead {
        delivery: d,
        reason: "snoozed too often".into(),
        error: None,
        handler_version: None,
        key: None,
        notice: None,
    }])
    .await
    .unwrap();
    let replayed = b.replay("q", &ReplaySelector::default()).await.unwrap();
    assert_eq!(replayed, 1);
    let d = receive_one(b, "q", LEASE).await;
    assert_eq!((d.attempt, d.snoozes), (1, 0));
}
