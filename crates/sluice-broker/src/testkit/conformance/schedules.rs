//! Schedule ticks: each fires once, in one step with its message, however
//! many hosts try it, alike on every backend.

use std::collections::BTreeSet;
use std::sync::Arc;

use crate::{Broker, BrokerError, LastTick, Tick};

use super::{msg, receive_n};

fn tick(schedule: &str, at_ms: u64, payload: Option<&str>) -> Tick {
    Tick {
        queue: "cron".into(),
        schedule: schedule.into(),
        at_ms,
        message: payload.map(|p| msg("cron", p)),
    }
}

/// A tick fires once: again, or an earlier one, does not; a skipped tick
/// (no message) moves the schedule on without publishing; schedules are
/// apart; a message for another queue is refused.
pub async fn a_tick_fires_once_with_its_message(b: Arc<dyn Broker>) {
    assert!(b.fire(tick("nightly", 1000, Some("t1000"))).await.unwrap());
    assert!(!b.fire(tick("nightly", 1000, Some("again"))).await.unwrap());
    assert!(!b.fire(tick("nightly", 500, Some("earlier"))).await.unwrap());
    assert!(b.fire(tick("nightly", 2000, None)).await.unwrap());
    assert!(
        !b.fire(tick("nightly", 2000, Some("after skip")))
            .await
            .unwrap()
    );
    assert!(b.fire(tick("hourly", 1500, Some("h1500"))).await.unwrap());
    let got = receive_n(&*b, "cron", 2).await;
    let payloads: BTreeSet<_> = got.iter().map(|d| d.payload.clone()).collect();
    assert_eq!(
        payloads,
        BTreeSet::from([b"t1000".to_vec(), b"h1500".to_vec()])
    );
    assert_eq!(b.queue_stats("cron").await.unwrap().pending(), 2);
    assert_eq!(
        b.last_ticks().await.unwrap(),
        [
            LastTick {
                queue: "cron".into(),
                schedule: "hourly".into(),
                at_ms: 1500
            },
            LastTick {
                queue: "cron".into(),
                schedule: "nightly".into(),
                at_ms: 2000
            },
        ]
    );
    let mut stray = tick("nightly", 3000, Some("x"));
    stray.message = Some(msg("elsewhere", "x"));
    let err = b.fire(stray).await.unwrap_err();
    assert!(
        matches!(&err, BrokerError::Invalid(text) if text.contains("elsewhere")),
        "{err}"
    );
}

/// Three hosts try the same 20 ticks, each in order, at once: every tick
/// is published once.
pub async fn hosts_trying_the_same_ticks_fire_each_once(b: Arc<dyn Broker>) {
    let hosts: Vec<_> = (0..3)
        .map(|_| {
            let b = b.clone();
            tokio::spawn(async move {
                let mut fired = 0;
                for t in 1..=20u64 {
                    let payload = format!("tick {t}");
                    if b.fire(tick("every", t * 1000, Some(&payload)))
                        .await
                        .unwrap()
                    {
                        fired += 1;
                    }
                }
                fired
            })
        })
        .collect();
    let mut fired = 0;
    for h in hosts {
        fired += h.await.unwrap();
    }
    assert_eq!(fired, 20);
    let got = receive_n(&*b, "cron", 20).await;
    let payloads: BTreeSet<_> = got.iter().map(|d| d.payload.clone()).collect();
    let want: BTreeSet<_> = (1..=20).map(|t| format!("tick {t}").into_bytes()).collect();
    assert_eq!(payloads, want);
    assert_eq!(b.queue_stats("cron").await.unwrap().pending(), 20);
}
