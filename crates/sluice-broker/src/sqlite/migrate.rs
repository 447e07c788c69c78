//! Creating a broker file's tables and upgrading files written by earlier
//! versions of sluice. Each role's `SCHEMA` creates whatever is missing, but
//! `CREATE TABLE IF NOT EXISTS` leaves an existing table as it was: columns
//! added since are added here, so a file from an earlier version opens with
//! its messages and dead letters intact.

use rusqlite::Connection;

use super::{dead, groups, kv, presence, queue, schedules, topics};

/// The schema version this build writes (`PRAGMA user_version`).
/// Version 4 added the `paused` table: a host of an earlier version would
/// not honour a pause, so it must not open the file. Version 5 added the
/// `flow` table (rate buckets), for the same reason: an earlier host would
/// lease past `max_in_flight` and `rate`. Version 5 also has the
/// `schedule_ticks` table. Version 6 added ordered groups (the `grp` and
/// `held_due` columns, the `orderings` and `blocked` tables): an earlier
/// host would lease a group's waiting messages out of order. Version 7
/// added `messages.snoozes`: an earlier host's queries would not find it.
pub(super) const VERSION: i64 = 7;

/// Columns added after their table was first released: table, column,
/// definition. The definitions must have defaults, since rows exist.
const ADDED: &[(&str, &str, &str)] = &[
    // Version 2: the scheduled redrives a message has been through.
    ("messages", "redrives", "INTEGER NOT NULL DEFAULT 0"),
    ("dead", "redrives", "INTEGER NOT NULL DEFAULT 0"),
    // Version 3: settlements refused for a lost lease.
    ("counters", "lost", "INTEGER NOT NULL DEFAULT 0"),
    // Version 6: ordered groups.
    ("messages", "grp", "TEXT"),
    ("messages", "held_due", "INTEGER"),
    ("dead", "grp", "TEXT"),
    ("counters", "ungrouped", "INTEGER NOT NULL DEFAULT 0"),
    // Version 7: snoozes.
    ("messages", "snoozes", "INTEGER NOT NULL DEFAULT 0"),
];

/// Create every role's tables that are missing, then bring the file up to
/// [`VERSION`].
pub(super) fn prepare(conn: &Connection) -> anyhow::Result<()> {
    for schema in [
        queue::SCHEMA,
        dead::SCHEMA,
        presence::SCHEMA,
        kv::SCHEMA,
        topics::SCHEMA,
        schedules::SCHEMA,
        groups::SCHEMA,
    ] {
        conn.execute_batch(schema)?;
    }
    upgrade(conn)?;
    conn.execute_batch(groups::INDEX)?;
    Ok(())
}

/// Bring the file up to [`VERSION`]. A file at it already is left alone,
/// without taking the write lock; a file written by a newer sluice is
/// refused rather than marked as this version.
pub(super) fn upgrade(conn: &Connection) -> anyhow::Result<()> {
    let version: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
    if version == VERSION {
        return Ok(());
    }
    anyhow::ensure!(
        version < VERSION,
        "its schema version is {version}, and this sluice knows versions up to {VERSION}: \
         run the newer sluice that wrote it"
    );
    // IMMEDIATE takes the write lock before looking, so two hosts opening
    // the same old file at once cannot both try to add a column.
    conn.execute_batch("BEGIN IMMEDIATE")?;
    let result = add_missing(conn);
    conn.execute_batch(if result.is_ok() { "COMMIT" } else { "ROLLBACK" })?;
    Ok(result?)
}

fn add_missing(conn: &Connection) -> rusqlite::Result<()> {
    for (table, column, definition) in ADDED {
        if !has_column(conn, table, column)? {
            conn.execute_batch(&format!(
                "ALTER TABLE {table} ADD COLUMN {column} {definition}"
            ))?;
        }
    }
    // Version 3: the table of queue names `stats` lists (made empty by the
    // queue role's schema), filled from what the file holds.
    conn.execute_batch(
        "INSERT OR IGNORE INTO queues (queue)
         SELECT queue FROM messages UNION SELECT queue FROM dead UNION SELECT queue FROM counters",
    )?;
    conn.pragma_update(None, "user_version", VERSION)
}

fn has_column(conn: &Connection, table: &str, column: &str) -> rusqlite::Result<bool> {
    let mut stmt = conn.prepare(&format!("PRAGMA table_info({table})"))?;
    let names = stmt.query_map([], |r| r.get::<_, String>(1))?;
    for name in names {
        if name? == column {
            return Ok(true);
        }
    }
    Ok(false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DeadLetters, Queue, ReplaySelector, SqliteBroker};

    /// The two tables as version 1 wrote them, before `redrives`.
    const VERSION_1: &str = "
    CREATE TABLE messages (
        seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT NOT NULL UNIQUE,
        queue TEXT NOT NULL, key TEXT NOT NULL, payload BLOB NOT NULL, headers TEXT,
        attempt INTEGER NOT NULL DEFAULT 0, enqueued_at INTEGER NOT NULL,
        visible_at INTEGER NOT NULL, leased INTEGER NOT NULL DEFAULT 0,
        receipt TEXT, last_error TEXT);
    CREATE TABLE dead (
        seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT NOT NULL UNIQUE,
        queue TEXT NOT NULL, key TEXT NOT NULL, payload BLOB NOT NULL, headers TEXT,
        attempts INTEGER NOT NULL, enqueued_at INTEGER NOT NULL, died_at INTEGER NOT NULL,
        reason TEXT NOT NULL, last_error TEXT, handler_version TEXT);
    INSERT INTO messages (id, queue, key, payload, enqueued_at, visible_at)
        VALUES ('m1', 'q', 'm1', x'6869', 1, 1);
    INSERT INTO dead (id, queue, key, payload, attempts, enqueued_at, died_at, reason)
        VALUES ('d1', 'q', 'd1', x'6f6c64', 3, 1, 2, 'gave up after 3 attempt(s)');
    PRAGMA user_version = 1;
    ";

    #[tokio::test]
    async fn a_version_1_file_opens_with_its_messages_and_dead_letters() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("old.db");
        crate::sqlite::connect(&path)
            .unwrap()
            .execute_batch(VERSION_1)
            .unwrap();

        let broker = SqliteBroker::open(&path).unwrap();
        let dead = broker.dead_letter("q", "d1").await.unwrap().unwrap();
        assert_eq!((dead.attempts, dead.redrives), (3, 0));
        let got = broker
            .receive(
                "q",
                10,
                std::time::Duration::from_secs(30),
                Default::default(),
            )
            .await
            .unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(
            (got[0].id.as_str(), &got[0].payload[..]),
            ("m1", &b"hi"[..])
        );
        let redrive = ReplaySelector {
            redrive: true,
            max_redrives: Some(1),
            ..ReplaySelector::default()
        };
        assert_eq!(broker.replay("q", &redrive).await.unwrap(), 1);
        drop(broker);

        // Opening it again finds nothing left to add.
        let conn = crate::sqlite::connect(&path).unwrap();
        let version: i64 = conn
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .unwrap();
        assert_eq!(version, VERSION);
        let redrives: i64 = conn
            .query_row("SELECT redrives FROM messages WHERE id = 'd1'", [], |r| {
                r.get(0)
            })
            .unwrap();
        assert_eq!(redrives, 1, "the redriven dead letter carries its count");
        upgrade(&conn).unwrap();
    }

    #[test]
    fn a_file_from_a_newer_version_is_refused_and_left_as_it_is() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("new.db");
        let newer = VERSION + 1;
        crate::sqlite::connect(&path)
            .unwrap()
            .pragma_update(None, "user_version", newer)
            .unwrap();
        let err = SqliteBroker::open(&path)
            .err()
            .expect("refused")
            .to_string();
        assert!(err.contains(&path.display().to_string()), "{err}");
        assert!(err.contains(&format!("schema version is {newer}")), "{err}");
        let version: i64 = crate::sqlite::connect(&path)
            .unwrap()
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .unwrap();
        assert_eq!(version, newer);
    }
}
