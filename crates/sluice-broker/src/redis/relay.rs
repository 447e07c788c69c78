//! The relay: publishes held in a queue's outbox (written atomically with an
//! ack, in the source queue's hash slot) moved to their target queues, each
//! guarded by a marker key so that a relay repeated after a crash enqueues
//! nothing twice.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex as StdMutex};
use std::time::{Duration, Instant};

use redis::Value;
use tokio::sync::Notify;

use super::codec::Outboxed;
use super::conn::{Conn, classify};
use super::groups::{Orderings, enqueue_under, group_arg};
use super::{QUEUES_KEY, QueueKeys, codec, group_by_queue, key, scripts};
use crate::Result;
use crate::codec::decode_headers;
use crate::message::new_id;

/// How long the relay's markers remember a relayed publish.
const RELAY_MARKER_TTL: Duration = Duration::from_secs(24 * 3600);

/// How often the relay also looks at the outboxes of every queue the broker
/// knows, so that publishes held by a host that died before it relayed
/// them, or by a queue no host serves any more, still reach their targets.
const RELAY_ALL_EVERY: Duration = Duration::from_secs(5);

/// Outboxes looked at at once by a sweep of every queue.
const SWEEP_AT_ONCE: usize = 64;

/// The queues whose outboxes this host wrote to since the relay last
/// looked, and the relay's wake-up.
#[derive(Default)]
pub(super) struct Wake {
    queues: StdMutex<BTreeSet<String>>,
    notify: Notify,
}

impl Wake {
    /// `queue`'s outbox has publishes to relay.
    pub(super) fn ring(&self, queue: &str) {
        let mut queues = self.queues.lock().expect("relay lock");
        if !queues.contains(queue) {
            queues.insert(queue.to_string());
        }
        drop(queues);
        self.notify.notify_one();
    }

    fn take(&self) -> BTreeSet<String> {
        std::mem::take(&mut *self.queues.lock().expect("relay lock"))
    }
}

/// Moves held publishes to their target queues: from the outboxes this
/// host wrote to, at once when a settle rings `wake`; and from every known
/// queue's outbox that holds any, every [`RELAY_ALL_EVERY`]. An outbox
/// that failed is tried again with backoff. Runs until the broker is
/// dropped.
pub(super) async fn relay_loop(conn: Conn, orderings: Arc<Orderings>, wake: Arc<Wake>) {
    let mut backoff = Duration::from_millis(50);
    let mut next_sweep = Instant::now();
    let mut failed: BTreeSet<String> = BTreeSet::new();
    loop {
        let until = if failed.is_empty() {
            tokio::time::Instant::from_std(next_sweep)
        } else {
            tokio::time::Instant::now() + backoff
        };
        tokio::select! {
            _ = wake.notify.notified() => {}
            _ = tokio::time::sleep_until(until) => {}
        }
        let mut queues = std::mem::take(&mut failed);
        queues.extend(wake.take());
        if Instant::now() >= next_sweep {
            next_sweep = Instant::now() + RELAY_ALL_EVERY;
            match holding(&conn).await {
                Ok(all) => queues.extend(all),
                Err(e) => tracing::warn!(error = %e, "could not list the outboxes to relay"),
            }
        }
        for q in queues {
            if let Err(e) = relay_queue(conn.clone(), &orderings, &q).await {
                tracing::warn!(queue = %q, error = %e, "relaying held publishes failed; retrying in {backoff:?}");
                failed.insert(q);
            }
        }
        backoff = if failed.is_empty() {
            Duration::from_millis(50)
        } else {
            (backoff * 2).min(Duration::from_secs(5))
        };
    }
}

/// Every known queue whose outbox holds publishes, looked at
/// [`SWEEP_AT_ONCE`] at a time.
async fn holding(conn: &Conn) -> redis::RedisResult<Vec<String>> {
    let all: Vec<String> = redis::cmd("SMEMBERS")
        .arg(QUEUES_KEY)
        .query_async(&mut conn.clone())
        .await?;
    let mut out = Vec::new();
    for chunk in all.chunks(SWEEP_AT_ONCE) {
        let mut lengths = tokio::task::JoinSet::new();
        for q in chunk {
            let (mut c, q) = (conn.clone(), q.clone());
            lengths.spawn(async move {
                let n: redis::RedisResult<u64> = redis::cmd("XLEN")
                    .arg(key(&q, "outbox"))
                    .query_async(&mut c)
                    .await;
                n.map(|n| (q, n))
            });
        }
        while let Some(done) = lengths.join_next().await {
            let (q, n) = done.expect("an XLEN task never panics")?;
            if n > 0 {
                out.push(q);
            }
        }
    }
    Ok(out)
}

pub(super) async fn relay_queue(mut conn: Conn, orderings: &Orderings, queue: &str) -> Result<()> {
    let outbox = key(queue, "outbox");
    loop {
        let reply: Value = redis::cmd("XRANGE")
            .arg(&outbox)
            .arg("-")
            .arg("+")
            .arg("COUNT")
            .arg(500)
            .query_async(&mut conn)
            .await
            .map_err(classify)?;
        let entries = codec::into_array(reply);
        if entries.is_empty() {
            return Ok(());
        }
        let mut held = Vec::with_capacity(entries.len());
        for e in entries {
            match codec::Held::parse(e) {
                Some(Outboxed::Held(h)) => held.push(h),
                Some(Outboxed::Unreadable { entry, fields }) => {
                    bury(&mut conn, queue, &entry, &fields)
                        .await
                        .map_err(classify)?;
                }
                None => {}
            }
        }
        if held.is_empty() {
            continue;
        }
        // One script per target queue: its keys share that queue's slot.
        let by_target = group_by_queue(&held, |&h| h.queue.as_str());
        for (target, list) in &by_target {
            enqueue_held(&mut conn, orderings, target, list).await?;
        }
        let targets: Vec<&str> = by_target.iter().map(|(q, _)| *q).collect();
        redis::cmd("SADD")
            .arg(QUEUES_KEY)
            .arg(&targets)
            .query_async::<()>(&mut conn)
            .await
            .map_err(classify)?;
        let entries: Vec<&str> = held.iter().map(|h| h.entry.as_str()).collect();
        redis::cmd("XDEL")
            .arg(&outbox)
            .arg(&entries)
            .query_async::<()>(&mut conn)
            .await
            .map_err(classify)?;
    }
}

/// Enqueue held publishes on `target`, each guarded by its marker key and
/// grouped by `target`'s ordering.
async fn enqueue_held(
    conn: &mut Conn,
    orderings: &Orderings,
    target: &str,
    held: &[&codec::Held],
) -> Result<()> {
    let keys = QueueKeys::new(target);
    let headers: Vec<Vec<(String, String)>> =
        held.iter().map(|h| decode_headers(&h.headers)).collect();
    enqueue_under(conn, orderings, target, |spec, ordering| {
        let mut script = scripts::PUBLISH.prepare_invoke();
        keys.publish_keys(&mut script);
        script.arg(RELAY_MARKER_TTL.as_millis() as u64).arg(spec);
        for (h, headers) in held.iter().zip(&headers) {
            script
                .key(key(target, &format!("relayed:{}", h.id)))
                .arg(&h.id)
                .arg(&h.key)
                .arg(&h.payload)
                .arg(&h.headers)
                .arg(h.delay_ms)
                .arg(group_arg(ordering, headers, &h.payload));
        }
        script
    })
    .await?;
    if tracing::enabled!(tracing::Level::DEBUG) {
        let ids: Vec<&str> = held.iter().map(|h| h.id.as_str()).collect();
        tracing::debug!(queue = target, ids = ?ids, "relayed held publishes");
    }
    Ok(())
}

/// Move an outbox entry the relay cannot read to `queue`'s dead letters,
/// with why, so that the entries behind it are relayed.
async fn bury(conn: &mut Conn, queue: &str, entry: &str, fields: &str) -> redis::RedisResult<()> {
    let keys = QueueKeys::new(queue);
    tracing::error!(
        queue,
        entry,
        "an outbox entry cannot be read (no target queue, id or delay); it is moved to the queue's dead letters"
    );
    scripts::BURY_HELD
        .key(&keys.dead)
        .key(&keys.dead_index)
        .key(&keys.outbox)
        .arg(entry)
        .arg(new_id())
        .arg(fields)
        .arg(format!(
            "unreadable held publish in the outbox of queue {queue} (entry {entry}): it names no valid target queue, id or delay; its fields are the payload"
        ))
        .invoke_async(conn)
        .await
}
