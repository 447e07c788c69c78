//! sluice: a message-handler runtime. A host pulls messages from a queue and
//! hands each one to a sandboxed WebAssembly component, which answers
//! `done`, `retry` or `reject`. The host owns delivery, idempotency, retries,
//! dead letters and limits.
//!
//! # The public API
//!
//! The product is the `sluice` binary; this library is there to build it,
//! and it promises little beyond it. What it does promise is for an
//! embedder: a Rust program that serves handlers inside its own process
//! rather than beside a `sluice run`. That is [`run`], with its
//! [`RunOptions`] ([`AdminOptions`], [`CacheFiles`]), on a broker from
//! [`broker`] (the crate `sluice-broker`, re-exported whole:
//! `broker::connect`, the role traits, the envelope). It is the same call
//! `sluice run` makes, and the tests and benchmarks make it too, so it is
//! exercised as an embedder would use it; its options are plain public
//! fields, so a new option is a breaking change, which a 0.x version
//! allows. An application that only publishes needs none of this: it
//! depends on `sluice-broker` alone and compiles no WebAssembly runtime.
//! [`cli::main`] is what the binary runs, public so that `src/main.rs` can
//! call it.
//!
//! Everything else is private to the crate: the runtime, the worker, the
//! registry, the config types and the admin endpoint change with the
//! binary, and none of it is an interface. `pub` on an item inside the
//! crate means it is exported, here or through the testkit (or is the type
//! of an exported field); every build with the feature `testkit` warns of
//! one that is not (`unreachable_pub`).
//! The feature `testkit` (module `testkit`) re-exports what the crate's
//! own integration tests and benchmarks drive below [`run`]: the compile
//! cache, the loader, the runtime, a worker, the metrics, the clock of the
//! host's loops. It is on for them through a dev-dependency of the crate
//! on itself, and off in every other build; it is not an API.
//!
//! # The parts
//!
//! Each depends only on those listed before it (no module imports one
//! that imports it back; the `layout` test checks this):
//!
//! * `broker` — the crate `sluice-broker`, re-exported with its modules
//!   `units`, `error`, `message`, `policy`, `topic`, `publish` and
//!   `client` (crate-private names here): the envelope, retry decisions,
//!   topics, the broker's roles and backends, and `Client`.
//! * `files` — bounded reads of regular files only.
//! * `trace` — one span per attempt, and OTLP export (the trace context in
//!   headers is the broker crate's).
//! * `schedule` — cron schedules: which ticks are due, and what the
//!   hosts and the broker say of each.
//! * `config` — `sluice.toml` and handler sidecars, every number checked
//!   against its documented bounds.
//! * `pause` — the host's view of which queues are paused.
//! * `wit` — the `bindgen!`s: the types of the WIT packages in `wit/` (0.2.0, and 0.1.0 still served).
//! * `host` — a handler's store, and the host side of each imported
//!   WIT interface.
//! * `runtime` — the wasmtime engine, the epoch deadline and one loaded
//!   handler version (`runtime::Handler`).
//! * `metrics` — the Prometheus metrics a host serves.
//! * `check` — validating a component against the `handler` world.
//! * `cache` — compiled components by content hash, in memory and on disk.
//! * `loader` — a handler file and its sidecar, read, compiled and checked.
//! * `bind` — the broker's topic bindings kept as the sidecars declare.
//! * `worker` — the dispatch loop of one queue.
//! * `stall` — which queues the watchdog found stalled, and why.
//! * `registry` — the live set of handlers: swap, unload, refusals.
//! * `reload` — watching the handlers directory for complete changes.
//! * `redrive` — putting dead letters back on their queue on a schedule.
//! * `ticker` — firing the handlers' cron schedules through the broker,
//!   each tick once across hosts.
//! * `watchdog` — a queue that has work and room for it but does not
//!   move: logged, on `/readyz` and in the metrics.
//! * `admin` — the admin HTTP endpoint: metrics, health, the JSON API and
//!   the dashboard.
//! * `app` — `run`: the registry, the watcher, the host's loops, shutdown.
//! * [`cli`] — the `sluice` command line.

#![deny(missing_docs)]
#![cfg_attr(feature = "testkit", warn(unreachable_pub))]

mod admin;
mod app;
mod bind;
mod cache;
mod check;
pub mod cli;
mod config;
mod files;
mod host;
mod loader;
mod metrics;
mod pause;
mod redrive;
mod registry;
mod reload;
mod runtime;
mod schedule;
mod stall;
#[cfg(feature = "testkit")]
pub mod testkit;
mod ticker;
mod trace;
mod watchdog;
mod wit;
mod worker;

pub use app::{AdminOptions, RunOptions, run};
pub use cache::CacheFiles;
pub use sluice_broker as broker;
use sluice_broker::{client, error, message, policy, publish, topic, units};
