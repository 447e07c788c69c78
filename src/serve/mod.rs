//! The serving side: what takes messages from the broker to the handlers
//! and keeps a host running. Each module depends only on those listed
//! before it: `pause`, `stall`, `metrics` (what a host counts), `bind`
//! (topic bindings and orderings kept as the sidecars say), `worker` (the
//! dispatch loop of one queue), `registry` (the live set of handlers),
//! `reload` (watching the handlers directory), `redrive` (dead letters back
//! on a schedule), `ticker` (cron ticks), `watchdog` (queues that do not
//! move), `admin` (the HTTP endpoint) and `app` (`run`: all of it
//! together, and shutdown).

pub(crate) mod admin;
pub(crate) mod app;
pub(crate) mod bind;
pub(crate) mod metrics;
pub(crate) mod pause;
pub(crate) mod redrive;
pub(crate) mod registry;
pub(crate) mod reload;
pub(crate) mod stall;
pub(crate) mod ticker;
pub(crate) mod watchdog;
pub(crate) mod worker;
