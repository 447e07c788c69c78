//! The queue role on Redis. Round trips are per batch, not per message:
//!
//! * publish: one `PUBLISH` script per queue and 500 messages;
//! * receive: one `XREADGROUP` (see `reader.rs`);
//! * claim: one pipeline of plain `SET NX GET`, the cheapest way to take keys;
//! * settle: one `SETTLE` script per queue, which fences each settlement by
//!   its delivery and writes held publishes to the queue's outbox for the
//!   relay.

use std::time::Duration;

use async_trait::async_trait;
use redis::Value;

use super::codec::{self, encode_headers};
use super::conn::classify;
use super::groups::{enqueue_under, group_arg};
use super::{
    DONE_PREFIX, GROUP, LEASE_PREFIX, QueueKeys, RedisBroker, group_by_queue, idem_key, key,
    lease_value, relay, scripts,
};
use crate::codec::{SETTLED_KEPT, settle_digest, written_again};
use crate::message::{Delivery, NewMessage, new_id, now_ms};
use crate::{
    BrokerError, ClaimState, Flow, KeyClaim, Lease, OrderedGroups, Queue, Result, Settlement,
};

/// Most messages one publish script carries.
const PUBLISH_CHUNK: usize = 500;

#[async_trait]
impl Queue for RedisBroker {
    async fn publish(&self, messages: Vec<NewMessage>) -> Result<Vec<String>> {
        let ids: Vec<String> = messages.iter().map(|_| new_id()).collect();
        let by_queue = group_by_queue(ids.iter().zip(&messages), |&(_, m)| m.queue.as_str());
        self.register(by_queue.iter().map(|(q, _)| *q)).await?;
        let mut conn = self.conn.clone();
        for (queue, list) in &by_queue {
            let keys = QueueKeys::new(queue);
            for chunk in list.chunks(PUBLISH_CHUNK) {
                enqueue_under(&mut conn, &self.orderings, queue, |spec, ordering| {
                    let mut script = scripts::PUBLISH.prepare_invoke();
                    keys.publish_keys(&mut script);
                    script.arg(0).arg(spec);
                    for (id, m) in chunk {
                        message_args(&mut script, id, m, ordering);
                    }
                    script
                })
                .await?;
            }
        }
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
        self.served
            .lock()
            .expect("served lock")
            .insert(queue.to_string());
        let reader = self.reader(queue).await?;
        let mut reader = reader.lock().await;
        self.read_batch(&mut reader, queue, max, lease, flow).await
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
        let lease_ms = lease.as_millis() as u64;
        let held = self.take_keys(queue, claims, lease_ms).await?;
        let mut states = Vec::with_capacity(claims.len());
        // Claims that found this delivery's own lease (it claimed before):
        // renewed by a script, by index into `states`.
        let mut own = Vec::new();
        for (i, (c, held)) in claims.iter().zip(held).enumerate() {
            let state = match held {
                Value::Nil => ClaimState::Acquired,
                Value::BulkString(v) if v.starts_with(DONE_PREFIX.as_bytes()) => {
                    ClaimState::AlreadyDone
                }
                Value::BulkString(v)
                    if v.strip_prefix(LEASE_PREFIX.as_bytes()) == Some(c.holder.as_bytes()) =>
                {
                    own.push(i);
                    ClaimState::Busy
                }
                _ => ClaimState::Busy,
            };
            states.push(state);
        }
        if !own.is_empty() {
            self.renew_own(queue, claims, &own, lease_ms, &mut states)
                .await?;
        }
        Ok(states)
    }

    async fn settle(&self, settlements: &[Settlement]) -> Result<()> {
        // Per queue, the acks that are fenced by their key's live lease go
        // without a script (see `is_plain`). The script goes first: when
        // Redis refuses it (a permission, a script error), the plain acks
        // are not written yet, so a caller that writes the batch again one
        // settlement at a time counts none of them twice.
        let now = now_ms();
        let by_queue = group_by_queue(settlements, |&s| s.delivery().queue.as_str());
        for (queue, list) in by_queue {
            let (plain, scripted): (Vec<&Settlement>, Vec<&Settlement>) =
                list.into_iter().partition(|s| is_plain(s, now));
            if !scripted.is_empty() {
                self.settle_queue(queue, &scripted).await?;
            }
            if !plain.is_empty() {
                self.settle_plain(queue, &plain).await?;
            }
        }
        Ok(())
    }

    /// Two for an ordered queue, one otherwise. Two go on the shared
    /// connection pipelined: the server runs one while the other is sent
    /// or answered. That shortens the path from a group's message to its
    /// next, which waits for the settle, and raised a 1,000-group drain
    /// from 0.65 to 0.75-0.79 × the plain one; a third added nothing. A
    /// plain drain, bound by what each message costs, lost 3-5 % to the
    /// smaller batches two make (see the README, "Benchmarks").
    fn settle_writes(&self, ordered: bool) -> usize {
        if ordered { 2 } else { 1 }
    }

    async fn extend(&self, queue: &str, leases: &[Lease], lease: Duration) -> Result<Vec<bool>> {
        let keys = QueueKeys::new(queue);
        let mut script = scripts::EXTEND.prepare_invoke();
        script
            .key(&keys.stream)
            .arg(GROUP)
            .arg(&self.consumer)
            .arg(lease.as_millis() as u64);
        let mut kidx = 1;
        for l in leases {
            let (entry, count) = codec::parse_receipt(&l.receipt);
            script.arg(entry).arg(count);
            match &l.key {
                Some(k) => {
                    kidx += 1;
                    script.key(idem_key(queue, k)).arg(kidx);
                }
                None => {
                    script.arg(0);
                }
            }
            script.arg(&l.receipt);
        }
        let held: Vec<u8> = script
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(classify)?;
        Ok(held.into_iter().map(|h| h == 1).collect())
    }

    async fn idle(&self, queue: &str, up_to: Duration) {
        self.wait_idle(queue, up_to).await;
    }

    async fn set_ordering(&self, queue: &str, ordering: Option<&OrderedGroups>) -> Result<()> {
        let spec = ordering.map(OrderedGroups::encode).unwrap_or_default();
        let keys = QueueKeys::new(queue);
        let mut script = scripts::ORDER.prepare_invoke();
        keys.enqueue_keys(&mut script)
            .arg(&spec)
            .invoke_async::<i64>(&mut self.conn.clone())
            .await
            .map_err(classify)?;
        self.orderings.learn(queue, spec);
        Ok(())
    }

    async fn flush(&self) -> Result<()> {
        let queues = self.served.lock().expect("served lock").clone();
        // Every queue is tried, whichever fails; the error names them all
        // and keeps the first one's kind and cause (the rest are logged).
        let mut failed: Vec<(String, BrokerError)> = Vec::new();
        for q in queues {
            if let Err(e) = relay::relay_queue(self.conn.clone(), &self.orderings, &q).await {
                failed.push((q, e));
            }
        }
        let names: Vec<String> = failed.iter().map(|(q, _)| format!("{q:?}")).collect();
        let refused = failed.iter().any(|(_, e)| !e.is_unavailable());
        let mut failed = failed.into_iter();
        let Some((_, first)) = failed.next() else {
            return Ok(());
        };
        for (q, e) in failed {
            tracing::warn!(queue = %q, "relaying the outbox failed: {}", crate::error::chain(&e));
        }
        let context = format!("relaying the outbox of queue {}", names.join(", "));
        Err(if refused {
            BrokerError::refused(context, first)
        } else {
            BrokerError::unavailable(context, first)
        })
    }
}

impl RedisBroker {
    /// One plain `SET NX GET` per key, pipelined: cheaper for Redis than the
    /// same commands inside a script, and it answers in one go. Returns what
    /// each key held before: nothing when it was taken.
    async fn take_keys(
        &self,
        queue: &str,
        claims: &[KeyClaim],
        lease_ms: u64,
    ) -> Result<Vec<Value>> {
        let mut pipe = redis::pipe();
        for c in claims {
            pipe.cmd("SET")
                .arg(idem_key(queue, &c.key))
                .arg(lease_value(&c.holder))
                .arg("NX")
                .arg("GET")
                .arg("PX")
                .arg(lease_ms);
        }
        let mut conn = self.conn.clone();
        pipe.query_async(&mut conn).await.map_err(classify)
    }

    /// Renew the keys at `own` (indexes into `claims`) that still hold this
    /// delivery's own lease, in one script that checks and renews each
    /// in one step, and put what came of each into `states`.
    async fn renew_own(
        &self,
        queue: &str,
        claims: &[KeyClaim],
        own: &[usize],
        lease_ms: u64,
        states: &mut [ClaimState],
    ) -> Result<()> {
        let mut renew = scripts::RENEW.prepare_invoke();
        renew.arg(lease_ms);
        for &i in own {
            renew
                .key(idem_key(queue, &claims[i].key))
                .arg(&claims[i].holder);
        }
        let mut conn = self.conn.clone();
        let renewed: Vec<u8> = renew.invoke_async(&mut conn).await.map_err(classify)?;
        for (&i, r) in own.iter().zip(renewed) {
            states[i] = match r {
                0 => ClaimState::Acquired,
                1 => ClaimState::AlreadyDone,
                _ => ClaimState::Busy,
            };
        }
        Ok(())
    }

    /// Settle acks that need no check inside Redis (see [`is_plain`]): one
    /// `MULTI`/`EXEC` records the keys, acks and deletes the entries, moves
    /// their ordered groups on (`ADVANCE`) and counts them as done. What
    /// each key held before says whether that was right (see
    /// [`PlainAck`]): this delivery's lease, or nothing, is; a key done by
    /// another message with it makes the ack a duplicate. A key another
    /// delivery of the message held or finished means the ack came after
    /// the lease had passed on, which the margin makes all but impossible
    /// but a stalled host could still do: it is logged, and the message
    /// counts done once (a lost lease where the other delivery finished).
    async fn settle_plain(&self, queue: &str, plain: &[&Settlement]) -> Result<()> {
        let keys = QueueKeys::new(queue);
        let mut pipe = redis::pipe();
        pipe.atomic();
        let mut entries = Vec::with_capacity(plain.len());
        // Entries of ordered groups are acked by `ADVANCE`, the rest here.
        let mut ungrouped = Vec::with_capacity(plain.len());
        let mut grouped = Vec::new();
        // The deliveries whose keys are set, in the order of the replies.
        let mut keyed = Vec::with_capacity(plain.len());
        let (mut done, mut duplicates) = (0u64, 0u64);
        for s in plain {
            let d = s.delivery();
            let entry = codec::parse_receipt(&d.receipt).0;
            entries.push(entry);
            match d.group.as_deref() {
                Some(g) => grouped.push((entry, g)),
                None => ungrouped.push(entry),
            }
            match s {
                Settlement::Done {
                    key: Some((k, retention)),
                    ..
                } => {
                    pipe.cmd("SET")
                        .arg(idem_key(queue, k))
                        .arg(format!("{DONE_PREFIX}{}", d.id))
                        .arg("PX")
                        .arg(retention.as_millis() as u64)
                        .arg("GET");
                    keyed.push(d);
                    done += 1;
                }
                _ => duplicates += 1,
            }
        }
        if !ungrouped.is_empty() {
            pipe.cmd("XACK")
                .arg(&keys.stream)
                .arg(GROUP)
                .arg(&ungrouped)
                .ignore();
        }
        advance_groups(&mut pipe, &keys, &grouped);
        pipe.cmd("XDEL").arg(&keys.stream).arg(&entries).ignore();
        // Counted unless the write was written before: the last reply.
        let digest = settle_digest(plain.iter().copied());
        let counts = [("done", done), ("duplicates", duplicates)];
        count_once(&mut pipe, &self.written(queue), &keys, &digest, &counts);
        let mut conn = self.conn.clone();
        let mut before: Vec<Value> = pipe.query_async(&mut conn).await.map_err(classify)?;
        if before.pop() == Some(Value::Int(1)) {
            written_again(queue, plain.len());
            return Ok(());
        }
        self.recount_plain(queue, &keys, &keyed, &before).await
    }

    /// The list of this consumer's last settle writes of `queue` (see
    /// [`scripts::SETTLED`]).
    fn written(&self, queue: &str) -> String {
        key(queue, &format!("settled:{}", self.consumer))
    }

    /// Count what each plain ack's key held before (`before`, in the order
    /// of `keyed`) says it was: see [`PlainAck`].
    async fn recount_plain(
        &self,
        queue: &str,
        keys: &QueueKeys,
        keyed: &[&Delivery],
        before: &[Value],
    ) -> Result<()> {
        let (mut duplicates, mut lost, mut overtook) = (0, Vec::new(), Vec::new());
        for (d, held) in keyed.iter().zip(before) {
            match plain_ack(d, held) {
                PlainAck::Done => {}
                PlainAck::Duplicate => duplicates += 1,
                PlainAck::Finished => lost.push(d.id.as_str()),
                PlainAck::Overtook => overtook.push(d.id.as_str()),
            }
        }
        if !overtook.is_empty() || !lost.is_empty() {
            tracing::warn!(queue, overtook = ?overtook, finished = ?lost, "acks reached Redis after their deliveries' leases had passed to another delivery (the host stalled between checking the lease and Redis running them): those of messages another delivery still held are done, and that delivery's own settlement will be refused; those of messages another delivery had finished count as lost leases");
        }
        if duplicates > 0 || !lost.is_empty() {
            self.recount(keys, duplicates, lost.len() as i64).await?;
        }
        Ok(())
    }

    /// Move plain acks counted as done to `duplicates` and `lost`.
    async fn recount(&self, keys: &QueueKeys, duplicates: i64, lost: i64) -> Result<()> {
        let mut conn = self.conn.clone();
        redis::pipe()
            .cmd("HINCRBY")
            .arg(&keys.counters)
            .arg("done")
            .arg(-(duplicates + lost))
            .ignore()
            .cmd("HINCRBY")
            .arg(&keys.counters)
            .arg("duplicates")
            .arg(duplicates)
            .ignore()
            .cmd("HINCRBY")
            .arg(&keys.counters)
            .arg("lost")
            .arg(lost)
            .ignore()
            .query_async::<()>(&mut conn)
            .await
            .map_err(classify)
    }

    /// Settle a queue's batch in one `SETTLE` script (its argument format
    /// is documented in `scripts.rs`). Settlements it refuses for a lost
    /// lease are logged.
    async fn settle_queue(&self, queue: &str, settlements: &[&Settlement]) -> Result<()> {
        let keys = QueueKeys::new(queue);
        let mut script = scripts::SETTLE.prepare_invoke();
        script
            .key(&keys.stream)
            .key(&keys.delayed)
            .key(&keys.bodies)
            .key(&keys.dead)
            .key(&keys.counters)
            .key(&keys.outbox)
            .key(&keys.dead_index)
            .key(&keys.groups)
            .key(&keys.waiting)
            .key(self.written(queue));
        let digest = settle_digest(settlements.iter().copied());
        script
            .arg(GROUP)
            .arg(&self.consumer)
            .arg(&digest)
            .arg(SETTLED_KEPT.as_millis() as u64);
        let mut idem_keys = 0usize;
        let mut has_publishes = false;
        for s in settlements {
            let kidx = match s.key() {
                Some(k) => {
                    script.key(idem_key(queue, k));
                    idem_keys += 1;
                    idem_keys
                }
                None => 0,
            };
            has_publishes |= settle_args(&mut script, s, kidx);
        }
        if tracing::enabled!(tracing::Level::DEBUG) {
            let ids: Vec<&str> = settlements
                .iter()
                .map(|s| s.delivery().id.as_str())
                .collect();
            tracing::debug!(queue, digest, messages = ?ids, "settle write");
        }
        let mut conn = self.conn.clone();
        let lost: Result<Option<Vec<String>>> =
            script.invoke_async(&mut conn).await.map_err(classify);
        tracing::debug!(queue, digest, answer = ?lost, "settle write answered");
        let Some(lost) = lost? else {
            written_again(queue, settlements.len());
            return Ok(());
        };
        if !lost.is_empty() {
            tracing::warn!(queue, ids = ?lost, "settlements refused: their deliveries had lost their leases (the messages were delivered again)");
        }
        if has_publishes {
            self.relay_wake.ring(queue);
        }
        Ok(())
    }
}

/// Add to an ack's transaction that `counts` are added to the queue's
/// counters unless the write `digest` is among those in `written` (see
/// [`scripts::SETTLED`]); its reply, the transaction's last, is then 1.
fn count_once(
    pipe: &mut redis::Pipeline,
    written: &str,
    keys: &QueueKeys,
    digest: &str,
    counts: &[(&str, u64)],
) {
    pipe.cmd("EVAL")
        .arg(scripts::SETTLED)
        .arg(2)
        .arg(written)
        .arg(&keys.counters)
        .arg(digest)
        .arg(SETTLED_KEPT.as_millis() as u64);
    for (name, n) in counts {
        if *n > 0 {
            pipe.arg(*name).arg(*n);
        }
    }
}

/// Add to an ack's transaction that the `grouped` entries (each with its
/// ordered group) are acked and their groups move on (`ADVANCE`); nothing
/// when there are none.
fn advance_groups(pipe: &mut redis::Pipeline, keys: &QueueKeys, grouped: &[(&str, &str)]) {
    if grouped.is_empty() {
        return;
    }
    pipe.cmd("EVAL")
        .arg(scripts::ADVANCE)
        .arg(4)
        .arg(&keys.stream)
        .arg(&keys.delayed)
        .arg(&keys.bodies)
        .arg(&keys.groups)
        .arg(&keys.waiting)
        .arg(GROUP);
    for (entry, group) in grouped {
        pipe.arg(*entry).arg(*group);
    }
    pipe.ignore();
}

/// Append one settlement's arguments to the `SETTLE` script: its kind,
/// entry, delivery count, key index (`kidx`, 0 for none), id, attempt and
/// ordered group, then what its kind needs. True when it holds publishes
/// for the outbox.
fn settle_args(script: &mut redis::ScriptInvocation<'_>, s: &Settlement, kidx: usize) -> bool {
    let d = s.delivery();
    let (entry, count) = codec::parse_receipt(&d.receipt);
    let kind = match s {
        Settlement::Done { .. } => "D",
        Settlement::Duplicate { .. } => "U",
        Settlement::Retry { .. } => "R",
        Settlement::Defer { .. } => "F",
        Settlement::Snooze { .. } => "Z",
        Settlement::Dead { .. } => "X",
    };
    script
        .arg(kind)
        .arg(entry)
        .arg(count)
        .arg(kidx)
        .arg(&d.id)
        .arg(d.attempt)
        .arg(d.group.as_deref().unwrap_or(""));
    let held: Vec<&NewMessage> = match s {
        Settlement::Done { key, publishes, .. } => {
            let retention = key.as_ref().map_or(0, |(_, r)| r.as_millis() as u64);
            script.arg(retention).arg(publishes.len());
            publishes.iter().collect()
        }
        Settlement::Duplicate { .. } => Vec::new(),
        Settlement::Retry { delay, error, .. } => {
            script.arg(delay.as_millis() as u64).arg(error);
            Vec::new()
        }
        Settlement::Defer { delay, .. } | Settlement::Snooze { delay, .. } => {
            script.arg(delay.as_millis() as u64);
            Vec::new()
        }
        Settlement::Dead {
            reason,
            error,
            handler_version,
            notice,
            ..
        } => {
            script
                .arg(reason)
                .arg(error.as_deref().unwrap_or(""))
                .arg(handler_version.as_deref().unwrap_or(""))
                .arg(notice.iter().len());
            notice.iter().collect()
        }
    };
    for (index, p) in held.iter().enumerate() {
        publish_args(script, &publish_id(d, index), p);
    }
    !held.is_empty()
}

/// The id of the `index`th publish a settlement of delivery `d` holds: the
/// same every time that settlement is written. A settle write whose reply
/// was lost is written again; should both writes ever be applied, their
/// outbox holds the same publishes twice, and the relay's markers (one per
/// id) enqueue each once. A UUIDv7 whose time is the end of the delivery's
/// lease and whose random bits are a hash of the delivery and the index.
fn publish_id(d: &Delivery, index: usize) -> String {
    use sha2::{Digest, Sha256};
    let mut hash = Sha256::new();
    for part in [d.id.as_bytes(), d.receipt.as_bytes()] {
        hash.update((part.len() as u64).to_le_bytes());
        hash.update(part);
    }
    hash.update((index as u64).to_le_bytes());
    let digest = hash.finalize();
    let mut random = [0u8; 10];
    random.copy_from_slice(&digest[..10]);
    uuid::Builder::from_unix_timestamp_millis(d.lease_until_ms, &random)
        .into_uuid()
        .simple()
        .to_string()
}

/// How long before a delivery's lease ends its plain ack must be sent: a
/// host would have to stall this long between its check and Redis running
/// the ack for the ack to land after the lease.
const PLAIN_MARGIN_MS: u64 = 2_000;

/// What a plain ack's key held just before it was set, and so what the ack
/// counts as.
#[derive(Debug, PartialEq, Eq)]
enum PlainAck {
    /// This delivery's lease, or nothing: the message is done.
    Done,
    /// Another message with the key had finished: a duplicate.
    Duplicate,
    /// Another delivery of this message held the key: the ack came late,
    /// but the message is done by it (that delivery's own settlement is
    /// refused).
    Overtook,
    /// Another delivery of this message had finished it: the ack came late
    /// and changed nothing; a lost lease.
    Finished,
}

fn plain_ack(d: &Delivery, held: &Value) -> PlainAck {
    let Value::BulkString(held) = held else {
        return PlainAck::Done;
    };
    if let Some(holder) = held.strip_prefix(LEASE_PREFIX.as_bytes()) {
        if holder == d.receipt.as_bytes() {
            return PlainAck::Done;
        }
        return PlainAck::Overtook;
    }
    match held.strip_prefix(DONE_PREFIX.as_bytes()) {
        Some(id) if id == d.id.as_bytes() => PlainAck::Finished,
        Some(_) => PlainAck::Duplicate,
        None => PlainAck::Done,
    }
}

/// Whether a settlement may go without the script's checks: a done with an
/// idempotency key and nothing to publish, or a duplicate, settled well
/// within its delivery's lease. Its key was claimed after the delivery was
/// leased, for as long, so until the lease ends the key is still this
/// delivery's: no other delivery can have taken it, nor finished the
/// message, and the stream entry cannot have been reclaimed (hosts reclaim
/// by the longest lease of the queue). Within the lease the key itself is
/// the fence; a later settlement goes through `SETTLE`, which checks.
fn is_plain(s: &Settlement, now_ms: u64) -> bool {
    let in_lease = now_ms + PLAIN_MARGIN_MS < s.delivery().lease_until_ms;
    in_lease
        && match s {
            Settlement::Done { key, publishes, .. } => key.is_some() && publishes.is_empty(),
            Settlement::Duplicate { .. } => true,
            _ => false,
        }
}

/// The six arguments of one publish in the settle script's outbox format:
/// queue, id, key, payload, headers, delay (its group is taken when the
/// relay enqueues it).
fn publish_args(script: &mut redis::ScriptInvocation<'_>, id: &str, p: &NewMessage) {
    script
        .arg(&p.queue)
        .arg(id)
        .arg(p.key.as_deref().unwrap_or(""))
        .arg(&p.payload)
        .arg(encode_headers(&p.headers))
        .arg(p.delay.as_millis() as u64);
}

/// The six arguments of message `m` with `id`, as the scripts that enqueue
/// take them (see `enqueue_message` in the scripts' prelude): id, key (""
/// for the id), payload, headers ("" for none), delay ms and its group
/// under `ordering` ("" for none).
pub(super) fn message_args(
    script: &mut redis::ScriptInvocation<'_>,
    id: &str,
    m: &NewMessage,
    ordering: Option<&OrderedGroups>,
) {
    script
        .arg(id)
        .arg(m.key.as_deref().unwrap_or(""))
        .arg(&m.payload)
        .arg(encode_headers(&m.headers))
        .arg(m.delay.as_millis() as u64)
        .arg(group_arg(ordering, &m.headers, &m.payload));
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn delivery(lease_until_ms: u64) -> Delivery {
        Delivery {
            id: "m".into(),
            queue: "q".into(),
            key: "m".into(),
            payload: Vec::new(),
            headers: Vec::new(),
            attempt: 1,
            enqueued_at_us: 0,
            last_error: None,
            receipt: "1-0 1".into(),
            lease_until_ms,
            group: None,
            snoozes: 0,
        }
    }

    #[test]
    fn only_acks_well_within_their_lease_go_without_the_script() {
        let done = |until, publishes: Vec<NewMessage>| Settlement::Done {
            delivery: delivery(until),
            key: Some(("k".into(), Duration::from_secs(60))),
            publishes,
        };
        assert!(is_plain(&done(10_000, vec![]), 1_000));
        assert!(
            !is_plain(&done(1_400, vec![]), 1_000),
            "too close to the lease's end"
        );
        assert!(!is_plain(
            &done(10_000, vec![NewMessage::new("a", "x")]),
            1_000
        ));
        let keyless = Settlement::Done {
            delivery: delivery(10_000),
            key: None,
            publishes: vec![],
        };
        assert!(
            !is_plain(&keyless, 1_000),
            "nothing but the entry fences it"
        );
        let dup = Settlement::Duplicate {
            delivery: delivery(10_000),
        };
        assert!(is_plain(&dup, 1_000));
        assert!(
            !is_plain(&done(2_900, vec![]), 1_000),
            "within the 2 s margin"
        );
    }

    #[test]
    fn what_a_plain_acks_key_held_says_what_it_counts_as() {
        let d = delivery(10_000);
        let bulk = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        assert_eq!(plain_ack(&d, &Value::Nil), PlainAck::Done);
        assert_eq!(plain_ack(&d, &bulk("L:1-0 1")), PlainAck::Done);
        assert_eq!(plain_ack(&d, &bulk("L:1-0 2")), PlainAck::Overtook);
        assert_eq!(plain_ack(&d, &bulk("D:m")), PlainAck::Finished);
        assert_eq!(plain_ack(&d, &bulk("D:other")), PlainAck::Duplicate);
    }
}
