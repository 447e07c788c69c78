//! The one place that calls the host's imports, in the WIT's own terms
//! (milliseconds, byte lists). Inside a component the calls go to the
//! host; on a native target, where the imports do not exist, they go to the
//! fake host of [`crate::testing`], so handlers can be unit tested.

use std::fmt;

/// A call the host refused or could not carry out (a publish, a key-value
/// call), with the host's reason. `?` on it retries the message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostError {
    reason: String,
}

impl HostError {
    pub(crate) fn new(reason: String) -> Self {
        HostError { reason }
    }

    /// The host's reason.
    pub fn reason(&self) -> &str {
        &self.reason
    }
}

impl fmt::Display for HostError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.reason)
    }
}

impl std::error::Error for HostError {}

pub(crate) use imports::*;

#[cfg(target_arch = "wasm32")]
mod imports {
    pub(crate) use crate::__private::bindings::sluice::handler::publish::PublishOptions;
    use crate::__private::bindings::sluice::handler::{config, kv, lease, log, publish};
    use crate::log::Level;

    pub(crate) fn log(level: Level, message: &str) {
        let level = match level {
            Level::Trace => log::Level::Trace,
            Level::Debug => log::Level::Debug,
            Level::Info => log::Level::Info,
            Level::Warn => log::Level::Warn,
            Level::Error => log::Level::Error,
        };
        log::log(level, message);
    }

    pub(crate) fn config_get(key: &str) -> Option<String> {
        config::get(key)
    }

    pub(crate) fn config_get_all() -> Vec<(String, String)> {
        config::get_all()
    }

    pub(crate) fn publish(
        queue: &str,
        payload: &[u8],
        options: &PublishOptions,
    ) -> Result<(), String> {
        publish::publish(queue, payload, options)
    }

    pub(crate) fn publish_to_topic(
        topic: &str,
        route: &str,
        payload: &[u8],
        options: &PublishOptions,
    ) -> Result<u32, String> {
        publish::publish_to_topic(topic, route, payload, options)
    }

    pub(crate) fn kv_get(key: &str) -> Result<Option<Vec<u8>>, String> {
        kv::get(key)
    }

    pub(crate) fn kv_set(key: &str, value: &[u8], ttl_ms: Option<u64>) -> Result<(), String> {
        kv::set(key, value, ttl_ms)
    }

    pub(crate) fn kv_delete(key: &str) -> Result<bool, String> {
        kv::delete(key)
    }

    pub(crate) fn kv_increment(key: &str, delta: i64) -> Result<i64, String> {
        kv::increment(key, delta)
    }

    pub(crate) fn lease_time_left() -> u64 {
        lease::time_left()
    }

    pub(crate) fn lease_extend(ms: u64) -> u64 {
        lease::extend(ms)
    }
}

#[cfg(not(target_arch = "wasm32"))]
mod imports {
    pub(crate) use crate::__private::bindings::sluice::handler::publish::PublishOptions;
    pub(crate) use crate::testing::imports::*;
}
