//! Making instances of one handler version ([`Maker`]), and the fresh ones
//! it makes ahead of the messages ([`Spares`]).
//!
//! In `fresh` mode every message gets an instance no message used before.
//! Making one (a store, the WASI context, instantiation with the guest's
//! start code) and throwing it away (resetting its memory) cost more than
//! the call itself, so a version keeps a few fresh instances ready, made off
//! the message path: after a call's settlement is passed on, the caller
//! drops the used instance and makes the next one ([`Spares::tidy`]), on its
//! own thread, before it takes the next message. A message that finds none
//! ready makes its own, as before. A spare is never handed to two messages, and one whose making
//! failed is never kept, so isolation and failures stay what they were.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use wasmtime::{Store, UpdateDeadline};

use super::budget::Unit;
use super::limits::{TimedOut, by_deadline};
use super::world::{Instance, Pre};
use super::{Deadline, Runtime};
use crate::sandbox::imports::{HandlerContext, HostState};

/// Fresh instances kept ready by each version, at most.
pub const SPARES_PER_HANDLER: usize = 4;

/// Fresh instances kept ready over every handler of a host, at most: the
/// engine's pool holds this many beyond the handlers' `concurrency`.
pub(crate) const SPARE_INSTANCES: usize = 64;

/// An instance with its store, how many calls it served, and its place in
/// the host's pool once a call took it (a spare has none until then).
pub(super) struct Warm {
    pub(crate) store: Store<HostState>,
    pub(crate) instance: Instance,
    pub(crate) uses: u32,
    pub(crate) unit: Option<Unit>,
}

/// Why making an instance failed.
pub(super) enum Unmade {
    Failed(wasmtime::Error, Store<HostState>),
    TimedOut,
}

/// What it takes to make an instance of one handler version.
pub(super) struct Maker {
    pub(crate) runtime: Runtime,
    pub(crate) pre: Pre,
    pub(crate) context: Arc<HandlerContext>,
    pub(crate) memory: u64,
    pub(crate) timeout: Duration,
}

impl Maker {
    /// A new instance, made by `deadline`.
    pub(crate) async fn make(&self, deadline: &Deadline) -> Result<Warm, Unmade> {
        let mut store = self.new_store(deadline);
        match by_deadline(deadline, self.pre.instantiate(&mut store)).await {
            Ok(Ok(instance)) => Ok(Warm {
                store,
                instance,
                uses: 0,
                unit: None,
            }),
            Ok(Err(e)) => Err(Unmade::Failed(e, store)),
            Err(TimedOut(_)) => Err(Unmade::TimedOut),
        }
    }

    fn new_store(&self, deadline: &Deadline) -> Store<HostState> {
        let mut store = Store::new(
            self.runtime.engine(),
            HostState::new(
                self.context.clone(),
                self.memory,
                self.runtime.live_instance(),
                deadline.clone(),
            ),
        );
        store.limiter(|s| s.limiter());
        let timeout = self.timeout;
        store.epoch_deadline_callback(move |ctx| {
            if Instant::now() >= ctx.data().deadline().at() {
                Err(wasmtime::Error::new(TimedOut(timeout)))
            } else {
                // Let other tasks on this thread run while the guest computes.
                Ok(UpdateDeadline::Yield(1))
            }
        });
        store.set_epoch_deadline(1);
        store
    }
}

/// A fresh instance made ahead of a message: never called.
pub(super) struct Spare {
    pub(crate) warm: Warm,
    /// How long making it took.
    pub(crate) took: Duration,
    _slot: Counted,
}

/// The fresh instances one version keeps ready, and the used ones waiting
/// to be dropped.
pub(super) struct Spares {
    ready: Mutex<Vec<Spare>>,
    /// Used instances, dropped by the next [`Spares::tidy`].
    used: Mutex<Vec<Warm>>,
    /// Spares being made now (counted by guards, so a tidy dropped
    /// mid-way gives its count back).
    making: Arc<AtomicUsize>,
    /// How many to keep ready.
    target: usize,
    /// Set when the version retires, or when making a spare failed: none
    /// are made any more (a message then makes its own, and meets the
    /// failure itself).
    stopped: AtomicBool,
}

impl Spares {
    /// Up to `target` spares, none made yet.
    pub(crate) fn new(target: usize) -> Self {
        Spares {
            ready: Mutex::new(Vec::new()),
            used: Mutex::new(Vec::new()),
            making: Arc::default(),
            target: target.min(SPARES_PER_HANDLER),
            stopped: AtomicBool::new(false),
        }
    }

    /// A spare, if one is ready.
    pub(crate) fn take(&self) -> Option<Spare> {
        self.ready.lock().expect("spares lock").pop()
    }

    /// Spares ready now.
    #[cfg(any(test, feature = "testkit"))]
    pub(crate) fn ready(&self) -> usize {
        self.ready.lock().expect("spares lock").len()
    }

    /// Make none any more, and drop those ready and those used.
    pub(crate) fn stop(&self) {
        self.stopped.store(true, Ordering::SeqCst);
        let ready = std::mem::take(&mut *self.ready.lock().expect("spares lock"));
        let used = std::mem::take(&mut *self.used.lock().expect("spares lock"));
        drop((ready, used));
    }

    /// Keep `used` for the next [`Spares::tidy`] to drop, off the message
    /// path; while `target` wait already (nobody tidies), drop it now.
    pub(crate) fn put_used(&self, used: Warm) {
        let mut waiting = self.used.lock().expect("spares lock");
        if waiting.len() < self.target.max(1) && !self.stopped.load(Ordering::SeqCst) {
            waiting.push(used);
            return;
        }
        drop(waiting);
        drop(used);
    }

    /// Drop the used instances (resetting their memory), then make spares
    /// until `target` are ready or being made, as far as the host has room.
    pub(crate) async fn tidy(&self, maker: &Maker) {
        let used = std::mem::take(&mut *self.used.lock().expect("spares lock"));
        drop(used);
        while let Some((slot, making)) = self.reserve(&maker.runtime) {
            let started = Instant::now();
            let deadline = Deadline::new(maker.timeout, Duration::ZERO);
            let made = maker.make(&deadline).await;
            drop(making);
            match made {
                Ok(warm) => self.keep(Spare {
                    warm,
                    took: started.elapsed(),
                    _slot: slot,
                }),
                // The pool is full for now: a later call tries again.
                Err(Unmade::Failed(e, _))
                    if e.downcast_ref::<wasmtime::PoolConcurrencyLimitError>()
                        .is_some() =>
                {
                    return;
                }
                Err(unmade) => {
                    let why = match unmade {
                        Unmade::Failed(e, _) => crate::error::one_line(&e),
                        Unmade::TimedOut => format!("{}", TimedOut(maker.timeout)),
                    };
                    tracing::info!(
                        handler = %maker.context.name, version = %maker.context.version,
                        "making a spare fresh instance failed ({why}); this version makes none any more, and each message makes its own"
                    );
                    self.stopped.store(true, Ordering::SeqCst);
                    return;
                }
            }
        }
    }

    /// A place for one more spare, and its count as being made, if this
    /// version is short of spares and the host has room for one.
    fn reserve(&self, runtime: &Runtime) -> Option<(Counted, Counted)> {
        let ready = self.ready.lock().expect("spares lock");
        if self.stopped.load(Ordering::SeqCst)
            || ready.len() + self.making.load(Ordering::SeqCst) >= self.target
        {
            return None;
        }
        let slot = Counted::take(&runtime.spare_count(), SPARE_INSTANCES)?;
        let making = Counted::take(&self.making, usize::MAX)?;
        Some((slot, making))
    }

    /// Keep `spare` ready, unless the version retired meanwhile.
    fn keep(&self, spare: Spare) {
        let mut ready = self.ready.lock().expect("spares lock");
        if !self.stopped.load(Ordering::SeqCst) {
            ready.push(spare);
        }
    }
}

/// One place of a count kept under a limit, given back on drop.
pub(super) struct Counted(Arc<AtomicUsize>);

impl Counted {
    /// One more of `count`, unless it is at `limit`.
    fn take(count: &Arc<AtomicUsize>, limit: usize) -> Option<Self> {
        count
            .try_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n < limit).then_some(n + 1)
            })
            .ok()?;
        Some(Counted(count.clone()))
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}
