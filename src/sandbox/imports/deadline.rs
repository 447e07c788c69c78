//! The deadline of one call, which the guest may move later (the `lease`
//! interface's `extend`) up to a limit. Shared by the store that moves it,
//! the timer that ends the call at it, and the worker that keeps the call's
//! leases for as long.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

/// When one call must end, and how far it may be moved: see the module.
#[derive(Clone, Debug)]
pub struct Deadline {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    start: Instant,
    /// The deadline, in nanoseconds after `start`.
    at: AtomicU64,
    /// The latest it may move to, in nanoseconds after `start`.
    latest: u64,
    /// Woken when the deadline moves.
    moved: Notify,
}

impl Deadline {
    /// A call starting now that must end within `timeout`, or within
    /// `timeout + max_extend` if it asks.
    pub fn new(timeout: Duration, max_extend: Duration) -> Self {
        let nanos = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        Deadline {
            inner: Arc::new(Inner {
                start: Instant::now(),
                at: AtomicU64::new(nanos(timeout)),
                latest: nanos(timeout).saturating_add(nanos(max_extend)),
                moved: Notify::new(),
            }),
        }
    }

    /// When the call must end now.
    pub fn at(&self) -> Instant {
        self.inner.start + Duration::from_nanos(self.inner.at.load(Ordering::Relaxed))
    }

    /// How long the call has left (zero once the deadline passed).
    pub fn left(&self) -> Duration {
        self.at().saturating_duration_since(Instant::now())
    }

    /// Move the deadline to `by` from now, if that is later, but no later
    /// than the limit. Returns the time left.
    pub fn extend(&self, by: Duration) -> Duration {
        let wanted = Instant::now().saturating_duration_since(self.inner.start) + by;
        let wanted = u64::try_from(wanted.as_nanos())
            .unwrap_or(u64::MAX)
            .min(self.inner.latest);
        if self.inner.at.fetch_max(wanted, Ordering::Relaxed) < wanted {
            self.inner.moved.notify_waiters();
        }
        self.left()
    }

    /// Ready when the deadline moves after this call (not before).
    pub fn moved(&self) -> tokio::sync::futures::Notified<'_> {
        self.inner.moved.notified()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_deadline_moves_only_later_and_never_past_the_limit() {
        let d = Deadline::new(Duration::from_secs(5), Duration::from_secs(60));
        let first = d.at();
        assert!(d.left() <= Duration::from_secs(5) && d.left() > Duration::from_secs(4));
        let left = d.extend(Duration::from_secs(1));
        assert_eq!(d.at(), first, "an earlier deadline is not taken");
        assert!(left > Duration::from_secs(4), "{left:?}");
        let left = d.extend(Duration::from_secs(30));
        assert!(
            left > Duration::from_secs(29) && left <= Duration::from_secs(30),
            "{left:?}"
        );
        let left = d.extend(Duration::from_secs(3600));
        assert!(
            left > Duration::from_secs(64) && left <= Duration::from_secs(65),
            "capped at timeout + max_extend: {left:?}"
        );
        let none = Deadline::new(Duration::from_secs(5), Duration::ZERO);
        assert!(none.extend(Duration::from_secs(60)) <= Duration::from_secs(5));
    }
}
