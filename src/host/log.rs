//! `sluice:handler/log`: guest log lines into the host's `tracing` log.

use super::HostState;
use crate::wit::sluice::handler::log::{Host, Level};

impl Host for HostState {
    fn log(&mut self, level: Level, message: String) {
        let handler = self.handler.name.as_str();
        let id = self.message_id.as_str();
        match level {
            Level::Trace => {
                tracing::trace!(target: "sluice::guest", handler, message_id = id, "{message}")
            }
            Level::Debug => {
                tracing::debug!(target: "sluice::guest", handler, message_id = id, "{message}")
            }
            Level::Info => {
                tracing::info!(target: "sluice::guest", handler, message_id = id, "{message}")
            }
            Level::Warn => {
                tracing::warn!(target: "sluice::guest", handler, message_id = id, "{message}")
            }
            Level::Error => {
                tracing::error!(target: "sluice::guest", handler, message_id = id, "{message}")
            }
        }
    }
}
