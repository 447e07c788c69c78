//! The wall-clock deadline of a call: the engine's epoch ticks every
//! [`EPOCH_TICK`], and each store checks its deadline at the tick;
//! `by_deadline` ends the host's side of the work (a call, an
//! instantiation) when the deadline passes. (The memory cap is the store's
//! own: `crate::sandbox::imports::limits`.)

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
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

/// `work`, ended at `deadline`, which may move later meanwhile. Most work
/// (a warm call, a fresh instance) finishes in its first poll, running the
/// guest to its end on the fiber: it needs no timer, and arming one costs
/// more than a warm call. Work that waits (on a host future, or yielding at
/// an epoch tick) gets the timer that ends it at its deadline.
pub(super) async fn by_deadline<F: Future>(
    deadline: &Deadline,
    work: F,
) -> Result<F::Output, TimedOut> {
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
