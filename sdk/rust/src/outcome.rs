//! What a handler decides about a message: done, or an [`Error`] saying
//! what to do instead (retry, reject or snooze).
//!
//! A handler returns [`Result`]: `Ok(())` is `done`. The error half is built
//! by [`Retry`], [`Reject`] and [`Snooze`], or converted by `?` from any
//! other error, which becomes a retry. [`Outcome`] is the same decision as
//! a plain value.

use std::fmt;
use std::time::Duration;

/// What a handler returns: `Ok(())` when the message is done, else the
/// [`Error`] that says what to do with it.
pub type Result<T = (), E = Error> = std::result::Result<T, E>;

/// What the host does with a message once the handler returns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Handled: acked, and its publishes committed.
    Done,
    /// A transient failure: deliver it again after this delay, or after
    /// the handler's backoff policy when `None`. Dead-lettered once the
    /// sidecar's `max_attempts` is reached.
    Retry(Option<Duration>),
    /// A poison message: dead-lettered now with this reason, no retries.
    Reject(String),
    /// Not now: deliver it again after this delay without spending an
    /// attempt.
    Snooze(Duration),
}

/// Why a message is not done, and what the host should do with it: the
/// error half of a handler's [`Result`].
///
/// Built by [`Retry::after`], [`Retry::backoff`], [`Reject::new`] and
/// [`Snooze::after`]. `?` turns other errors into one:
///
/// - any [`std::error::Error`] (a refused publish, a failed key-value call,
///   an I/O error, ...) becomes a retry after the backoff policy, and its
///   text, with its sources, is logged at warn as
///   `retrying after an error: <text>` when the handler returns;
/// - [`Malformed`](crate::Malformed), from [`Message::text`](crate::Message::text)
///   or [`Message::json`](crate::Message::json), becomes a reject: a payload
///   that does not parse never will.
///
/// It deliberately does not implement [`std::error::Error`] itself, so that
/// the conversion from every other error can exist (as with `anyhow::Error`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    /// Never `Outcome::Done`.
    outcome: Outcome,
    /// The error `?` converted, as text, logged when the handler returns.
    cause: Option<String>,
}

impl Error {
    fn new(outcome: Outcome) -> Self {
        Error {
            outcome,
            cause: None,
        }
    }

    /// What the host is to do with the message.
    pub fn outcome(&self) -> &Outcome {
        &self.outcome
    }

    /// The text of the error `?` converted into this retry, if it was one.
    pub fn cause(&self) -> Option<&str> {
        self.cause.as_deref()
    }

    /// The outcome and the cause, taken apart.
    pub(crate) fn into_parts(self) -> (Outcome, Option<String>) {
        (self.outcome, self.cause)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.outcome {
            Outcome::Done => write!(f, "done")?,
            Outcome::Retry(None) => write!(f, "retry after the backoff")?,
            Outcome::Retry(Some(d)) => write!(f, "retry after {d:?}")?,
            Outcome::Reject(reason) => write!(f, "reject: {reason}")?,
            Outcome::Snooze(d) => write!(f, "snooze for {d:?}")?,
        }
        match &self.cause {
            Some(cause) => write!(f, " ({cause})"),
            None => Ok(()),
        }
    }
}

impl<E: std::error::Error> From<E> for Error {
    /// A retry after the backoff policy, carrying the error's text and its
    /// sources' (`outer: inner: ...`) to be logged.
    fn from(error: E) -> Self {
        let mut cause = error.to_string();
        let mut source = error.source();
        while let Some(inner) = source {
            cause.push_str(&format!(": {inner}"));
            source = inner.source();
        }
        Error {
            outcome: Outcome::Retry(None),
            cause: Some(cause),
        }
    }
}

impl From<Error> for Outcome {
    fn from(error: Error) -> Self {
        error.outcome
    }
}

/// Builds a retry: a transient failure, tried again later. The message is
/// dead-lettered once the sidecar's `max_attempts` is reached.
///
/// ```
/// # use std::time::Duration;
/// fn handle(_: &sluice_sdk::Message) -> sluice_sdk::Result {
///     Err(sluice_sdk::Retry::after(Duration::from_secs(5)))
/// }
/// ```
#[derive(Debug)]
pub enum Retry {}

impl Retry {
    /// Deliver the message again after `delay`.
    pub fn after(delay: Duration) -> Error {
        Error::new(Outcome::Retry(Some(delay)))
    }

    /// Deliver the message again after the delay of the handler's backoff
    /// policy (the sidecar's `[retry]`).
    pub fn backoff() -> Error {
        Error::new(Outcome::Retry(None))
    }
}

/// Builds a reject: a poison message, dead-lettered now with a reason.
///
/// ```
/// fn handle(_: &sluice_sdk::Message) -> sluice_sdk::Result {
///     Err(sluice_sdk::Reject::new("no such customer"))
/// }
/// ```
#[derive(Debug)]
pub enum Reject {}

impl Reject {
    /// Dead-letter the message with `reason`.
    #[allow(clippy::new_ret_no_self)] // the error half of a `Result`, as `Retry::after` makes
    pub fn new(reason: impl Into<String>) -> Error {
        Error::new(Outcome::Reject(reason.into()))
    }
}

/// Builds a snooze: not now, without spending an attempt. A message snoozed
/// more than the sidecar's `retry.max_snoozes` times is dead-lettered.
///
/// ```
/// # use std::time::Duration;
/// fn handle(_: &sluice_sdk::Message) -> sluice_sdk::Result {
///     Err(sluice_sdk::Snooze::after(Duration::from_millis(500)))
/// }
/// ```
#[derive(Debug)]
pub enum Snooze {}

impl Snooze {
    /// Deliver the message again after `delay`, with the same attempt number.
    pub fn after(delay: Duration) -> Error {
        Error::new(Outcome::Snooze(delay))
    }
}

/// `duration` in whole milliseconds, rounded up so that a delay is never
/// shorter than asked; `u64::MAX` when it does not fit.
pub(crate) fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos().div_ceil(1_000_000)).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builders_make_their_outcome() {
        let d = Duration::from_millis(250);
        assert_eq!(Retry::after(d).outcome(), &Outcome::Retry(Some(d)));
        assert_eq!(Retry::backoff().outcome(), &Outcome::Retry(None));
        assert_eq!(Reject::new("bad").outcome(), &Outcome::Reject("bad".into()));
        assert_eq!(Snooze::after(d).outcome(), &Outcome::Snooze(d));
        assert_eq!(Reject::new("bad").cause(), None);
    }

    #[derive(Debug)]
    struct Outer(std::io::Error);
    impl fmt::Display for Outer {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(f, "saving the order")
        }
    }
    impl std::error::Error for Outer {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    fn fails() -> Result {
        Err(Outer(std::io::Error::other("disk full")))?;
        Ok(())
    }

    #[test]
    fn question_mark_on_an_error_retries_with_its_text_and_sources() {
        let error = fails().unwrap_err();
        assert_eq!(error.outcome(), &Outcome::Retry(None));
        assert_eq!(error.cause(), Some("saving the order: disk full"));
        assert_eq!(
            error.to_string(),
            "retry after the backoff (saving the order: disk full)"
        );
    }

    #[test]
    fn milliseconds_round_up_and_saturate() {
        assert_eq!(millis(Duration::ZERO), 0);
        assert_eq!(millis(Duration::from_micros(1)), 1);
        assert_eq!(millis(Duration::from_millis(10)), 10);
        assert_eq!(millis(Duration::from_micros(10_001)), 11);
        assert_eq!(millis(Duration::MAX), u64::MAX);
    }
}
