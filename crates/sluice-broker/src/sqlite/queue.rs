//! The queue role on SQLite: messages in `messages`, idempotency keys in
//! `keys`, done/duplicate/retry counts in `counters`. Every function runs
//! inside the caller's savepoint on the broker thread, so each is atomic on
//! its own, and a settle batch commits with its publishes.

use std::collections::HashMap;
use std::time::Duration;

use async_trait::async_trait;
use rusqlite::{Connection, OptionalExtension, params};

use super::{SqliteBroker, classify, dead, groups, wake};
use crate::codec::{decode_headers, encode_headers, lease_expired, settle_digest, written_again};
use crate::message::{Delivery, NewMessage, new_id, now_ms, now_us};
use crate::{
    ClaimState, Flow, KeyClaim, KeyOf, Lease, OrderedGroups, Queue, Rate, Received, Result,
    Settlement, claims_of,
};

#[async_trait]
impl Queue for SqliteBroker {
    async fn publish(&self, messages: Vec<NewMessage>) -> Result<Vec<String>> {
        self.call(move |conn| insert_messages(conn, &messages, now_ms()))
            .await
    }

    async fn receive(
        &self,
        queue: &str,
        max: usize,
        lease: Duration,
        flow: Flow,
    ) -> Result<Vec<Delivery>> {
        self.seen_now(queue);
        let queue = queue.to_string();
        self.call_unsynced(move |conn| receive(conn, &queue, max, lease, flow))
            .await
    }

    async fn claim(
        &self,
        queue: &str,
        claims: &[KeyClaim],
        lease: Duration,
    ) -> Result<Vec<ClaimState>> {
        let queue = queue.to_string();
        let claims = claims.to_vec();
        self.call_unsynced(move |conn| claim(conn, &queue, &claims, lease))
            .await
    }

    /// One job on the broker thread: the leases and the keys they take
    /// commit together (without an fsync, as each would alone), or neither.
    async fn receive_claiming(
        &self,
        queue: &str,
        max: usize,
        lease: Duration,
        flow: Flow,
        key_of: &KeyOf,
    ) -> Result<Received> {
        self.seen_now(queue);
        let queue = queue.to_string();
        let key_of = key_of.clone();
        self.call_unsynced(move |conn| {
            let deliveries = receive(conn, &queue, max, lease, flow)?;
            let keys: Vec<Option<String>> = deliveries.iter().map(|d| key_of(d)).collect();
            let claims = claim(
                conn,
                &queue,
                &claims_of(deliveries.iter().zip(&keys)),
                lease,
            )?;
            Ok(Received {
                deliveries,
                keys,
                claims: Ok(claims),
            })
        })
        .await
    }

    fn claims_with_receive(&self) -> bool {
        true
    }

    /// A write this broker committed a moment ago, sent again, is not
    /// applied again: on SQLite that takes only the memory of the last
    /// few, as a write's answer cannot be lost between the broker thread
    /// and its caller; the write is sent again only by a caller that got
    /// it twice.
    async fn settle(&self, settlements: &[Settlement]) -> Result<()> {
        if settlements.is_empty() {
            return Ok(());
        }
        let digest = settle_digest(settlements);
        if self.settled.lock().expect("settled lock").has(&digest) {
            written_again(&settlements[0].delivery().queue, settlements.len());
            return Ok(());
        }
        // The broker thread needs its own copy.
        let settlements = settlements.to_vec();
        self.call(move |conn| settle(conn, settlements)).await?;
        self.settled.lock().expect("settled lock").add(digest);
        Ok(())
    }

    async fn extend(&self, queue: &str, leases: &[Lease], lease: Duration) -> Result<Vec<bool>> {
        let (queue, leases) = (queue.to_string(), leases.to_vec());
        self.call_unsynced(move |conn| extend(conn, &queue, &leases, lease))
            .await
    }

    async fn set_ordering(&self, queue: &str, ordering: Option<&OrderedGroups>) -> Result<()> {
        let (queue, ordering) = (queue.to_string(), ordering.cloned());
        self.call(move |conn| {
            groups::set_ordering(conn, &queue, ordering.as_ref(), now_ms() as i64)
        })
        .await
    }

    /// Wait for `queue` to ring (see `wake.rs`), unless it has rung since
    /// its last receive began, or for its next message's due time (at
    /// least `up_to`, so that a message due but not taken, held back by a
    /// flow limit, is not looked at in a spin), or for
    /// 30 s at most (`wake::WATCHED_WAIT`). Where the file's doorbells are not
    /// watched, for `up_to` at most, as a poll.
    async fn idle(&self, queue: &str, up_to: Duration) {
        if !self.bells.on() {
            tokio::time::sleep(up_to).await;
            return;
        }
        let bell = self.bells.of(queue);
        let woken = bell.notify().notified();
        tokio::pin!(woken);
        // Waiting starts before looking, so that a ring in between is not
        // missed.
        woken.as_mut().enable();
        let seen = self.seen.lock().expect("seen lock").get(queue).copied();
        if seen != Some(bell.rung()) {
            return;
        }
        let most = if self.bells.watched() {
            wake::WATCHED_WAIT
        } else {
            up_to
        };
        let wait = match self.until_due(queue).await {
            Ok(Some(wait)) => wait.clamp(up_to.min(most), most),
            Ok(None) => most,
            Err(_) => up_to,
        };
        let _ = tokio::time::timeout(wait, woken).await;
    }
}

impl SqliteBroker {
    /// Note how many times `queue` has rung, as a receive of it begins.
    fn seen_now(&self, queue: &str) {
        if !self.bells.on() {
            return;
        }
        let rung = self.bells.of(queue).rung();
        let mut seen = self.seen.lock().expect("seen lock");
        match seen.get_mut(queue) {
            Some(at) => *at = rung,
            None => {
                seen.insert(queue.to_string(), rung);
            }
        }
    }

    /// How long until `queue`'s next message is due (zero: one is due
    /// now); `None` when it has none, or only ones waiting in their groups.
    async fn until_due(&self, queue: &str) -> Result<Option<Duration>> {
        let queue = queue.to_string();
        let next: Option<i64> = self
            .read(move |conn| {
                conn.prepare_cached("SELECT min(visible_at) FROM messages WHERE queue = ?1")
                    .and_then(|mut s| s.query_row([&queue], |r| r.get(0)))
                    .map_err(classify)
            })
            .await?;
        Ok(next
            .filter(|&at| at < groups::WAITING)
            .map(|at| Duration::from_millis((at - now_ms() as i64).max(0) as u64)))
    }
}

/// The digests of the last [`Settled::KEPT`] settle writes that committed.
#[derive(Default)]
pub(super) struct Settled(std::collections::VecDeque<String>);

impl Settled {
    const KEPT: usize = 64;

    fn has(&self, digest: &str) -> bool {
        self.0.iter().any(|d| d == digest)
    }

    fn add(&mut self, digest: String) {
        if self.0.len() == Self::KEPT {
            self.0.pop_front();
        }
        self.0.push_back(digest);
    }
}

/// Insert `messages`, each due after its own delay from `now` (enqueued
/// now, to the microsecond); their ids.
/// Each queue is remembered in `queues`, which `stats` lists. A message of
/// an ordered queue takes its group, and waits if its group has a message
/// before it.
pub(super) fn insert_messages(
    conn: &Connection,
    messages: &[NewMessage],
    now: u64,
) -> Result<Vec<String>> {
    let orderings = known_queues(conn, messages)?;
    let mut stmt = conn
        .prepare_cached(
            "INSERT INTO messages (id, queue, key, payload, headers, enqueued_us, visible_at, grp, held_due)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
        )
        .map_err(classify)?;
    let mut ids = Vec::with_capacity(messages.len());
    let mut ungrouped: HashMap<&str, i64> = HashMap::new();
    let enqueued = now_us() as i64;
    for m in messages {
        let id = new_id();
        let key = m.key.as_deref().unwrap_or(&id);
        let due = (now + m.delay.as_millis() as u64) as i64;
        let grp = orderings[m.queue.as_str()].as_ref().and_then(|o| {
            let grp = o.group_of(&m.headers, &m.payload);
            if grp.is_none() {
                tracing::debug!(queue = %m.queue, id = %id, group = ?o.group, "a message of an ordered queue has no group value; it is handled unordered");
                *ungrouped.entry(m.queue.as_str()).or_default() += 1;
            }
            grp
        });
        let waits = match grp.as_deref() {
            Some(g) => groups::must_wait(conn, &m.queue, g)?,
            None => false,
        };
        let (visible_at, held_due) = groups::placement(waits, due);
        if !waits {
            wake::ring_later(&m.queue);
        }
        stmt.execute(params![
            id,
            m.queue,
            key,
            m.payload,
            encode_headers(&m.headers),
            enqueued,
            visible_at,
            grp,
            held_due
        ])
        .map_err(classify)?;
        ids.push(id);
    }
    count_ungrouped(conn, ungrouped)?;
    Ok(ids)
}

/// Remember the queues of `messages` in `queues`; their orderings.
fn known_queues<'a>(
    conn: &Connection,
    messages: &'a [NewMessage],
) -> Result<HashMap<&'a str, Option<OrderedGroups>>> {
    let mut known = conn
        .prepare_cached("INSERT OR IGNORE INTO queues (queue) VALUES (?1)")
        .map_err(classify)?;
    let mut orderings = HashMap::new();
    for m in messages {
        if !orderings.contains_key(m.queue.as_str()) {
            known.execute([&m.queue]).map_err(classify)?;
            orderings.insert(m.queue.as_str(), groups::ordering_of(conn, &m.queue)?);
        }
    }
    Ok(orderings)
}

/// Add to each queue's count of messages published without a group value.
fn count_ungrouped(conn: &Connection, ungrouped: HashMap<&str, i64>) -> Result<()> {
    let mut bump = conn
        .prepare_cached(
            "INSERT INTO counters (queue, ungrouped) VALUES (?1, ?2)
             ON CONFLICT (queue) DO UPDATE SET ungrouped = ungrouped + ?2",
        )
        .map_err(classify)?;
    for (queue, n) in ungrouped {
        bump.execute(params![queue, n]).map_err(classify)?;
    }
    Ok(())
}

/// Lease up to `max` due messages of `queue`: pick them, then mark each
/// leased with a new receipt and one more attempt.
fn receive(
    conn: &Connection,
    queue: &str,
    max: usize,
    lease: Duration,
    flow: Flow,
) -> Result<Vec<Delivery>> {
    let now = now_ms();
    let lease_until = now + lease.as_millis() as u64;
    let (max, tokens) = allowed(conn, queue, max, flow, now)?;
    if max == 0 {
        return Ok(Vec::new());
    }
    let picked = pick_due(conn, queue, max, now, lease_until)?;
    if let (Some(tokens), false) = (tokens, picked.is_empty()) {
        store_tokens(conn, queue, tokens - picked.len() as f64, now)?;
    }
    let mut update = conn
        .prepare_cached(
            "UPDATE messages SET leased = 1, visible_at = ?2, receipt = ?3, attempt = ?4, last_error = ?5
             WHERE seq = ?1",
        )
        .map_err(classify)?;
    let mut out = Vec::with_capacity(picked.len());
    for (seq, d) in picked {
        update
            .execute(params![
                seq,
                lease_until as i64,
                d.receipt,
                d.attempt,
                d.last_error
            ])
            .map_err(classify)?;
        out.push(d);
    }
    Ok(out)
}

/// The leases of queue ?1 that have not run out by ?2, counted on
/// [`LEASED_INDEX`].
const LEASED_NOW: &str =
    "SELECT count(*) FROM messages WHERE queue = ?1 AND leased = 1 AND visible_at > ?2";

/// The index [`LEASED_NOW`] counts on: the leased rows alone.
/// `messages_due` also holds every delayed message (a retry waiting out its
/// backoff, a message published with a delay), and counting there looked
/// each of them up, so each receive of a queue with `max_in_flight` cost
/// time in proportion to its delayed messages. Every lease adds an entry
/// and every settle takes one out, which cost the native drain of the
/// benchmark harness about 7% (about 2 µs more CPU a message), so a
/// file gets the index only when one of its queues is first received with
/// `max_in_flight`, and keeps it.
const LEASED_INDEX: &str =
    "CREATE INDEX IF NOT EXISTS messages_leased ON messages (queue, visible_at) WHERE leased = 1";

/// How many of `max` leases `flow` allows now: no more than
/// `max_in_flight` leased at once (leases that ran out do not count), nor
/// more than the whole tokens in the queue's rate bucket, refilled for the
/// time since it was last spent; with the tokens, when there is a rate.
/// Runs in the receive's transaction, so two hosts on one file cannot both
/// take the last place.
fn allowed(
    conn: &Connection,
    queue: &str,
    max: usize,
    flow: Flow,
    now: u64,
) -> Result<(usize, Option<f64>)> {
    let mut max = max;
    if let Some(limit) = flow.max_in_flight {
        conn.prepare_cached(LEASED_INDEX)
            .and_then(|mut s| s.execute([]))
            .map_err(classify)?;
        let leased: i64 = conn
            .prepare_cached(LEASED_NOW)
            .and_then(|mut s| s.query_row(params![queue, now as i64], |r| r.get(0)))
            .map_err(classify)?;
        max = max.min((i64::from(limit) - leased).max(0) as usize);
    }
    let Some(rate) = flow.rate.filter(|_| max > 0) else {
        return Ok((max, None));
    };
    let tokens = refilled(conn, queue, rate, now)?;
    Ok((max.min(tokens.floor().max(0.0) as usize), Some(tokens)))
}

/// The tokens in the queue's rate bucket, refilled to `now`; full for a
/// queue that has none yet. Refilling is linear up to the bucket's size,
/// so the bucket is written only when tokens are spent.
fn refilled(conn: &Connection, queue: &str, rate: Rate, now: u64) -> Result<f64> {
    let stored: Option<(f64, i64)> = conn
        .prepare_cached("SELECT tokens, updated_at FROM flow WHERE queue = ?1")
        .and_then(|mut s| {
            s.query_row([queue], |r| Ok((r.get(0)?, r.get(1)?)))
                .optional()
        })
        .map_err(classify)?;
    let burst = rate.burst();
    Ok(match stored {
        None => burst,
        Some((tokens, at)) => {
            let elapsed = now.saturating_sub(at.max(0) as u64) as f64;
            (tokens + elapsed * rate.per_ms()).min(burst)
        }
    })
}

/// Store the queue's bucket as holding `tokens` at `now`.
fn store_tokens(conn: &Connection, queue: &str, tokens: f64, now: u64) -> Result<()> {
    conn.prepare_cached(
        "INSERT INTO flow (queue, tokens, updated_at) VALUES (?1, ?2, ?3)
         ON CONFLICT (queue) DO UPDATE SET tokens = ?2, updated_at = ?3",
    )
    .and_then(|mut s| s.execute(params![queue, tokens, now as i64]))
    .map_err(classify)?;
    Ok(())
}

/// The due messages of `queue`, oldest due first, as the deliveries they
/// become, with their row numbers.
fn pick_due(
    conn: &Connection,
    queue: &str,
    max: usize,
    now: u64,
    lease_until: u64,
) -> Result<Vec<(i64, Delivery)>> {
    let mut select = conn
        .prepare_cached(
            "SELECT seq, id, key, payload, headers, attempt, enqueued_us, leased, last_error, grp,
                    snoozes
             FROM messages WHERE queue = ?1 AND visible_at <= ?2
             ORDER BY visible_at, seq LIMIT ?3",
        )
        .map_err(classify)?;
    let rows = select
        .query_map(params![queue, now as i64, max as i64], |row| {
            let attempt: u32 = row.get(5)?;
            let was_leased: bool = row.get(7)?;
            let last_error = if was_leased {
                Some(lease_expired(attempt))
            } else {
                row.get(8)?
            };
            let headers: Option<String> = row.get(4)?;
            let delivery = Delivery {
                id: row.get(1)?,
                queue: queue.to_string(),
                key: row.get(2)?,
                payload: row.get(3)?,
                headers: headers.map_or_else(Vec::new, |h| decode_headers(h.as_bytes())),
                attempt: attempt + 1,
                enqueued_at_us: row.get::<_, i64>(6)? as u64,
                last_error,
                receipt: format!("{:016x}", rand::random::<u64>()),
                lease_until_ms: lease_until,
                group: row.get(9)?,
                snoozes: row.get(10)?,
            };
            Ok((row.get(0)?, delivery))
        })
        .map_err(classify)?;
    rows.collect::<rusqlite::Result<_>>().map_err(classify)
}

fn claim(
    conn: &Connection,
    queue: &str,
    claims: &[KeyClaim],
    lease: Duration,
) -> Result<Vec<ClaimState>> {
    let now = now_ms() as i64;
    // One statement takes a key that is free, expired, or held by this same
    // delivery; a key it leaves as it is was done or held by another
    // delivery, which only then is read to tell which.
    let mut take = conn
        .prepare_cached(
            "INSERT INTO keys (queue, key, done, holder, expires_at) VALUES (?1, ?2, 0, ?3, ?4)
             ON CONFLICT (queue, key) DO UPDATE
             SET done = 0, holder = excluded.holder, expires_at = excluded.expires_at
             WHERE keys.expires_at <= ?5 OR (keys.done = 0 AND keys.holder = excluded.holder)",
        )
        .map_err(classify)?;
    let mut done = conn
        .prepare_cached("SELECT done FROM keys WHERE queue = ?1 AND key = ?2")
        .map_err(classify)?;
    let lease_until = now + lease.as_millis() as i64;
    let mut out = Vec::with_capacity(claims.len());
    for c in claims {
        let taken = take
            .execute(params![queue, c.key, c.holder, lease_until, now])
            .map_err(classify)?;
        let state = if taken == 1 {
            ClaimState::Acquired
        } else if done
            .query_row(params![queue, c.key], |r| r.get::<_, bool>(0))
            .map_err(classify)?
        {
            ClaimState::AlreadyDone
        } else {
            ClaimState::Busy
        };
        out.push(state);
    }
    Ok(out)
}

/// What a settle batch adds to one queue's counters.
#[derive(Default)]
struct Counts {
    done: i64,
    duplicates: i64,
    retried: i64,
    lost: i64,
}

fn settle(conn: &Connection, settlements: Vec<Settlement>) -> Result<()> {
    let now = now_ms() as i64;
    let mut counts: HashMap<String, Counts> = HashMap::new();
    let mut lost = Vec::new();
    for s in settlements {
        let c = counts.entry(s.delivery().queue.clone()).or_default();
        let id = s.delivery().id.clone();
        match settle_one(conn, s, now)? {
            Some(Counted::Done) => c.done += 1,
            Some(Counted::Duplicate) => c.duplicates += 1,
            Some(Counted::Retried) => c.retried += 1,
            Some(Counted::Nothing) => {}
            None => {
                c.lost += 1;
                lost.push(id);
            }
        }
    }
    if !lost.is_empty() {
        tracing::warn!(ids = ?lost, "settlements refused: their deliveries had lost their leases (the messages were delivered again)");
    }
    add_counts(conn, counts)
}

/// What a settlement that applied counts as.
enum Counted {
    Done,
    Duplicate,
    Retried,
    Nothing,
}

/// Apply one settlement, fenced by its receipt: `None` when its delivery
/// lost its lease, and nothing was applied.
fn settle_one(conn: &Connection, s: Settlement, now: i64) -> Result<Option<Counted>> {
    let at = |delay: Duration| now + delay.as_millis() as i64;
    // A snooze counts one more snooze; a defer nothing.
    let snoozes = u32::from(matches!(s, Settlement::Snooze { .. }));
    // Each other outcome moves the message on, if the delivery still holds
    // it, and then lets its key go.
    let (applied, delivery, key, counted) = match s {
        Settlement::Done {
            delivery,
            key,
            publishes,
        } => return settle_done(conn, &delivery, key, &publishes, now),
        Settlement::Duplicate { delivery } => {
            return Ok(take_leased(conn, &delivery, now)?.map(|_| Counted::Duplicate));
        }
        Settlement::Retry {
            delivery,
            delay,
            error,
            key,
        } => {
            let applied = put_back(conn, &delivery, at(delay), &error)?;
            (applied, delivery, key, Counted::Retried)
        }
        Settlement::Defer {
            delivery,
            delay,
            key,
        }
        | Settlement::Snooze {
            delivery,
            delay,
            key,
        } => {
            let applied = defer(conn, &delivery, at(delay), snoozes)?;
            (applied, delivery, key, Counted::Nothing)
        }
        Settlement::Dead {
            delivery,
            reason,
            error,
            handler_version,
            key,
            notice,
        } => {
            let why = (
                reason.as_str(),
                error.as_deref(),
                handler_version.as_deref(),
            );
            let applied = bury_leased(conn, &delivery, why, notice.as_slice(), now)?;
            (applied, delivery, key, Counted::Nothing)
        }
    };
    if !applied {
        return Ok(None);
    }
    release_key(conn, &delivery, key.as_deref())?;
    Ok(Some(counted))
}

/// Move a leased message to the dead letters at `now`, with why it died
/// (reason, last error, handler version) and `notice` published in the
/// same step; false when its delivery lost the lease.
fn bury_leased(
    conn: &Connection,
    delivery: &Delivery,
    (reason, error, handler_version): (&str, Option<&str>, Option<&str>),
    notice: &[NewMessage],
    now: i64,
) -> Result<bool> {
    let Some((redrives, grp)) = take_row(conn, delivery)? else {
        return Ok(false);
    };
    let death = dead::Death {
        reason,
        error,
        handler_version,
        redrives,
        at: now,
    };
    dead::bury(conn, delivery, grp.as_deref(), &death)?;
    if let Some(grp) = grp {
        groups::died(conn, &delivery.queue, &grp, &delivery.id, death.at)?;
    }
    insert_messages(conn, notice, death.at as u64)?;
    Ok(true)
}

/// Remove a handled message, record its key and commit its publishes, if its
/// delivery still holds the lease (`None` when not). A duplicate when the
/// key was done already by another message with it.
fn settle_done(
    conn: &Connection,
    delivery: &Delivery,
    key: Option<(String, Duration)>,
    publishes: &[NewMessage],
    now: i64,
) -> Result<Option<Counted>> {
    if take_leased(conn, delivery, now)?.is_none() {
        return Ok(None);
    }
    let first = match &key {
        Some((key, retention)) => record_done(conn, delivery, key, *retention, now)?,
        None => true,
    };
    if !first {
        return Ok(Some(Counted::Duplicate));
    }
    insert_messages(conn, publishes, now as u64)?;
    Ok(Some(Counted::Done))
}

/// Make a leased message due again at `at` with its error; false when the
/// lease was lost, or this delivery's settlement was applied already (the
/// row keeps its receipt until it is leased again).
fn put_back(conn: &Connection, d: &Delivery, at: i64, error: &str) -> Result<bool> {
    let n = conn
        .prepare_cached(
            "UPDATE messages SET leased = 0, visible_at = ?3, last_error = ?4
             WHERE id = ?1 AND receipt = ?2 AND leased = 1",
        )
        .and_then(|mut s| s.execute(params![d.id, d.receipt, at, error]))
        .map_err(classify)?;
    if n == 1 {
        wake::ring_later(&d.queue);
    }
    Ok(n == 1)
}

/// Make a leased message due again at `at`, giving back its attempt and
/// adding `snoozes` to its snoozes; false when the lease was lost, or this
/// delivery's settlement was applied already.
fn defer(conn: &Connection, d: &Delivery, at: i64, snoozes: u32) -> Result<bool> {
    let n = conn
        .prepare_cached(
            "UPDATE messages SET leased = 0, visible_at = ?3, attempt = MAX(attempt - 1, 0),
             snoozes = snoozes + ?4
             WHERE id = ?1 AND receipt = ?2 AND leased = 1",
        )
        .and_then(|mut s| s.execute(params![d.id, d.receipt, at, snoozes]))
        .map_err(classify)?;
    if n == 1 {
        wake::ring_later(&d.queue);
    }
    Ok(n == 1)
}

/// Lease each delivery that still holds its lease, and the key it holds,
/// for `lease` from now.
fn extend(conn: &Connection, queue: &str, leases: &[Lease], lease: Duration) -> Result<Vec<bool>> {
    let until = now_ms() as i64 + lease.as_millis() as i64;
    let mut message = conn
        .prepare_cached(
            "UPDATE messages SET visible_at = ?3 WHERE id = ?1 AND receipt = ?2 AND leased = 1",
        )
        .map_err(classify)?;
    let mut key = conn
        .prepare_cached(
            "UPDATE keys SET expires_at = ?4
             WHERE queue = ?1 AND key = ?2 AND holder = ?3 AND done = 0",
        )
        .map_err(classify)?;
    let mut held = Vec::with_capacity(leases.len());
    for l in leases {
        let still = message
            .execute(params![l.id, l.receipt, until])
            .map_err(classify)?
            == 1;
        if still && let Some(k) = &l.key {
            key.execute(params![queue, k, l.receipt, until])
                .map_err(classify)?;
        }
        held.push(still);
    }
    Ok(held)
}

fn add_counts(conn: &Connection, counts: HashMap<String, Counts>) -> Result<()> {
    let mut bump = conn
        .prepare_cached(
            "INSERT INTO counters (queue, done, duplicates, retried, lost) VALUES (?1, ?2, ?3, ?4, ?5)
             ON CONFLICT (queue) DO UPDATE SET done = done + ?2, duplicates = duplicates + ?3,
             retried = retried + ?4, lost = lost + ?5",
        )
        .map_err(classify)?;
    for (queue, c) in counts {
        bump.execute(params![queue, c.done, c.duplicates, c.retried, c.lost])
            .map_err(classify)?;
    }
    Ok(())
}

/// Delete the row of a delivery that still holds its lease, and return the
/// redrives the message carries (which only the row knows); `None` when the
/// lease was lost. A message of a group hands it on (unless it dies: see
/// [`bury_leased`]).
fn take_leased(conn: &Connection, d: &Delivery, now: i64) -> Result<Option<u32>> {
    let Some((redrives, grp)) = take_row(conn, d)? else {
        return Ok(None);
    };
    if let Some(grp) = grp {
        groups::advance(conn, &d.queue, &grp, now)?;
    }
    Ok(Some(redrives))
}

/// Delete a leased message's row: its redrives and group.
fn take_row(conn: &Connection, d: &Delivery) -> Result<Option<(u32, Option<String>)>> {
    conn.prepare_cached(
        "DELETE FROM messages WHERE id = ?1 AND receipt = ?2 RETURNING redrives, grp",
    )
    .and_then(|mut s| {
        s.query_row(params![d.id, d.receipt], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()
    })
    .map_err(classify)
}

/// Mark `key` done for this delivery. False when it was already done (by
/// another message with the key), which makes this delivery a duplicate.
fn record_done(
    conn: &Connection,
    d: &Delivery,
    key: &str,
    retention: Duration,
    now: i64,
) -> Result<bool> {
    // One statement: the key's row is written in place unless it is done
    // and not yet expired, which leaves it as it is and changes nothing.
    let changed = conn
        .prepare_cached(
            "INSERT INTO keys (queue, key, done, holder, expires_at) VALUES (?1, ?2, 1, ?3, ?4)
             ON CONFLICT (queue, key) DO UPDATE
             SET done = 1, holder = excluded.holder, expires_at = excluded.expires_at
             WHERE NOT (keys.done = 1 AND keys.expires_at > ?5)",
        )
        .and_then(|mut s| {
            s.execute(params![
                d.queue,
                key,
                d.id,
                now + retention.as_millis() as i64,
                now
            ])
        })
        .map_err(classify)?;
    Ok(changed == 1)
}

fn release_key(conn: &Connection, d: &Delivery, key: Option<&str>) -> Result<()> {
    if let Some(key) = key {
        conn.prepare_cached(
            "DELETE FROM keys WHERE queue = ?1 AND key = ?2 AND done = 0 AND holder = ?3",
        )
        .and_then(|mut s| s.execute(params![d.queue, key, d.receipt]))
        .map_err(classify)?;
    }
    Ok(())
}

/// Delete the idempotency keys that have expired.
pub(super) fn sweep_keys(conn: &Connection, now: u64) -> rusqlite::Result<usize> {
    conn.execute("DELETE FROM keys WHERE expires_at <= ?1", [now as i64])
}

/// Bounded fuzzing of row decoding: whatever a row of `messages` holds
/// (headers that are not JSON, any payload bytes, odd keys), receiving it
/// never panics, and what was published reads back as it was.
#[cfg(test)]
mod fuzz {
    use proptest::prelude::*;

    use super::*;

    /// The stored headers kept in `tests/corpus/stored-headers.txt`, each
    /// in a row as someone else might have written it: the row is received
    /// without a panic, its payload intact.
    #[test]
    fn rows_with_the_corpus_of_stored_headers_are_received() {
        // The workspace keeps one corpus, at its root.
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../tests/corpus/stored-headers.txt");
        let text = std::fs::read_to_string(&path).unwrap();
        let corpus: Vec<&str> = text.lines().filter_map(|l| l.strip_prefix("> ")).collect();
        assert!(
            corpus.len() >= 10,
            "the corpus is missing: {}",
            path.display()
        );
        let dir = tempfile::tempdir().unwrap();
        let conn = super::super::open_connection(&dir.path().join("f.db")).unwrap();
        for (i, headers) in corpus.iter().enumerate() {
            conn.execute(
                "INSERT INTO messages (id, queue, key, payload, headers, attempt, enqueued_us, visible_at)
                 VALUES (?1, 'q', '', ?2, ?3, 0, 0, 0)",
                params![format!("m{i}"), vec![i as u8], headers],
            )
            .unwrap();
            let got = receive(&conn, "q", 10, Duration::from_secs(60), Flow::default()).unwrap();
            assert_eq!(got.len(), 1, "{headers:?}");
            assert_eq!(got[0].payload, vec![i as u8], "{headers:?}");
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]

        #[test]
        fn any_row_is_received_without_panicking(
            headers in proptest::option::of("\\PC{0,40}"),
            payload in prop::collection::vec(any::<u8>(), 0..100),
            key in "\\PC{0,20}",
            attempt in 0u32..10_000,
            error in proptest::option::of("\\PC{0,20}"),
        ) {
            let dir = tempfile::tempdir().unwrap();
            let conn = super::super::open_connection(&dir.path().join("f.db")).unwrap();
            conn.execute(
                "INSERT INTO messages (id, queue, key, payload, headers, attempt, enqueued_us, visible_at, last_error)
                 VALUES ('m', 'q', ?1, ?2, ?3, ?4, 0, 0, ?5)",
                params![key, payload, headers, attempt, error],
            )
            .unwrap();
            let got = receive(&conn, "q", 10, Duration::from_secs(1), Flow::default()).unwrap();
            prop_assert_eq!(got.len(), 1);
            prop_assert_eq!(&got[0].payload, &payload);
            prop_assert_eq!(got[0].attempt, attempt + 1);
        }

        #[test]
        fn a_published_message_reads_back_as_it_was(
            payload in prop::collection::vec(any::<u8>(), 0..100),
            headers in prop::collection::vec(("\\PC{0,10}", "\\PC{0,10}"), 0..4),
            key in proptest::option::of("\\PC{1,20}"),
        ) {
            let dir = tempfile::tempdir().unwrap();
            let conn = super::super::open_connection(&dir.path().join("f.db")).unwrap();
            let mut m = NewMessage::new("q", payload.clone());
            m.headers = headers.clone();
            m.key = key.clone();
            let ids = insert_messages(&conn, &[m], 0).unwrap();
            let got = receive(&conn, "q", 10, Duration::from_secs(1), Flow::default()).unwrap();
            prop_assert_eq!(&got[0].id, &ids[0]);
            prop_assert_eq!(&got[0].payload, &payload);
            prop_assert_eq!(&got[0].headers, &headers);
            prop_assert_eq!(&got[0].key, key.as_ref().unwrap_or(&ids[0]));
        }
    }
}

#[cfg(test)]
mod flow {
    use super::*;

    /// A queue with `max_in_flight` counts its leases on `messages_leased`,
    /// made by the first such receive (a file whose queues have no limit
    /// does without it): however many of its messages are delayed,
    /// counting reads only the leased ones (SQLite's own count of the
    /// statement's steps says so), and the limit holds as before.
    #[test]
    fn counting_the_leases_of_a_queue_reads_none_of_its_delayed_messages() {
        let dir = tempfile::tempdir().unwrap();
        let conn = super::super::open_connection(&dir.path().join("f.db")).unwrap();
        let now = now_ms();
        let mut later = NewMessage::new("q", b"later".to_vec());
        later.delay = Duration::from_secs(3600);
        insert_messages(&conn, &vec![later; 20_000], now).unwrap();
        insert_messages(&conn, &vec![NewMessage::new("q", b"now".to_vec()); 10], now).unwrap();
        let limited = Flow {
            max_in_flight: Some(5),
            rate: None,
        };
        let lease = Duration::from_secs(60);
        let has_index = || -> i64 {
            conn.query_row(
                "SELECT count(*) FROM sqlite_master WHERE name = 'messages_leased'",
                [],
                |r| r.get(0),
            )
            .unwrap()
        };
        assert!(
            receive(&conn, "other", 10, lease, Flow::default())
                .unwrap()
                .is_empty()
        );
        assert_eq!(has_index(), 0, "a receive without a limit makes no index");
        assert_eq!(receive(&conn, "q", 10, lease, limited).unwrap().len(), 5);
        assert_eq!(has_index(), 1);
        assert!(receive(&conn, "q", 10, lease, limited).unwrap().is_empty());

        let mut count = conn.prepare(LEASED_NOW).unwrap();
        let leased: i64 = count
            .query_row(params!["q", now_ms() as i64], |r| r.get(0))
            .unwrap();
        assert_eq!(leased, 5);
        let steps = count.get_status(rusqlite::StatementStatus::VmStep);
        assert!(
            steps < 200,
            "counting 5 leases beside 20,000 delayed messages took {steps} steps"
        );
        let plan: Vec<String> = conn
            .prepare(&format!("EXPLAIN QUERY PLAN {LEASED_NOW}"))
            .unwrap()
            .query_map(params!["q", 0], |r| r.get::<_, String>(3))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert!(
            plan.iter().any(|step| step.contains("messages_leased")),
            "{plan:?}"
        );
    }
}
