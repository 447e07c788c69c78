//! The PostgreSQL broker's own tests, on servers of their own
//! (`sluice_broker::testkit::PgServer`): the harness itself, the schema and
//! its migrations, connection errors and TLS, the queue role's SQL, and
//! enqueue inside the caller's transactions. (Its semantics are the
//! conformance suite's; many hosts and a restarted server: `scale`.)

use std::time::{Duration, Instant};

use sluice::broker::message::NewMessage;
use sluice::broker::{ClaimState, Flow, KeyClaim, Lease, PgBroker, Queue, Settlement};
use sluice_broker::testkit::PgServer;
use sluice_broker::testkit::codec::lease_expired;
use tokio_postgres::{Client, NoTls};

use crate::support::Env;

/// How long a test waits to connect; a server that is not there must fail
/// the test, not hang it.
const CONNECT_DEADLINE: Duration = Duration::from_secs(30);

/// A client whose connection runs on its own task until the server ends it.
async fn connect(url: &str) -> Client {
    let (client, connection) =
        tokio::time::timeout(CONNECT_DEADLINE, tokio_postgres::connect(url, NoTls))
            .await
            .unwrap_or_else(|_| panic!("connecting to {url} took over {CONNECT_DEADLINE:?}"))
            .unwrap_or_else(|e| panic!("connecting to {url}: {e}"));
    tokio::spawn(async move {
        // Ends with an error when the server goes away, which some tests want.
        let _ = connection.await;
    });
    client
}

/// The real and effective uids of a process, from /proc.
fn uids(pid: u32) -> Vec<u32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("Uid:")).unwrap();
    line["Uid:".len()..]
        .split_whitespace()
        .map(|uid| uid.parse().unwrap())
        .collect()
}

#[tokio::test]
async fn a_test_server_starts_restarts_and_keeps_its_data() {
    let started = Instant::now();
    let server = PgServer::start();
    eprintln!("PostgreSQL started in {:?}", started.elapsed());
    let port = server.port();
    assert_eq!(
        server.url(),
        format!("postgres://sluice@127.0.0.1:{port}/sluice")
    );
    assert_eq!(
        server.admin_url(),
        format!("postgres://postgres@127.0.0.1:{port}/postgres")
    );
    // PostgreSQL will not run as root; the harness must have seen to that
    // even when the tests themselves run as root.
    let pid = server.pid();
    assert!(
        uids(pid).iter().all(|&uid| uid != 0),
        "postmaster {pid} runs as root: {:?}",
        uids(pid)
    );

    let client = connect(&server.url()).await;
    client
        .batch_execute(
            "CREATE TABLE kept (id int PRIMARY KEY, note text NOT NULL);
             INSERT INTO kept VALUES (1, 'before the restart');",
        )
        .await
        .unwrap();
    assert_eq!(
        server.psql("SELECT tableowner FROM pg_tables WHERE tablename = 'kept'"),
        "sluice"
    );

    let restarting = Instant::now();
    server.restart();
    eprintln!("PostgreSQL restarted in {:?}", restarting.elapsed());
    assert_eq!(server.port(), port);
    assert!(
        client.simple_query("SELECT 1").await.is_err(),
        "a fast restart ends open sessions"
    );
    let client = connect(&server.url()).await;
    let row = client
        .query_one("SELECT note FROM kept WHERE id = 1", &[])
        .await
        .unwrap();
    assert_eq!(row.get::<_, String>(0), "before the restart");

    server.stop();
    assert!(
        tokio_postgres::connect(&server.url(), NoTls).await.is_err(),
        "a stopped server must not answer"
    );
    server.start_again();
    assert_eq!(
        server.psql("SELECT id, note FROM kept"),
        "1|before the restart"
    );
    let admin = connect(&server.admin_url()).await;
    let row = admin
        .query_one(
            "SELECT rolsuper FROM pg_roles WHERE rolname = 'sluice'",
            &[],
        )
        .await
        .unwrap();
    assert!(!row.get::<_, bool>(0), "the broker's role is no superuser");
}

/// The broker of `server`, with its schema made.
async fn broker(server: &PgServer) -> PgBroker {
    PgBroker::connect(&server.url()).await.unwrap()
}

fn lease() -> Duration {
    Duration::from_secs(30)
}

#[tokio::test]
async fn hosts_starting_at_once_make_the_schema_once_and_a_newer_schema_is_refused() {
    let server = PgServer::start();
    let url = server.url();
    let (a, b, c) = tokio::join!(
        PgBroker::connect(&url),
        PgBroker::connect(&url),
        PgBroker::connect(&url)
    );
    for made in [a, b, c] {
        assert_eq!(made.unwrap().schema(), "sluice");
    }
    assert_eq!(
        server.psql("SELECT version FROM sluice.schema_version"),
        "9"
    );
    // A second start finds it made and changes nothing.
    broker(&server).await;
    assert_eq!(
        server.psql("SELECT count(*) FROM sluice.schema_version"),
        "1"
    );
    server.psql("UPDATE sluice.schema_version SET version = 99");
    let err = PgBroker::connect(&url).await.err().unwrap().to_string();
    assert!(
        err.contains("newer sluice") && err.contains("99") && err.contains("\"sluice\""),
        "{err}"
    );
    // Another schema in the same database is its own broker.
    let other = PgBroker::connect(&format!("{url}?schema=jobs"))
        .await
        .unwrap();
    assert_eq!(other.schema(), "jobs");
    assert_eq!(server.psql("SELECT version FROM jobs.schema_version"), "9");
}

/// Version 1's definition of function `name`, from the file `sql` that
/// made it, as a CREATE OR REPLACE.
fn v1_function(sql: &str, name: &str) -> String {
    let start = sql
        .find(&format!("CREATE FUNCTION {name}("))
        .unwrap_or_else(|| panic!("no function {name} in version 1's SQL"));
    let end = start + sql[start..].find("\n$$;").unwrap() + "\n$$;".len();
    sql[start..end].replacen("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION", 1)
}

/// Turn the schema of `server` back into version 1's: what versions 2, 3,
/// 5, 6, 7 and 8 (`queue_v2.sql`, `queue_v3.sql`, `queue_v5.sql`,
/// `queue_v6.sql`, `queue_v7.sql`, `queue_v8.sql`: the files before the
/// numbered migrations, kept in crates/sluice-broker/tests/fixtures/postgres)
/// and 9 (`migrations/0009_microseconds.sql`) changed, undone with version 1's own
/// SQL, done as the broker's role, which owns the schema.
/// (Version 4's settings go with the functions made again.)
fn back_to_version_1(server: &PgServer) {
    let queue = include_str!("../../crates/sluice-broker/tests/fixtures/postgres/queue.sql");
    let groups = include_str!("../../crates/sluice-broker/tests/fixtures/postgres/groups.sql");
    let mut sql = String::from(
        "SET ROLE sluice; SET search_path = sluice;
         ALTER TABLE messages ADD CONSTRAINT messages_id_key UNIQUE (id);
         DROP FUNCTION settle_each, settle_apply, receipt_rows, receipt_seq, new_receipt,
                       lease_due;
         DROP INDEX messages_leased;
         DROP FUNCTION settle_once;
         DROP TABLE settled;
         DROP FUNCTION publish_refuse, publish_quote, publish_check_queue, publish_headers,
                       publish_check_key, publish_check_delay, publish_max_size;
         DROP FUNCTION now_us;
         UPDATE messages SET enqueued_at = enqueued_at / 1000;
         UPDATE dead SET enqueued_at = enqueued_at / 1000;
         UPDATE schema_version SET version = 1;",
    );
    for (file, name) in [
        (queue, "claim"),
        (queue, "settle"),
        (queue, "extend"),
        (queue, "lease_limited"),
        (queue, "publish"),
        (queue, "enqueue"),
        (groups, "rejoin"),
        (groups, "enqueue_grouped"),
    ] {
        sql.push_str(&v1_function(file, name));
        sql.push(';');
    }
    server.psql(&sql);
}

/// A database that a version 1 sluice made, with deliveries it leased, is
/// upgraded in place by the next host that connects; those deliveries
/// (their receipts do not name their rows) still extend and settle, fenced
/// as before, and new ones lease and settle.
#[tokio::test]
async fn a_version_1_schema_is_upgraded_in_place_and_its_leases_still_settle() {
    let server = PgServer::start();
    let b = broker(&server).await;
    b.publish(vec![
        NewMessage::new("q", b"a".to_vec()),
        NewMessage::new("q", b"b".to_vec()),
    ])
    .await
    .unwrap();
    back_to_version_1(&server);
    // Leased as version 1 leases, before the upgrade.
    server.psql(
        "UPDATE sluice.messages SET leased = true, attempt = attempt + 1,
                visible_at = sluice.now_ms() + 30000,
                receipt = substr(md5(random()::text || seq::text), 1, 16)",
    );
    let rows = server.psql("SELECT id, receipt FROM sluice.messages ORDER BY seq");
    let old: Vec<sluice::broker::message::Delivery> = rows
        .lines()
        .map(|row| {
            let (id, receipt) = row.split_once('|').unwrap();
            let mut d = crate::support::delivery("q", 0, "");
            (d.id, d.key, d.receipt) = (id.into(), id.into(), receipt.into());
            d
        })
        .collect();
    let b = broker(&server).await;
    assert_eq!(
        server.psql("SELECT version FROM sluice.schema_version"),
        "9"
    );
    // Version 1's functions, made again by the upgrade, plan each call for
    // its batch too.
    assert_eq!(batch_functions_planned_per_call(&server), BATCH_FUNCTIONS);
    assert_eq!(
        server.psql(
            "SELECT count(*) FROM pg_indexes WHERE schemaname = 'sluice'
             AND tablename = 'messages' AND indexdef LIKE '%(id)%'"
        ),
        "0",
        "messages.id has no index of its own"
    );
    let lease_of = |d: &sluice::broker::message::Delivery, receipt: &str| Lease {
        id: d.id.clone(),
        receipt: receipt.into(),
        key: None,
    };
    let held = b
        .extend(
            "q",
            &[lease_of(&old[0], &old[0].receipt), lease_of(&old[0], "1.x")],
            lease(),
        )
        .await
        .unwrap();
    assert_eq!(held, [true, false]);
    let done = |d: &sluice::broker::message::Delivery| Settlement::Done {
        delivery: d.clone(),
        key: Some((d.key.clone(), Duration::from_secs(60))),
        publishes: Vec::new(),
    };
    let mut forged = old[1].clone();
    forged.receipt = "not-its-receipt".into();
    b.settle(&[done(&old[0]), done(&forged)]).await.unwrap();
    assert_eq!(server.psql("SELECT done, lost FROM sluice.counters"), "1|1");
    b.settle(&[done(&old[1])]).await.unwrap();
    b.publish(vec![NewMessage::new("q", b"c".to_vec())])
        .await
        .unwrap();
    let new = b.receive("q", 10, lease(), Flow::default()).await.unwrap();
    assert_eq!(new.len(), 1);
    b.settle(&[done(&new[0])]).await.unwrap();
    assert_eq!(server.psql("SELECT count(*) FROM sluice.messages"), "0");
    assert_eq!(server.psql("SELECT done, lost FROM sluice.counters"), "3|1");
    assert_eq!(
        server.psql("SELECT count(*) FROM sluice.keys WHERE done"),
        "3"
    );
}

#[tokio::test]
async fn a_bad_connection_says_in_one_line_what_to_fix() {
    let server = PgServer::start();
    let port = server.port();
    server.psql("CREATE ROLE other LOGIN; CREATE SCHEMA theirs AUTHORIZATION other");
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let free = closed.local_addr().unwrap().port();
    drop(closed);
    for (url, says) in [
        (
            format!("postgres://sluice@127.0.0.1:{port}/nosuchdb"),
            "database \"nosuchdb\" does not exist",
        ),
        (
            format!("postgres://nobody@127.0.0.1:{port}/sluice"),
            "refused role \"nobody\"",
        ),
        (
            format!("postgres://sluice@127.0.0.1:{port}/sluice?schema=theirs"),
            "belongs to role \"other\"",
        ),
        (
            format!("postgres://sluice@127.0.0.1:{free}/sluice"),
            "cannot reach PostgreSQL",
        ),
        (
            format!("postgres://sluice@127.0.0.1:{port}"),
            "names no database",
        ),
    ] {
        let err = PgBroker::connect(&url).await.err().unwrap().to_string();
        assert!(err.contains(says), "{url}: {err}");
        assert_eq!(err.lines().count(), 1, "{url}: one line: {err}");
    }
}

/// `sslmode=require` speaks TLS and verifies the server: with its CA in
/// `sslrootcert` it gets in (every session of the broker encrypted), with
/// the public roots it is refused, and a server without TLS is refused
/// rather than spoken to in plain text; each failure is one line.
#[tokio::test]
async fn sslmode_require_connects_over_verified_tls_only() {
    let server = PgServer::start();
    let url = format!("{}?sslmode=require", server.url());
    let plain = PgBroker::connect(&url).await.err().unwrap().to_string();
    assert!(
        plain.contains("TLS to PostgreSQL failed") && plain.contains("does not support TLS"),
        "{plain}"
    );
    let ca = server.enable_tls();
    let unknown = PgBroker::connect(&url).await.err().unwrap().to_string();
    assert!(
        unknown.contains("TLS to PostgreSQL failed") && unknown.contains("sslrootcert"),
        "{unknown}"
    );
    for err in [&plain, &unknown] {
        assert_eq!(err.lines().count(), 1, "one line: {err}");
    }
    let b = PgBroker::connect(&format!("{url}&sslrootcert={}", ca.display()))
        .await
        .unwrap();
    b.publish(vec![NewMessage::new("q", "over TLS")])
        .await
        .unwrap();
    let got = b.receive("q", 1, lease(), Flow::default()).await.unwrap();
    assert_eq!(got[0].payload, b"over TLS");
    let sessions = server.psql(
        "SELECT count(*) FILTER (WHERE s.ssl), count(*) FROM pg_stat_ssl s
         JOIN pg_stat_activity a USING (pid) WHERE a.usename = 'sluice'",
    );
    let (tls, all) = sessions.split_once('|').unwrap();
    assert!(all != "0" && tls == all, "TLS sessions | all: {sessions}");
}

#[tokio::test]
async fn messages_are_leased_settled_retried_and_buried() {
    let server = PgServer::start();
    let b = broker(&server).await;
    let mut keyed = NewMessage::new("q", b"keyed".to_vec());
    keyed.key = Some("k1".into());
    keyed.headers = vec![("tenant".into(), "a".into())];
    let mut later = NewMessage::new("q", b"later".to_vec());
    later.delay = Duration::from_secs(3600);
    let ids = b
        .publish(vec![
            NewMessage::new("q", b"one".to_vec()),
            keyed,
            later,
            NewMessage::new("q", b"dies".to_vec()),
        ])
        .await
        .unwrap();
    let got = b.receive("q", 10, lease(), Flow::default()).await.unwrap();
    let payloads: Vec<&[u8]> = got.iter().map(|d| d.payload.as_slice()).collect();
    assert_eq!(
        payloads,
        [&b"one"[..], b"keyed", b"dies"],
        "the delayed one waits"
    );
    assert!(got.iter().all(|d| d.attempt == 1 && d.lease_until_ms > 0));
    assert_eq!(got[1].key, "k1");
    assert_eq!(
        got[1].headers,
        vec![("tenant".to_string(), "a".to_string())]
    );
    assert_eq!(got[0].key, ids[0], "no key: the id is the key");
    assert!(
        b.receive("q", 10, lease(), Flow::default())
            .await
            .unwrap()
            .is_empty(),
        "leased messages are not delivered twice"
    );
    let claims = b
        .claim(
            "q",
            &[KeyClaim {
                key: "k1".into(),
                holder: got[1].receipt.clone(),
            }],
            lease(),
        )
        .await
        .unwrap();
    assert_eq!(claims, [ClaimState::Acquired]);
    let mut notice = NewMessage::new("dead-notices", b"it died".to_vec());
    notice.headers = vec![("why".into(), "test".into())];
    b.settle(&[
        Settlement::Retry {
            delivery: got[0].clone(),
            delay: Duration::ZERO,
            error: "try again".into(),
            key: None,
        },
        Settlement::Done {
            delivery: got[1].clone(),
            key: Some(("k1".into(), Duration::from_secs(3600))),
            publishes: vec![NewMessage::new("next", b"follow-up".to_vec())],
        },
        Settlement::Dead {
            delivery: got[2].clone(),
            reason: "rejected".into(),
            error: Some("bad input".into()),
            handler_version: Some("v1".into()),
            key: None,
            notice: Some(notice),
        },
    ])
    .await
    .unwrap();
    let again = b.receive("q", 10, lease(), Flow::default()).await.unwrap();
    assert_eq!(again.len(), 1);
    assert_eq!(
        (again[0].id.as_str(), again[0].attempt),
        (ids[0].as_str(), 2)
    );
    assert_eq!(again[0].last_error.as_deref(), Some("try again"));
    let next = b
        .receive("next", 10, lease(), Flow::default())
        .await
        .unwrap();
    assert_eq!(next.len(), 1, "the done message's publish was committed");
    let notices = b
        .receive("dead-notices", 10, lease(), Flow::default())
        .await
        .unwrap();
    assert_eq!(notices[0].headers, vec![("why".into(), "test".into())]);
    assert_eq!(
        server.psql("SELECT id, reason, last_error, handler_version, attempts FROM sluice.dead"),
        format!("{}|rejected|bad input|v1|1", ids[3])
    );
    assert_eq!(
        server.psql("SELECT done, retried, lost FROM sluice.counters WHERE queue = 'q'"),
        "1|1|0"
    );
    // The key is done: a claim by another message finds it so.
    let claims = b
        .claim(
            "q",
            &[KeyClaim {
                key: "k1".into(),
                holder: "someone".into(),
            }],
            lease(),
        )
        .await
        .unwrap();
    assert_eq!(claims, [ClaimState::AlreadyDone]);
    // A settlement of a delivery that no longer holds its lease is refused.
    b.settle(&[Settlement::Duplicate {
        delivery: got[1].clone(),
    }])
    .await
    .unwrap();
    assert_eq!(
        server.psql("SELECT done, duplicates, lost FROM sluice.counters WHERE queue = 'q'"),
        "1|0|1"
    );
}

#[tokio::test]
async fn an_expired_lease_delivers_again_and_the_late_ack_is_refused() {
    let server = PgServer::start();
    let b = broker(&server).await;
    b.publish(vec![NewMessage::new("q", b"x".to_vec())])
        .await
        .unwrap();
    let first = b
        .receive("q", 1, Duration::from_millis(200), Flow::default())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await;
    let second = b.receive("q", 1, lease(), Flow::default()).await.unwrap();
    assert_eq!(second.len(), 1);
    assert_eq!(second[0].attempt, 2);
    assert_eq!(second[0].last_error, Some(lease_expired(1)));
    // The first delivery's late ack is refused; the second's applies.
    let done = |d: &sluice::broker::message::Delivery| Settlement::Done {
        delivery: d.clone(),
        key: None,
        publishes: Vec::new(),
    };
    b.settle(&[done(&first[0])]).await.unwrap();
    assert_eq!(server.psql("SELECT count(*) FROM sluice.messages"), "1");
    b.settle(&[done(&second[0])]).await.unwrap();
    assert_eq!(server.psql("SELECT count(*) FROM sluice.messages"), "0");
    assert_eq!(server.psql("SELECT done, lost FROM sluice.counters"), "1|1");
}

/// A broker that has leased and settled thousands of messages vacuums
/// `messages` itself, without waiting for autovacuum (which has not come
/// round to a new database by then); the harness's `bloat` section shows
/// what that does to the table's size over a million messages.
#[tokio::test]
async fn a_busy_broker_vacuums_its_messages_table() {
    let server = PgServer::start();
    let b = broker(&server).await;
    let vacuums = || {
        server.psql(
            "SELECT vacuum_count FROM pg_stat_user_tables
             WHERE schemaname = 'sluice' AND relname = 'messages'",
        )
    };
    assert_eq!(vacuums(), "0");
    b.publish(
        (0..6000)
            .map(|i| NewMessage::new("q", format!("{i}")))
            .collect(),
    )
    .await
    .unwrap();
    let got = b
        .receive("q", 6000, lease(), Flow::default())
        .await
        .unwrap();
    let done: Vec<Settlement> = got
        .into_iter()
        .map(|delivery| Settlement::Duplicate { delivery })
        .collect();
    b.settle(&done).await.unwrap();
    let started = Instant::now();
    while vacuums() == "0" {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "no vacuum 10 s after 12,000 rows changed"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(server.psql("SELECT count(*) FROM sluice.messages"), "0");
}

/// What `call` returns and the plans `auto_explain` logs for the
/// statements inside it, run once in a session of its own on `server`.
fn nested_plans(server: &PgServer, call: &str) -> (String, String) {
    let offset = server.log_len();
    let out = server.psql(&format!(
        "LOAD 'auto_explain';
         SET auto_explain.log_min_duration = 0;
         SET auto_explain.log_nested_statements = on;
         {call}"
    ));
    (out, server.log_since(offset))
}

/// Publish `n` messages to queue q, a thousand at a time, each due after
/// `delay`.
async fn publish_backlog(b: &PgBroker, n: usize, delay: Duration) {
    for start in (0..n).step_by(1000) {
        b.publish(
            (start..n.min(start + 1000))
                .map(|i| {
                    let mut m = NewMessage::new("q", format!("{}.{i}", delay.as_secs()));
                    m.delay = delay;
                    m
                })
                .collect(),
        )
        .await
        .unwrap();
    }
}

/// A backlog published in a burst has no statistics until autovacuum
/// analyzes it, and stale ones after. Either way, receiving walks
/// `messages_due` in order and finds each picked row by its primary key:
/// no plan that reads, sorts or hashes the whole backlog to lease a few of
/// its messages, which made each receive cost time in proportion to the
/// backlog. Plain and flow-limited receives alike.
#[tokio::test]
async fn receiving_from_a_big_backlog_walks_the_due_index_with_or_without_statistics() {
    let server = PgServer::start();
    let b = broker(&server).await;
    publish_backlog(&b, 20_000, Duration::ZERO).await;
    let receives = [
        "SELECT count(*) FROM sluice.lease_due('q', 100, 30000, 'x')",
        "SELECT count(*) FROM sluice.lease_limited('q', 100, 30000, 'x', 1000, NULL, NULL)",
    ];
    for statistics in ["none", "fresh"] {
        if statistics == "fresh" {
            server.psql("ANALYZE sluice.messages");
        }
        for call in receives {
            let (_, plans) = nested_plans(&server, call);
            assert!(
                plans.contains("Index Scan using messages_due on messages"),
                "{call} with {statistics} statistics does not walk messages_due:\n{plans}"
            );
            for whole in ["Sort", "Bitmap Heap Scan", "Seq Scan on messages", "Hash"] {
                assert!(
                    !plans.contains(whole),
                    "{call} with {statistics} statistics plans a {whole}:\n{plans}"
                );
            }
        }
    }
    assert_eq!(
        server.psql("SELECT count(*) FROM sluice.messages WHERE leased"),
        "400"
    );
}

/// A queue with `max_in_flight` counts its leases on `messages_leased`,
/// the index of the leased rows alone, with or without statistics. Over
/// `messages_due` the count fetched each of the queue's delayed messages
/// from the table to leave it out, so every receive cost time in
/// proportion to them (28 to 40 ms with 200,000 delayed, against 0.7 to
/// 1.1 ms on this index).
#[tokio::test]
async fn a_limited_receive_counts_its_leases_without_reading_the_delayed_messages() {
    let server = PgServer::start();
    let b = broker(&server).await;
    publish_backlog(&b, 20_000, Duration::from_secs(3600)).await;
    publish_backlog(&b, 10, Duration::ZERO).await;
    let call = "SELECT count(*) FROM sluice.lease_limited('q', 10, 30000, 'x', 5, NULL, NULL)";
    for (statistics, leased) in [("none", "5"), ("fresh", "0")] {
        if statistics == "fresh" {
            server.psql("ANALYZE sluice.messages");
        }
        let (got, plans) = nested_plans(&server, call);
        assert_eq!(got, leased, "with {statistics} statistics");
        assert!(
            plans.contains("using messages_leased on messages"),
            "with {statistics} statistics the leases are not counted on messages_leased:\n{plans}"
        );
    }
    assert_eq!(
        server.psql("SELECT count(*) FROM sluice.messages WHERE leased"),
        "5"
    );
}

/// The keys table keeps done keys for their retention, so it grows far
/// beyond the keys in flight. A claim reads each key's state by its primary
/// key: no plan that scans every key of the queue to hash them, which made
/// each claim read the whole table.
#[tokio::test]
async fn a_claim_beside_many_done_keys_reads_each_key_by_its_primary_key() {
    let server = PgServer::start();
    broker(&server).await;
    server.psql(
        "INSERT INTO sluice.keys (queue, key, done, holder, expires_at)
         SELECT 'q', 'old-' || g, true, 'h', sluice.now_ms() + 86400000
         FROM generate_series(1, 20000) AS g",
    );
    // One key done already, 998 new ones, and the first new one again.
    let (states, plans) = nested_plans(
        &server,
        "SELECT s, count(*) FROM unnest(sluice.claim('q',
             ARRAY['old-1'] || ARRAY(SELECT 'new-' || g FROM generate_series(1, 998) AS g)
                 || ARRAY['new-1'],
             ARRAY(SELECT 'h' || g FROM generate_series(1, 1000) AS g), 30000)) AS s
         GROUP BY s ORDER BY s",
    );
    assert_eq!(states, "0|998\n1|1\n2|1");
    assert!(
        plans.contains("Index Scan using keys_pkey on keys cur"),
        "the claim does not look each key up:\n{plans}"
    );
    for whole in ["Bitmap Heap Scan on keys cur", "Seq Scan on keys cur"] {
        assert!(
            !plans.contains(whole),
            "the claim plans a {whole}:\n{plans}"
        );
    }
}

/// PostgreSQL plans a statement of a PL/pgSQL function afresh for its
/// first five calls in a session, then may keep one generic plan, made
/// without the arguments. For the broker's batch functions that plan
/// assumes an array of ten elements, and may join the rows of a batch of
/// a thousand each with each, as it did in a long drain, where every
/// settle after the fifth on a connection cost time in proportion to the
/// square of its batch. The batch functions plan each call with its own
/// arguments.
#[tokio::test]
async fn the_sixth_settle_on_a_connection_plans_for_its_batch_as_the_first_did() {
    let server = PgServer::start();
    let b = broker(&server).await;
    const ROUNDS: usize = 7;
    const BATCH: usize = 500;
    publish_backlog(&b, ROUNDS * BATCH, Duration::ZERO).await;
    // Each round leases a batch, takes its keys and settles it done, as a
    // worker does, all in one session.
    let (done, plans) = nested_plans(
        &server,
        &format!(
            "DO $$
             DECLARE ids text[]; receipts text[]; n int;
             BEGIN
               FOR round IN 1..{ROUNDS} LOOP
                 SELECT array_agg(r_id), array_agg(r_receipt) INTO ids, receipts
                 FROM sluice.lease_due('q', {BATCH}, 30000, 'x');
                 n := array_length(ids, 1);
                 PERFORM sluice.claim('q', ids, receipts, 30000);
                 PERFORM sluice.settle(array_fill('D'::text, ARRAY[n]), ids, receipts,
                   array_fill('q'::text, ARRAY[n]), ids, array_fill(86400000::bigint, ARRAY[n]),
                   array_fill(0::bigint, ARRAY[n]), array_fill(NULL::text, ARRAY[n]),
                   array_fill(NULL::text, ARRAY[n]), array_fill('v'::text, ARRAY[n]),
                   array_fill(1, ARRAY[n]), '{{}}', '{{}}', '{{}}', '{{}}', '{{}}', '{{}}', '{{}}');
               END LOOP;
             END $$;
             SELECT done FROM sluice.counters WHERE queue = 'q'"
        ),
    );
    assert_eq!(done, (ROUNDS * BATCH).to_string());
    // The statements over the whole batch: settle_apply's (its rows are
    // `s_1`) and claim's (`c_1`), one plan a round each.
    for scan in ["Function Scan on s_1 ", "Function Scan on c_1 "] {
        let estimates: Vec<&str> = plans
            .lines()
            .filter(|l| l.contains(scan))
            .map(|l| l.split("rows=").nth(1).unwrap_or(l))
            .collect();
        assert_eq!(estimates.len(), ROUNDS, "{scan}in every round:\n{plans}");
        assert!(
            estimates
                .iter()
                .all(|e| e.starts_with(&format!("{BATCH} "))),
            "a round planned {scan}for another batch than its own {BATCH} rows: {estimates:?}"
        );
    }
    assert_eq!(batch_functions_planned_per_call(&server), BATCH_FUNCTIONS);
}

/// The functions the broker calls with whole batches (`queue_v4.sql`).
const BATCH_FUNCTIONS: &str = "claim,extend,groups_left,settle,settle_apply,settle_each,unblock";

/// The broker's functions that plan every call for its own arguments.
fn batch_functions_planned_per_call(server: &PgServer) -> String {
    server.psql(
        "SELECT string_agg(proname, ',' ORDER BY proname) FROM pg_proc
         WHERE pronamespace = 'sluice'::regnamespace
           AND 'plan_cache_mode=force_custom_plan' = ANY(proconfig)",
    )
}

/// Expired idempotency keys do not pile up: each claim deletes up to twice
/// as many expired keys as it takes.
#[tokio::test]
async fn claims_sweep_expired_keys() {
    let server = PgServer::start();
    let b = broker(&server).await;
    let claims = |prefix: &str| -> Vec<KeyClaim> {
        (0..10)
            .map(|i| KeyClaim {
                key: format!("{prefix}{i}"),
                holder: format!("h{i}"),
            })
            .collect()
    };
    b.claim("q", &claims("old"), Duration::from_millis(1))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    let states = b.claim("q", &claims("new"), lease()).await.unwrap();
    assert!(
        states.iter().all(|s| *s == ClaimState::Acquired),
        "{states:?}"
    );
    assert_eq!(
        server.psql("SELECT string_agg(DISTINCT left(key, 3), ',') FROM sluice.keys"),
        "new",
        "the expired keys were swept"
    );
}

#[tokio::test]
async fn a_busy_key_waits_for_its_holder_and_extend_keeps_a_lease() {
    let server = PgServer::start();
    let b = broker(&server).await;
    let claim = |holder: &str| KeyClaim {
        key: "k".into(),
        holder: holder.into(),
    };
    let states = b
        .claim("q", &[claim("a"), claim("b"), claim("a")], lease())
        .await
        .unwrap();
    assert_eq!(
        states,
        [ClaimState::Acquired, ClaimState::Busy, ClaimState::Acquired],
        "one holder at a time; the holder may take it again"
    );
    b.publish(vec![NewMessage::new("q", b"x".to_vec())])
        .await
        .unwrap();
    let d = b
        .receive("q", 1, Duration::from_millis(300), Flow::default())
        .await
        .unwrap()
        .remove(0);
    let held = b
        .extend(
            "q",
            &[
                Lease {
                    id: d.id.clone(),
                    receipt: d.receipt.clone(),
                    key: None,
                },
                Lease {
                    id: d.id.clone(),
                    receipt: "not-its-receipt".into(),
                    key: None,
                },
            ],
            lease(),
        )
        .await
        .unwrap();
    assert_eq!(held, [true, false]);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        b.receive("q", 1, lease(), Flow::default())
            .await
            .unwrap()
            .is_empty(),
        "the extended lease still holds"
    );
}

#[tokio::test]
async fn two_hosts_receiving_at_once_never_share_a_message() {
    let server = PgServer::start();
    let (a, b) = (broker(&server).await, broker(&server).await);
    let all: Vec<NewMessage> = (0..2000)
        .map(|i| NewMessage::new("q", i.to_string().into_bytes()))
        .collect();
    a.publish(all).await.unwrap();
    let drain = |host: PgBroker| async move {
        let mut ids = Vec::new();
        loop {
            let got = host
                .receive("q", 50, lease(), Flow::default())
                .await
                .unwrap();
            if got.is_empty() {
                return ids;
            }
            ids.extend(got.into_iter().map(|d| d.id));
        }
    };
    let (x, y) = tokio::join!(tokio::spawn(drain(a)), tokio::spawn(drain(b)));
    let (x, y) = (x.unwrap(), y.unwrap());
    let mut both: Vec<String> = x.iter().chain(&y).cloned().collect();
    both.sort();
    both.dedup();
    assert_eq!(both.len(), 2000, "every message leased exactly once");
    assert_eq!(x.len() + y.len(), 2000);
}

#[tokio::test]
async fn sql_publish_in_a_rolled_back_transaction_leaves_nothing() {
    let server = PgServer::start();
    let b = broker(&server).await;
    server.psql(
        "BEGIN; SELECT sluice.publish('q', 'gone'::bytea); ROLLBACK;
         BEGIN; SELECT sluice.publish('q', 'kept'::bytea, '{\"tenant\": \"a\"}', 'order-1');
         COMMIT;",
    );
    let got = b.receive("q", 10, lease(), Flow::default()).await.unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].payload, b"kept");
    assert_eq!(got[0].key, "order-1");
    assert_eq!(got[0].headers, vec![("tenant".into(), "a".into())]);
    let err = server.psql_err("SELECT sluice.publish('q', 'x'::bytea, '[1]')");
    assert!(err.contains("headers must be a JSON object"), "{err}");
}

/// `Client::publish_in` writes into the caller's transaction: a rollback
/// takes the message back with the business row, a commit hands both on,
/// and a host handles what was committed (and only that).
#[test]
fn client_publish_in_a_transaction_commits_or_rolls_back_with_it() {
    let env = Env::postgres();
    env.deploy("hello", "hello", None);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let published = rt.block_on(async {
        let sluice = sluice::broker::client::Client::connect(&env.broker_url())
            .await
            .unwrap();
        let mut db = connect(&env.broker_url()).await;
        db.batch_execute("CREATE TABLE shop_orders (id int PRIMARY KEY)")
            .await
            .unwrap();
        let mut published = Vec::new();
        for (id, commit) in [(1, false), (2, true)] {
            let tx = db.transaction().await.unwrap();
            tx.execute("INSERT INTO shop_orders VALUES ($1)", &[&id])
                .await
                .unwrap();
            let ids = sluice
                .publish_in(&tx, vec![NewMessage::new("hello", format!("order {id}"))])
                .await
                .unwrap();
            assert_eq!(ids.len(), 1);
            published.push(ids[0].clone());
            if commit {
                tx.commit().await.unwrap();
            } else {
                tx.rollback().await.unwrap();
            }
        }
        let rows = db.query("SELECT id FROM shop_orders", &[]).await.unwrap();
        assert_eq!(rows.len(), 1, "only the committed order is there");
        // A client of another broker cannot, and says why.
        let sqlite = sluice::broker::client::Client::connect(&format!(
            "sqlite://{}",
            env.dir.path().join("other.db").display()
        ))
        .await
        .unwrap();
        let err = sqlite
            .publish_in(&db, vec![NewMessage::new("hello", "x")])
            .await
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("needs a client connected to a postgres://"),
            "{err}"
        );
        published
    });
    assert_eq!(
        env.count("hello", "ready"),
        1,
        "the rolled-back one never was"
    );
    let log = env.run_until_idle();
    assert_eq!(env.count("hello", "done"), 1, "{log}");
    // sluice.toml names the same broker for a command given no --broker.
    let config = env.dir.path().join("pg.toml");
    std::fs::write(&config, format!("broker = \"{}\"\n", env.broker_url())).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["--config", config.to_str().unwrap(), "--json", "stats"])
        .output()
        .unwrap();
    let stats = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stats.contains("\"done\":1"),
        "{stats}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (rolled_back, committed) = (&published[0], &published[1]);
    assert!(
        log.contains(&format!("message {committed}")) && !log.contains(rolled_back.as_str()),
        "{log}"
    );
}

/// A worker whose receive found nothing waits for a notification rather
/// than polling: a publish from another host, or from SQL, ends the wait at
/// once, well before the half-second fallback would have looked again.
#[tokio::test]
async fn an_idle_wait_is_ended_by_a_publish_from_another_host_or_from_sql() {
    let server = PgServer::start();
    let (waiter, publisher) = (broker(&server).await, broker(&server).await);
    let waiter = std::sync::Arc::new(waiter);
    for how in ["client", "sql"] {
        let w = waiter.clone();
        let waiting = tokio::spawn(async move {
            let start = Instant::now();
            w.idle("w", Duration::from_millis(1)).await;
            start.elapsed()
        });
        tokio::time::sleep(Duration::from_millis(100)).await;
        match how {
            "client" => {
                publisher
                    .publish(vec![NewMessage::new("w", b"x".to_vec())])
                    .await
                    .unwrap();
            }
            _ => {
                server.psql("SELECT sluice.publish('w', 'x'::bytea)");
            }
        }
        let took = waiting.await.unwrap();
        assert!(
            took < Duration::from_millis(450),
            "{how}: woken after {took:?}, as late as the fallback"
        );
        let got = waiter
            .receive("w", 10, lease(), Flow::default())
            .await
            .unwrap();
        assert_eq!(got.len(), 1, "{how}: the message is there");
        waiter
            .settle(&[Settlement::Duplicate {
                delivery: got[0].clone(),
            }])
            .await
            .unwrap();
    }
}
