//! The Redis broker: one Stream and consumer group per queue, delayed and
//! retried messages in a sorted set, dead letters in a stream of their own,
//! idempotency keys as plain keys with a TTL. Every key of a queue carries
//! the hash tag `{queue}`, so the same code runs on Redis Cluster, and many
//! hosts can consume one queue as competing consumers.
//!
//! The roles are one file each: [`queue`] (publish, receive, claim, settle,
//! flush), [`dead`], [`presence`], [`kv`] and [`topics`]. Their internals:
//! [`conn`] (connections, and Redis errors as broker errors), [`reader`]
//! (each queue's blocking read and maintenance), [`relay`] (held publishes
//! moved from a queue's outbox to their targets), [`codec`] (entries and
//! replies) and [`scripts`] (the Lua).

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;

use tokio::sync::Mutex;

use crate::Result;
use crate::message::{hostname, new_id};

mod codec;
mod conn;
mod dead;
mod groups;
mod kv;
mod presence;
mod queue;
mod reader;
mod relay;
mod schedules;
mod scripts;
mod topics;

use conn::{Client, Conn, classify};
use reader::Reader;

/// The consumer group every host joins.
const GROUP: &str = "sluice";
/// The set of known queue names (one of three keys without a queue's hash
/// tag, with [`STATUS_KEY`] and [`PAUSED_KEY`]).
const QUEUES_KEY: &str = "sluice:queues";
/// Each host's handler statuses, as JSON by host.
const STATUS_KEY: &str = "sluice:handlers";
/// The set of paused queue names.
const PAUSED_KEY: &str = "sluice:paused";
/// How long a receive blocks on an empty stream.
const BLOCK: Duration = Duration::from_millis(50);
/// The longest an idle queue's reader waits (`Queue::idle`) before it
/// looks again: a new entry, or a delayed message due before every other
/// (which rings the queue's wake stream), ends the wait at once, and it
/// ends when the next delayed message is due.
const IDLE_WAIT: Duration = crate::IDLE_MOST;
/// How often a receiver promotes due messages and reclaims expired leases.
const MAINTAIN_EVERY: Duration = Duration::from_millis(100);

fn key(queue: &str, part: &str) -> String {
    format!("sluice:{{{queue}}}:{part}")
}

/// The idempotency key `k` of `queue`.
fn idem_key(queue: &str, k: &str) -> String {
    format!("sluice:{{{queue}}}:key:{k}")
}

/// What an idempotency key holds while the delivery whose receipt is
/// `holder` handles its message. (Once done it holds `D:` and the message
/// id: see `SETTLE`.)
fn lease_value(holder: &str) -> String {
    format!("{LEASE_PREFIX}{holder}")
}

/// The prefixes of a key's lease and of a done key; the scripts spell them
/// too, as `'L:'` and `'D:'`.
const LEASE_PREFIX: &str = "L:";
const DONE_PREFIX: &str = "D:";

/// `items` grouped by the queue `queue_of` names, queues and items each in
/// the order they first come. Every key a script touches must share one
/// queue's hash slot, so batches are split this way before a script runs.
fn group_by_queue<'a, T>(
    items: impl IntoIterator<Item = T>,
    queue_of: impl Fn(&T) -> &'a str,
) -> Vec<(&'a str, Vec<T>)> {
    let mut out: Vec<(&'a str, Vec<T>)> = Vec::new();
    for item in items {
        let q = queue_of(&item);
        match out.iter_mut().find(|(name, _)| *name == q) {
            Some((_, list)) => list.push(item),
            None => out.push((q, vec![item])),
        }
    }
    out
}

/// The keys of one queue, in the order the scripts expect them.
struct QueueKeys {
    stream: String,
    delayed: String,
    bodies: String,
    dead: String,
    counters: String,
    outbox: String,
    /// Each dead letter's entry in `dead`, by message id.
    dead_index: String,
    /// Each live consumer's lease, for reclaiming (see `MAINTAIN`).
    leases: String,
    /// The rate bucket: `tokens` and `at` (see `TAKE`).
    flow: String,
    /// The last tick of each schedule of the queue, by name (see `FIRE`).
    schedules: String,
    /// Ordered groups: the ordering, which groups are held, and blocks (see
    /// `enqueue_grouped` in the scripts' prelude) ...
    groups: String,
    /// ... and the prefix of each group's list of waiting messages, in
    /// order (`WAITING:GROUP`).
    waiting: String,
    /// A stream of at most one entry, added to when a delayed message is
    /// due before every other (see `enqueue` in the scripts' prelude): an
    /// idle reader blocks on it beside `stream`.
    wake: String,
}

impl QueueKeys {
    /// The keys of every place a message is queued in: stream, delayed,
    /// bodies, groups and waiting, in this order in every script that
    /// queues one.
    fn enqueue_keys<'a, 'b>(
        &self,
        script: &'a mut redis::ScriptInvocation<'b>,
    ) -> &'a mut redis::ScriptInvocation<'b> {
        script
            .key(&self.stream)
            .key(&self.delayed)
            .key(&self.bodies)
            .key(&self.groups)
            .key(&self.waiting)
    }

    /// The keys `PUBLISH` takes before its markers.
    fn publish_keys(&self, script: &mut redis::ScriptInvocation<'_>) {
        self.enqueue_keys(script).key(&self.counters);
    }

    fn new(queue: &str) -> Self {
        QueueKeys {
            stream: key(queue, "stream"),
            delayed: key(queue, "delayed"),
            bodies: key(queue, "bodies"),
            dead: key(queue, "dead"),
            counters: key(queue, "counters"),
            outbox: key(queue, "outbox"),
            dead_index: key(queue, "deadidx"),
            leases: key(queue, "leases"),
            flow: key(queue, "flow"),
            schedules: key(queue, "schedules"),
            groups: key(queue, "groups"),
            waiting: key(queue, "waiting"),
            wake: key(queue, "wake"),
        }
    }
}

/// A host's connection to a Redis (or a Redis Cluster) holding sluice's
/// queues: a shared multiplexed connection for most calls, one more per
/// queue it receives from, and the relay task that moves held publishes.
pub struct RedisBroker {
    client: Client,
    conn: Conn,
    consumer: String,
    cluster: bool,
    readers: Mutex<HashMap<String, Arc<Mutex<Reader>>>>,
    /// Queue names this broker has added to [`QUEUES_KEY`].
    registered: StdMutex<HashSet<String>>,
    /// Queues this host receives from: their outboxes are relayed first.
    served: Arc<StdMutex<BTreeSet<String>>>,
    relay_wake: Arc<relay::Wake>,
    relay: tokio::task::JoinHandle<()>,
    /// Each queue's ordering as last seen.
    orderings: Arc<groups::Orderings>,
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
        let (client, cluster) = Client::open(url).await?;
        let conn = client
            .connect()
            .await
            .map_err(|e| anyhow::anyhow!("cannot connect to Redis at {url}: {e}"))?;
        let consumer = format!("{}-{}-{}", hostname(), std::process::id(), &new_id()[20..]);
        let served = Arc::new(StdMutex::new(BTreeSet::new()));
        let relay_wake = Arc::new(relay::Wake::default());
        let orderings = Arc::new(groups::Orderings::default());
        let relay = tokio::spawn(relay::relay_loop(
            conn.clone(),
            orderings.clone(),
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
            orderings,
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
    /// The members of the set at `key`, sorted: the known queues
    /// ([`QUEUES_KEY`]) or the paused ones.
    async fn sorted_members(&self, key: &str) -> Result<Vec<String>> {
        let mut members: Vec<String> = redis::cmd("SMEMBERS")
            .arg(key)
            .query_async(&mut self.conn.clone())
            .await
            .map_err(classify)?;
        members.sort();
        Ok(members)
    }

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
}

impl std::fmt::Debug for RedisBroker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisBroker")
            .field("consumer", &self.consumer)
            .field("cluster", &self.cluster)
            .finish()
    }
}
