//! `sluice:handler/log`: guest log lines into the host's `tracing` log, each
//! cut to [`MAX_LOG_LINE`], within the handler's rate and the call's budget.

use super::HostState;
use super::budget::{MAX_LOG_LINE, truncate};
use crate::sandbox::wit::sluice::handler::log::{Host, Level};

impl Host for HostState {
    fn log(&mut self, level: Level, message: String) {
        let handler = self.handler.clone();
        let name = handler.name.as_str();
        let enabled = match level {
            Level::Trace => tracing::enabled!(target: "sluice::guest", tracing::Level::TRACE),
            Level::Debug => tracing::enabled!(target: "sluice::guest", tracing::Level::DEBUG),
            Level::Info => tracing::enabled!(target: "sluice::guest", tracing::Level::INFO),
            Level::Warn => tracing::enabled!(target: "sluice::guest", tracing::Level::WARN),
            Level::Error => tracing::enabled!(target: "sluice::guest", tracing::Level::ERROR),
        };
        // A line no one would see costs nothing and counts against nothing;
        // a capture sees every line.
        if !enabled && handler.capture.is_none() {
            return;
        }
        let message = truncate(&message, MAX_LOG_LINE);
        if self.charge(message.len() as u64, "log").is_err() {
            handler.log.drop_one(name);
            return;
        }
        // Over the rate, `admit` counts it.
        if !handler.log.admit(name) {
            return;
        }
        if let Some(capture) = &handler.capture {
            capture.line(level, "log", &message);
        }
        if !enabled {
            return;
        }
        let id = self.message_id.as_str();
        let queue = self.queue.as_str();
        let attempt = self.attempt;
        let trace_id = self.trace_id.map(|t| t.trace_id_hex());
        let trace_id = trace_id.as_deref().unwrap_or("");
        macro_rules! line {
            ($level:expr) => {
                tracing::event!(target: "sluice::guest", $level, handler = name, queue, message_id = id, attempt, trace_id, "{message}")
            };
        }
        match level {
            Level::Trace => line!(tracing::Level::TRACE),
            Level::Debug => line!(tracing::Level::DEBUG),
            Level::Info => line!(tracing::Level::INFO),
            Level::Warn => line!(tracing::Level::WARN),
            Level::Error => line!(tracing::Level::ERROR),
        }
    }
}
