//! The queue role on PostgreSQL: one statement per batch. Receiving picks
//! due rows with `FOR UPDATE SKIP LOCKED` and leases them in the same
//! statement; claiming keys, settling and extending leases are the schema's
//! functions (`migrations/`), given one array per field. A queue with flow
//! limits is received by `lease_limited` instead: its receives take turns
//! on the queue's row of `flow`, which holds its rate bucket, and each
//! counts the leases the one before it took. Ordered groups are kept by
//! `enqueue` and `settle` (see `groups.rs`).

use std::time::Duration;

use async_trait::async_trait;

use super::{PgBroker, classify};
use crate::codec::{
    SETTLED_KEPT, decode_headers, encode_headers, lease_expired, settle_digest, written_again,
};
use crate::message::{Delivery, NewMessage, new_id};
use crate::{ClaimState, Flow, KeyClaim, Lease, OrderedGroups, Queue, Result, Settlement};

/// Lease up to $2 due messages of queue $1 for $3 ms, with `lease_due`
/// (`migrations/0003_receive_on_index.sql`). A row whose lease ran out
/// gets the lease-expired text ($4, with its attempt number in place of
/// `u32::MAX`) as its last error.
/// Each row comes back with the due time and row number it was picked by.
/// Its receipt starts with that row number (`new_receipt`), which is how
/// settling finds the row. (`lease_limited` leases the same way, for a
/// queue with flow limits.)
const RECEIVE: &str = "SELECT * FROM lease_due($1, $2, $3, $4)";

#[async_trait]
impl Queue for PgBroker {
    async fn publish(&self, messages: Vec<NewMessage>) -> Result<Vec<String>> {
        let ids: Vec<String> = messages.iter().map(|_| new_id()).collect();
        let mut batch = Publishes::default();
        for (id, m) in ids.iter().zip(&messages) {
            batch.push(id.clone(), m);
        }
        let conn = self.conn("publishing").await?;
        batch
            .enqueue(&**conn, "enqueue")
            .await
            .map_err(|e| classify("publishing", e))?;
        Ok(ids)
    }

    async fn receive(
        &self,
        queue: &str,
        max: usize,
        lease: Duration,
        flow: Flow,
    ) -> Result<Vec<Delivery>> {
        if max == 0 {
            return Ok(Vec::new());
        }
        self.lease_due(queue, max, lease, flow).await
    }

    async fn claim(
        &self,
        queue: &str,
        claims: &[KeyClaim],
        lease: Duration,
    ) -> Result<Vec<ClaimState>> {
        if claims.is_empty() {
            return Ok(Vec::new());
        }
        let keys: Vec<&str> = claims.iter().map(|c| c.key.as_str()).collect();
        let holders: Vec<&str> = claims.iter().map(|c| c.holder.as_str()).collect();
        let conn = self.conn("taking idempotency keys").await?;
        let row = conn
            .query_one(
                "SELECT claim($1, $2, $3, $4)",
                &[&queue, &keys, &holders, &(lease.as_millis() as i64)],
            )
            .await
            .map_err(|e| classify("taking idempotency keys", e))?;
        let states: Vec<i32> = row.get(0);
        Ok(states
            .into_iter()
            .map(|s| match s {
                0 => ClaimState::Acquired,
                1 => ClaimState::AlreadyDone,
                _ => ClaimState::Busy,
            })
            .collect())
    }

    async fn settle(&self, settlements: &[Settlement]) -> Result<()> {
        if settlements.is_empty() {
            return Ok(());
        }
        let args = SettleArgs::new(settlements);
        let digest = settle_digest(settlements);
        let keep = SETTLED_KEPT.as_millis() as i64;
        let conn = self.conn("settling").await?;
        let row = conn
            .query_one(
                "SELECT settle_once($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13,
                                    $14, $15, $16, $17, $18, $19, $20)",
                &[
                    &digest,
                    &keep,
                    &args.kinds,
                    &args.ids,
                    &args.receipts,
                    &args.queues,
                    &args.keys,
                    &args.retentions,
                    &args.delays,
                    &args.errors,
                    &args.reasons,
                    &args.versions,
                    &args.attempts,
                    &args.owners,
                    &args.publishes.ids,
                    &args.publishes.queues,
                    &args.publishes.keys,
                    &args.publishes.payloads,
                    &args.publishes.headers,
                    &args.publishes.delays,
                ],
            )
            .await
            .map_err(|e| classify("settling", e))?;
        let Some(states) = row.get::<_, Option<Vec<i32>>>(0) else {
            written_again(&settlements[0].delivery().queue, settlements.len());
            return Ok(());
        };
        self.churn.add(settlements.len());
        self.wake_delayed(settlements, &states);
        let lost: Vec<&str> = settlements
            .iter()
            .zip(&states)
            .filter(|(_, st)| **st == 0)
            .map(|(s, _)| s.delivery().id.as_str())
            .collect();
        if !lost.is_empty() {
            tracing::warn!(ids = ?lost, "settlements refused: their deliveries had lost their leases (the messages were delivered again)");
        }
        Ok(())
    }

    /// Two: each call runs on its own connection, in its own server
    /// process, so a second batch is applied while the first commits. On 2
    /// cores, `hello` reuse drains settled one batch at a time for 30–31 ms
    /// a thousand messages, the whole drain long; with two at once they
    /// were 7–16 % faster (see the README), and three or four no faster.
    fn settle_writes(&self, _ordered: bool) -> usize {
        2
    }

    async fn extend(&self, queue: &str, leases: &[Lease], lease: Duration) -> Result<Vec<bool>> {
        if leases.is_empty() {
            return Ok(Vec::new());
        }
        let ids: Vec<&str> = leases.iter().map(|l| l.id.as_str()).collect();
        let receipts: Vec<&str> = leases.iter().map(|l| l.receipt.as_str()).collect();
        let keys: Vec<Option<&str>> = leases.iter().map(|l| l.key.as_deref()).collect();
        let conn = self.conn("extending leases").await?;
        let row = conn
            .query_one(
                "SELECT extend($1, $2, $3, $4, $5)",
                &[&queue, &ids, &receipts, &keys, &(lease.as_millis() as i64)],
            )
            .await
            .map_err(|e| classify("extending leases", e))?;
        Ok(row.get(0))
    }

    /// Wait for `queue`'s notification, up to its next due time (at least
    /// `up_to`, so that rows another host is leasing right now are not
    /// polled in a spin) or the fallback for a notification missed at most:
    /// `wake::LISTENING_WAIT` while the listening connection is up,
    /// `wake::MAX_WAIT` while it is down.
    async fn idle(&self, queue: &str, up_to: Duration) {
        let wake = self.wakes.of(queue);
        let woken = wake.notified();
        tokio::pin!(woken);
        // Waiting starts before looking, so that a wake-up sent in between
        // is not missed.
        woken.as_mut().enable();
        let most = self.wakes.most();
        let wait = match self.until_due(queue).await {
            Ok(Some(wait)) => wait.clamp(up_to.min(most), most),
            Ok(None) => most,
            Err(_) => up_to,
        };
        let _ = tokio::time::timeout(wait, woken).await;
    }

    async fn set_ordering(&self, queue: &str, ordering: Option<&OrderedGroups>) -> Result<()> {
        self.order(queue, ordering).await?;
        // A changed ordering may let waiting messages go, unannounced: this
        // host's idle receivers look again (every host sets its handlers'
        // orderings again each STATUS_EVERY).
        self.wakes.wake(queue);
        Ok(())
    }
}

impl PgBroker {
    /// Wake this process's idle receivers of the queues whose messages
    /// went back with a delay (a retry, snooze or hand-back the schema does
    /// not notify, as they are not due yet), so that they wait for the new
    /// due time rather than the one they saw before. `states`: what the
    /// schema answered for each settlement, 0 for a lost lease.
    fn wake_delayed(&self, settlements: &[Settlement], states: &[i32]) {
        let mut woken: Vec<&str> = Vec::new();
        for (s, st) in settlements.iter().zip(states) {
            let delayed = match s {
                Settlement::Retry { delay, .. }
                | Settlement::Defer { delay, .. }
                | Settlement::Snooze { delay, .. } => !delay.is_zero(),
                _ => false,
            };
            let queue = s.delivery().queue.as_str();
            if delayed && *st > 0 && !woken.contains(&queue) {
                woken.push(queue);
                self.wakes.wake(queue);
            }
        }
    }

    /// Lease up to `max` due messages of `queue`, oldest due first, fewer
    /// when `flow` says so. Only a queue with flow limits goes through
    /// `lease_limited` and its lock; the rest pick with one plain
    /// statement, so that limits not set cost nothing.
    async fn lease_due(
        &self,
        queue: &str,
        max: usize,
        lease: Duration,
        flow: Flow,
    ) -> Result<Vec<Delivery>> {
        let conn = self.conn("receiving").await?;
        let (max, lease, expired) = (
            max as i64,
            lease.as_millis() as i64,
            lease_expired(u32::MAX),
        );
        let rows = if flow == Flow::default() {
            conn.query(RECEIVE, &[&queue, &max, &lease, &expired]).await
        } else {
            let limit = flow.max_in_flight.map(i64::from);
            let per_ms = flow.rate.map(|r| r.per_ms());
            let burst = flow.rate.map(|r| r.burst());
            conn.query(
                "SELECT * FROM lease_limited($1, $2, $3, $4, $5, $6, $7)",
                &[&queue, &max, &lease, &expired, &limit, &per_ms, &burst],
            )
            .await
        }
        .map_err(|e| classify("receiving", e))?;
        self.churn.add(rows.len());
        let mut out: Vec<(i64, i64, Delivery)> = rows
            .iter()
            .map(|row| {
                let headers: Option<String> = row.get(3);
                let delivery = Delivery {
                    id: row.get(0),
                    queue: queue.to_string(),
                    key: row.get(1),
                    payload: row.get(2),
                    headers: headers.map_or_else(Vec::new, |h| decode_headers(h.as_bytes())),
                    attempt: row.get::<_, i32>(4) as u32,
                    enqueued_at_us: row.get::<_, i64>(5) as u64,
                    last_error: row.get(6),
                    receipt: row.get(7),
                    lease_until_ms: row.get::<_, i64>(8) as u64,
                    group: row.get(9),
                    snoozes: row.get::<_, i32>(10) as u32,
                };
                (row.get(11), row.get(12), delivery)
            })
            .collect();
        // UPDATE ... RETURNING gives rows in no set order: put them back in
        // the order they were picked, oldest due first, then published.
        out.sort_by_key(|(due, seq, _)| (*due, *seq));
        Ok(out.into_iter().map(|(_, _, d)| d).collect())
    }

    /// How long until the next message of `queue` is due (or its lease
    /// runs out); `None` when it has none.
    async fn until_due(&self, queue: &str) -> Result<Option<Duration>> {
        let conn = self.conn("receiving").await?;
        let row = conn
            .query_one(
                "SELECT min(visible_at) - now_ms() FROM messages WHERE queue = $1",
                &[&queue],
            )
            .await
            .map_err(|e| classify("receiving", e))?;
        let ms: Option<i64> = row.get(0);
        Ok(ms.map(|ms| Duration::from_millis(ms.max(0) as u64)))
    }
}

/// Messages to enqueue, one array per column, as `enqueue` takes them.
#[derive(Default)]
pub(super) struct Publishes {
    ids: Vec<String>,
    queues: Vec<String>,
    keys: Vec<Option<String>>,
    payloads: Vec<Vec<u8>>,
    headers: Vec<Option<String>>,
    delays: Vec<i64>,
}

impl Publishes {
    /// Add message `m` as `id`.
    pub(super) fn push(&mut self, id: String, m: &NewMessage) {
        self.ids.push(id);
        self.queues.push(m.queue.clone());
        self.keys.push(m.key.clone());
        self.payloads.push(m.payload.clone());
        self.headers.push(encode_headers(&m.headers));
        self.delays.push(m.delay.as_millis() as i64);
    }

    /// Enqueue them all in one statement on `client`, through the schema's
    /// `enqueue` named as `function` (schema-qualified on a connection
    /// whose search path is not the broker's).
    pub(super) async fn enqueue(
        &self,
        client: &impl tokio_postgres::GenericClient,
        function: &str,
    ) -> std::result::Result<u64, tokio_postgres::Error> {
        client
            .execute(
                &format!("SELECT {function}($1, $2, $3, $4, $5, $6)"),
                &[
                    &self.ids,
                    &self.queues,
                    &self.keys,
                    &self.payloads,
                    &self.headers,
                    &self.delays,
                ],
            )
            .await
    }
}

/// A settle batch as `settle` takes it: one array per field, and the
/// publishes with the (1-based) settlement each belongs to.
#[derive(Default)]
struct SettleArgs {
    kinds: Vec<&'static str>,
    ids: Vec<String>,
    receipts: Vec<String>,
    queues: Vec<String>,
    keys: Vec<Option<String>>,
    retentions: Vec<i64>,
    delays: Vec<i64>,
    errors: Vec<Option<String>>,
    reasons: Vec<Option<String>>,
    versions: Vec<Option<String>>,
    attempts: Vec<i32>,
    owners: Vec<i32>,
    publishes: Publishes,
}

impl SettleArgs {
    fn new(settlements: &[Settlement]) -> Self {
        let mut a = SettleArgs::default();
        for (i, s) in settlements.iter().enumerate() {
            let d = s.delivery();
            let f = Fields::of(s);
            a.kinds.push(f.kind);
            a.ids.push(d.id.clone());
            a.receipts.push(d.receipt.clone());
            a.queues.push(d.queue.clone());
            a.keys.push(s.key().map(str::to_string));
            a.retentions.push(f.retention.as_millis() as i64);
            a.delays.push(f.delay.as_millis() as i64);
            a.errors.push(f.error);
            a.reasons.push(f.reason);
            a.versions.push(f.version);
            a.attempts.push(d.attempt as i32);
            for m in f.publishes {
                a.owners.push(i as i32 + 1);
                a.publishes.push(new_id(), m);
            }
        }
        a
    }
}

/// What one settlement gives `settle` besides its delivery and key.
#[derive(Default)]
struct Fields<'a> {
    kind: &'static str,
    retention: Duration,
    delay: Duration,
    error: Option<String>,
    reason: Option<String>,
    version: Option<String>,
    publishes: &'a [NewMessage],
}

impl<'a> Fields<'a> {
    fn of(s: &'a Settlement) -> Self {
        match s {
            Settlement::Done { key, publishes, .. } => Fields {
                kind: "D",
                retention: key.as_ref().map_or(Duration::ZERO, |(_, r)| *r),
                publishes,
                ..Fields::default()
            },
            Settlement::Duplicate { .. } => Fields {
                kind: "U",
                ..Fields::default()
            },
            Settlement::Retry { delay, error, .. } => Fields {
                kind: "R",
                delay: *delay,
                error: Some(error.clone()),
                ..Fields::default()
            },
            Settlement::Defer { delay, .. } => Fields {
                kind: "F",
                delay: *delay,
                ..Fields::default()
            },
            Settlement::Snooze { delay, .. } => Fields {
                kind: "S",
                delay: *delay,
                ..Fields::default()
            },
            Settlement::Dead {
                reason,
                error,
                handler_version,
                notice,
                ..
            } => Fields {
                kind: "X",
                error: error.clone(),
                reason: Some(reason.clone()),
                version: handler_version.clone(),
                publishes: notice.as_slice(),
                ..Fields::default()
            },
        }
    }
}
