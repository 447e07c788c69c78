//! The wall-clock deadline of a call: the engine's epoch ticks every
//! [`EPOCH_TICK`], and each store checks its deadline at the tick. (The
//! memory cap is the store's own: `crate::host::limits`.)

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use wasmtime::Engine;

/// How often the engine's epoch advances; the granularity of timeouts.
pub(crate) const EPOCH_TICK: Duration = Duration::from_millis(5);

/// A guest ran past the handler's timeout.
#[derive(Debug, thiserror::Error)]
#[error("timed out after {}", humantime::format_duration(*.0))]
pub(crate) struct TimedOut(pub Duration);

/// Advances the engine's epoch every [`EPOCH_TICK`] until dropped.
pub(crate) struct EpochTicker {
    stop: Arc<AtomicBool>,
}

impl EpochTicker {
    /// Start the ticker thread for `engine`.
    pub(crate) fn start(engine: Engine) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        std::thread::Builder::new()
            .name("sluice-epoch".into())
            .spawn(move || {
                while !flag.load(Ordering::Relaxed) {
                    std::thread::sleep(EPOCH_TICK);
                    engine.increment_epoch();
                }
            })
            .expect("spawning the epoch thread");
        EpochTicker { stop }
    }
}

impl Drop for EpochTicker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}
