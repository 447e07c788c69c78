//! The WebAssembly runtime: one `Engine` with the pooling allocator, one
//! `Linker` with WASI p2, wasi:http and the sluice imports of every package
//! version (generated in [`crate::sandbox::wit`], implemented in [`crate::sandbox::imports`]),
//! the worlds a handler may implement ([`World`]), and the loaded handler
//! versions that run one delivery, or one batch, a call ([`Handler`]).

use std::sync::Arc;
use std::sync::atomic::AtomicUsize;

use anyhow::Result;
use wasmtime::component::{Component, HasSelf, Linker};
use wasmtime::{
    Config, Enabled, Engine, InstanceAllocationStrategy, PoolingAllocationConfig, ProfilingStrategy,
};

use crate::sandbox::imports::{HostState, LiveCount, LiveInstance};
use crate::sandbox::wit;

mod budget;
pub(crate) mod handler;
mod instances;
pub(crate) mod limits;
mod world;

pub use crate::sandbox::imports::Deadline;
pub(crate) use handler::BatchInvocation;
pub use handler::{Failure, Handler, Invocation, Ready};
pub(crate) use instances::SPARE_INSTANCES;
#[cfg(any(test, feature = "testkit"))]
pub use instances::SPARES_PER_HANDLER;
pub(crate) use world::{Pre, World};

/// The largest memory cap a handler may ask for.
pub(crate) const MAX_HANDLER_MEMORY: u64 = crate::config::bounds::MEMORY.1;

pub(crate) use budget::Budget;

/// Handler instances in the engine's pool by default on a machine with
/// `ram` bytes of memory: one per 16 MiB, and at least 1,000 and at most
/// 4,096 (see [`default_max_instances`]).
pub(crate) fn max_instances_for(ram: u64) -> usize {
    let (least, most) = (1000, crate::config::bounds::MAX_INSTANCES.1);
    ((ram / (16 << 20)) as usize).clamp(least, most)
}

/// Handler instances in the engine's pool by default: [`max_instances_for`]
/// this machine's memory. The pool costs address space up front (each
/// instance's slots reserve 4 GiB per memory), and resident memory only as
/// slots are used: a slot used once keeps up to 16 MiB of the pages its
/// instance wrote, so the next instance there finds them mapped. One
/// instance per 16 MiB keeps that cost within the machine's memory; the
/// floor of 1,000 lets a thousand handlers serve with their floor of one
/// instance each on any machine; the cap keeps the address space reserved
/// (about 8 GiB per instance) well inside what Linux gives a process.
pub(crate) fn default_max_instances() -> usize {
    max_instances_for(physical_memory())
}

/// This machine's memory in bytes (0 when it cannot be read).
fn physical_memory() -> u64 {
    // SAFETY: sysconf only reads system values.
    let (pages, size) = unsafe {
        (
            libc::sysconf(libc::_SC_PHYS_PAGES),
            libc::sysconf(libc::_SC_PAGE_SIZE),
        )
    };
    (pages.max(0) as u64).saturating_mul(size.max(0) as u64)
}

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
    /// The pool's instances, shared by the handlers.
    budget: Arc<Budget>,
}

impl Runtime {
    /// The engine, with a pool of the default size
    /// ([`default_max_instances`]), and the linker with everything a
    /// handler may import.
    pub fn new() -> Result<Self> {
        Self::with_max_instances(default_max_instances())
    }

    /// The engine, with the pooling allocator sized for `max_instances`
    /// handler instances and the spare fresh instances, and the linker with
    /// everything a handler may import.
    pub fn with_max_instances(max_instances: usize) -> Result<Self> {
        let pool = pool_config(max_instances)?;
        let mut config = Config::new();
        config
            .epoch_interruption(true)
            .wasm_component_model(true)
            .allocation_strategy(InstanceAllocationStrategy::Pooling(pool))
            .profiler(profiler()?);
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
                budget: Budget::new(max_instances),
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

    /// The pool's instances, shared by the handlers.
    pub(crate) fn budget(&self) -> &Arc<Budget> {
        &self.inner.budget
    }

    /// Handler instances the pool holds (`max_instances`).
    pub fn max_instances(&self) -> usize {
        self.inner.budget.total()
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

/// The pooling allocator, sized for `max_instances` handler instances and
/// the spare fresh instances, and how it resets a used instance's memory.
fn pool_config(max_instances: usize) -> Result<PoolingAllocationConfig> {
    let mut pool = PoolingAllocationConfig::new();
    let (n, spares) = (max_instances as u32, SPARE_INSTANCES as u32);
    let instances = n + spares;
    pool.total_component_instances(instances)
        .total_core_instances(10 * n + 16 * spares)
        .total_memories(2 * n + 2 * spares)
        .total_tables(10 * n + 16 * spares)
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
        // JavaScript instance cheap on the message path. Since wasmtime
        // 50.0.2 the scan also finds written pages the kernel moved to
        // swap, and it goes on past its 64th separate run of written
        // pages (48 stopped at the 32nd and gave the rest back to the
        // kernel, so such guests faulted that part in on every call).
        pool.pagemap_scan(Enabled::Yes)
            .linear_memory_keep_resident(16 << 20)
            .table_keep_resident(1 << 20);
    } else {
        // Reset small memories with memset rather than madvise: cheaper
        // for the few pages a handler touches per message. The first 1
        // MiB is written over, and the rest is given back to the kernel.
        pool.linear_memory_keep_resident(1 << 20)
            .table_keep_resident(1 << 16);
    }
    Ok(pool)
}

/// How the handlers' compiled code is made known to a profiler:
/// `SLUICE_PROFILE=perfmap` writes each function's address and name to
/// `/tmp/perf-PID.map` (logged), which `perf report` reads to name the
/// handlers' functions; unset or `off`, nothing (the default).
fn profiler() -> Result<ProfilingStrategy> {
    match std::env::var("SLUICE_PROFILE").as_deref() {
        Err(_) | Ok("off") => Ok(ProfilingStrategy::None),
        Ok("perfmap") => {
            tracing::info!(
                map = %format!("/tmp/perf-{}.map", std::process::id()),
                "SLUICE_PROFILE=perfmap: the handlers' functions are named for perf in the map file"
            );
            Ok(ProfilingStrategy::PerfMap)
        }
        Ok(other) => anyhow::bail!(
            "SLUICE_PROFILE is {other:?}: set it to \"perfmap\" (name the handlers' functions for perf in /tmp/perf-PID.map) or \"off\" (the default), or unset it"
        ),
    }
}

/// Whether a fresh instance's memory is reset from the pages found
/// written with Linux's `PAGEMAP_SCAN`: where the kernel has it, unless
/// `SLUICE_PAGEMAP_SCAN=off` (logged).
fn scan_written_pages() -> Result<bool> {
    match std::env::var("SLUICE_PAGEMAP_SCAN").as_deref() {
        Err(_) | Ok("auto") => Ok(PoolingAllocationConfig::is_pagemap_scan_available()),
        Ok("off") => {
            tracing::info!(
                "SLUICE_PAGEMAP_SCAN=off: fresh instances' memory is reset without PAGEMAP_SCAN"
            );
            Ok(false)
        }
        Ok(other) => anyhow::bail!(
            "SLUICE_PAGEMAP_SCAN is {other:?}: set it to \"auto\" (the default) or \"off\", or unset it"
        ),
    }
}
