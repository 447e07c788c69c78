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
//! The crate is four folders, each a layer that depends only on those
//! before it (no module imports one that imports it back, in any folder;
//! the `layout` test checks this):
//!
//! * `broker` — the crate `sluice-broker`, re-exported with its modules
//!   `units`, `error`, `message`, `policy`, `topic`, `publish` and
//!   `client` (crate-private names here): the envelope, retry decisions,
//!   topics, the broker's roles and backends, and `Client`.
//! * `base/` — what both sides build on: bounded reads of regular files
//!   (`files`), one span per attempt and OTLP export (`trace`; the trace
//!   context in headers is the broker crate's), and cron schedules: which
//!   ticks are due, and what the hosts and the broker say of each
//!   (`schedule`).
//! * `config/` — `sluice.toml` and handler sidecars, every number checked
//!   against its documented bounds.
//! * `sandbox/` — the guest side: the WIT bindings (`wit`), the host side
//!   of each imported WIT interface and a handler's store (`imports`), the
//!   wasmtime engine, the epoch deadline and one loaded handler version
//!   (`runtime`), validating a component against the worlds (`check`),
//!   compiled components by content hash (`cache`), and a handler file
//!   with its sidecar read, compiled and checked (`loader`).
//! * `serve/` — the serving side: the dispatch loop of one queue
//!   (`worker`), the live set of handlers (`registry`), the broker's
//!   bindings kept as the sidecars declare (`bind`), watching the handlers
//!   directory (`reload`), scheduled redrive (`redrive`), firing cron
//!   ticks (`ticker`), paused queues (`pause`), the stall watchdog
//!   (`stall`, `watchdog`), the Prometheus metrics (`metrics`), the admin
//!   endpoint (`admin`) and `run` itself (`app`).
//! * [`cli`] — the `sluice` command line.

#![deny(missing_docs)]
#![cfg_attr(feature = "testkit", warn(unreachable_pub))]

mod base;
pub mod cli;
mod config;
mod sandbox;
mod serve;
#[cfg(feature = "testkit")]
pub mod testkit;

pub use sandbox::cache::CacheFiles;
pub use serve::app::{AdminOptions, RunOptions, run};
pub use sluice_broker as broker;
use sluice_broker::{client, error, message, policy, publish, topic, units};
