//! Creating the broker's schema and bringing it up to this build's version.
//!
//! The schema is the SQL files in `migrations/`, one a version, numbered
//! from 1: `0001_schema.sql` makes every role's tables and functions, and
//! each later file changes them in place, replacing only the functions it
//! changes, so that a database made by any version reaches the same
//! schema. A database at version N gets the files after N, in order, in
//! one transaction with the version they reach: when one fails, none is
//! applied, and the error names the version, its file and the server's
//! reason. Hosts that start at once take turns on an advisory lock named
//! after the schema, so each step runs exactly once. A schema from a newer
//! sluice is refused rather than used: its tables may mean things this
//! build does not know.

use tokio_postgres::{Client, Transaction};

/// One version of the schema: its number and the file that makes it.
struct Migration {
    version: i32,
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

/// Every version, the first one first.
const MIGRATIONS: &[Migration] = &[
    migration!(1, "0001_schema.sql"),
    migration!(2, "0002_receipts_name_rows.sql"),
    migration!(3, "0003_receive_on_index.sql"),
    migration!(4, "0004_plan_per_batch.sql"),
    migration!(5, "0005_leased_index.sql"),
    migration!(6, "0006_settle_only_leased.sql"),
    migration!(7, "0007_settle_once.sql"),
    migration!(8, "0008_publish_checks.sql"),
    migration!(9, "0009_microseconds.sql"),
];

/// The schema version this build writes.
pub(super) const VERSION: i32 = MIGRATIONS.len() as i32;

/// Create `schema` if it is missing and bring it up to [`VERSION`]. The
/// connection's search path names `schema`.
pub(super) async fn prepare(client: &mut Client, schema: &str) -> anyhow::Result<()> {
    let tx = client.transaction().await?;
    tx.execute(
        "SELECT pg_advisory_xact_lock(hashtext($1))",
        &[&format!("sluice schema {schema}")],
    )
    .await?;
    ensure_schema(&tx, schema).await?;
    tx.batch_execute("CREATE TABLE IF NOT EXISTS schema_version (version integer NOT NULL)")
        .await?;
    let version: i32 = tx
        .query_opt("SELECT max(version) FROM schema_version", &[])
        .await?
        .and_then(|r| r.get::<_, Option<i32>>(0))
        .unwrap_or(0);
    if version > VERSION {
        anyhow::bail!(
            "schema {schema:?} was written by a newer sluice (schema version {version}; this one knows versions up to {VERSION}): run that sluice, or name another schema with ?schema=NAME"
        );
    }
    apply(&tx, schema, version).await?;
    if version < VERSION {
        tx.execute("DELETE FROM schema_version", &[]).await?;
        tx.execute(
            "INSERT INTO schema_version (version) VALUES ($1)",
            &[&VERSION],
        )
        .await?;
    }
    tx.commit().await?;
    Ok(())
}

/// Apply the versions after `version`, in order, in `tx`: the first that
/// fails stops it, named with its file and why, and the caller's
/// transaction, rolled back, leaves the schema as it was.
async fn apply(tx: &Transaction<'_>, schema: &str, version: i32) -> anyhow::Result<()> {
    for step in MIGRATIONS.iter().skip(version as usize) {
        tx.batch_execute(step.sql).await.map_err(|e| {
            anyhow::anyhow!(
                "upgrading schema {schema:?} to version {} (migrations/{}) failed, and the schema was left as it was (version {version}): {}",
                step.version,
                step.file,
                db_message(&e)
            )
        })?;
    }
    Ok(())
}

/// Create `schema` when it is missing; refuse one this role may not create
/// tables in, naming its owner.
async fn ensure_schema(tx: &Transaction<'_>, schema: &str) -> anyhow::Result<()> {
    let owner = tx
        .query_opt(
            "SELECT pg_get_userbyid(nspowner), has_schema_privilege(nspname, 'CREATE'),
                    current_user::text
             FROM pg_namespace WHERE nspname = $1",
            &[&schema],
        )
        .await?;
    match owner {
        None => tx
            .batch_execute(&format!("CREATE SCHEMA {schema}"))
            .await
            .map_err(|e| {
                anyhow::anyhow!(
                    "cannot create schema {schema:?} ({}): grant the role CREATE on the database, or create the schema for it (CREATE SCHEMA {schema} AUTHORIZATION <role>)",
                    db_message(&e)
                )
            })?,
        Some(row) => {
            let (owner, can_create, me): (String, bool, String) = (row.get(0), row.get(1), row.get(2));
            if !can_create {
                anyhow::bail!(
                    "schema {schema:?} belongs to role {owner:?}, and role {me:?} may not create tables in it: name another schema with ?schema=NAME in the broker URL, or have {owner:?} run GRANT USAGE, CREATE ON SCHEMA {schema} TO {me}"
                );
            }
        }
    }
    Ok(())
}

/// The server's message for a database error, else the error.
fn db_message(e: &tokio_postgres::Error) -> String {
    e.as_db_error()
        .map_or_else(|| e.to_string(), |d| d.message().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
