//! What a guest may make the host hold or write, beyond its own memory:
//!
//! * a byte budget per call ([`HandlerContext::call_budget`], `[limits]
//!   call_budget`) for everything the call hands over: held publishes with
//!   their headers and queue names, and log lines. A publish over it fails
//!   with an error the guest sees; a log line over it is dropped and
//!   counted. The host never grows for it.
//! * log lines: each cut to [`MAX_LOG_LINE`] bytes with a marker, and at
//!   most `[limits] log_rate` lines a second per handler version
//!   ([`LogLimiter`]); the rest are dropped and counted.
//!
//! [`HandlerContext::call_budget`]: super::HandlerContext::call_budget

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// The longest log line kept, in bytes; the rest is cut with a marker.
pub(crate) const MAX_LOG_LINE: usize = 8 << 10;

pub(crate) use crate::message::truncate;

/// At most `rate` log lines a second for one handler version, with a burst
/// of as many; counts what it turns away.
pub(crate) struct LogLimiter {
    rate: f64,
    /// Tokens left and when they were last topped up.
    bucket: Mutex<(f64, Instant)>,
    dropped: AtomicU64,
}

impl LogLimiter {
    /// A limiter of `rate` lines a second.
    pub(crate) fn new(rate: u32) -> Self {
        let rate = f64::from(rate.max(1));
        LogLimiter {
            rate,
            bucket: Mutex::new((rate, Instant::now())),
            dropped: AtomicU64::new(0),
        }
    }

    /// Whether one more line may be written now; counts it as dropped if
    /// not, and says so in the log once for each run of drops.
    pub(crate) fn admit(&self, handler: &str) -> bool {
        let mut bucket = self.bucket.lock().expect("log limiter lock");
        let (tokens, at) = &mut *bucket;
        let now = Instant::now();
        *tokens = (*tokens + now.duration_since(*at).as_secs_f64() * self.rate).min(self.rate);
        *at = now;
        if *tokens >= 1.0 {
            *tokens -= 1.0;
            return true;
        }
        drop(bucket);
        self.drop_one(handler);
        false
    }

    /// Count a line that was not written (over the rate or the budget).
    pub(crate) fn drop_one(&self, handler: &str) {
        let before = self.dropped.fetch_add(1, Ordering::Relaxed);
        if before.is_power_of_two() || before == 0 {
            tracing::warn!(
                target: "sluice::guest", handler,
                "log lines of handler {handler} dropped: over its `[limits] log_rate` of {} a second or its call budget ({} dropped so far)",
                self.rate, before + 1
            );
        }
    }

    /// Lines dropped so far.
    pub(crate) fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_over_the_rate_are_dropped_and_counted() {
        let limiter = LogLimiter::new(10);
        let admitted = (0..100).filter(|_| limiter.admit("h")).count();
        assert!((10..=12).contains(&admitted), "{admitted}");
        assert_eq!(limiter.dropped(), 100 - admitted as u64);
    }
}
