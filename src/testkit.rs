//! What the crate's own integration tests and benchmarks drive below the
//! public API, re-exported under the name of the module it is in, without
//! its folder (so `crate::sandbox::runtime::Runtime` is
//! `sluice::testkit::runtime::Runtime`).
//!
//! Built with the feature `testkit` only, which the crate's tests and
//! benchmarks turn on through a dev-dependency on the crate itself. It is
//! not an API: anything here changes with the binary.

/// A host on a clock of the caller's.
pub mod app {
    pub use crate::serve::app::run_with_clock;
}

/// Compiled components by content hash.
pub mod cache {
    pub use crate::sandbox::cache::CompileCache;
}

/// Validating a component against the handler world.
pub mod check {
    pub use crate::sandbox::check::compile;
}

/// `sluice.toml` and handler sidecars.
pub mod config {
    pub use crate::config::{HandlerSpec, HostConfig, InstanceMode, parse_toml};
}

/// Bounded reads of files.
pub mod files {
    pub use crate::base::files::DEFAULT_MAX_COMPONENT_SIZE;
}

/// A handler file and its sidecar, read, compiled and checked.
pub mod loader {
    pub use crate::sandbox::loader::{content_hash, load_file};
}

/// The metrics a host serves.
pub mod metrics {
    pub use crate::serve::metrics::{Metrics, PoolCounts};
}

/// Which queues are paused.
pub mod pause {
    pub use crate::serve::pause::Paused;
}

/// The clock the host's scheduled loops sleep on.
pub mod redrive {
    pub use crate::serve::redrive::Clock;
}

/// The engine and one loaded handler version.
pub mod runtime {
    pub use crate::sandbox::runtime::{
        Deadline, Failure, Handler, Invocation, Ready, Runtime, SPARES_PER_HANDLER,
    };
}

/// Cron schedules: what is due, and the overview `sluice stats` prints.
pub mod schedule {
    pub use crate::base::schedule::{overview, rfc3339};
}

/// One span per attempt.
pub mod trace {
    pub use crate::base::trace::{Attempt, AttemptFields};
}

/// The dispatch loop of one queue.
pub mod worker {
    pub use crate::serve::worker::{DEFAULT_BROKER_TIMEOUT, Dispatch, Observe, QueueWorker};
}
