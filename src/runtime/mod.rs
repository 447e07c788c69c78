//! The WebAssembly runtime: one `Engine` with the pooling allocator, one
//! `Linker` with WASI p2, wasi:http and the sluice imports of every package
//! version (generated in [`crate::wit`], implemented in [`crate::host`]),
//! the worlds a handler may implement ([`World`]), and the loaded handler
//! versions that run one delivery, or one batch, a call ([`Handler`]).

use std::sync::Arc;
use std::sync::atomic::AtomicUsize;

use anyhow::Result;
use wasmtime::component::{Component, HasSelf, Linker};
use wasmtime::{Config, Enabled, Engine, InstanceAllocationStrategy, PoolingAllocationConfig};

use crate::host::{HostState, LiveCount, LiveInstance};
use crate::wit;

pub mod handler;
mod instances;
pub mod limits;
mod world;

pub use crate::host::Deadline;
pub use handler::{BatchInvocation, Failure, Handler, Invocation};
pub use instances::{SPARE_INSTANCES, SPARES_PER_HANDLER};
pub use world::{Pre, World};

/// The largest memory cap a handler may ask for.
pub const MAX_HANDLER_MEMORY: u64 = crate::config::bounds::MEMORY.1;

/// Component instances (and fiber stacks) in the engine's pool: the sum of
/// the `concurrency` of every handler a host serves must fit, and the
/// registry refuses a handler that would not.
pub const POOL_INSTANCES: usize = crate::config::bounds::CONCURRENCY.1;

/// Engine, linker and epoch ticker, shared by every handler.
#[derive(Clone)]
pub struct Runtime {
    inner: Arc<Inner>,
}

struct Inner {
    engine: Engine,
    linker: Linker<HostState>,
    _ticker: limits::EpochTicker,
    live: LiveCount,
    /// Spare fresh instances kept ready, over every handler.
    spares: Arc<AtomicUsize>,
}

impl Runtime {
    /// The engine, with the pooling allocator sized for every handler a host
    /// serves and the spare fresh instances, and the linker with everything
    /// a handler may import.
    pub fn new() -> Result<Self> {
        let pool = pool_config()?;
        let mut config = Config::new();
        config
            .epoch_interruption(true)
            .wasm_component_model(true)
            .allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
        let engine = Engine::new(&config)
            .map_err(|e| anyhow::Error::from(e).context("cannot create the WebAssembly engine"))?;
        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker)
            .map_err(|e| anyhow::Error::from(e).context("cannot link WASI"))?;
        wasmtime_wasi_http::p2::add_only_http_to_linker_async(&mut linker)
            .map_err(|e| anyhow::Error::from(e).context("cannot link wasi:http"))?;
        // Both package versions' imports: a component built for 0.1.0 is
        // served as it is.
        wit::Handler::add_to_linker::<HostState, HasSelf<HostState>>(&mut linker, |s| s)
            .map_err(|e| anyhow::Error::from(e).context("cannot link the sluice imports"))?;
        wit::v1::Handler::add_to_linker::<HostState, HasSelf<HostState>>(&mut linker, |s| s)
            .map_err(|e| anyhow::Error::from(e).context("cannot link the sluice 0.1.0 imports"))?;
        let ticker = limits::EpochTicker::start(engine.clone());
        Ok(Runtime {
            inner: Arc::new(Inner {
                engine,
                linker,
                _ticker: ticker,
                live: LiveCount::default(),
                spares: Arc::default(),
            }),
        })
    }

    /// The engine every handler is compiled for.
    pub fn engine(&self) -> &Engine {
        &self.inner.engine
    }

    /// The linker every handler is instantiated through.
    pub fn linker(&self) -> &Linker<HostState> {
        &self.inner.linker
    }

    /// Spare fresh instances ready or being made now, of every handler.
    pub fn spare_instances(&self) -> usize {
        self.inner.spares.load(std::sync::atomic::Ordering::Relaxed)
    }

    pub(crate) fn spare_count(&self) -> Arc<AtomicUsize> {
        self.inner.spares.clone()
    }

    /// Handler instances alive now, warm, spare or in a call, of every
    /// handler.
    pub fn instances_in_use(&self) -> usize {
        self.inner.live.get()
    }

    /// Count one more live instance until the returned guard is dropped.
    pub(crate) fn live_instance(&self) -> LiveInstance {
        self.inner.live.enter()
    }

    pub(crate) fn compile(&self, bytes: &[u8]) -> wasmtime::Result<Component> {
        Component::new(self.engine(), bytes)
    }
}

/// The pooling allocator, sized for every handler a host serves and the
/// spare fresh instances, and how it resets a used instance's memory.
fn pool_config() -> Result<PoolingAllocationConfig> {
    let mut pool = PoolingAllocationConfig::new();
    let instances = (POOL_INSTANCES + SPARE_INSTANCES) as u32;
    pool.total_component_instances(instances)
        .total_core_instances(10_000 + 16 * SPARE_INSTANCES as u32)
        .total_memories(2000 + 2 * SPARE_INSTANCES as u32)
        .total_tables(10_000 + 16 * SPARE_INSTANCES as u32)
        .total_stacks(instances)
        .max_core_instances_per_component(64)
        .max_memories_per_component(8)
        .max_tables_per_component(64)
        .max_component_instance_size(1 << 20)
        .max_core_instance_size(1 << 20)
        .table_elements(200_000)
        .max_memory_size(MAX_HANDLER_MEMORY as usize);
    if scan_written_pages()? {
        // Reset only the pages an instance wrote, copying them back from
        // the image, and keep them resident: the next instance in the
        // slot finds them mapped, rather than faulting each one in on
        // its first call. This is what makes a fresh Python or
        // JavaScript instance cheap on the message path. The scan finds
        // only pages in memory (wasmtime 48), so a written page the
        // kernel moved to swap would keep what the previous instance
        // wrote there: with swap on, the reset below is used instead
        // (see `scan_written_pages`). It also stops at its 32nd separate
        // run of written pages and gives the rest back to the kernel, so
        // a Python or JavaScript instance still faults part of its memory
        // in on each call: a build with that limit raised to 1,024 made
        // their fresh calls 2 × (JavaScript) and 4 × (Python) cheaper on
        // the message path. wasmtime 50.0.2 fixes both (it needs Rust
        // 1.97, and cargo resolves it with wasmtime-wasi 50.0.1 and this
        // crate's features); 48.0.10, which this host runs, fixes
        // neither. With 50.0.1 a
        // whole fresh JavaScript call cost 2 × as much as with this one,
        // most of it in the reset's memmove.
        pool.pagemap_scan(Enabled::Yes)
            .linear_memory_keep_resident(16 << 20)
            .table_keep_resident(1 << 20);
    } else {
        // Reset small memories with memset rather than madvise: cheaper
        // for the few pages a handler touches per message. The first 1
        // MiB is written over whether a page of it is in memory or in
        // swap, and the rest is given back to the kernel, which drops
        // swapped pages too.
        pool.linear_memory_keep_resident(1 << 20)
            .table_keep_resident(1 << 16);
    }
    Ok(pool)
}

/// Whether a fresh instance's memory is reset from the pages found
/// written with Linux's `PAGEMAP_SCAN`: where the kernel has it, unless
/// `SLUICE_PAGEMAP_SCAN=off` or swap is on (logged either way; swap is
/// looked for only where the scan could be used).
fn scan_written_pages() -> Result<bool> {
    match std::env::var("SLUICE_PAGEMAP_SCAN").as_deref() {
        Err(_) | Ok("auto") => {}
        Ok("off") => {
            tracing::info!(
                "SLUICE_PAGEMAP_SCAN=off: fresh instances' memory is reset without PAGEMAP_SCAN"
            );
            return Ok(false);
        }
        Ok(other) => anyhow::bail!(
            "SLUICE_PAGEMAP_SCAN is {other:?}: set it to \"auto\" (the default) or \"off\", or unset it"
        ),
    }
    if !PoolingAllocationConfig::is_pagemap_scan_available() {
        return Ok(false);
    }
    if let Some(areas) = swap_in_use() {
        tracing::warn!(
            swap = %areas,
            "swap is on: fresh instances' memory is reset without PAGEMAP_SCAN, which would leave a page in swap holding the previous instance's data; Python and JavaScript fresh calls cost more (see \"Instance modes\" in the README). A swap area added after the start is not seen: restart sluice then"
        );
        return Ok(false);
    }
    Ok(true)
}

/// The swap areas the kernel uses now, as `/proc/swaps` lists them (names
/// joined by ", "), or `None` when there are none. A kernel without swap
/// support has no `/proc/swaps`, which reads as none.
fn swap_in_use() -> Option<String> {
    let listed = std::fs::read_to_string("/proc/swaps").ok()?;
    swap_areas(&listed)
}

/// The swap areas in `listed`, the text of `/proc/swaps`: a header line,
/// then one line per area, its file name first.
fn swap_areas(listed: &str) -> Option<String> {
    let areas: Vec<&str> = listed
        .lines()
        .skip(1)
        .filter_map(|line| line.split_whitespace().next())
        .collect();
    (!areas.is_empty()).then(|| areas.join(", "))
}

#[cfg(test)]
mod tests {
    use super::swap_areas;

    #[test]
    fn swap_is_on_when_proc_swaps_lists_an_area() {
        let header = "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n";
        assert_eq!(swap_areas(header), None);
        assert_eq!(swap_areas(""), None);
        let two = format!(
            "{header}/swapfile                               file\t\t1048572\t\t0\t\t-2\n/dev/zram0                              partition\t4194300\t\t12\t\t100\n"
        );
        assert_eq!(swap_areas(&two).as_deref(), Some("/swapfile, /dev/zram0"));
    }
}
