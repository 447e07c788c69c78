//! What is the PostgreSQL broker's own in its key-value store and schedule
//! ticks, beyond the conformance suite (which runs on it too): entries
//! shared by two brokers (two hosts), expired rows swept, increments from
//! two hosts at once, and a fire's message rolled back with its tick.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use sluice::broker::message::{Delivery, NewMessage};
use sluice::broker::{BrokerError, Flow, KvStore, PgBroker, Queue, Schedules, Tick};
use sluice_broker::testkit::PgServer;

/// A server and a broker connected to it.
async fn broker() -> (PgServer, Arc<PgBroker>) {
    let server = PgServer::start();
    let broker = PgBroker::connect(&server.url()).await.unwrap();
    (server, Arc::new(broker))
}

async fn get(b: &PgBroker, scope: &str, key: &str) -> Option<Vec<u8>> {
    b.kv_get(scope, key).await.unwrap()
}

#[tokio::test]
async fn kv_ttl_expires_set_replaces_it_and_expired_rows_are_swept() {
    let (server, b) = broker().await;
    let short = Some(Duration::from_millis(200));
    b.kv_set("a", "brief", b"v".to_vec(), short).await.unwrap();
    b.kv_set("a", "kept", b"v".to_vec(), short).await.unwrap();
    b.kv_set("a", "kept", b"w".to_vec(), None).await.unwrap();
    b.kv_set("a", "long", b"v".to_vec(), Some(Duration::from_secs(60)))
        .await
        .unwrap();
    assert_eq!(get(&b, "a", "brief").await.as_deref(), Some(&b"v"[..]));
    tokio::time::sleep(Duration::from_millis(350)).await;
    assert_eq!(get(&b, "a", "brief").await, None, "expired");
    assert_eq!(get(&b, "a", "kept").await.as_deref(), Some(&b"w"[..]));
    assert_eq!(get(&b, "a", "long").await.as_deref(), Some(&b"v"[..]));
    assert!(
        !b.kv_delete("a", "brief").await.unwrap(),
        "an expired key counts as not set"
    );
    assert_eq!(b.kv_increment("a", "brief", 3).await.unwrap(), 3);
    for bad in [Duration::ZERO, Duration::from_secs(3651 * 24 * 3600)] {
        let err = b.kv_set("a", "x", b"v".to_vec(), Some(bad)).await;
        assert!(
            matches!(&err, Err(BrokerError::Invalid(m)) if m.contains("time to live")),
            "{bad:?}: {err:?}"
        );
    }
    assert_eq!(
        get(&b, "a", "x").await,
        None,
        "a refused set writes nothing"
    );

    // Expired rows do not stay: a later set with an expiry takes them.
    for i in 0..5 {
        b.kv_set("s", &format!("e{i}"), b"v".to_vec(), short)
            .await
            .unwrap();
    }
    tokio::time::sleep(Duration::from_millis(350)).await;
    assert_eq!(
        server.psql("SELECT count(*) FROM sluice.kv WHERE scope = 's'"),
        "5"
    );
    b.kv_set("s", "fresh", b"v".to_vec(), Some(Duration::from_secs(60)))
        .await
        .unwrap();
    assert_eq!(
        server.psql("SELECT string_agg(key, ',') FROM sluice.kv WHERE scope = 's'"),
        "fresh"
    );
}

#[tokio::test]
async fn kv_increment_creates_adds_keeps_expiry_and_refuses() {
    let (_server, b) = broker().await;
    assert_eq!(b.kv_increment("a", "n", 5).await.unwrap(), 5, "new key");
    assert_eq!(b.kv_increment("a", "n", -7).await.unwrap(), -2);
    assert_eq!(b.kv_increment("a", "n", 0).await.unwrap(), -2);
    assert_eq!(get(&b, "a", "n").await.as_deref(), Some(&b"-2"[..]));
    b.kv_set("a", "s", b"40".to_vec(), None).await.unwrap();
    assert_eq!(b.kv_increment("a", "s", 2).await.unwrap(), 42);
    b.kv_set("a", "t", b"1".to_vec(), Some(Duration::from_millis(200)))
        .await
        .unwrap();
    assert_eq!(b.kv_increment("a", "t", 1).await.unwrap(), 2);
    tokio::time::sleep(Duration::from_millis(350)).await;
    assert_eq!(get(&b, "a", "t").await, None, "the expiry survived");

    let bad: [&[u8]; 10] = [
        b"abc",
        b"1.5",
        b" 7",
        b"+1",
        b"01",
        b"-0",
        b"",
        b"99999999999999999999",
        b"9223372036854775808",
        b"\xff1",
    ];
    for (i, value) in bad.iter().enumerate() {
        let key = format!("bad{i}");
        b.kv_set("a", &key, value.to_vec(), None).await.unwrap();
        let err = b.kv_increment("a", &key, 1).await.unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "the value of key {key:?} is not a decimal integer in the s64 range, so it cannot be incremented"
            ),
            "{value:?}"
        );
        assert!(matches!(err, BrokerError::Invalid(_)), "{value:?}");
        assert_eq!(get(&b, "a", &key).await.as_deref(), Some(*value));
    }
    b.kv_set("a", "min", i64::MIN.to_string().into_bytes(), None)
        .await
        .unwrap();
    assert_eq!(b.kv_increment("a", "min", 0).await.unwrap(), i64::MIN);
    b.kv_set("a", "max", i64::MAX.to_string().into_bytes(), None)
        .await
        .unwrap();
    let err = b.kv_increment("a", "max", 1).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "incrementing key \"max\" by 1 would overflow a signed 64-bit integer"
    );
    assert_eq!(
        get(&b, "a", "max").await,
        Some(i64::MAX.to_string().into_bytes())
    );
    assert_eq!(b.kv_increment("a", "max", -1).await.unwrap(), i64::MAX - 1);
}

#[tokio::test]
async fn kv_concurrent_increments_from_two_hosts_sum_exactly() {
    const TASKS: i64 = 8;
    const EACH: i64 = 25;
    let (server, first) = broker().await;
    let second = Arc::new(PgBroker::connect(&server.url()).await.unwrap());
    let tasks: Vec<_> = (1..=TASKS)
        .map(|t| {
            let b = if t % 2 == 0 {
                first.clone()
            } else {
                second.clone()
            };
            tokio::spawn(async move {
                let mut seen = Vec::new();
                for _ in 0..EACH {
                    seen.push(b.kv_increment("a", "hits", t).await.unwrap());
                }
                seen
            })
        })
        .collect();
    let mut results = Vec::new();
    for t in tasks {
        results.extend(t.await.unwrap());
    }
    let total = EACH * TASKS * (TASKS + 1) / 2;
    assert_eq!(first.kv_increment("a", "hits", 0).await.unwrap(), total);
    results.sort();
    results.dedup();
    assert_eq!(results.len() as i64, TASKS * EACH, "every total distinct");
    assert_eq!(results.last().copied(), Some(total));
}

fn tick(schedule: &str, at_ms: u64, payload: Option<&str>) -> Tick {
    Tick {
        queue: "cron".into(),
        schedule: schedule.into(),
        at_ms,
        message: payload.map(|p| NewMessage::new("cron", p.as_bytes())),
    }
}

/// Every message of `queue` that is due, leased for a minute.
async fn take_all(b: &PgBroker, queue: &str) -> Vec<Delivery> {
    b.receive(queue, 100, Duration::from_secs(60), Flow::default())
        .await
        .unwrap()
}

fn payloads(deliveries: &[Delivery]) -> BTreeSet<Vec<u8>> {
    deliveries.iter().map(|d| d.payload.clone()).collect()
}

#[tokio::test]
async fn hosts_trying_the_same_ticks_fire_each_once() {
    let (server, first) = broker().await;
    let mut hosts = vec![first.clone()];
    for _ in 0..2 {
        hosts.push(Arc::new(PgBroker::connect(&server.url()).await.unwrap()));
    }
    let tasks: Vec<_> = hosts
        .into_iter()
        .map(|b| {
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
    for t in tasks {
        fired += t.await.unwrap();
    }
    assert_eq!(fired, 20);
    let got = take_all(&first, "cron").await;
    assert_eq!(got.len(), 20, "each tick published once");
    let want: BTreeSet<_> = (1..=20).map(|t| format!("tick {t}").into_bytes()).collect();
    assert_eq!(payloads(&got), want);
}

#[tokio::test]
async fn a_tick_whose_message_fails_is_not_recorded() {
    let (server, b) = broker().await;
    // A trigger makes every enqueue fail: the tick must not be recorded
    // without its message.
    server.psql(
        "CREATE FUNCTION sluice.refuse() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN RAISE EXCEPTION 'no messages today'; END $$;
         CREATE TRIGGER refuse BEFORE INSERT ON sluice.messages
         FOR EACH ROW EXECUTE FUNCTION sluice.refuse();",
    );
    let err = b.fire(tick("nightly", 1000, Some("t"))).await.unwrap_err();
    assert!(matches!(err, BrokerError::Refused { .. }), "{err}");
    assert!(b.last_ticks().await.unwrap().is_empty(), "not recorded");
    server.psql("DROP TRIGGER refuse ON sluice.messages");
    assert!(b.fire(tick("nightly", 1000, Some("t"))).await.unwrap());
    assert_eq!(
        payloads(&take_all(&b, "cron").await),
        BTreeSet::from([b"t".to_vec()])
    );
}
