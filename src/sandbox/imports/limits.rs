//! The memory cap of one store: all of the guest's linear memories together
//! (a component may have several) are held to the handler's
//! `limits.memory`, and so are its tables' elements to [`MAX_TABLE_ELEMENTS`].
//! A refusal is remembered so that a failed attempt can be told apart from
//! an ordinary trap.

use wasmtime::ResourceLimiter;

use crate::units::format_size;

/// A guest grew its memory past the handler's cap.
#[derive(Debug, thiserror::Error)]
#[error("memory limit of {} exceeded (asked for {})", format_size(*.cap), format_size(*.asked))]
pub struct MemoryLimitHit {
    pub(crate) cap: u64,
    pub(crate) asked: u64,
}

/// Table elements all of a store's tables may hold together (a few bytes
/// each).
pub(crate) const MAX_TABLE_ELEMENTS: usize = 1_000_000;

/// Caps the linear memory of a store at `cap` bytes, all memories together,
/// and remembers a refusal.
pub struct MemoryLimiter {
    cap: u64,
    /// Bytes of every memory of the store, as last allowed.
    total: u64,
    /// Bytes the last allowed growth added, taken back if it then failed.
    last_growth: u64,
    table_elements: usize,
    last_table_growth: usize,
    hit: Option<MemoryLimitHit>,
}

impl MemoryLimiter {
    /// A limiter that allows up to `cap` bytes of linear memory.
    pub fn new(cap: u64) -> Self {
        MemoryLimiter {
            cap,
            total: 0,
            last_growth: 0,
            table_elements: 0,
            last_table_growth: 0,
            hit: None,
        }
    }

    /// The refusal that ended a call, if one did.
    pub fn hit(&self) -> Option<&MemoryLimitHit> {
        self.hit.as_ref()
    }

    /// Bytes of every linear memory of the store together.
    pub fn total(&self) -> u64 {
        self.total
    }
}

impl ResourceLimiter for MemoryLimiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let growth = (desired as u64).saturating_sub(current as u64);
        let after = self.total.saturating_add(growth);
        if after > self.cap {
            let hit = MemoryLimitHit {
                cap: self.cap,
                asked: after,
            };
            let err = wasmtime::Error::msg(hit.to_string());
            self.hit = Some(hit);
            return Err(err);
        }
        self.total = after;
        self.last_growth = growth;
        Ok(true)
    }

    // As wasmtime's default does, a failed growth is `memory.grow`
    // answering -1 to the guest, not a trap.
    fn memory_grow_failed(&mut self, _error: wasmtime::Error) -> wasmtime::Result<()> {
        self.total -= std::mem::take(&mut self.last_growth);
        Ok(())
    }

    fn table_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let growth = desired.saturating_sub(current);
        let after = self.table_elements.saturating_add(growth);
        if after > MAX_TABLE_ELEMENTS {
            return Ok(false);
        }
        self.table_elements = after;
        self.last_table_growth = growth;
        Ok(true)
    }

    fn table_grow_failed(&mut self, _error: wasmtime::Error) -> wasmtime::Result<()> {
        self.table_elements -= std::mem::take(&mut self.last_table_growth);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAGE: usize = 64 << 10;

    #[test]
    fn all_memories_together_are_held_to_the_cap() {
        let mut l = MemoryLimiter::new(10 * PAGE as u64);
        // Two memories of 4 pages each: 8 of 10.
        assert!(l.memory_growing(0, 4 * PAGE, None).unwrap());
        assert!(l.memory_growing(0, 4 * PAGE, None).unwrap());
        assert!(l.hit().is_none());
        // A third of 4 pages would make 12: refused, though alone it fits.
        let err = l.memory_growing(0, 4 * PAGE, None).unwrap_err();
        assert!(
            err.to_string()
                .contains("memory limit of 640KiB exceeded (asked for 768KiB)")
        );
        assert!(l.hit().is_some());
        // Growing the first by 2 pages still fits exactly.
        let mut l = MemoryLimiter::new(10 * PAGE as u64);
        assert!(l.memory_growing(0, 4 * PAGE, None).unwrap());
        assert!(l.memory_growing(0, 4 * PAGE, None).unwrap());
        assert!(l.memory_growing(4 * PAGE, 6 * PAGE, None).unwrap());
    }

    #[test]
    fn a_growth_that_failed_after_it_was_allowed_is_not_counted() {
        let mut l = MemoryLimiter::new(8 * PAGE as u64);
        assert!(l.memory_growing(0, 6 * PAGE, None).unwrap());
        let _ = l.memory_grow_failed(wasmtime::Error::msg("no"));
        assert!(l.memory_growing(0, 8 * PAGE, None).unwrap());
    }

    #[test]
    fn table_elements_are_counted_across_tables() {
        let mut l = MemoryLimiter::new(0);
        assert!(l.table_growing(0, MAX_TABLE_ELEMENTS / 2, None).unwrap());
        assert!(l.table_growing(0, MAX_TABLE_ELEMENTS / 2, None).unwrap());
        assert!(!l.table_growing(0, 1, None).unwrap());
    }
}
