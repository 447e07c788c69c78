//! PostgreSQL: a schema made by each of versions 1 to 8 with the SQL files
//! those versions ran (`tests/fixtures/postgres`, as they were before the
//! numbered migrations), upgraded by this build.

use sluice_broker::PgBroker;
use sluice_broker::testkit::PgServer;
use tokio_postgres::{Client, NoTls};

use super::{first_difference, old_rows_are_usable};

/// What each version ran over the one before, the first one first:
/// version 1 is every role's part.
const OLD_VERSIONS: [&[&str]; 8] = [
    &[
        include_str!("../fixtures/postgres/queue.sql"),
        include_str!("../fixtures/postgres/groups.sql"),
        include_str!("../fixtures/postgres/dead.sql"),
        include_str!("../fixtures/postgres/presence.sql"),
        include_str!("../fixtures/postgres/kv.sql"),
        include_str!("../fixtures/postgres/topics.sql"),
        include_str!("../fixtures/postgres/schedules.sql"),
    ],
    &[include_str!("../fixtures/postgres/queue_v2.sql")],
    &[include_str!("../fixtures/postgres/queue_v3.sql")],
    &[include_str!("../fixtures/postgres/queue_v4.sql")],
    &[include_str!("../fixtures/postgres/queue_v5.sql")],
    &[include_str!("../fixtures/postgres/queue_v6.sql")],
    &[include_str!("../fixtures/postgres/queue_v7.sql")],
    &[include_str!("../fixtures/postgres/queue_v8.sql")],
];

/// A session of the broker's role (which owns what it makes), with
/// notices off as the broker has them.
async fn session(server: &PgServer) -> Client {
    let (client, connection) = tokio_postgres::connect(&server.url(), NoTls).await.unwrap();
    tokio::spawn(connection);
    client
        .batch_execute("SET client_min_messages = warning")
        .await
        .unwrap();
    client
}

/// Make `schema` as version `version` left it, as that version's broker
/// did (its files in order, then its version recorded), with the rows
/// that [`old_rows_are_usable`] checks, written with that version's
/// columns.
async fn make_old(c: &Client, schema: &str, version: usize) {
    c.batch_execute(&format!(
        "CREATE SCHEMA {schema}; SET search_path = {schema};
         CREATE TABLE schema_version (version integer NOT NULL);"
    ))
    .await
    .unwrap();
    for parts in &OLD_VERSIONS[..version] {
        c.batch_execute(&parts.concat()).await.unwrap();
    }
    c.execute(
        "INSERT INTO schema_version (version) VALUES ($1)",
        &[&(version as i32)],
    )
    .await
    .unwrap();
    c.batch_execute(
        "INSERT INTO queues (queue) VALUES ('q');
         INSERT INTO messages (id, queue, key, payload, enqueued_at, visible_at)
             VALUES ('m1', 'q', 'm1', '\\x6869', 1, now_ms());
         INSERT INTO keys (queue, key, done, holder, expires_at)
             VALUES ('q', 'k-done', true, 'an old delivery', now_ms() + 3600000);
         INSERT INTO dead (id, queue, key, payload, attempts, enqueued_at, died_at, reason)
             VALUES ('d1', 'q', 'd1', '\\x6f6c64', 3, 1, now_ms(), 'gave up');
         RESET search_path;",
    )
    .await
    .unwrap();
}

/// Everything a schema is made of, one line each, sorted, with the
/// schema's name as SCHEMA: every function's definition (with its
/// settings), every column, index and constraint.
async fn shape(c: &Client, schema: &str) -> Vec<String> {
    let queries = [
        "SELECT 'function ' || pg_get_functiondef(p.oid)
         FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = $1",
        "SELECT concat_ws(' ', 'column', table_name, column_name, ordinal_position, data_type,
                          is_nullable, column_default)
         FROM information_schema.columns WHERE table_schema = $1",
        "SELECT 'index ' || indexdef FROM pg_indexes WHERE schemaname = $1",
        "SELECT concat_ws(' ', 'constraint', c.conrelid::regclass, c.conname,
                          pg_get_constraintdef(c.oid))
         FROM pg_constraint c JOIN pg_namespace n ON n.oid = c.connamespace
         WHERE n.nspname = $1",
    ];
    let mut lines = Vec::new();
    for query in queries {
        for row in c.query(query, &[&schema]).await.unwrap() {
            lines.push(row.get::<_, String>(0).replace(schema, "SCHEMA"));
        }
    }
    lines.sort();
    lines
}

/// A schema made by each earlier version (and by version 8, today's, as
/// the old files made it) is upgraded with its rows intact and usable, to
/// the same functions, columns, indexes and constraints as a new schema.
#[tokio::test]
async fn a_schema_of_every_earlier_version_upgrades_to_the_schema_of_a_new_one() {
    let server = PgServer::start();
    let c = session(&server).await;
    PgBroker::connect(&format!("{}?schema=sluice_fresh", server.url()))
        .await
        .unwrap();
    let fresh = shape(&c, "sluice_fresh").await;
    assert!(
        fresh
            .iter()
            .any(|l| l.contains("FUNCTION SCHEMA.settle_once("))
    );
    for version in 1..=OLD_VERSIONS.len() {
        let schema = format!("sluice_from_v{version}");
        let label = format!("a schema of version {version}");
        make_old(&c, &schema, version).await;
        let url = format!("{}?schema={schema}", server.url());
        let b = PgBroker::connect(&url)
            .await
            .unwrap_or_else(|e| panic!("{label}: {e:#}"));
        let row = c
            .query_one(&format!("SELECT version FROM {schema}.schema_version"), &[])
            .await
            .unwrap();
        assert_eq!(row.get::<_, i32>(0), 9, "{label}");
        old_rows_are_usable(&b, &label).await;
        let upgraded = shape(&c, &schema).await;
        assert!(
            upgraded == fresh,
            "{label} ends unlike a new one: {}",
            first_difference(&upgraded, &fresh)
        );
    }
}

/// A schema of version 6 with a table in the way of version 7's: the
/// upgrade fails, names version 7, its file and the server's reason, and
/// leaves the schema, its version and its rows as they were.
#[tokio::test]
async fn a_migration_that_cannot_apply_leaves_the_schema_as_it_was() {
    let server = PgServer::start();
    let c = session(&server).await;
    make_old(&c, "sluice_blocked", 6).await;
    c.batch_execute("CREATE TABLE sluice_blocked.settled (note text)")
        .await
        .unwrap();
    let before = shape(&c, "sluice_blocked").await;
    let url = format!("{}?schema=sluice_blocked", server.url());
    let err = format!("{:#}", PgBroker::connect(&url).await.err().unwrap());
    for part in [
        "version 7",
        "migrations/0007_settle_once.sql",
        "relation \"settled\" already exists",
        "left as it was (version 6)",
    ] {
        assert!(err.contains(part), "{part:?} in {err}");
    }
    assert_eq!(shape(&c, "sluice_blocked").await, before);
    let row = c
        .query_one(
            "SELECT (SELECT version FROM sluice_blocked.schema_version),
                    (SELECT count(*) FROM sluice_blocked.messages),
                    (SELECT count(*) FROM sluice_blocked.dead)",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(
        (
            row.get::<_, i32>(0),
            row.get::<_, i64>(1),
            row.get::<_, i64>(2)
        ),
        (6, 1, 1)
    );
}
