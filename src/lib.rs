//! sluice: a message-handler runtime. A host pulls messages from a queue and
//! hands each one to a sandboxed WebAssembly component, which answers
//! `done`, `retry` or `reject`. The host owns delivery, idempotency, retries,
//! dead letters and limits.
//!
//! The parts:
//!
//! * [`message`] — the envelope: what is published and what is delivered.
//! * [`broker`] — the `Broker` trait and its backends (`sqlite`, `redis`).
//! * [`policy`] — pure retry and dead-letter decisions.
//! * [`topic`] — routing keys, patterns and which queues a topic publish reaches.
//! * [`config`] — `sluice.toml` and handler sidecars.
//! * [`runtime`] — the wasmtime engine, limits and the one `bindgen!`.
//! * [`host`] — the host side of each imported WIT interface.
//! * [`check`] — validating a component against the `handler` world.
//! * [`cache`] — compiled components by content hash, in memory and on disk.
//! * [`registry`] — the live set of handlers: load, swap, unload.
//! * [`reload`] — watching the handlers directory for complete changes.
//! * [`redrive`] — putting dead letters back on their queue on a schedule.
//! * [`worker`] — the dispatch loop of one queue.
//! * [`client`] — publishing from Rust applications ([`Client`]).
//! * [`app`] — `run`: the registry, the watcher, shutdown, `--until-idle`.
//! * [`cli`] — the `sluice` command line.

pub mod app;
pub mod broker;
pub mod cache;
pub mod check;
pub mod cli;
pub mod client;
pub mod config;
pub mod host;
pub mod message;
pub mod policy;
pub mod redrive;
pub mod registry;
pub mod reload;
pub mod runtime;
pub mod topic;
pub mod units;
pub mod worker;

pub use client::Client;
