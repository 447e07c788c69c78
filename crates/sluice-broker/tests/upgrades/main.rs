//! Databases made by earlier versions of sluice, from the schema those
//! versions wrote (kept in `tests/fixtures/`), opened by this one: each is
//! upgraded by the numbered migrations with its messages, idempotency keys
//! and dead letters intact and usable, and ends with the schema a new
//! database gets; a migration that cannot apply leaves the database as it
//! was and says which version failed and why. One module per backend; a
//! new backend with a schema of its own adds one.

use std::time::Duration;

use sluice_broker::{Broker, ClaimState, Flow, KeyClaim, ReplaySelector, Settlement};

mod postgres;
mod sqlite;

/// What every old database in these tests holds, as its version's rows:
/// message `m1` (payload "hi") waiting in queue `q`, key `k-done` done,
/// and dead letter `d1` (payload "old", 3 attempts, reason "gave up").
/// Checks that all three are there and work: the key reads as done, the
/// message leases and acks, and the dead letter lists, replays, leases and
/// acks; then the queue is empty.
async fn old_rows_are_usable(b: &dyn Broker, label: &str) {
    let lease = Duration::from_secs(30);
    let dead = b.dead_letter("q", "d1").await.unwrap();
    let dead = dead.unwrap_or_else(|| panic!("{label}: the dead letter is gone"));
    assert_eq!(
        (dead.attempts, dead.reason.as_str(), &dead.payload[..]),
        (3, "gave up", &b"old"[..]),
        "{label}"
    );
    // Enqueued at 1 ms, as the old file counted (now in microseconds).
    assert_eq!(
        dead.enqueued_at_ms, 1,
        "{label}: the dead letter's enqueue time"
    );
    let claim = KeyClaim {
        key: "k-done".into(),
        holder: "new holder".into(),
    };
    let claimed = b.claim("q", &[claim], lease).await.unwrap();
    assert_eq!(claimed, [ClaimState::AlreadyDone], "{label}: the key");
    ack_the_one_message(b, "m1", b"hi", label).await;
    let replayed = b.replay("q", &ReplaySelector::default()).await.unwrap();
    assert_eq!(replayed, 1, "{label}: the dead letter replays");
    ack_the_one_message(b, "d1", b"old", label).await;
    let left = b.receive("q", 10, lease, Flow::default()).await.unwrap();
    assert!(left.is_empty(), "{label}: {left:?}");
}

/// Lease the one due message of `q`, which must be `id` with `payload`,
/// and ack it.
async fn ack_the_one_message(b: &dyn Broker, id: &str, payload: &[u8], label: &str) {
    let got = b
        .receive("q", 10, Duration::from_secs(30), Flow::default())
        .await
        .unwrap();
    assert_eq!(got.len(), 1, "{label}: {got:?}");
    assert_eq!(
        (got[0].id.as_str(), &got[0].payload[..]),
        (id, payload),
        "{label}"
    );
    assert_eq!(got[0].enqueued_at_us, 1000, "{label}: {id}'s enqueue time");
    b.settle(&[Settlement::Done {
        delivery: got[0].clone(),
        key: None,
        publishes: vec![],
    }])
    .await
    .unwrap();
}

/// The first line where two schemas differ, for an assertion message.
fn first_difference(a: &[String], b: &[String]) -> String {
    let at = a.iter().zip(b).position(|(x, y)| x != y);
    match at {
        Some(i) => format!("\n{}\n  against\n{}", a[i], b[i]),
        None => format!("{} lines against {}", a.len(), b.len()),
    }
}
