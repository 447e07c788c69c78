//! The queue role: what the worker needs and nothing more. Messages are
//! published, leased in batches, their idempotency keys taken, and each
//! delivery settled: done, duplicate, retried, deferred or dead.

use std::time::Duration;

use async_trait::async_trait;

use super::Result;
use crate::message::{Delivery, NewMessage};

/// Where messages wait, are leased and are settled. Calls work in batches so
/// that a networked backend makes one round trip per batch, not per message.
#[async_trait]
pub trait Queue: Send + Sync + 'static {
    /// Enqueue messages, each after its own delay. Returns their ids in order.
    async fn publish(&self, messages: Vec<NewMessage>) -> Result<Vec<String>>;

    /// Lease up to `max` due messages of `queue` for `lease`. Every delivery
    /// counts one attempt, whether or not it is settled before the lease ends.
    async fn receive(&self, queue: &str, max: usize, lease: Duration) -> Result<Vec<Delivery>>;

    /// Take idempotency keys of `queue` for `lease`, one answer per claim.
    async fn claim(
        &self,
        queue: &str,
        claims: &[KeyClaim],
        lease: Duration,
    ) -> Result<Vec<ClaimState>>;

    /// End leases. A settlement whose lease was lost to another consumer is
    /// ignored, except `Done`, which still records its key so the other
    /// consumer's copy becomes a duplicate.
    async fn settle(&self, settlements: &[Settlement]) -> Result<()>;

    /// Finish what the broker does in the background for this host before it
    /// exits: on Redis, move held publishes from the outboxes of the queues
    /// it served to their targets.
    async fn flush(&self) -> Result<()> {
        Ok(())
    }
}

/// An idempotency key to take before a delivery is handled.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyClaim {
    pub key: String,
    pub message_id: String,
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
    /// done already (a concurrent delivery won), the publishes are dropped
    /// and the message counts as a duplicate.
    Done {
        delivery: Delivery,
        key: Option<(String, Duration)>,
        publishes: Vec<NewMessage>,
    },
    /// The key had completed before: remove the message without handling it.
    Duplicate { delivery: Delivery },
    /// Deliver again after `delay`; this attempt counts. Releases `key`.
    Retry {
        delivery: Delivery,
        delay: Duration,
        error: String,
        key: Option<String>,
    },
    /// Put back for `delay` without counting an attempt (key busy, shutdown).
    Defer { delivery: Delivery, delay: Duration },
    /// Move to the dead letters. Releases `key`. `notice`, if any, is
    /// published in the same atomic step that stores the dead letter (the
    /// handler's `on_dead` hook), and only if it is stored.
    Dead {
        delivery: Delivery,
        reason: String,
        error: Option<String>,
        handler_version: Option<String>,
        key: Option<String>,
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
            | Settlement::Dead { delivery, .. } => delivery,
        }
    }

    /// The idempotency key this settlement records or releases, if any.
    pub fn key(&self) -> Option<&str> {
        match self {
            Settlement::Done { key, .. } => key.as_ref().map(|(k, _)| k.as_str()),
            Settlement::Retry { key, .. } | Settlement::Dead { key, .. } => key.as_deref(),
            Settlement::Duplicate { .. } | Settlement::Defer { .. } => None,
        }
    }
}
