//! What can go wrong in a broker call, sorted by what the caller should do
//! about it: wait and call again, give up on this request, or fix its input;
//! and error text for people: a whole chain of causes on one line, for log
//! lines, refusal reasons and the CLI's one-line errors.

use std::error::Error;

/// The error a backend's own client library gave, kept as the source.
pub type Cause = Box<dyn std::error::Error + Send + Sync + 'static>;

/// A broker call that did not succeed. The text says what was being done;
/// the backend's own error is the [`source`](std::error::Error::source), so
/// `{:#}` in an `anyhow` chain, or [`crate::error::chain`], shows both.
#[derive(Debug, thiserror::Error)]
pub enum BrokerError {
    /// The broker could not be reached or did not answer in time (connection
    /// refused or dropped, a timeout, a cluster resharding, a stopped broker
    /// thread, a file locked too long). Made again later, unchanged, the call
    /// may well succeed: callers back off and retry.
    #[error("broker unavailable: {context}")]
    Unavailable {
        /// What was being done.
        context: String,
        /// The backend's own error, when there was one.
        #[source]
        source: Option<Cause>,
    },
    /// The broker answered and refused or failed this call (a script error,
    /// a permission it lacks, a constraint). Made again unchanged it fails
    /// the same way, so retrying it forever only holds up the calls behind it.
    #[error("broker refused the call: {context}")]
    Refused {
        /// What was being done.
        context: String,
        /// The backend's own error, when there was one.
        #[source]
        source: Option<Cause>,
    },
    /// The caller's input is not valid; the text says what to change. Both
    /// backends use the same words, so a handler sees the same error on either.
    #[error("{0}")]
    Invalid(String),
}

impl BrokerError {
    /// The broker could not be reached while doing `context`.
    pub fn unavailable(context: impl Into<String>, source: impl Into<Cause>) -> Self {
        BrokerError::Unavailable {
            context: context.into(),
            source: Some(source.into()),
        }
    }

    /// The broker refused `context`.
    pub fn refused(context: impl Into<String>, source: impl Into<Cause>) -> Self {
        BrokerError::Refused {
            context: context.into(),
            source: Some(source.into()),
        }
    }

    /// Whether the same call may succeed later: see [`BrokerError::Unavailable`].
    pub fn is_unavailable(&self) -> bool {
        matches!(self, BrokerError::Unavailable { .. })
    }
}

/// The result of a broker call.
pub type Result<T, E = BrokerError> = std::result::Result<T, E>;

/// An `anyhow` error chain (or anything whose `{:#}` shows its causes) on
/// one line: "outer: inner: root".
pub fn one_line(err: &dyn std::fmt::Display) -> String {
    let text = format!("{err:#}");
    text.split('\n')
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

/// A standard error and each of its sources, joined by ": ".
pub fn chain(err: &(dyn Error + 'static)) -> String {
    let mut text = err.to_string();
    let mut next = err.source();
    while let Some(cause) = next {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        next = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("reading {0}")]
    struct Outer(&'static str, #[source] std::io::Error);

    #[test]
    fn a_chain_names_every_cause_once() {
        let e = Outer("a.wasm", std::io::Error::other("disk on fire"));
        assert_eq!(chain(&e), "reading a.wasm: disk on fire");
        let any = anyhow::Error::new(e).context("loading");
        assert_eq!(one_line(&any), "loading: reading a.wasm: disk on fire");
    }
}
