//! What is the PostgreSQL broker's own in ordered groups and flow limits,
//! beyond the conformance suite (which runs on it too): a message's group
//! is taken in SQL, so it must come out as `OrderedGroups::group_of` takes
//! it in Rust, for every header and payload; and the limits hold with
//! hosts publishing, receiving and settling at once.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sluice::broker::message::NewMessage;
use sluice::broker::{Flow, GroupSource, OrderedGroups, PgBroker, Queue, Settlement};
use sluice_broker::testkit::PgServer;
use tokio_postgres::NoTls;

const LEASE: Duration = Duration::from_secs(30);

async fn broker(server: &PgServer) -> PgBroker {
    PgBroker::connect(&server.url()).await.unwrap()
}

fn ordering(group: GroupSource) -> OrderedGroups {
    OrderedGroups {
        group,
        block_on_dead: false,
    }
}

/// Payloads that probe how JSON is read: numbers Rust writes its own way,
/// escapes, control characters, sizes, indexes, duplicate names, and
/// payloads that are not UTF-8 JSON at all.
fn tricky_payloads() -> Vec<Vec<u8>> {
    let long = "x".repeat(256);
    let too_long = "é".repeat(129);
    let texts = [
        r#"{"customer": {"id": 7}}"#.to_string(),
        r#"{"customer": {"id": "c-1"}}"#.into(),
        r#"{"customer": {"id": 1.0}}"#.into(),
        r#"{"customer": {"id": 1e20}}"#.into(),
        r#"{"customer": {"id": -0}}"#.into(),
        r#"{"customer": {"id": 1.5e-7}}"#.into(),
        r#"{"customer": {"id": 0.00001}}"#.into(),
        r#"{"customer": {"id": 18446744073709551616}}"#.into(),
        r#"{"customer": {"id": -9223372036854775809}}"#.into(),
        r#"{"customer": {"id": 12.50}}"#.into(),
        r#"{"customer": {"id": 1e400}}"#.into(),
        r#"{"customer": {"id": "caf\u00e9"}}"#.into(),
        r#"{"customer": {"id": "a\nb"}}"#.into(),
        r#"{"customer": {"id": "a\\nb"}}"#.into(),
        r#"{"customer": {"id": "x\u0000"}, "note": "\u0000"}"#.into(),
        r#"{"customer": {"id": 7}, "note": "\u0000"}"#.into(),
        r#"{"customer": {"id": "a\u0085"}}"#.into(),
        r#"{"customer": {"id": ""}}"#.into(),
        format!(r#"{{"customer": {{"id": "{long}"}}}}"#),
        format!(r#"{{"customer": {{"id": "{too_long}"}}}}"#),
        r#"{"customer": {"id": 1}, "customer": {"id": 2}}"#.into(),
        r#"{"customer": {"id": true}}"#.into(),
        r#"{"customer": {"id": null}}"#.into(),
        r#"{"customer": {"id": [1]}}"#.into(),
        r#"{"customer": [{"id": 3}]}"#.into(),
        r#"{"a": ["first", "second"], "a/b": "slash", "~": "tilde"}"#.into(),
        r#"{"customer": {"id": 7}} trailing"#.into(),
        r#"  {"customer": {"id": "spaced"}}  "#.into(),
        r#""a bare string""#.into(),
        "42".into(),
        "not json".into(),
        String::new(),
    ];
    let mut out: Vec<Vec<u8>> = texts.iter().map(|t| t.as_bytes().to_vec()).collect();
    out.push(b"{\"customer\": {\"id\": \"\xff\"}}".to_vec());
    out.extend(numbers().map(|n| format!(r#"{{"customer": {{"id": {n}}}}}"#).into_bytes()));
    out
}

/// Numbers written the ways JSON producers write them, from a fixed
/// pseudo-random sequence: floats of every size, and integers around the
/// edges of i64 and u64.
fn numbers() -> impl Iterator<Item = String> {
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut out = Vec::new();
    while out.len() < 1500 {
        let bits = next();
        let f = f64::from_bits(bits);
        if f.is_finite() {
            out.push(format!("{f:e}"));
            out.push(format!("{f}"));
            out.push(format!(
                "{:.3}",
                f64::from_bits(bits >> 12 | 0x3ff0_0000_0000_0000)
            ));
        }
        out.push((bits as i64).to_string());
        out.push((bits >> (bits % 64)).to_string());
    }
    out.extend(
        [
            "9223372036854775807",
            "-9223372036854775808",
            "18446744073709551615",
        ]
        .map(String::from),
    );
    out.into_iter()
        .filter(|n| serde_json::from_str::<serde_json::Value>(n).is_ok())
}

/// Headers that probe how stored headers are read.
fn tricky_headers() -> Vec<Vec<(String, String)>> {
    let pair = |k: &str, v: &str| (k.to_string(), v.to_string());
    vec![
        vec![],
        vec![pair("g", "a")],
        vec![pair("other", "x"), pair("g", "b\"c\\d/e")],
        vec![pair("g", "first"), pair("g", "second")],
        vec![pair("g", "line\nbreak")],
        vec![pair("g", "nul\0")],
        vec![pair("note", "nul\0"), pair("g", "fine")],
        vec![pair("g", "a\\nb")],
        vec![pair("g", "\u{85}")],
        vec![pair("g", "")],
        vec![pair("G", "case")],
        vec![pair("g", "😀 ünïcode")],
        vec![pair("g", &"y".repeat(257))],
        vec![pair("x", "[\"g\",\"inside\"]"), pair("g", "outside")],
    ]
}

/// Every message of `queue` ordered by `by`, published from Rust with
/// each header set and payload: the group stored is the one
/// `OrderedGroups::group_of` takes.
async fn check_groups(b: &PgBroker, db: &tokio_postgres::Client, queue: &str, by: GroupSource) {
    let ordering = ordering(by);
    b.set_ordering(queue, Some(&ordering)).await.unwrap();
    // A header is read whatever the payload, a pointer whatever the
    // headers: each is tried with a few of the other.
    let (headers, payloads) = match &ordering.group {
        GroupSource::Header(_) => (tricky_headers(), tricky_payloads()[..3].to_vec()),
        GroupSource::Pointer(_) => (tricky_headers()[..3].to_vec(), tricky_payloads()),
    };
    let mut cases = Vec::new();
    for headers in &headers {
        for payload in &payloads {
            let mut m = NewMessage::new(queue, payload.clone());
            m.headers = headers.clone();
            cases.push(m);
        }
    }
    let ids = b.publish(cases.clone()).await.unwrap();
    let rows = db
        .query(
            "SELECT id, grp FROM sluice.messages WHERE queue = $1",
            &[&queue],
        )
        .await
        .unwrap();
    let stored: HashMap<String, Option<String>> =
        rows.iter().map(|r| (r.get(0), r.get(1))).collect();
    for (id, m) in ids.iter().zip(&cases) {
        let want = ordering.group_of(&m.headers, &m.payload);
        assert_eq!(
            stored[id],
            want,
            "{:?} with headers {:?} and payload {:?}",
            ordering.group,
            m.headers,
            String::from_utf8_lossy(&m.payload)
        );
    }
}

#[tokio::test]
async fn groups_taken_in_sql_are_the_ones_rust_takes() {
    let server = PgServer::start();
    let b = broker(&server).await;
    let (db, connection) = tokio_postgres::connect(&server.url(), NoTls).await.unwrap();
    tokio::spawn(connection);
    let sources = [
        GroupSource::Header("g".into()),
        GroupSource::Pointer("/customer/id".into()),
        GroupSource::Pointer("/customer/0/id".into()),
        GroupSource::Pointer("/a/1".into()),
        GroupSource::Pointer("/a/01".into()),
        GroupSource::Pointer("/a~1b".into()),
        GroupSource::Pointer("/~0".into()),
        GroupSource::Pointer(String::new()),
        GroupSource::Pointer("customer".into()),
    ];
    for (i, by) in sources.into_iter().enumerate() {
        check_groups(&b, &db, &format!("q{i}"), by).await;
    }
}

/// A message published from SQL, in the caller's transaction, joins its
/// group like one from a host: it waits behind the group's message, and is
/// leased when that one is done.
#[tokio::test]
async fn a_message_published_from_sql_joins_its_group() {
    let server = PgServer::start();
    let b = broker(&server).await;
    b.set_ordering(
        "q",
        Some(&ordering(GroupSource::Pointer("/customer".into()))),
    )
    .await
    .unwrap();
    let (db, connection) = tokio_postgres::connect(&server.url(), NoTls).await.unwrap();
    tokio::spawn(connection);
    for payload in [r#"{"customer": 7, "n": 1}"#, r#"{"customer": 7, "n": 2}"#] {
        db.execute(
            "SELECT sluice.publish('q', convert_to($1, 'UTF8'))",
            &[&payload],
        )
        .await
        .unwrap();
    }
    let first = b.receive("q", 10, LEASE, Flow::default()).await.unwrap();
    assert_eq!(first.len(), 1, "the second waits for the first");
    assert_eq!(first[0].group.as_deref(), Some("7"));
    assert!(
        b.receive("q", 10, LEASE, Flow::default())
            .await
            .unwrap()
            .is_empty()
    );
    let delivery = first.into_iter().next().unwrap();
    b.settle(&[Settlement::Done {
        delivery,
        key: None,
        publishes: vec![],
    }])
    .await
    .unwrap();
    let second = b.receive("q", 10, LEASE, Flow::default()).await.unwrap();
    assert_eq!(second.len(), 1);
    assert!(String::from_utf8_lossy(&second[0].payload).contains(r#""n": 2"#));
}

/// Two hosts publish to a few groups and receive and settle at once: a
/// group never has two messages leased, and each group's come in the order
/// they were published.
#[tokio::test]
async fn hosts_publishing_and_settling_at_once_keep_each_group_in_order() {
    let server = PgServer::start();
    let hosts = [
        Arc::new(broker(&server).await),
        Arc::new(broker(&server).await),
    ];
    let by_header = ordering(GroupSource::Header("g".into()));
    hosts[0].set_ordering("q", Some(&by_header)).await.unwrap();
    const GROUPS: usize = 4;
    const EACH: usize = 60;
    let leased: Arc<Mutex<HashSet<String>>> = Arc::default();
    let seen: Arc<Mutex<HashMap<String, Vec<usize>>>> = Arc::default();
    let mut tasks = tokio::task::JoinSet::new();
    for (h, host) in hosts.iter().enumerate() {
        let host = host.clone();
        tasks.spawn(async move {
            // Each host publishes its half of every group's sequence, in
            // small batches, interleaved with the other's.
            for n in (h..EACH).step_by(2) {
                let batch = (0..GROUPS)
                    .map(|g| {
                        let mut m = NewMessage::new("q", n.to_string());
                        m.headers = vec![("g".into(), format!("g{g}"))];
                        m
                    })
                    .collect();
                host.publish(batch).await.unwrap();
                tokio::task::yield_now().await;
            }
        });
    }
    for host in &hosts {
        for _ in 0..2 {
            let (host, leased, seen) = (host.clone(), leased.clone(), seen.clone());
            tasks.spawn(async move { work(&host, &leased, &seen, GROUPS * EACH).await });
        }
    }
    let deadline = Duration::from_secs(60);
    tokio::time::timeout(deadline, async {
        while tasks.join_next().await.is_some() {}
    })
    .await
    .expect("every message handled within a minute");
    let seen = seen.lock().unwrap();
    for g in 0..GROUPS {
        let order = &seen[&format!("g{g}")];
        assert_eq!(order.len(), EACH, "g{g}: {order:?}");
        // Publishes interleave between hosts, so each group's order is its
        // publish order, which is not 0..EACH; each host's own are in order.
        for h in 0..2 {
            let mine: Vec<usize> = order.iter().copied().filter(|n| n % 2 == h).collect();
            assert!(mine.windows(2).all(|w| w[0] < w[1]), "g{g}: {order:?}");
        }
    }
}

/// Receive and settle until `total` messages were handled by all workers
/// together; fail on a group leased twice at once.
async fn work(
    host: &PgBroker,
    leased: &Mutex<HashSet<String>>,
    seen: &Mutex<HashMap<String, Vec<usize>>>,
    total: usize,
) {
    loop {
        let done: usize = seen.lock().unwrap().values().map(Vec::len).sum();
        if done >= total {
            return;
        }
        let got = host.receive("q", 3, LEASE, Flow::default()).await.unwrap();
        if got.is_empty() {
            tokio::time::sleep(Duration::from_millis(2)).await;
            continue;
        }
        for d in &got {
            let g = d.group.clone().expect("every message has a group");
            assert!(
                leased.lock().unwrap().insert(g.clone()),
                "{g} leased twice at once"
            );
            let n: usize = String::from_utf8_lossy(&d.payload).parse().unwrap();
            seen.lock().unwrap().entry(g).or_default().push(n);
        }
        // A group's next message is leased only after this commits, so
        // its place is freed before.
        for d in &got {
            leased.lock().unwrap().remove(d.group.as_deref().unwrap());
        }
        let settlements: Vec<Settlement> = got
            .into_iter()
            .map(|delivery| Settlement::Done {
                delivery,
                key: None,
                publishes: vec![],
            })
            .collect();
        host.settle(&settlements).await.unwrap();
    }
}

/// Hosts receiving at once, many times over, never lease more than
/// `max_in_flight` between them.
#[tokio::test]
async fn hosts_receiving_at_once_stay_within_max_in_flight() {
    let server = PgServer::start();
    let hosts = [
        Arc::new(broker(&server).await),
        Arc::new(broker(&server).await),
    ];
    let messages = (0..100)
        .map(|i| NewMessage::new("q", i.to_string()))
        .collect();
    hosts[0].publish(messages).await.unwrap();
    let flow = Flow {
        max_in_flight: Some(7),
        rate: None,
    };
    let mut receives = tokio::task::JoinSet::new();
    for i in 0..16 {
        let host = hosts[i % 2].clone();
        receives.spawn(async move { host.receive("q", 5, LEASE, flow).await.unwrap().len() });
    }
    let leased: usize = receives.join_all().await.into_iter().sum();
    assert_eq!(leased, 7, "exactly the limit, across both hosts");
}
