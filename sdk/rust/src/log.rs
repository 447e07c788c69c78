//! Log lines in the host's log, tagged there with the handler and the
//! message. The macros [`info!`](crate::info), [`warn!`](crate::warn), ...
//! take `format!` arguments.

use crate::host;

/// The severity of a log line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Level {
    /// Finest detail.
    Trace,
    /// Detail for debugging.
    Debug,
    /// Normal events.
    Info,
    /// Something unexpected that the handler got past.
    Warn,
    /// A failure.
    Error,
}

/// Writes `message` to the host's log at `level`.
pub fn log(level: Level, message: &str) {
    host::log(level, message);
}

/// Writes `message` at trace level.
pub fn trace(message: &str) {
    log(Level::Trace, message);
}

/// Writes `message` at debug level.
pub fn debug(message: &str) {
    log(Level::Debug, message);
}

/// Writes `message` at info level.
pub fn info(message: &str) {
    log(Level::Info, message);
}

/// Writes `message` at warn level.
pub fn warn(message: &str) {
    log(Level::Warn, message);
}

/// Writes `message` at error level.
pub fn error(message: &str) {
    log(Level::Error, message);
}

/// Logs at trace level: `trace!("{} left", n)`.
#[macro_export]
macro_rules! trace {
    ($($arg:tt)+) => { $crate::log::log($crate::log::Level::Trace, &::std::format!($($arg)+)) };
}

/// Logs at debug level: `debug!("{} left", n)`.
#[macro_export]
macro_rules! debug {
    ($($arg:tt)+) => { $crate::log::log($crate::log::Level::Debug, &::std::format!($($arg)+)) };
}

/// Logs at info level: `info!("order {id} forwarded")`.
#[macro_export]
macro_rules! info {
    ($($arg:tt)+) => { $crate::log::log($crate::log::Level::Info, &::std::format!($($arg)+)) };
}

/// Logs at warn level: `warn!("not counted: {e}")`.
#[macro_export]
macro_rules! warn {
    ($($arg:tt)+) => { $crate::log::log($crate::log::Level::Warn, &::std::format!($($arg)+)) };
}

/// Logs at error level: `error!("publish failed: {e}")`.
#[macro_export]
macro_rules! error {
    ($($arg:tt)+) => { $crate::log::log($crate::log::Level::Error, &::std::format!($($arg)+)) };
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::FakeHost;

    #[test]
    fn functions_and_macros_log_at_their_level() {
        let host = FakeHost::new();
        let n = 3;
        crate::trace!("t{n}");
        crate::debug!("d{}", n);
        crate::info!("i");
        crate::warn!("w");
        crate::error!("e");
        warn("plain");
        assert_eq!(
            host.logs(),
            [
                (Level::Trace, "t3".to_string()),
                (Level::Debug, "d3".to_string()),
                (Level::Info, "i".to_string()),
                (Level::Warn, "w".to_string()),
                (Level::Error, "e".to_string()),
                (Level::Warn, "plain".to_string()),
            ]
        );
    }
}
