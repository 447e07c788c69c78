//! Flow limits held by the broker: `max_in_flight` caps a queue's leases
//! and `rate` spends a bucket of one second's worth, alike on every
//! backend. (That hosts together stay within them is in `flow.rs`.)

use std::sync::Arc;
use std::time::Duration;

use crate::message::Delivery;
use crate::{Broker, Flow, Rate, Settlement};

use super::{LEASE, SHORT, msg};

fn in_flight(n: u32) -> Flow {
    Flow {
        max_in_flight: Some(n),
        rate: None,
    }
}

fn rate(text: &str) -> Flow {
    Flow {
        max_in_flight: None,
        rate: Some(text.parse::<Rate>().unwrap()),
    }
}

async fn publish(b: &dyn Broker, queue: &str, n: usize) {
    let messages = (0..n).map(|i| msg(queue, &i.to_string())).collect();
    b.publish(messages).await.unwrap();
}

async fn done(b: &dyn Broker, delivery: Delivery) {
    b.settle(&[Settlement::Done {
        delivery,
        key: None,
        publishes: vec![],
    }])
    .await
    .unwrap();
}

/// No more than `max_in_flight` are leased at once, whatever a receive
/// asks for; settling one frees its place; another queue is not limited by
/// this one's leases.
pub async fn max_in_flight_caps_the_leases_of_a_queue(b: Arc<dyn Broker>) {
    publish(&*b, "q", 10).await;
    publish(&*b, "other", 3).await;
    let mut held = b.receive("q", 10, LEASE, in_flight(4)).await.unwrap();
    assert_eq!(held.len(), 4);
    assert!(
        b.receive("q", 10, LEASE, in_flight(4))
            .await
            .unwrap()
            .is_empty()
    );
    // Without the limit the rest are there to lease.
    assert_eq!(
        b.receive("other", 10, LEASE, in_flight(4))
            .await
            .unwrap()
            .len(),
        3
    );
    done(&*b, held.remove(0)).await;
    done(&*b, held.remove(0)).await;
    let more = b.receive("q", 10, LEASE, in_flight(4)).await.unwrap();
    assert_eq!(more.len(), 2, "two places freed by two settlements");
    assert!(
        b.receive("q", 10, LEASE, in_flight(4))
            .await
            .unwrap()
            .is_empty()
    );
}

/// A lease that ran out frees its place: the next receive leases again
/// (the expired message, or another), still no more than the limit.
pub async fn an_expired_lease_frees_its_place(b: Arc<dyn Broker>) {
    publish(&*b, "q", 3).await;
    assert_eq!(
        b.receive("q", 10, SHORT, in_flight(1)).await.unwrap().len(),
        1
    );
    assert!(
        b.receive("q", 10, SHORT, in_flight(1))
            .await
            .unwrap()
            .is_empty()
    );
    tokio::time::sleep(SHORT * 3).await;
    // The same lease as before: on Redis a lease runs out by the longest
    // that a live consumer of the queue leases for.
    let again = b.receive("q", 10, SHORT, in_flight(1)).await.unwrap();
    assert_eq!(again.len(), 1, "one place, freed by the lease running out");
    assert!(
        b.receive("q", 10, SHORT, in_flight(1))
            .await
            .unwrap()
            .is_empty()
    );
}

/// `rate` leases a full bucket (one second's worth) at once, then what
/// refills; the bucket never holds more than one second's worth.
pub async fn rate_spends_a_bucket_of_one_second(b: Arc<dyn Broker>) {
    publish(&*b, "q", 40).await;
    let five = rate("5/s");
    assert_eq!(b.receive("q", 40, LEASE, five).await.unwrap().len(), 5);
    assert!(b.receive("q", 40, LEASE, five).await.unwrap().is_empty());
    tokio::time::sleep(Duration::from_millis(450)).await;
    let refilled = b.receive("q", 40, LEASE, five).await.unwrap().len();
    assert!(
        (1..=3).contains(&refilled),
        "about 2 tokens in 450 ms at 5/s, got {refilled}"
    );
    // Two seconds idle refill the bucket to its size, not beyond.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(b.receive("q", 40, LEASE, five).await.unwrap().len(), 5);
}
