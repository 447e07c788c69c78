//! The topics part of the conformance suite: every backend stores bindings
//! and counts unmatched publishes the same way, and routes a topic publish to
//! the same queues. Run against SQLite, a single Redis and a Redis Cluster.

use std::sync::Arc;

use crate::client::{Client, PublishError};
use crate::topic::{Binding, CLI_ORIGIN, ROUTE_HEADER, TOPIC_HEADER};
use crate::{Broker, Flow};

use super::receive_n;

fn binding(topic: &str, queue: &str, pattern: Option<&str>, origin: &str) -> Binding {
    Binding {
        topic: topic.into(),
        queue: queue.into(),
        pattern: pattern.map(str::to_string),
        origin: origin.into(),
    }
}

fn shapes(bindings: &[Binding]) -> Vec<(String, Option<String>, String)> {
    let mut out: Vec<_> = bindings
        .iter()
        .map(|b| (b.queue.clone(), b.pattern.clone(), b.origin.clone()))
        .collect();
    out.sort();
    out
}

/// Bindings are stored once per topic, queue and pattern (binding again
/// updates the origin), listed by topic, and removed one pattern or all of a
/// queue's at once; `topic_stats` names every topic.
pub async fn bindings_are_stored_listed_and_removed(b: Arc<dyn Broker>) {
    assert!(b.bindings("orders").await.unwrap().is_empty());
    b.bind(&[
        binding("orders", "audit", Some("orders.#"), CLI_ORIGIN),
        binding("orders", "eu", Some("orders.eu.*"), CLI_ORIGIN),
        binding("orders", "parked", None, CLI_ORIGIN),
        binding("refunds", "audit", Some("#"), CLI_ORIGIN),
    ])
    .await
    .unwrap();
    // Binding again updates the origin instead of adding a second binding.
    b.bind(&[binding("orders", "eu", Some("orders.eu.*"), "handler:eu")])
        .await
        .unwrap();
    assert_eq!(
        shapes(&b.bindings("orders").await.unwrap()),
        [
            ("audit".into(), Some("orders.#".into()), "cli".into()),
            ("eu".into(), Some("orders.eu.*".into()), "handler:eu".into()),
            ("parked".into(), None, "cli".into()),
        ]
    );
    assert_eq!(b.unbind("orders", "parked", None, false).await.unwrap(), 1);
    assert_eq!(b.unbind("orders", "parked", None, false).await.unwrap(), 0);
    assert_eq!(
        b.unbind("orders", "audit", Some("nope"), false)
            .await
            .unwrap(),
        0
    );
    b.bind(&[binding("orders", "audit", Some("x.*"), CLI_ORIGIN)])
        .await
        .unwrap();
    assert_eq!(b.unbind("orders", "audit", None, true).await.unwrap(), 2);
    assert_eq!(
        shapes(&b.bindings("orders").await.unwrap()),
        [("eu".into(), Some("orders.eu.*".into()), "handler:eu".into())]
    );
    let stats = b.topic_stats().await.unwrap();
    let names: Vec<&str> = stats.iter().map(|t| t.topic.as_str()).collect();
    assert_eq!(names, ["orders", "refunds"]);
}

/// Replacing one origin's bindings (a sidecar's) swaps its whole set and
/// leaves those of every other origin; the same set again changes nothing.
pub async fn replacing_an_origins_bindings_leaves_the_others(b: Arc<dyn Broker>) {
    let mine = "handler:audit";
    b.bind(&[
        binding("orders", "audit", Some("orders.#"), mine),
        binding("refunds", "audit", Some("#"), mine),
        binding("orders", "audit", Some("manual.*"), CLI_ORIGIN),
        binding("orders", "other", Some("#"), "handler:other"),
    ])
    .await
    .unwrap();
    // The sidecar now declares one binding, on a third topic.
    b.replace_bindings(mine, &[binding("stock", "audit", None, mine)])
        .await
        .unwrap();
    assert_eq!(
        shapes(&b.bindings("orders").await.unwrap()),
        [
            ("audit".into(), Some("manual.*".into()), "cli".into()),
            ("other".into(), Some("#".into()), "handler:other".into()),
        ]
    );
    assert!(b.bindings("refunds").await.unwrap().is_empty());
    assert_eq!(
        shapes(&b.bindings("stock").await.unwrap()),
        [("audit".into(), None, mine.into())]
    );
    // Replacing with the same set again changes nothing.
    b.replace_bindings(mine, &[binding("stock", "audit", None, mine)])
        .await
        .unwrap();
    assert_eq!(b.bindings("stock").await.unwrap().len(), 1);
}

/// A topic publish goes once to each queue whose pattern matches its route,
/// with the topic and route in headers; an unmatched one goes to the
/// catch-all, or is refused and counted without one; bad names are refused
/// before the broker.
pub async fn topic_publish_copies_to_matching_queues(b: Arc<dyn Broker>) {
    b.bind(&[
        binding("orders", "audit", Some("orders.#"), CLI_ORIGIN),
        binding("orders", "eu", Some("orders.eu.*"), CLI_ORIGIN),
        binding("orders", "parked", None, CLI_ORIGIN),
    ])
    .await
    .unwrap();
    let client = Client::from_broker(b.clone());
    let copies = client
        .publish_to_topic("orders", "orders.eu.created", b"e1")
        .await
        .unwrap();
    let mut queues: Vec<&str> = copies.iter().map(|c| c.queue.as_str()).collect();
    queues.sort();
    assert_eq!(
        queues,
        ["audit", "eu"],
        "each matching queue once, not the catch-all"
    );
    let d = &receive_n(&*b, "eu", 1).await[0];
    assert_eq!(d.payload, b"e1");
    assert_eq!(d.header(TOPIC_HEADER), Some("orders"));
    assert_eq!(d.header(ROUTE_HEADER), Some("orders.eu.created"));
    assert_eq!(receive_n(&*b, "audit", 1).await[0].payload, b"e1");

    // No pattern matches: the catch-all takes it, and it is counted.
    let copies = client
        .publish_to_topic("orders", "refunds.x", b"r1")
        .await
        .unwrap();
    assert_eq!(copies.len(), 1);
    assert_eq!(receive_n(&*b, "parked", 1).await[0].payload, b"r1");
    unmatched_and_bad_topic_publishes_are_refused(&*b, &client).await;
}

/// The rest of [`topic_publish_copies_to_matching_queues`], on a broker
/// whose topic `orders` has a catch-all `parked` and one unmatched publish.
async fn unmatched_and_bad_topic_publishes_are_refused(b: &dyn Broker, client: &Client) {
    // Without a catch-all it is refused, counted, and nothing is enqueued.
    b.unbind("orders", "parked", None, false).await.unwrap();
    let err = client
        .publish_to_topic("orders", "refunds.y", b"r2")
        .await
        .unwrap_err();
    assert!(
        matches!(&err, PublishError::Refused(why) if why.contains("no queue is bound to topic \"orders\"")),
        "{err}"
    );
    let err = client
        .publish_to_topic("nobody", "a.b", b"r3")
        .await
        .unwrap_err();
    assert!(matches!(err, PublishError::Refused(_)), "{err}");
    let stats = b.topic_stats().await.unwrap();
    let count = |t: &str| stats.iter().find(|s| s.topic == t).map(|s| s.unmatched);
    assert_eq!((count("orders"), count("nobody")), (Some(2), Some(1)));
    assert!(
        b.receive("parked", 10, super::LEASE, Flow::default())
            .await
            .unwrap()
            .is_empty()
    );
    // Bad names never reach the broker.
    for (topic, route) in [("a/b", "x"), ("orders", "a..b"), ("orders", "a.*")] {
        let err = client
            .publish_to_topic(topic, route, b"x")
            .await
            .unwrap_err();
        assert!(matches!(err, PublishError::Refused(_)), "{topic} {route}");
    }
}
