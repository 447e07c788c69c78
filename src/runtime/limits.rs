//! Per-instance limits: the memory cap and the wall-clock deadline.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use wasmtime::{Engine, ResourceLimiter};

use crate::units::format_size;

/// How often the engine's epoch advances; the granularity of timeouts.
pub const EPOCH_TICK: Duration = Duration::from_millis(5);

/// A guest grew its memory past the handler's cap.
#[derive(Debug, thiserror::Error)]
#[error("memory limit of {} exceeded (asked for {})", format_size(*.cap), format_size(*.asked))]
pub struct MemoryLimitHit {
    pub cap: u64,
    pub asked: u64,
}

/// A guest ran past the handler's timeout.
#[derive(Debug, thiserror::Error)]
#[error("timed out after {}", humantime::format_duration(*.0))]
pub struct TimedOut(pub Duration);

/// Caps linear memory at `cap` bytes per instance and remembers a refusal,
/// so a failed attempt can be told apart from an ordinary trap.
pub struct MemoryLimiter {
    cap: u64,
    pub(crate) hit: Option<MemoryLimitHit>,
}

impl MemoryLimiter {
    pub fn new(cap: u64) -> Self {
        MemoryLimiter { cap, hit: None }
    }
}

impl ResourceLimiter for MemoryLimiter {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired as u64 > self.cap {
            let hit = MemoryLimitHit {
                cap: self.cap,
                asked: desired as u64,
            };
            let err = wasmtime::Error::msg(hit.to_string());
            self.hit = Some(hit);
            return Err(err);
        }
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= 1_000_000)
    }
}

/// Advances the engine's epoch every [`EPOCH_TICK`] until dropped.
pub struct EpochTicker {
    stop: Arc<AtomicBool>,
}

impl EpochTicker {
    pub fn start(engine: Engine) -> Self {
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
