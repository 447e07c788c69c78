//! sluice: a message-handler runtime. A host pulls messages from a queue and
//! hands each one to a sandboxed WebAssembly component, which answers
//! `done`, `retry` or `reject`. The host owns delivery, idempotency, retries,
//! dead letters and limits.
//!
//! The parts, each depending only on those listed before it (no module
//! imports one that imports it back; the `layout` test checks this):
//!
//! * [`units`], [`error`], [`files`] — sizes and durations as people write
//!   them, error chains on one line, and bounded reads of regular files only.
//! * [`message`] — the envelope: what is published and what is delivered.
//! * [`trace`] — W3C trace context in headers, attempt spans, OTLP export.
//! * [`policy`] — pure retry and dead-letter decisions.
//! * [`topic`] — routing keys, patterns and which queues a topic publish reaches.
//! * [`broker`] — the broker's roles (queue, dead letters, presence,
//!   key-value, topics, schedules) and its backends (`sqlite`, `redis`),
//!   one file per role in each.
//! * [`schedule`] — cron schedules: which ticks are due, and what the
//!   hosts and the broker say of each.
//! * [`config`] — `sluice.toml` and handler sidecars, every number checked
//!   against its documented bounds.
//! * [`pause`] — the host's view of which queues are paused.
//! * [`publish`] — publish errors and a topic publish's fan-out, shared by
//!   the client and the handlers' `publish-to-topic`.
//! * [`client`] — publishing from Rust applications ([`Client`]).
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
//! * [`registry`] — the live set of handlers: swap, unload, refusals.
//! * [`reload`] — watching the handlers directory for complete changes.
//! * [`redrive`] — putting dead letters back on their queue on a schedule.
//! * [`ticker`] — firing the handlers' cron schedules through the broker,
//!   each tick once across hosts.
//! * [`admin`] — the admin HTTP endpoint: metrics, health, the JSON API and
//!   the dashboard.
//! * [`app`] — `run`: the registry, the watcher, the host's loops, shutdown.
//! * [`cli`] — the `sluice` command line.

pub mod admin;
pub mod app;
pub mod bind;
pub mod broker;
pub mod cache;
pub mod check;
pub mod cli;
pub mod client;
pub mod config;
pub mod error;
pub mod files;
pub mod host;
pub mod loader;
pub mod message;
pub mod metrics;
pub mod pause;
pub mod policy;
pub mod publish;
pub mod redrive;
pub mod registry;
pub mod reload;
pub mod runtime;
pub mod schedule;
pub mod stall;
pub mod ticker;
pub mod topic;
pub mod trace;
pub mod units;
pub mod watchdog;
pub mod wit;
pub mod worker;

pub use client::Client;
