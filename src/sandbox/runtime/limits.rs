//! The wall-clock deadline of a call: the engine's epoch ticks every
//! [`EPOCH_TICK`] while guest code runs (the ticker sleeps while none
//! does, so an idle host is not woken 200 times a second), and each store
//! checks its deadline at the tick; `by_deadline` ends the host's side of
//! the work (a call, an instantiation) when the deadline passes. (The memory cap is the store's
//! own: `crate::sandbox::imports::limits`.)

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::Duration;

use wasmtime::Engine;

use super::Deadline;

/// How often the engine's epoch advances; the granularity of timeouts.
pub(crate) const EPOCH_TICK: Duration = Duration::from_millis(5);

/// A guest ran past the handler's timeout.
#[derive(Debug, thiserror::Error)]
#[error("timed out after {}", humantime::format_duration(*.0))]
pub(crate) struct TimedOut(pub Duration);

/// Guest work (a call, an instantiation: see [`by_deadline`]) running
/// now, in every engine of the process.
static RUNNING: AtomicUsize = AtomicUsize::new(0);
/// Tickers parked because none was running.
static PARKED: AtomicUsize = AtomicUsize::new(0);
/// Every ticker's thread, to wake when guest work starts.
static TICKERS: Mutex<Vec<std::thread::Thread>> = Mutex::new(Vec::new());

/// Advances the engine's epoch every [`EPOCH_TICK`] while guest work runs,
/// until dropped.
pub(crate) struct EpochTicker {
    stop: Arc<AtomicBool>,
    thread: std::thread::Thread,
}

impl EpochTicker {
    /// Start the ticker thread for `engine`.
    pub(crate) fn start(engine: Engine) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("sluice-epoch".into())
            .spawn(move || tick(&engine, &flag))
            .expect("spawning the epoch thread")
            .thread()
            .clone();
        TICKERS.lock().expect("tickers lock").push(thread.clone());
        EpochTicker { stop, thread }
    }
}

/// Tick `engine` while guest work runs; park while none does. A ticker
/// counts itself parked before it looks, and work counts itself running
/// before it looks for parked tickers, so one of the two always sees the
/// other (and an unpark before the park is not lost: it makes the park
/// return at once).
fn tick(engine: &Engine, stop: &AtomicBool) {
    while !stop.load(Ordering::SeqCst) {
        if RUNNING.load(Ordering::SeqCst) == 0 {
            PARKED.fetch_add(1, Ordering::SeqCst);
            if RUNNING.load(Ordering::SeqCst) == 0 && !stop.load(Ordering::SeqCst) {
                std::thread::park();
            }
            PARKED.fetch_sub(1, Ordering::SeqCst);
            continue;
        }
        std::thread::sleep(EPOCH_TICK);
        engine.increment_epoch();
    }
}

impl Drop for EpochTicker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let mut tickers = TICKERS.lock().expect("tickers lock");
        tickers.retain(|t| t.id() != self.thread.id());
        self.thread.unpark();
    }
}

/// Guest work running, for as long as it lives: the tickers tick.
struct Running;

impl Running {
    fn start() -> Running {
        if RUNNING.fetch_add(1, Ordering::SeqCst) == 0 && PARKED.load(Ordering::SeqCst) > 0 {
            for ticker in TICKERS.lock().expect("tickers lock").iter() {
                ticker.unpark();
            }
        }
        Running
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        RUNNING.fetch_sub(1, Ordering::SeqCst);
    }
}

/// `work`, ended at `deadline`, which may move later meanwhile. Most work
/// (a warm call, a fresh instance) finishes in its first poll, running the
/// guest to its end on the fiber: it needs no timer, and arming one costs
/// more than a warm call. Work that waits (on a host future, or yielding at
/// an epoch tick) gets the timer that ends it at its deadline.
pub(super) async fn by_deadline<F: Future>(
    deadline: &Deadline,
    work: F,
) -> Result<F::Output, TimedOut> {
    let _running = Running::start();
    let mut work = std::pin::pin!(work);
    let first = std::future::poll_fn(|cx| Poll::Ready(work.as_mut().poll(cx))).await;
    if let Poll::Ready(done) = first {
        return Ok(done);
    }
    loop {
        let at = deadline.at();
        tokio::select! {
            done = work.as_mut() => return Ok(done),
            () = tokio::time::sleep_until(tokio::time::Instant::from_std(at)) => {
                // Unless the guest moved the deadline meanwhile.
                if deadline.at() <= at {
                    return Err(TimedOut(Duration::ZERO));
                }
            }
        }
    }
}
