//! Keeping the hot table small. Every message is a row inserted, updated
//! when leased and deleted when settled, so a busy queue leaves dead row
//! versions behind faster than autovacuum, which looks at a database once
//! a minute by default, comes round to remove them: left alone, the
//! `messages` table of a long drain grows without bound (a harness run
//! measured 47 × its size after a million messages). So each broker
//! vacuums the tables it churns itself, as soon as it has changed enough
//! rows since its last vacuum, and at most once per [`EVERY`]: `VACUUM
//! (SKIP_LOCKED)`, so that hosts never queue up behind each other's.
//! The idempotency keys, a much larger table when their retention is long,
//! are vacuumed one time in [`KEYS_EVERY`].

use std::sync::Weak;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use deadpool_postgres::Pool;

/// How often the vacuumer looks at the count of changed rows.
const EVERY: Duration = Duration::from_secs(1);
/// Rows changed (leased or settled) that make a vacuum worth its scan.
const THRESHOLD: u64 = 5_000;
/// The keys are vacuumed along with the messages one time in this many.
const KEYS_EVERY: u32 = 10;

/// Rows this broker changed since its last vacuum.
#[derive(Default)]
pub(super) struct Churn(AtomicU64);

impl Churn {
    /// Note `rows` rows of `messages` changed.
    pub(super) fn add(&self, rows: usize) {
        self.0.fetch_add(rows as u64, Ordering::Relaxed);
    }
}

/// Vacuum as long as the broker that owns `churn` is alive.
pub(super) async fn run(pool: Pool, churn: Weak<Churn>) {
    let mut rounds = 0u32;
    let mut warned = false;
    loop {
        tokio::time::sleep(EVERY).await;
        let Some(churn) = churn.upgrade() else { return };
        if churn.0.load(Ordering::Relaxed) < THRESHOLD {
            continue;
        }
        churn.0.store(0, Ordering::Relaxed);
        drop(churn);
        rounds += 1;
        let tables = if rounds.is_multiple_of(KEYS_EVERY) {
            "messages, keys"
        } else {
            "messages"
        };
        let conn = match pool.get().await {
            Ok(conn) => conn,
            // The server is away: the receivers say so; try next time.
            Err(e) => {
                tracing::debug!(error = %e, "no connection to vacuum {tables} with");
                continue;
            }
        };
        match conn
            .batch_execute(&format!("VACUUM (SKIP_LOCKED) {tables}"))
            .await
        {
            Ok(()) => {}
            // Once, then quietly: the server refused it (the receivers
            // report a connection lost, which has no code).
            Err(e) if !warned && e.code().is_some() => {
                warned = true;
                tracing::warn!(error = %e, "the PostgreSQL broker could not vacuum {tables}; its tables grow until autovacuum comes round");
            }
            Err(e) => {
                tracing::debug!(error = %e, "the PostgreSQL broker could not vacuum {tables}")
            }
        }
    }
}
