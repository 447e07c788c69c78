//! The memory cap of one store: every memory the guest grows is checked
//! against the handler's `limits.memory`, and a refusal is remembered so
//! that a failed attempt can be told apart from an ordinary trap.

use wasmtime::ResourceLimiter;

use crate::units::format_size;

/// A guest grew its memory past the handler's cap.
#[derive(Debug, thiserror::Error)]
#[error("memory limit of {} exceeded (asked for {})", format_size(*.cap), format_size(*.asked))]
pub struct MemoryLimitHit {
    pub cap: u64,
    pub asked: u64,
}

/// Caps linear memory at `cap` bytes per instance and remembers a refusal.
pub struct MemoryLimiter {
    cap: u64,
    hit: Option<MemoryLimitHit>,
}

impl MemoryLimiter {
    /// A limiter that allows up to `cap` bytes of linear memory.
    pub fn new(cap: u64) -> Self {
        MemoryLimiter { cap, hit: None }
    }

    /// The refusal that ended a call, if one did.
    pub fn hit(&self) -> Option<&MemoryLimitHit> {
        self.hit.as_ref()
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
