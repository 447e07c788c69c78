//! The queue role: what the worker needs and nothing more. Messages are
//! published, leased in batches, their idempotency keys taken, and each
//! delivery settled: done, duplicate, retried, deferred or dead.

use std::time::Duration;

use async_trait::async_trait;

use super::Result;
use crate::message::{Delivery, NewMessage};
pub use crate::policy::{Flow, GroupSource, OrderedGroups, Rate};

/// The longest a broker's [`Queue::idle`] waits before its caller looks
/// again, while it hears of new messages (SQLite's doorbells, PostgreSQL's
/// notifications, Redis's blocking reads): a host with a thousand idle
/// queues looks about 33 times a second in all.
pub const IDLE_MOST: Duration = Duration::from_secs(30);

/// Where messages wait, are leased and are settled. Calls work in batches so
/// that a networked backend makes one round trip per batch, not per message.
#[async_trait]
pub trait Queue: Send + Sync + 'static {
    /// Enqueue messages, each after its own delay. Returns their ids in order.
    async fn publish(&self, messages: Vec<NewMessage>) -> Result<Vec<String>>;

    /// Lease up to `max` due messages of `queue` for `lease`, fewer when
    /// `flow` says so. Every delivery counts one attempt, whether or not it
    /// is settled before the lease ends.
    async fn receive(
        &self,
        queue: &str,
        max: usize,
        lease: Duration,
        flow: Flow,
    ) -> Result<Vec<Delivery>>;

    /// Take idempotency keys of `queue` for `lease`, one answer per claim. A
    /// key is held by one delivery at a time: another delivery of the same
    /// message finds it busy until the holder settles or its lease ends.
    async fn claim(
        &self,
        queue: &str,
        claims: &[KeyClaim],
        lease: Duration,
    ) -> Result<Vec<ClaimState>>;

    /// Lease as [`Queue::receive`] does, then take the idempotency key that
    /// `key_of` gives each delivery (none where it gives `None`), held by
    /// that delivery's receipt, as [`Queue::claim`] does. A broker that does
    /// both in one step says so with [`Queue::claims_with_receive`], and a
    /// worker then calls this rather than the two; by default it is the two
    /// calls, one after the other, and a failed claim leaves the deliveries
    /// leased, holding no key (`Received::claims` says why).
    async fn receive_claiming(
        &self,
        queue: &str,
        max: usize,
        lease: Duration,
        flow: Flow,
        key_of: &KeyOf,
    ) -> Result<Received> {
        let deliveries = self.receive(queue, max, lease, flow).await?;
        let keys: Vec<Option<String>> = deliveries.iter().map(|d| key_of(d)).collect();
        let wanted = claims_of(deliveries.iter().zip(&keys));
        let claims = claim_all(self, queue, &wanted, lease).await;
        Ok(Received {
            deliveries,
            keys,
            claims,
        })
    }

    /// Whether [`Queue::receive_claiming`] leases and takes keys in one
    /// step: false unless the broker says so.
    fn claims_with_receive(&self) -> bool {
        false
    }

    /// End leases. Every settlement is fenced by its delivery's receipt: one
    /// whose delivery lost its lease (the message was delivered again since,
    /// or is gone) is refused, applied in no part, and counted in
    /// [`QueueStats::lost_leases`](super::QueueStats::lost_leases). A late
    /// `Done` therefore never overwrites a newer delivery's result.
    async fn settle(&self, settlements: &[Settlement]) -> Result<()>;

    /// How many [`Queue::settle`] calls a worker may have in flight at once
    /// for one queue: 1 unless the broker runs them side by side. Calls in
    /// flight together settle different deliveries, as the calls of
    /// different hosts do. `ordered`: the queue keeps ordered groups, where
    /// a group's next message is queued only when the one before is
    /// settled, so a settle lies on the path from message to message and
    /// not only on the drain's throughput.
    fn settle_writes(&self, _ordered: bool) -> usize {
        1
    }

    /// Keep leases going while their calls run past what they were leased
    /// for (the guest asked for more time): each delivery that still holds
    /// its lease is leased for `lease` from now, and so is the idempotency
    /// key it holds. Returns, in order, whether each still held its lease.
    async fn extend(&self, queue: &str, leases: &[Lease], lease: Duration) -> Result<Vec<bool>>;

    /// Put `queue`'s messages in ordered groups from now on, or stop (`None`):
    /// a message published with a group value waits while an earlier one of
    /// its group is unsettled (ready, delayed, leased, or dead with
    /// `block_on_dead`), and becomes due when that one is done, a
    /// duplicate or dead. Stopping, or no longer blocking on dead ones,
    /// lets every waiting message go.
    async fn set_ordering(&self, queue: &str, ordering: Option<&OrderedGroups>) -> Result<()>;

    /// Wait before the next receive of `queue`, which found nothing last
    /// time: `up_to` (the caller's idle backoff) by default. A broker that
    /// hears when messages arrive returns as soon as one does, and may wait
    /// past `up_to`, to the next message's due time or [`IDLE_MOST`],
    /// since it will not miss one.
    async fn idle(&self, queue: &str, up_to: Duration) {
        let _ = queue;
        tokio::time::sleep(up_to).await;
    }

    /// Finish what the broker does in the background for this host before it
    /// exits: on Redis, move held publishes from the outboxes of the queues
    /// it served to their targets.
    async fn flush(&self) -> Result<()> {
        Ok(())
    }
}

/// A delivery's lease, and the idempotency key it holds, to extend.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lease {
    /// The message id.
    pub id: String,
    /// The delivery's receipt: only the delivery that holds the lease
    /// extends it.
    pub receipt: String,
    /// The idempotency key the delivery holds, extended with the lease.
    pub key: Option<String>,
}

/// An idempotency key to take before a delivery is handled.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyClaim {
    /// The idempotency key.
    pub key: String,
    /// Who takes it: the delivery's receipt, so that two deliveries of one
    /// message are two holders.
    pub holder: String,
}

/// What gives a delivery's idempotency key; `None`: it takes none.
pub type KeyOf = std::sync::Arc<dyn Fn(&Delivery) -> Option<String> + Send + Sync>;

/// Deliveries leased by [`Queue::receive_claiming`], with their keys.
#[derive(Debug)]
pub struct Received {
    /// The deliveries leased, as [`Queue::receive`] leases them.
    pub deliveries: Vec<Delivery>,
    /// Each delivery's key, in the same order (`None`: it takes none).
    pub keys: Vec<Option<String>>,
    /// What taking the keys found, one answer per `Some` key, in order; an
    /// error when they could not be taken (the deliveries are leased all
    /// the same, and hold no key).
    pub claims: Result<Vec<ClaimState>>,
}

/// The claims of the deliveries whose keys are `Some`, each held by its
/// delivery's receipt, in order.
pub fn claims_of<'a>(
    keyed: impl IntoIterator<Item = (&'a Delivery, &'a Option<String>)>,
) -> Vec<KeyClaim> {
    keyed
        .into_iter()
        .filter_map(|(d, k)| {
            k.as_ref().map(|k| KeyClaim {
                key: k.clone(),
                holder: d.receipt.clone(),
            })
        })
        .collect()
}

/// Take `claims` in one [`Queue::claim`] call, or answer at once when
/// there are none.
pub async fn claim_all<Q: Queue + ?Sized>(
    broker: &Q,
    queue: &str,
    claims: &[KeyClaim],
    lease: Duration,
) -> Result<Vec<ClaimState>> {
    if claims.is_empty() {
        return Ok(Vec::new());
    }
    broker.claim(queue, claims, lease).await
}

/// What came of a [`KeyClaim`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClaimState {
    /// The key is now leased to this delivery: handle it.
    Acquired,
    /// The key already completed within its retention: ack as a duplicate.
    AlreadyDone,
    /// Another delivery holds the key right now: try again later.
    Busy,
}

/// How one delivery ends its lease. Each is applied atomically.
#[derive(Clone, Debug)]
pub enum Settlement {
    /// Handled. Removes the message, records `key` as done for `retention`
    /// and commits `publishes`, all in one step. If the key turns out to be
    /// done already (another message with the same key completed), the
    /// publishes are dropped and the message counts as a duplicate.
    Done {
        /// The delivery handled.
        delivery: Delivery,
        /// The key it held, and how long it is kept as done.
        key: Option<(String, Duration)>,
        /// What the handler published, committed with the ack.
        publishes: Vec<NewMessage>,
    },
    /// The key had completed before: remove the message without handling it.
    Duplicate {
        /// The delivery acked.
        delivery: Delivery,
    },
    /// Deliver again after `delay`; this attempt counts. Releases `key`.
    Retry {
        /// The delivery that failed.
        delivery: Delivery,
        /// How long the message waits.
        delay: Duration,
        /// Why, kept as the next delivery's `last_error`.
        error: String,
        /// The key the delivery held.
        key: Option<String>,
    },
    /// Put back for `delay` without counting an attempt (key busy, shutdown).
    /// Releases `key` if this delivery holds it.
    Defer {
        /// The delivery put back.
        delivery: Delivery,
        /// How long the message waits.
        delay: Duration,
        /// The key the delivery held.
        key: Option<String>,
    },
    /// The handler snoozed it: like `Defer` (no attempt counts), and the
    /// message's snoozes go up by one.
    Snooze {
        /// The delivery snoozed.
        delivery: Delivery,
        /// How long the message waits.
        delay: Duration,
        /// The key the delivery held.
        key: Option<String>,
    },
    /// Move to the dead letters. Releases `key`. `notice`, if any, is
    /// published in the same atomic step that stores the dead letter (the
    /// handler's `on_dead` hook), and only if it is stored.
    Dead {
        /// The delivery that died.
        delivery: Delivery,
        /// Why, as the dead letter keeps it.
        reason: String,
        /// The last attempt's error, if it failed.
        error: Option<String>,
        /// The content hash of the handler version that handled it last.
        handler_version: Option<String>,
        /// The key the delivery held.
        key: Option<String>,
        /// A message published with the dead letter.
        notice: Option<NewMessage>,
    },
}

impl Settlement {
    /// The delivery this settlement ends.
    pub fn delivery(&self) -> &Delivery {
        match self {
            Settlement::Done { delivery, .. }
            | Settlement::Duplicate { delivery }
            | Settlement::Retry { delivery, .. }
            | Settlement::Defer { delivery, .. }
            | Settlement::Snooze { delivery, .. }
            | Settlement::Dead { delivery, .. } => delivery,
        }
    }

    /// The idempotency key this settlement records or releases, if any.
    pub fn key(&self) -> Option<&str> {
        match self {
            Settlement::Done { key, .. } => key.as_ref().map(|(k, _)| k.as_str()),
            Settlement::Retry { key, .. }
            | Settlement::Dead { key, .. }
            | Settlement::Defer { key, .. }
            | Settlement::Snooze { key, .. } => key.as_deref(),
            Settlement::Duplicate { .. } => None,
        }
    }
}
