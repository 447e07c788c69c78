//! The Redis broker: one Stream and consumer group per queue, delayed and
//! retried messages in a sorted set, dead letters in a stream of their own,
//! idempotency keys as plain keys with a TTL. Every key of a queue carries
//! the hash tag `{queue}`, so the same code runs on Redis Cluster, and many
//! hosts can consume one queue as competing consumers.
//!
//! Round trips are per batch, not per message: one `XREADGROUP` for a batch
//! and one pipeline of `SET NX GET` for its idempotency keys
//! ([`receive`]), one `MULTI`/`EXEC` or one script to settle it
//! ([`settle`]). Publishes held by a handler go to an outbox stream in the
//! source queue's slot, written in the same step as the ack; the [`relay`]
//! moves them to their target queues. The parts: [`conn`] (connections),
//! [`codec`] (entries and replies), [`scripts`] (the Lua), [`kv`] and
//! [`topics`] (the other stores every broker keeps).

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;

use async_trait::async_trait;
use redis::Value;
use tokio::sync::{Mutex, Notify};

use super::{
    Broker, BrokerError, ClaimState, DeadLetter, HandlerStatus, KeyClaim, QueueStats,
    ReplaySelector, Result, Settlement,
};
use crate::message::{Delivery, NewMessage, hostname, new_id};

mod codec;
mod conn;
mod kv;
mod receive;
mod relay;
mod scripts;
mod settle;
mod topics;

use conn::{Client, Conn, classify};
use receive::Reader;

use codec::{Entry, array, encode_headers, int, text};

/// The consumer group every host joins.
const GROUP: &str = "sluice";
/// The set of known queue names (one of two keys without a queue's hash tag).
const QUEUES_KEY: &str = "sluice:queues";
/// Each host's handler statuses, as JSON by host.
const STATUS_KEY: &str = "sluice:handlers";
/// How long a receive blocks on an empty stream.
const BLOCK: Duration = Duration::from_millis(50);
/// How often a receiver promotes due messages and reclaims expired leases.
const MAINTAIN_EVERY: Duration = Duration::from_millis(100);
/// Dead letters one replay script looks at before handing back.
const REPLAY_SCAN: usize = 1000;

fn key(queue: &str, part: &str) -> String {
    format!("sluice:{{{queue}}}:{part}")
}

/// The idempotency key `k` of `queue`.
fn idem_key(queue: &str, k: &str) -> String {
    format!("sluice:{{{queue}}}:key:{k}")
}

/// What an idempotency key holds while `message_id` is being handled.
fn lease_value(message_id: &str) -> String {
    format!("{LEASE_PREFIX}{message_id}")
}

/// What an idempotency key holds once `message_id` is done.
fn done_value(message_id: &str) -> String {
    format!("{DONE_PREFIX}{message_id}")
}

/// The prefixes of [`lease_value`] and [`done_value`]; the scripts spell
/// them too, as `'L:'` and `'D:'`.
const LEASE_PREFIX: &str = "L:";
const DONE_PREFIX: &str = "D:";

/// The keys of one queue, in the order the scripts expect them.
struct QueueKeys {
    stream: String,
    delayed: String,
    bodies: String,
    dead: String,
    counters: String,
    outbox: String,
}

impl QueueKeys {
    fn new(queue: &str) -> Self {
        QueueKeys {
            stream: key(queue, "stream"),
            delayed: key(queue, "delayed"),
            bodies: key(queue, "bodies"),
            dead: key(queue, "dead"),
            counters: key(queue, "counters"),
            outbox: key(queue, "outbox"),
        }
    }
}

pub struct RedisBroker {
    client: Client,
    conn: Conn,
    consumer: String,
    cluster: bool,
    readers: Mutex<HashMap<String, Arc<Mutex<Reader>>>>,
    registered: StdMutex<HashSet<String>>,
    served: Arc<StdMutex<BTreeSet<String>>>,
    relay_wake: Arc<Notify>,
    relay: tokio::task::JoinHandle<()>,
}

impl Drop for RedisBroker {
    fn drop(&mut self) {
        self.relay.abort();
    }
}

impl RedisBroker {
    /// Connect to `redis://HOST:PORT[/DB]`. A node with cluster mode on is
    /// used through a cluster-aware connection.
    pub async fn connect(url: &str) -> anyhow::Result<Self> {
        let single =
            redis::Client::open(url).map_err(|e| anyhow::anyhow!("bad Redis URL {url:?}: {e}"))?;
        let mut probe = tokio::time::timeout(
            Duration::from_secs(5),
            single.get_multiplexed_async_connection(),
        )
        .await
        .map_err(|_| anyhow::anyhow!("cannot connect to Redis at {url}: timed out"))?
        .map_err(|e| anyhow::anyhow!("cannot connect to Redis at {url}: {e}"))?;
        let info: String = redis::cmd("INFO")
            .arg("cluster")
            .query_async(&mut probe)
            .await
            .map_err(|e| anyhow::anyhow!("Redis at {url} did not answer INFO: {e}"))?;
        let cluster = info.contains("cluster_enabled:1");
        let client = if cluster {
            let c = redis::cluster::ClusterClientBuilder::new(vec![url])
                .retries(6)
                .connection_timeout(Duration::from_secs(2))
                .response_timeout(Duration::from_secs(10))
                .build()
                .map_err(|e| anyhow::anyhow!("bad Redis Cluster URL {url:?}: {e}"))?;
            Client::Cluster(Box::new(c))
        } else {
            Client::Single(single)
        };
        let conn = client
            .connect()
            .await
            .map_err(|e| anyhow::anyhow!("cannot connect to Redis at {url}: {e}"))?;
        let consumer = format!("{}-{}-{}", hostname(), std::process::id(), &new_id()[20..]);
        let served = Arc::new(StdMutex::new(BTreeSet::new()));
        let relay_wake = Arc::new(Notify::new());
        let relay = tokio::spawn(relay::relay_loop(
            conn.clone(),
            served.clone(),
            relay_wake.clone(),
        ));
        Ok(RedisBroker {
            client,
            conn,
            consumer,
            cluster,
            readers: Mutex::new(HashMap::new()),
            registered: StdMutex::new(HashSet::new()),
            served,
            relay_wake,
            relay,
        })
    }

    /// Whether the broker talks to a Redis Cluster.
    pub fn is_cluster(&self) -> bool {
        self.cluster
    }

    /// This host's consumer name in every queue's group.
    pub fn consumer(&self) -> &str {
        &self.consumer
    }

    /// Remember a queue name in the set `stats` lists.
    async fn register(&self, queues: impl IntoIterator<Item = &str>) -> Result<()> {
        let new: Vec<String> = {
            let known = self.registered.lock().expect("registered lock");
            queues
                .into_iter()
                .filter(|q| !known.contains(*q))
                .map(str::to_string)
                .collect()
        };
        if new.is_empty() {
            return Ok(());
        }
        let mut conn = self.conn.clone();
        redis::cmd("SADD")
            .arg(QUEUES_KEY)
            .arg(&new)
            .query_async::<()>(&mut conn)
            .await
            .map_err(classify)?;
        self.registered.lock().expect("registered lock").extend(new);
        Ok(())
    }

    /// The entries of a queue's dead stream, oldest first, at most `count`.
    async fn read_dead(&self, queue: &str, count: Option<usize>) -> Result<Vec<Entry>> {
        let mut conn = self.conn.clone();
        let mut cmd = redis::cmd("XRANGE");
        cmd.arg(key(queue, "dead")).arg("-").arg("+");
        if let Some(n) = count {
            cmd.arg("COUNT").arg(n);
        }
        let reply: Value = cmd.query_async(&mut conn).await.map_err(classify)?;
        Ok(codec::into_array(reply)
            .into_iter()
            .filter_map(Entry::parse)
            .collect())
    }
}

#[async_trait]
impl Broker for RedisBroker {
    async fn publish(&self, messages: Vec<NewMessage>) -> Result<Vec<String>> {
        let mut ids = Vec::with_capacity(messages.len());
        let mut by_queue: Vec<(String, Vec<(String, &NewMessage)>)> = Vec::new();
        for m in &messages {
            let id = new_id();
            ids.push(id.clone());
            match by_queue.iter_mut().find(|(q, _)| *q == m.queue) {
                Some((_, list)) => list.push((id, m)),
                None => by_queue.push((m.queue.clone(), vec![(id, m)])),
            }
        }
        self.register(by_queue.iter().map(|(q, _)| q.as_str()))
            .await?;
        let mut conn = self.conn.clone();
        for (queue, list) in &by_queue {
            let keys = QueueKeys::new(queue);
            for chunk in list.chunks(500) {
                let mut script = scripts::PUBLISH.prepare_invoke();
                script
                    .key(&keys.stream)
                    .key(&keys.delayed)
                    .key(&keys.bodies)
                    .arg(0);
                for (id, m) in chunk {
                    script
                        .arg(id)
                        .arg(m.key.as_deref().unwrap_or(""))
                        .arg(&m.payload)
                        .arg(encode_headers(&m.headers))
                        .arg(m.delay.as_millis() as u64);
                }
                script
                    .invoke_async::<()>(&mut conn)
                    .await
                    .map_err(classify)?;
            }
        }
        Ok(ids)
    }

    async fn receive(&self, queue: &str, max: usize, lease: Duration) -> Result<Vec<Delivery>> {
        self.receive_batch(queue, max, lease).await
    }

    async fn claim(
        &self,
        queue: &str,
        claims: &[KeyClaim],
        lease: Duration,
    ) -> Result<Vec<ClaimState>> {
        self.claim_keys(queue, claims, lease).await
    }

    async fn settle(&self, settlements: &[Settlement]) -> Result<()> {
        self.settle_all(settlements).await
    }

    async fn queue_stats(&self, queue: &str) -> Result<QueueStats> {
        let keys = QueueKeys::new(queue);
        let mut conn = self.conn.clone();
        let reply: Value = scripts::STATS
            .key(&keys.stream)
            .key(&keys.delayed)
            .key(&keys.bodies)
            .key(&keys.dead)
            .key(&keys.counters)
            .key(&keys.outbox)
            .arg(GROUP)
            .invoke_async(&mut conn)
            .await
            .map_err(classify)?;
        let v = array(&reply);
        let n = |i: usize| v.get(i).and_then(int).unwrap_or(0);
        let (in_stream, pending, delayed, dead, outbox) = (n(0), n(1), n(2), n(3), n(4));
        let mut s = QueueStats {
            queue: queue.to_string(),
            ready: in_stream.saturating_sub(pending),
            delayed,
            // Publishes waiting in the outbox are still in transit.
            in_flight: pending + outbox,
            dead,
            ..Default::default()
        };
        let counters = v.get(5).map(array).unwrap_or_default();
        for pair in counters.chunks(2) {
            if let [k, val] = pair {
                let count = int(val).unwrap_or(0);
                match text(k).as_deref() {
                    Some("done") => s.done = count,
                    Some("duplicates") => s.duplicates = count,
                    Some("retried") => s.retried = count,
                    _ => {}
                }
            }
        }
        Ok(s)
    }

    async fn stats(&self) -> Result<Vec<QueueStats>> {
        let mut conn = self.conn.clone();
        let mut queues: Vec<String> = redis::cmd("SMEMBERS")
            .arg(QUEUES_KEY)
            .query_async(&mut conn)
            .await
            .map_err(classify)?;
        queues.sort();
        let mut out = Vec::with_capacity(queues.len());
        for q in queues {
            out.push(self.queue_stats(&q).await?);
        }
        Ok(out)
    }

    async fn dead_letters(&self, queue: &str, limit: usize) -> Result<Vec<DeadLetter>> {
        let dead = self.read_dead(queue, Some(limit.max(1))).await?;
        Ok(dead
            .into_iter()
            .map(|e| e.into_dead_letter(queue))
            .collect())
    }

    async fn dead_letter(&self, queue: &str, id: &str) -> Result<Option<DeadLetter>> {
        let dead = self.read_dead(queue, None).await?;
        Ok(dead
            .into_iter()
            .find(|e| e.id == id)
            .map(|e| e.into_dead_letter(queue)))
    }

    async fn replay(&self, queue: &str, selector: &ReplaySelector) -> Result<u64> {
        let mut conn = self.conn.clone();
        // The dead stream's entry ids are the times of death, so a cut-off
        // is the end of the range.
        let until = selector
            .died_before_ms
            .map_or_else(|| "+".to_string(), |ms| ms.to_string());
        let max_redrives = selector.max_redrives.map_or(-1, i64::from);
        let mut after = "-".to_string();
        let mut moved = 0u64;
        loop {
            let left = match selector.limit {
                Some(limit) if moved >= limit as u64 => break,
                Some(limit) => limit as u64 - moved,
                None => 0,
            };
            let mut script = scripts::REPLAY.prepare_invoke();
            script
                .key(key(queue, "dead"))
                .key(key(queue, "stream"))
                .arg(&after)
                .arg(&until)
                .arg(REPLAY_SCAN)
                .arg(left)
                .arg(max_redrives)
                .arg(u8::from(selector.redrive));
            for id in &selector.ids {
                script.arg(id);
            }
            let (n, last): (u64, String) =
                script.invoke_async(&mut conn).await.map_err(classify)?;
            moved += n;
            if last.is_empty() {
                return Ok(moved);
            }
            after = format!("({last}");
        }
        Ok(moved)
    }

    async fn purge(&self, queue: &str) -> Result<u64> {
        let mut conn = self.conn.clone();
        scripts::PURGE
            .key(key(queue, "dead"))
            .invoke_async(&mut conn)
            .await
            .map_err(classify)
    }

    async fn put_handler_statuses(&self, host: &str, statuses: Vec<HandlerStatus>) -> Result<()> {
        let mut conn = self.conn.clone();
        let json = serde_json::to_string(&statuses).expect("statuses serialize");
        redis::cmd("HSET")
            .arg(STATUS_KEY)
            .arg(host)
            .arg(json)
            .query_async::<()>(&mut conn)
            .await
            .map_err(classify)
    }

    async fn flush(&self) -> Result<()> {
        let queues = self.served.lock().expect("served lock").clone();
        // Every queue is tried, whichever fails; the error names them.
        let mut failed = Vec::new();
        for q in queues {
            if let Err(e) = relay::relay_queue(self.conn.clone(), &q).await {
                failed.push(format!("queue {q:?}: {e}"));
            }
        }
        if failed.is_empty() {
            Ok(())
        } else {
            Err(BrokerError::Unavailable(format!(
                "relaying the outbox of {}",
                failed.join("; ")
            )))
        }
    }

    async fn handler_statuses(&self) -> Result<Vec<HandlerStatus>> {
        let mut conn = self.conn.clone();
        let all: Vec<(String, String)> = redis::cmd("HGETALL")
            .arg(STATUS_KEY)
            .query_async(&mut conn)
            .await
            .map_err(classify)?;
        let mut out: Vec<HandlerStatus> = all
            .iter()
            .filter_map(|(_, json)| serde_json::from_str::<Vec<HandlerStatus>>(json).ok())
            .flatten()
            .collect();
        out.sort_by(|a, b| (&a.handler, &a.host).cmp(&(&b.handler, &b.host)));
        Ok(out)
    }
}

impl std::fmt::Debug for RedisBroker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisBroker")
            .field("consumer", &self.consumer)
            .field("cluster", &self.cluster)
            .finish()
    }
}
