//! Settling a batch: plain acknowledgements in one `MULTI`/`EXEC`, the rest
//! in one script per queue.

use redis::Value;

use super::codec::{self, encode_headers};
use super::conn::classify;
use super::{DONE_PREFIX, GROUP, QueueKeys, RedisBroker, done_value, idem_key, scripts};
use crate::broker::{Result, Settlement};
use crate::message::{NewMessage, new_id};

impl RedisBroker {
    pub(super) async fn settle_all(&self, settlements: &[Settlement]) -> Result<()> {
        // Per queue, the settlements that only ack go without a script.
        let mut by_queue: Vec<(&str, Vec<&Settlement>, Vec<&Settlement>)> = Vec::new();
        for s in settlements {
            let q = s.delivery().queue.as_str();
            let at = match by_queue.iter().position(|(name, _, _)| *name == q) {
                Some(i) => i,
                None => {
                    by_queue.push((q, Vec::new(), Vec::new()));
                    by_queue.len() - 1
                }
            };
            let (_, plain, scripted) = &mut by_queue[at];
            if is_plain(s) {
                plain.push(s);
            } else {
                scripted.push(s);
            }
        }
        for (queue, plain, scripted) in by_queue {
            if !plain.is_empty() {
                self.settle_plain(queue, &plain).await?;
            }
            if !scripted.is_empty() {
                self.settle_queue(queue, &scripted).await?;
            }
        }
        Ok(())
    }

    /// Settle acks that need no decision inside Redis: done with an
    /// idempotency key and nothing to publish, and duplicates. One
    /// `MULTI`/`EXEC` records the keys, acks and deletes the entries and
    /// counts them. A key that turns out to be done already (another delivery
    /// won a race after a lease ran out) was counted as done; a second step
    /// moves those counts to `duplicates`.
    async fn settle_plain(&self, queue: &str, plain: &[&Settlement]) -> Result<()> {
        let keys = QueueKeys::new(queue);
        let mut pipe = redis::pipe();
        pipe.atomic();
        let mut entries = Vec::with_capacity(plain.len());
        let (mut done, mut duplicates) = (0u64, 0u64);
        for s in plain {
            let d = s.delivery();
            entries.push(codec::parse_receipt(&d.receipt).0);
            match s {
                Settlement::Done {
                    key: Some((k, retention)),
                    ..
                } => {
                    pipe.cmd("SET")
                        .arg(idem_key(queue, k))
                        .arg(done_value(&d.id))
                        .arg("PX")
                        .arg(retention.as_millis() as u64)
                        .arg("GET");
                    done += 1;
                }
                _ => duplicates += 1,
            }
        }
        pipe.cmd("XACK")
            .arg(&keys.stream)
            .arg(GROUP)
            .arg(&entries)
            .ignore();
        pipe.cmd("XDEL").arg(&keys.stream).arg(&entries).ignore();
        for (name, n) in [("done", done), ("duplicates", duplicates)] {
            if n > 0 {
                pipe.cmd("HINCRBY")
                    .arg(&keys.counters)
                    .arg(name)
                    .arg(n)
                    .ignore();
            }
        }
        let mut conn = self.conn.clone();
        let before: Vec<Value> = pipe.query_async(&mut conn).await.map_err(classify)?;
        let late = before
            .iter()
            .filter(|v| matches!(v, Value::BulkString(b) if b.starts_with(DONE_PREFIX.as_bytes())))
            .count() as i64;
        if late > 0 {
            redis::pipe()
                .cmd("HINCRBY")
                .arg(&keys.counters)
                .arg("done")
                .arg(-late)
                .ignore()
                .cmd("HINCRBY")
                .arg(&keys.counters)
                .arg("duplicates")
                .arg(late)
                .ignore()
                .query_async::<()>(&mut conn)
                .await
                .map_err(classify)?;
        }
        Ok(())
    }

    async fn settle_queue(&self, queue: &str, settlements: &[&Settlement]) -> Result<()> {
        let keys = QueueKeys::new(queue);
        let mut script = scripts::SETTLE.prepare_invoke();
        script
            .key(&keys.stream)
            .key(&keys.delayed)
            .key(&keys.bodies)
            .key(&keys.dead)
            .key(&keys.counters)
            .key(&keys.outbox);
        script.arg(GROUP).arg(&self.consumer);
        let mut idem_keys = 0usize;
        let mut has_publishes = false;
        for s in settlements {
            let d = s.delivery();
            let (entry, count) = codec::parse_receipt(&d.receipt);
            let key = match s {
                Settlement::Done { key, .. } => key.as_ref().map(|(k, _)| k.as_str()),
                Settlement::Retry { key, .. } | Settlement::Dead { key, .. } => key.as_deref(),
                Settlement::Duplicate { .. } | Settlement::Defer { .. } => None,
            };
            let kidx = match key {
                Some(k) => {
                    script.key(idem_key(queue, k));
                    idem_keys += 1;
                    idem_keys
                }
                None => 0,
            };
            let kind = match s {
                Settlement::Done { .. } => "D",
                Settlement::Duplicate { .. } => "U",
                Settlement::Retry { .. } => "R",
                Settlement::Defer { .. } => "F",
                Settlement::Dead { .. } => "X",
            };
            script
                .arg(kind)
                .arg(entry)
                .arg(count)
                .arg(kidx)
                .arg(&d.id)
                .arg(d.attempt);
            match s {
                Settlement::Done { key, publishes, .. } => {
                    let retention = key.as_ref().map_or(0, |(_, r)| r.as_millis() as u64);
                    script.arg(retention).arg(publishes.len());
                    for p in publishes {
                        has_publishes = true;
                        publish_args(&mut script, p);
                    }
                }
                Settlement::Duplicate { .. } => {}
                Settlement::Retry { delay, error, .. } => {
                    script.arg(delay.as_millis() as u64).arg(error);
                }
                Settlement::Defer { delay, .. } => {
                    script.arg(delay.as_millis() as u64);
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
                    if let Some(p) = notice {
                        has_publishes = true;
                        publish_args(&mut script, p);
                    }
                }
            }
        }
        let mut conn = self.conn.clone();
        script
            .invoke_async::<()>(&mut conn)
            .await
            .map_err(classify)?;
        if has_publishes {
            self.relay_wake.notify_one();
        }
        Ok(())
    }
}

/// Whether a settlement only acks: see [`RedisBroker::settle_plain`].
fn is_plain(s: &Settlement) -> bool {
    match s {
        Settlement::Done { key, publishes, .. } => key.is_some() && publishes.is_empty(),
        Settlement::Duplicate { .. } => true,
        _ => false,
    }
}

/// The six arguments of one publish in the settle script's outbox format.
fn publish_args(script: &mut redis::ScriptInvocation<'_>, p: &NewMessage) {
    script
        .arg(&p.queue)
        .arg(new_id())
        .arg(p.key.as_deref().unwrap_or(""))
        .arg(&p.payload)
        .arg(encode_headers(&p.headers))
        .arg(p.delay.as_millis() as u64);
}
