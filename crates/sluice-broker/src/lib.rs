//! sluice's broker: where messages wait, are leased, settled and
//! dead-lettered, and [`Client`], which publishes to it from an
//! application. This crate builds without the WebAssembly runtime: an
//! application that only publishes depends on it alone, with the backend it
//! uses (features `sqlite`, the default, `redis` and `postgres`).
//!
//! # The public API
//!
//! What a publisher needs: [`Client`] and its
//! [`PublishOptions`](client::PublishOptions), opened
//! from a broker URL ([`Client::connect`]) or an open broker. What a
//! program that runs or inspects queues needs (the `sluice` host is one):
//! [`connect`], the role traits below with the types in their signatures,
//! the envelope ([`message`]) and the backends' own types (`SqliteBroker`,
//! `RedisBroker`, `PgBroker`, each with its feature). The modules
//! [`policy`], [`topic`], [`publish`], [`trace`], [`units`] and [`error`]
//! are public because the host crate builds on them: retry decisions,
//! topic names and fan-out, trace context in headers, sizes and durations
//! as people write them. Everything else is private to the crate; `pub` on
//! an item inside it means the item is exported, and every build with the
//! feature `testkit` (the tests' and `cargo clippy --all-targets`) warns of
//! one that is not (`unreachable_pub`).
//!
//! The feature `testkit` adds the module `testkit`: the conformance suite and the
//! real servers tests start. It is for tests and benchmarks; an
//! application never needs it.
//!
//! # The parts
//!
//! Each depends only on those listed before it:
//!
//! * [`units`], [`error`] — sizes and durations as people write them;
//!   what can go wrong in a broker call, and error chains on one line.
//! * [`message`] — the envelope: what is published and what is delivered.
//! * [`trace`] — W3C trace context in message headers.
//! * [`policy`] — pure retry and dead-letter decisions.
//! * [`topic`] — routing keys, patterns and which queues a topic publish reaches.
//! * the roles and backends below.
//! * [`publish`] — publish errors and a topic publish's fan-out, shared by
//!   the client and the handlers' `publish-to-topic`.
//! * [`client`] — publishing from Rust applications ([`Client`]).
//!
//! The interface is cut by role, one small trait each, with the same
//! semantics on every backend (checked by the conformance suite,
//! `testkit::conformance`):
//!
//! * [`Queue`] (`queue.rs`) — publish, receive, claim keys, settle, flush:
//!   all the worker uses.
//! * [`DeadLetters`] (`dead.rs`) — list, show, replay, purge: all `sluice
//!   dlq` and the redrive scheduler use.
//! * [`Presence`] (`presence.rs`) — queue counts, the handler statuses
//!   hosts report, and pausing: `sluice stats`, `pause`, `resume`.
//! * [`KvStore`] (`kv.rs`) — the handlers' key-value stores.
//! * [`TopicStore`] (`topics.rs`) — topic bindings.
//! * [`Schedules`] (`schedules.rs`) — firing a cron schedule's tick once
//!   across hosts, and the last tick of each.
//!
//! [`Broker`] is all of them at once; every backend is one. Each backend has
//! the same files, one `impl` block per role (`queue.rs`, `dead.rs`,
//! `presence.rs`, `kv.rs`, `topics.rs`, `schedules.rs`), beside its own
//! internals (`groups.rs` in both: ordered groups), so that a
//! new backend is written by filling in the same files:
//!
//! * `sqlite/` — the embedded default: one SQLite file (`migrate.rs`: its
//!   schema versions, the files in `migrations/`; `mod.rs`: the
//!   group-commit writer and the readers).
//! * `redis/` — Streams and consumer groups, on one Redis or a Cluster
//!   (`conn.rs`, `reader.rs`, `relay.rs`, `codec.rs`, `scripts.rs` with
//!   the Lua in `scripts/*.lua`).
//! * `postgres/` — tables and SQL functions in a schema of one PostgreSQL
//!   database (`migrate.rs` running the files in `migrations/`, `wake.rs`:
//!   LISTEN/NOTIFY, `tls.rs`).
//!
//! What every backend writes alike (the text of a lost lease, headers,
//! status JSON) is in `codec.rs`; errors, by what the caller should do about
//! them, in [`error`].

#![deny(missing_docs)]
#![cfg_attr(feature = "testkit", warn(unreachable_pub))]

use std::sync::Arc;

pub mod client;
mod codec;
mod dead;
pub mod error;
mod kv;
pub mod message;
pub mod policy;
#[cfg(feature = "postgres")]
mod postgres;
mod presence;
pub mod publish;
mod queue;
#[cfg(feature = "redis")]
mod redis;
mod schedules;
#[cfg(feature = "sqlite")]
mod sqlite;
#[cfg(feature = "testkit")]
pub mod testkit;
pub mod topic;
mod topics;
pub mod trace;
pub mod units;

pub use self::client::Client;
#[cfg(feature = "postgres")]
pub use self::postgres::PgBroker;
#[cfg(feature = "redis")]
pub use self::redis::RedisBroker;
pub use dead::{DeadLetter, DeadLetters, ReplaySelector};
pub use error::{BrokerError, Result};
pub use kv::{KvStore, MemoryEntry, MemoryKv};
pub use presence::{
    HandlerStatus, InstanceCounts, PAUSE_POLL, PoolCounts, Presence, QueueStats, STATUS_EVERY,
    STATUS_STALE, ScheduleSpec, fresh_statuses,
};
pub use queue::{
    ClaimState, Flow, GroupSource, IDLE_MOST, KeyClaim, KeyOf, Lease, OrderedGroups, Queue, Rate,
    Received, Settlement, claim_all, claims_of,
};
pub use schedules::{LastTick, Schedules, Tick};
#[cfg(feature = "sqlite")]
pub use sqlite::SqliteBroker;
pub use topics::TopicStore;

/// A whole broker: every role. Implemented for any type that has them all,
/// so a backend implements the roles and nothing else.
pub trait Broker: Queue + DeadLetters + Presence + KvStore + TopicStore + Schedules {}

impl<T: Queue + DeadLetters + Presence + KvStore + TopicStore + Schedules + ?Sized> Broker for T {}

/// Open the broker a URL names: `sqlite://PATH`, `redis://HOST:PORT[/DB]`
/// or `postgres://USER@HOST:PORT/DB[?schema=NAME]`.
pub async fn connect(url: &str) -> anyhow::Result<Arc<dyn Broker>> {
    if let Some(path) = url.strip_prefix("sqlite://") {
        if path.is_empty() {
            anyhow::bail!("broker URL {url:?} has no file path; write it like sqlite://sluice.db");
        }
        #[cfg(feature = "sqlite")]
        return Ok(Arc::new(SqliteBroker::open(path)?));
        #[cfg(not(feature = "sqlite"))]
        return Err(without("sqlite"));
    }
    if url.starts_with("redis://") {
        #[cfg(feature = "redis")]
        return Ok(Arc::new(RedisBroker::connect(url).await?));
        #[cfg(not(feature = "redis"))]
        return Err(without("redis"));
    }
    if is_postgres(url) {
        #[cfg(feature = "postgres")]
        return Ok(Arc::new(PgBroker::connect(url).await?));
        #[cfg(not(feature = "postgres"))]
        return Err(without("postgres"));
    }
    anyhow::bail!(
        "unknown broker URL {url:?}: use sqlite://PATH, redis://HOST:PORT or postgres://USER@HOST:PORT/DB"
    )
}

/// The error for a broker URL whose backend this build left out.
#[cfg(not(all(feature = "sqlite", feature = "redis", feature = "postgres")))]
fn without(backend: &str) -> anyhow::Error {
    anyhow::anyhow!(
        "this build of sluice-broker has no {backend} backend: enable its feature \"{backend}\" \
         (sluice-broker = {{ features = [\"{backend}\"] }} in Cargo.toml)"
    )
}

/// Whether `url` names a PostgreSQL broker (`postgres://` or
/// `postgresql://`).
pub(crate) fn is_postgres(url: &str) -> bool {
    url.starts_with("postgres://") || url.starts_with("postgresql://")
}
