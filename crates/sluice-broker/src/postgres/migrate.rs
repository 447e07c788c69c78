//! Creating the broker's schema and bringing it up to this build's version.
//!
//! Each version is one SQL file, run once, in order, in one transaction
//! with the version it reaches. Hosts that start at once take turns on an
//! advisory lock named after the schema, so each step runs exactly once. A
//! schema from a newer sluice is refused rather than used: its tables may
//! mean things this build does not know.

use tokio_postgres::Client;

use super::{dead, kv, presence, queue, schedules, topics};

/// The schema version this build writes.
pub(super) const VERSION: i32 = MIGRATIONS.len() as i32;

/// The SQL of each version, the first one first: each role's part. A
/// later version changes an earlier one's objects in place, so that a
/// database made by any version reaches the same schema.
const MIGRATIONS: &[&[&str]] = &[
    &[
        queue::SCHEMA,
        dead::SCHEMA,
        presence::SCHEMA,
        kv::SCHEMA,
        topics::SCHEMA,
        schedules::SCHEMA,
    ],
    &[queue::SCHEMA_V2],
    &[queue::SCHEMA_V3],
    &[queue::SCHEMA_V4],
    &[queue::SCHEMA_V5],
    &[queue::SCHEMA_V6],
    &[queue::SCHEMA_V7],
    &[queue::SCHEMA_V8],
];

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
    for (i, parts) in MIGRATIONS.iter().enumerate().skip(version as usize) {
        tx.batch_execute(&parts.concat()).await.map_err(|e| {
            anyhow::anyhow!(
                "upgrading schema {schema:?} to version {} failed: {}",
                i + 1,
                db_message(&e)
            )
        })?;
    }
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

/// Create `schema` when it is missing; refuse one this role may not create
/// tables in, naming its owner.
async fn ensure_schema(tx: &tokio_postgres::Transaction<'_>, schema: &str) -> anyhow::Result<()> {
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
