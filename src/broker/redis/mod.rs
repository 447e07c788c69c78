//! The Redis broker: one Stream and consumer group per queue, delayed and
//! retried messages in a sorted set, dead letters in a stream of their own,
//! idempotency keys as plain keys with a TTL. Every key of a queue carries
//! the hash tag `{queue}`, so the same code runs on Redis Cluster, and many
//! hosts can consume one queue as competing consumers.
//!
//! Round trips are per batch, not per message: one `XREADGROUP` for a batch,
//! one script to take a batch's idempotency keys and one to settle a batch.
//! Publishes held by a handler go to an outbox stream in the source queue's
//! slot, written by the same script as the ack; a relay task moves them to
//! their target queues, each guarded by a marker key so a relay repeated
//! after a crash enqueues nothing twice.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex as StdMutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Pipeline, RedisError, RedisFuture, Value};
use tokio::sync::{Mutex, Notify};

use super::{
    Broker, BrokerError, ClaimState, DeadLetter, HandlerStatus, KeyClaim, QueueStats,
    ReplaySelector, Result, Settlement,
};
use crate::message::{Delivery, NewMessage, hostname, new_id, now_ms};

mod codec;
mod kv;
mod scripts;
mod topics;

use codec::{Entry, array, int, text};

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
/// How long the relay's markers remember a relayed publish.
const RELAY_MARKER_TTL: Duration = Duration::from_secs(24 * 3600);

fn key(queue: &str, part: &str) -> String {
    format!("sluice:{{{queue}}}:{part}")
}

/// The idempotency key `k` of `queue`.
fn idem_key(queue: &str, k: &str) -> String {
    format!("sluice:{{{queue}}}:key:{k}")
}

/// What an idempotency key holds while `message_id` is being handled; once
/// done it holds `D:` and the id.
fn lease_value(message_id: &str) -> String {
    format!("L:{message_id}")
}

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

/// A connection to a single Redis or to a cluster. Both reconnect on their
/// own; a command issued while Redis is away fails, and callers back off.
#[derive(Clone)]
enum Conn {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Single(c) => c.req_packed_command(cmd),
            Conn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Single(c) => c.req_packed_commands(cmd, offset, count),
            Conn::Cluster(c) => c.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
        }
    }
}

#[derive(Clone)]
enum Client {
    Single(redis::Client),
    Cluster(Box<redis::cluster::ClusterClient>),
}

impl Client {
    async fn connect(&self) -> redis::RedisResult<Conn> {
        match self {
            Client::Single(c) => {
                let config = ConnectionManagerConfig::new()
                    .set_number_of_retries(3)
                    .set_max_delay(Duration::from_secs(2))
                    .set_connection_timeout(Some(Duration::from_secs(2)))
                    .set_response_timeout(Some(Duration::from_secs(10)));
                Ok(Conn::Single(
                    ConnectionManager::new_with_config(c.clone(), config).await?,
                ))
            }
            Client::Cluster(c) => Ok(Conn::Cluster(c.get_async_connection().await?)),
        }
    }
}

/// The receiving side of one queue: its own connection, because a blocking
/// `XREADGROUP` holds the connection it runs on.
struct Reader {
    conn: Conn,
    group_ready: bool,
    cursor: String,
    last_maintain: Option<Instant>,
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

fn classify(e: RedisError) -> BrokerError {
    if e.is_io_error() || e.is_connection_dropped() || e.is_timeout() || e.is_connection_refusal() {
        BrokerError::Unavailable(format!("Redis: {e}"))
    } else {
        BrokerError::Storage(format!("Redis: {e}"))
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
        let relay = tokio::spawn(relay_loop(conn.clone(), served.clone(), relay_wake.clone()));
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

    async fn reader(&self, queue: &str) -> Result<Arc<Mutex<Reader>>> {
        let mut readers = self.readers.lock().await;
        if let Some(r) = readers.get(queue) {
            return Ok(r.clone());
        }
        let conn = self.client.connect().await.map_err(classify)?;
        let reader = Arc::new(Mutex::new(Reader {
            conn,
            group_ready: false,
            cursor: "0-0".into(),
            last_maintain: None,
        }));
        readers.insert(queue.to_string(), reader.clone());
        Ok(reader)
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

    async fn ensure_group(conn: &mut Conn, stream: &str) -> Result<()> {
        let created: redis::RedisResult<()> = redis::cmd("XGROUP")
            .arg("CREATE")
            .arg(stream)
            .arg(GROUP)
            .arg("0")
            .arg("MKSTREAM")
            .query_async(conn)
            .await;
        match created {
            Ok(()) => Ok(()),
            Err(e) if e.code() == Some("BUSYGROUP") => Ok(()),
            Err(e) => Err(classify(e)),
        }
    }

    async fn read_new(
        &self,
        reader: &mut Reader,
        keys: &QueueKeys,
        queue: &str,
        count: usize,
        block: bool,
        lease: Duration,
    ) -> Result<Vec<Delivery>> {
        let mut cmd = redis::cmd("XREADGROUP");
        cmd.arg("GROUP")
            .arg(GROUP)
            .arg(&self.consumer)
            .arg("COUNT")
            .arg(count);
        if block {
            cmd.arg("BLOCK").arg(BLOCK.as_millis() as u64);
        }
        cmd.arg("STREAMS").arg(&keys.stream).arg(">");
        let reply: Value = match cmd.query_async(&mut reader.conn).await {
            Ok(v) => v,
            Err(e) if e.code() == Some("NOGROUP") => {
                // The stream or group is gone (e.g. Redis lost its data):
                // make them again and read next time.
                reader.group_ready = false;
                return Ok(Vec::new());
            }
            Err(e) => return Err(classify(e)),
        };
        Ok(codec::read_reply(reply, queue, lease.as_millis() as u64))
    }

    async fn maintain(
        &self,
        reader: &mut Reader,
        keys: &QueueKeys,
        queue: &str,
        max: usize,
        lease: Duration,
    ) -> Result<Vec<Delivery>> {
        let mut conn = self.conn.clone();
        let reply: Value = scripts::MAINTAIN
            .key(&keys.stream)
            .key(&keys.delayed)
            .key(&keys.bodies)
            .arg(GROUP)
            .arg(&self.consumer)
            .arg(lease.as_millis() as u64)
            .arg(max.max(1))
            .arg(&reader.cursor)
            .invoke_async(&mut conn)
            .await
            .map_err(classify)?;
        let mut parts = codec::into_array(reply).into_iter();
        reader.cursor = parts
            .next()
            .and_then(codec::into_string)
            .unwrap_or_else(|| "0-0".into());
        let lease_until = now_ms() + lease.as_millis() as u64;
        let mut out = Vec::new();
        for item in parts.next().map(codec::into_array).unwrap_or_default() {
            // {entry id, fields, delivery count}
            let mut e = codec::into_array(item);
            let count = e.get(2).and_then(int);
            e.truncate(2);
            if let (Some(count), Some(entry)) = (count, Entry::parse(Value::Array(e))) {
                out.push(entry.into_delivery(queue, count, lease_until));
            }
        }
        Ok(out)
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
                        .arg(format!("D:{}", d.id))
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
            .filter(|v| matches!(v, Value::BulkString(b) if b.starts_with(b"D:")))
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

fn encode_headers(headers: &[(String, String)]) -> String {
    if headers.is_empty() {
        String::new()
    } else {
        serde_json::to_string(headers).expect("string pairs always serialize")
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
        if max == 0 {
            return Ok(Vec::new());
        }
        self.served
            .lock()
            .expect("served lock")
            .insert(queue.to_string());
        let keys = QueueKeys::new(queue);
        let reader = self.reader(queue).await?;
        let mut reader = reader.lock().await;
        if !reader.group_ready {
            self.register([queue]).await?;
            Self::ensure_group(&mut reader.conn, &keys.stream).await?;
            reader.group_ready = true;
        }
        let mut out = Vec::new();
        if reader
            .last_maintain
            .is_none_or(|t| t.elapsed() >= MAINTAIN_EVERY)
        {
            reader.last_maintain = Some(Instant::now());
            out = self.maintain(&mut reader, &keys, queue, max, lease).await?;
        }
        if out.len() < max {
            let block = out.is_empty();
            let fresh = self
                .read_new(&mut reader, &keys, queue, max - out.len(), block, lease)
                .await?;
            out.extend(fresh);
        }
        Ok(out)
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
        // One plain `SET NX GET` per key, pipelined: cheaper for Redis than
        // the same commands inside a script, and it answers in one go.
        let lease_ms = lease.as_millis() as u64;
        let mut pipe = redis::pipe();
        for c in claims {
            pipe.cmd("SET")
                .arg(idem_key(queue, &c.key))
                .arg(lease_value(&c.message_id))
                .arg("NX")
                .arg("GET")
                .arg("PX")
                .arg(lease_ms);
        }
        let mut conn = self.conn.clone();
        let before: Vec<Value> = pipe.query_async(&mut conn).await.map_err(classify)?;
        let mut states = Vec::with_capacity(claims.len());
        let mut extend = redis::pipe();
        let mut extending = false;
        for (c, held) in claims.iter().zip(before) {
            let state = match held {
                Value::Nil => ClaimState::Acquired,
                Value::BulkString(v) if v.starts_with(b"D:") => ClaimState::AlreadyDone,
                // This message's own earlier lease (it was delivered again):
                // take the key over for the new lease.
                Value::BulkString(v) if v[..] == *lease_value(&c.message_id).as_bytes() => {
                    extend
                        .cmd("PEXPIRE")
                        .arg(idem_key(queue, &c.key))
                        .arg(lease_ms)
                        .ignore();
                    extending = true;
                    ClaimState::Acquired
                }
                _ => ClaimState::Busy,
            };
            states.push(state);
        }
        if extending {
            extend
                .query_async::<()>(&mut conn)
                .await
                .map_err(classify)?;
        }
        Ok(states)
    }

    async fn settle(&self, settlements: &[Settlement]) -> Result<()> {
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
        let queues: Vec<String> = self
            .served
            .lock()
            .expect("served lock")
            .iter()
            .cloned()
            .collect();
        for q in queues {
            relay_queue(self.conn.clone(), &q).await.map_err(classify)?;
        }
        Ok(())
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

/// How often the relay also looks at the outboxes of every queue the broker
/// knows, so that publishes held by a queue no host serves any more still
/// reach their targets.
const RELAY_ALL_EVERY: Duration = Duration::from_secs(2);

/// Moves held publishes from the outboxes of the queues this host serves
/// (at once when a settle wakes it, else every 50 ms) and of every known
/// queue (every [`RELAY_ALL_EVERY`]) to their target queues. Runs until the
/// broker is dropped.
async fn relay_loop(conn: Conn, served: Arc<StdMutex<BTreeSet<String>>>, wake: Arc<Notify>) {
    let mut backoff = Duration::from_millis(50);
    let mut last_all = Instant::now();
    loop {
        tokio::select! {
            _ = wake.notified() => {}
            _ = tokio::time::sleep(Duration::from_millis(50)) => {}
        }
        let mut queues: BTreeSet<String> = served.lock().expect("served lock").clone();
        if last_all.elapsed() >= RELAY_ALL_EVERY {
            last_all = Instant::now();
            let mut c = conn.clone();
            match redis::cmd("SMEMBERS")
                .arg(QUEUES_KEY)
                .query_async::<Vec<String>>(&mut c)
                .await
            {
                Ok(all) => queues.extend(all),
                Err(e) => tracing::warn!(error = %e, "could not list queues to relay"),
            }
        }
        for q in queues {
            if let Err(e) = relay_queue(conn.clone(), &q).await {
                tracing::warn!(queue = %q, error = %e, "relaying held publishes failed; retrying in {backoff:?}");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(5));
                continue;
            }
            backoff = Duration::from_millis(50);
        }
    }
}

async fn relay_queue(mut conn: Conn, queue: &str) -> redis::RedisResult<()> {
    let outbox = key(queue, "outbox");
    loop {
        let reply: Value = redis::cmd("XRANGE")
            .arg(&outbox)
            .arg("-")
            .arg("+")
            .arg("COUNT")
            .arg(500)
            .query_async(&mut conn)
            .await?;
        let held: Vec<codec::Held> = codec::into_array(reply)
            .into_iter()
            .filter_map(codec::Held::parse)
            .collect();
        if held.is_empty() {
            return Ok(());
        }
        // One script per target queue: its keys share that queue's slot.
        let mut by_target: Vec<(&str, Vec<&codec::Held>)> = Vec::new();
        for h in &held {
            match by_target.iter_mut().find(|(q, _)| *q == h.queue) {
                Some((_, list)) => list.push(h),
                None => by_target.push((&h.queue, vec![h])),
            }
        }
        for (target, list) in &by_target {
            let keys = QueueKeys::new(target);
            let mut script = scripts::PUBLISH.prepare_invoke();
            script
                .key(&keys.stream)
                .key(&keys.delayed)
                .key(&keys.bodies)
                .arg(RELAY_MARKER_TTL.as_millis() as u64);
            for h in list {
                script
                    .key(key(target, &format!("relayed:{}", h.id)))
                    .arg(&h.id)
                    .arg(&h.key)
                    .arg(&h.payload)
                    .arg(&h.headers)
                    .arg(h.delay_ms);
            }
            script.invoke_async::<()>(&mut conn).await?;
        }
        let targets: Vec<&str> = by_target.iter().map(|(q, _)| *q).collect();
        redis::cmd("SADD")
            .arg(QUEUES_KEY)
            .arg(&targets)
            .query_async::<()>(&mut conn)
            .await?;
        let entries: Vec<&str> = held.iter().map(|h| h.entry.as_str()).collect();
        redis::cmd("XDEL")
            .arg(&outbox)
            .arg(&entries)
            .query_async::<()>(&mut conn)
            .await?;
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
