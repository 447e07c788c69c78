//! SQLite: a broker file as each schema version wrote it before the
//! numbered migrations, and as the builds within a version that added a
//! table, column or index without a version of their own wrote it
//! (`tests/fixtures/sqlite`, from git history), upgraded by this build.

use std::path::Path;

use rusqlite::Connection;
use sluice_broker::SqliteBroker;

use super::{first_difference, old_rows_are_usable};

/// Each old file's tables, named by its version (and `_first` for the
/// first builds of a version that later builds added to).
const OLD_FILES: &[(&str, &str)] = &[
    ("v1_first", include_str!("../fixtures/sqlite/v1_first.sql")),
    ("v1", include_str!("../fixtures/sqlite/v1.sql")),
    ("v2", include_str!("../fixtures/sqlite/v2.sql")),
    ("v3_first", include_str!("../fixtures/sqlite/v3_first.sql")),
    ("v3", include_str!("../fixtures/sqlite/v3.sql")),
    ("v4", include_str!("../fixtures/sqlite/v4.sql")),
    ("v5_first", include_str!("../fixtures/sqlite/v5_first.sql")),
    ("v5", include_str!("../fixtures/sqlite/v5.sql")),
    ("v6_first", include_str!("../fixtures/sqlite/v6_first.sql")),
    ("v6", include_str!("../fixtures/sqlite/v6.sql")),
    ("v7", include_str!("../fixtures/sqlite/v7.sql")),
];

/// The rows [`old_rows_are_usable`] checks, in the columns every version
/// has.
const OLD_ROWS: &str = "
INSERT INTO messages (id, queue, key, payload, enqueued_at, visible_at)
    VALUES ('m1', 'q', 'm1', x'6869', 1, 1);
INSERT INTO keys (queue, key, done, holder, expires_at)
    VALUES ('q', 'k-done', 1, 'an old delivery', 4102444800000);
INSERT INTO counters (queue, done) VALUES ('q', 7);
INSERT INTO dead (id, queue, key, payload, attempts, enqueued_at, died_at, reason)
    VALUES ('d1', 'q', 'd1', x'6f6c64', 3, 1, 2, 'gave up');
";

/// Make `path` as an old build made it: its tables and version, then the
/// rows.
fn make_old(path: &Path, tables: &str) {
    let conn = Connection::open(path).unwrap();
    conn.execute_batch(tables).unwrap();
    conn.execute_batch(OLD_ROWS).unwrap();
}

/// Everything a file's schema is made of, one line each, sorted: every
/// table's columns (type, NOT NULL, default, place in the primary key) and
/// whether it has rowids, and every index's definition.
fn shape(path: &Path) -> Vec<String> {
    let conn = Connection::open(path).unwrap();
    let mut lines: Vec<String> = conn
        .prepare(
            "SELECT concat_ws(' ', 'table', t.name, t.wr, c.cid, c.name, c.type, c.\"notnull\",
                              c.dflt_value, c.pk)
             FROM pragma_table_list t JOIN pragma_table_xinfo(t.name) c
             WHERE t.schema = 'main'
             UNION ALL
             SELECT concat_ws(' ', 'index', name, tbl_name, sql) FROM sqlite_master
             WHERE type = 'index'",
        )
        .unwrap()
        .query_map([], |r| r.get::<_, String>(0))
        .unwrap()
        .map(|line| {
            line.unwrap()
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect();
    lines.sort();
    lines
}

fn user_version(path: &Path) -> i64 {
    Connection::open(path)
        .unwrap()
        .pragma_query_value(None, "user_version", |r| r.get(0))
        .unwrap()
}

/// A file of every earlier version opens with its rows intact and usable,
/// its counters kept, and ends with the schema of a new file.
#[tokio::test]
async fn a_file_of_every_earlier_version_upgrades_to_the_schema_of_a_new_one() {
    let dir = tempfile::tempdir().unwrap();
    let fresh_path = dir.path().join("fresh.db");
    drop(SqliteBroker::open(&fresh_path).unwrap());
    let fresh = shape(&fresh_path);
    assert!(
        fresh
            .iter()
            .any(|l| l.starts_with("table messages 0 15 snoozes"))
    );
    for (name, tables) in OLD_FILES {
        let path = dir.path().join(format!("{name}.db"));
        let label = format!("a file of {name}");
        make_old(&path, tables);
        let b = SqliteBroker::open(&path).unwrap_or_else(|e| panic!("{label}: {e:#}"));
        old_rows_are_usable(&b, &label).await;
        drop(b);
        assert_eq!(user_version(&path), 8, "{label}");
        let done: i64 = Connection::open(&path)
            .unwrap()
            .query_row("SELECT done FROM counters WHERE queue = 'q'", [], |r| {
                r.get(0)
            })
            .unwrap();
        assert_eq!(done, 7 + 2, "{label}: the old count and the two acks");
        let upgraded = shape(&path);
        assert!(
            upgraded == fresh,
            "{label} ends unlike a new one: {}",
            first_difference(&upgraded, &fresh)
        );
    }
}

/// A file of version 5 with a table in the way of version 6's index: the
/// upgrade fails, names version 6, its file and SQLite's reason, and
/// leaves the file, its version and its rows as they were.
#[test]
fn a_migration_that_cannot_apply_leaves_the_file_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("blocked.db");
    make_old(&path, OLD_FILES[7].1);
    Connection::open(&path)
        .unwrap()
        .execute_batch("CREATE TABLE messages_group (note TEXT)")
        .unwrap();
    let before = shape(&path);
    let err = format!("{:#}", SqliteBroker::open(&path).err().unwrap());
    for part in [
        "version 6",
        "migrations/0006_groups.sql",
        "there is already a table named messages_group",
        "left as it was (version 5)",
    ] {
        assert!(err.contains(part), "{part:?} in {err}");
    }
    assert_eq!(shape(&path), before);
    assert_eq!(user_version(&path), 5);
    let rows: (i64, i64) = Connection::open(&path)
        .unwrap()
        .query_row(
            "SELECT (SELECT count(*) FROM messages), (SELECT count(*) FROM dead)",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!(rows, (1, 1));
}
