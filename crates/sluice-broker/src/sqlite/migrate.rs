//! Creating a broker file's tables and upgrading files written by earlier
//! versions of sluice.
//!
//! The schema is the SQL files in `migrations/`, one a version, numbered
//! from 1, each changing the tables the ones before it made. A file's
//! version is its `PRAGMA user_version`: a file at version N gets the files
//! after N, in order, in one transaction with the version they reach, so
//! when one fails none is applied and the error names the version and its
//! file. A file written by a newer sluice is refused, untouched.
//!
//! Files written before the numbered migrations were made by each role's
//! `CREATE TABLE IF NOT EXISTS` and a list of columns to add, and some
//! builds added a table or column without a version of their own: a file
//! of version 1 may or may not have the key-value store, one of version 3
//! `counters.lost`. So the files make every table and index only if it is
//! missing, and an `ALTER TABLE … ADD COLUMN` of a column the table has
//! already is passed over; every such file then ends with the same schema
//! (tests/upgrades/sqlite.rs opens one of each).

use rusqlite::Connection;

/// One version of the schema: its number and the file that makes it.
struct Migration {
    version: i64,
    file: &'static str,
    sql: &'static str,
}

/// The [`Migration`] of version `$version`, `migrations/$file`.
macro_rules! migration {
    ($version:literal, $file:literal) => {
        Migration {
            version: $version,
            file: $file,
            sql: include_str!(concat!("migrations/", $file)),
        }
    };
}

/// Every version, the first one first. Version 4 added the `paused`
/// table: a host of an earlier version would not honour a pause, so it
/// must not open the file; each later version is refused by earlier hosts
/// for the same kind of reason (its file says why).
const MIGRATIONS: &[Migration] = &[
    migration!(1, "0001_schema.sql"),
    migration!(2, "0002_redrives.sql"),
    migration!(3, "0003_queues.sql"),
    migration!(4, "0004_paused.sql"),
    migration!(5, "0005_flow.sql"),
    migration!(6, "0006_groups.sql"),
    migration!(7, "0007_snoozes.sql"),
    migration!(8, "0008_microseconds.sql"),
];

/// The schema version this build writes (`PRAGMA user_version`).
pub(super) const VERSION: i64 = MIGRATIONS.len() as i64;

/// Bring the file up to [`VERSION`], making its tables when it is new. A
/// file at it already is left alone, without taking the write lock; a
/// file written by a newer sluice is refused rather than marked as this
/// version.
pub(super) fn prepare(conn: &Connection) -> anyhow::Result<()> {
    let version = user_version(conn)?;
    if version == VERSION {
        return Ok(());
    }
    refuse_newer(version)?;
    // IMMEDIATE takes the write lock before looking again, so of two hosts
    // opening the same old file at once, the second finds it upgraded.
    conn.execute_batch("BEGIN IMMEDIATE")?;
    let result = user_version(conn).and_then(|version| apply(conn, version));
    conn.execute_batch(if result.is_ok() { "COMMIT" } else { "ROLLBACK" })?;
    result
}

fn user_version(conn: &Connection) -> anyhow::Result<i64> {
    Ok(conn.pragma_query_value(None, "user_version", |r| r.get(0))?)
}

fn refuse_newer(version: i64) -> anyhow::Result<()> {
    anyhow::ensure!(
        version <= VERSION,
        "its schema version is {version}, and this sluice knows versions up to {VERSION}: \
         run the newer sluice that wrote it"
    );
    Ok(())
}

/// Apply the versions after `version`, in order, then record [`VERSION`];
/// the caller's transaction rolls it all back when one fails.
fn apply(conn: &Connection, version: i64) -> anyhow::Result<()> {
    refuse_newer(version)?;
    for step in MIGRATIONS.iter().skip(version as usize) {
        run(conn, step.sql).map_err(|e| {
            anyhow::anyhow!(
                "upgrading it to schema version {} (migrations/{}) failed, and it was left as it was (version {version}): {e}",
                step.version,
                step.file
            )
        })?;
    }
    conn.pragma_update(None, "user_version", VERSION)?;
    Ok(())
}

/// Run the statements of `sql` one by one, passing over an `ALTER TABLE
/// … ADD COLUMN` whose column is there already. (SQLite refuses such a
/// statement when it prepares it, so it is looked at before.)
fn run(conn: &Connection, sql: &str) -> rusqlite::Result<()> {
    for statement in statements(sql) {
        if let Some((table, column)) = added_column(&statement)
            && has_column(conn, table, column)?
        {
            continue;
        }
        conn.execute_batch(&statement)?;
    }
    Ok(())
}

/// The statements of a migration file, without their comment lines: each
/// ends with a line that ends with `;`, as every statement of these files
/// does (none holds a `;` or `--` in a string).
fn statements(sql: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    for line in sql.lines() {
        let code = line.split("--").next().unwrap_or_default().trim_end();
        if code.trim().is_empty() {
            continue;
        }
        current.push_str(code);
        current.push('\n');
        if code.ends_with(';') {
            out.push(std::mem::take(&mut current));
        }
    }
    if !current.is_empty() {
        out.push(current);
    }
    out
}

/// The table and column of `ALTER TABLE table ADD COLUMN column …`.
fn added_column(sql: &str) -> Option<(&str, &str)> {
    let words: Vec<&str> = sql.split_whitespace().take(6).collect();
    let is = |i: usize, word: &str| words.get(i).is_some_and(|w| w.eq_ignore_ascii_case(word));
    (words.len() == 6 && is(0, "ALTER") && is(1, "TABLE") && is(3, "ADD") && is(4, "COLUMN"))
        .then(|| (words[2], words[5]))
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

    /// A file as the first release of version 1 wrote it, before
    /// `redrives` (tests/fixtures/sqlite/v1_first.sql), with a message and
    /// a dead letter.
    const VERSION_1: &str = concat!(
        include_str!("../../tests/fixtures/sqlite/v1_first.sql"),
        "
    INSERT INTO messages (id, queue, key, payload, enqueued_at, visible_at)
        VALUES ('m1', 'q', 'm1', x'6869', 1, 1);
    INSERT INTO dead (id, queue, key, payload, attempts, enqueued_at, died_at, reason)
        VALUES ('d1', 'q', 'd1', x'6f6c64', 3, 1, 2, 'gave up after 3 attempt(s)');
    "
    );

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
        prepare(&conn).unwrap();
    }

    /// The files are the versions 1, 2, ... in order, each named with its
    /// number, so that VERSION is the last one's.
    #[test]
    fn the_files_are_numbered_in_order() {
        for (i, step) in MIGRATIONS.iter().enumerate() {
            assert_eq!(step.version as usize, i + 1, "{}", step.file);
            assert!(
                step.file.starts_with(&format!("{:04}_", step.version)),
                "{}",
                step.file
            );
        }
    }

    #[test]
    fn a_file_is_cut_into_its_statements_without_comments() {
        let sql = "-- a comment; with a semicolon\nCREATE TABLE t (\n  a -- the a\n);\n\nALTER TABLE t ADD COLUMN b;\n-- the end\n";
        assert_eq!(
            statements(sql),
            [
                "CREATE TABLE t (\n  a\n);\n",
                "ALTER TABLE t ADD COLUMN b;\n"
            ]
        );
        for step in MIGRATIONS {
            for statement in statements(step.sql) {
                assert!(
                    statement.trim_end().ends_with(';'),
                    "{}: {statement}",
                    step.file
                );
            }
        }
    }

    #[test]
    fn an_added_column_is_read_from_its_statement() {
        assert_eq!(
            added_column("ALTER TABLE counters ADD COLUMN lost INTEGER NOT NULL DEFAULT 0"),
            Some(("counters", "lost"))
        );
        assert_eq!(
            added_column("alter table dead\n  add column grp TEXT"),
            Some(("dead", "grp"))
        );
        assert_eq!(added_column("ALTER TABLE t RENAME TO u"), None);
        assert_eq!(added_column("CREATE TABLE t (a)"), None);
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
