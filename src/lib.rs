//! sluice: a message-handler runtime. A host pulls messages from a queue and
//! hands each one to a sandboxed WebAssembly component, which answers
//! `done`, `retry` or `reject`. The host owns delivery, idempotency, retries,
//! dead letters and limits.
//!
//! The parts, each depending only on those listed before it (no module
//! imports one that imports it back; the `layout` test checks this):
//!
//! * [`broker`] — the crate `sluice-broker`, re-exported with its modules
//!   [`units`], [`error`], [`message`], [`policy`], [`topic`], [`publish`]
//!   and [`client`]: the envelope, retry decisions, topics, the broker's
//!   roles and backends, and [`Client`]. An application that only
//!   publishes depends on that crate alone.
//! * [`files`] — bounded reads of regular files only.
//! * [`trace`] — one span per attempt, and OTLP export (the trace context in
//!   headers is the broker crate's).
//! * [`schedule`] — cron schedules: which ticks are due, and what the
//!   hosts and the broker say of each.
//! * [`config`] — `sluice.toml` and handler sidecars, every number checked
//!   against its documented bounds.
//! * [`pause`] — the host's view of which queues are paused.
//! * [`wit`] — the `bindgen!`s: the types of the WIT packages in `wit/` (0.2.0, and 0.1.0 still served).
//! * [`host`] — a handler's store, and the host side of each imported
//!   WIT interface.
//! * [`runtime`] — the wasmtime engine, the epoch deadline and one loaded
//!   handler version ([`runtime::Handler`]).
//! * [`metrics`] — the Prometheus metrics a host serves.
//! * [`check`] — validating a component against the `handler` world.
//! * [`cache`] — compiled components by content hash, in memory and on disk.
//! * [`loader`] — a handler file and its sidecar, read, compiled and checked.
//! * [`bind`] — the broker's topic bindings kept as the sidecars declare.
//! * [`worker`] — the dispatch loop of one queue.
//! * [`stall`] — which queues the watchdog found stalled, and why.
//! * [`registry`] — the live set of handlers: swap, unload, refusals.
//! * [`reload`] — watching the handlers directory for complete changes.
//! * [`redrive`] — putting dead letters back on their queue on a schedule.
//! * [`ticker`] — firing the handlers' cron schedules through the broker,
//!   each tick once across hosts.
//! * [`watchdog`] — a queue that has work and room for it but does not
//!   move: logged, on `/readyz` and in the metrics.
//! * [`admin`] — the admin HTTP endpoint: metrics, health, the JSON API and
//!   the dashboard.
//! * [`app`] — `run`: the registry, the watcher, the host's loops, shutdown.
//! * [`cli`] — the `sluice` command line.

pub mod admin;
pub mod app;
pub mod bind;
pub mod cache;
pub mod check;
pub mod cli;
pub mod config;
pub mod files;
pub mod host;
pub mod loader;
pub mod metrics;
pub mod pause;
pub mod redrive;
pub mod registry;
pub mod reload;
pub mod runtime;
pub mod schedule;
pub mod stall;
pub mod ticker;
pub mod trace;
pub mod watchdog;
pub mod wit;
pub mod worker;

pub use sluice_broker as broker;
pub use sluice_broker::{Client, client, error, message, policy, publish, topic, units};
