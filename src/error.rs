//! Error text for people: a whole chain of causes on one line, for log lines,
//! refusal reasons and the CLI's one-line errors.

use std::error::Error;

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
