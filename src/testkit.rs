//! What the crate's own integration tests and benchmarks drive below the
//! public API, re-exported by module as it is inside the crate (so
//! `crate::runtime::Runtime` is `sluice::testkit::runtime::Runtime`).
//!
//! Built with the feature `testkit` only, which the crate's tests and
//! benchmarks turn on through a dev-dependency on the crate itself. It is
//! not an API: anything here changes with the binary.

/// A host on a clock of the caller's.
pub mod app {
    pub use crate::app::run_with_clock;
}

/// Compiled components by content hash.
pub mod cache {
    pub use crate::cache::CompileCache;
}

/// Validating a component against the handler world.
pub mod check {
    pub use crate::check::compile;
}

/// `sluice.toml` and handler sidecars.
pub mod config {
    pub use crate::config::{HandlerSpec, HostConfig, InstanceMode};
}

/// Bounded reads of files.
pub mod files {
    pub use crate::files::DEFAULT_MAX_COMPONENT_SIZE;
}

/// A handler file and its sidecar, read, compiled and checked.
pub mod loader {
    pub use crate::loader::{content_hash, load_file};
}

/// The metrics a host serves.
pub mod metrics {
    pub use crate::metrics::{Metrics, PoolCounts};
}

/// Which queues are paused.
pub mod pause {
    pub use crate::pause::Paused;
}

/// The clock the host's scheduled loops sleep on.
pub mod redrive {
    pub use crate::redrive::Clock;
}

/// The engine and one loaded handler version.
pub mod runtime {
    pub use crate::runtime::{Deadline, Failure, Handler, Invocation, Runtime, SPARES_PER_HANDLER};
}

/// Cron schedules: what is due, and the overview `sluice stats` prints.
pub mod schedule {
    pub use crate::schedule::{overview, rfc3339};
}

/// One span per attempt.
pub mod trace {
    pub use crate::trace::{Attempt, AttemptFields};
}

/// The dispatch loop of one queue.
pub mod worker {
    pub use crate::worker::{DEFAULT_BROKER_TIMEOUT, Dispatch, Observe, QueueWorker};
}
