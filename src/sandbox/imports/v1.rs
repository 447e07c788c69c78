//! The imports of `sluice:handler@0.1.0`, for components built against it:
//! each forwards to the current package's, which is the same interface
//! under a newer version.

use super::HostState;
use crate::sandbox::wit::sluice::handler as current;
use crate::sandbox::wit::v1::sluice::handler::{config, kv, log, publish, types};

impl types::Host for HostState {}

impl log::Host for HostState {
    fn log(&mut self, level: log::Level, message: String) {
        let level = match level {
            log::Level::Trace => current::log::Level::Trace,
            log::Level::Debug => current::log::Level::Debug,
            log::Level::Info => current::log::Level::Info,
            log::Level::Warn => current::log::Level::Warn,
            log::Level::Error => current::log::Level::Error,
        };
        current::log::Host::log(self, level, message);
    }
}

impl config::Host for HostState {
    fn get(&mut self, key: String) -> Option<String> {
        current::config::Host::get(self, key)
    }

    fn get_all(&mut self) -> Vec<(String, String)> {
        current::config::Host::get_all(self)
    }
}

fn options(o: publish::PublishOptions) -> current::publish::PublishOptions {
    current::publish::PublishOptions {
        headers: o.headers,
        key: o.key,
        delay_ms: o.delay_ms,
    }
}

impl publish::Host for HostState {
    fn publish(
        &mut self,
        queue: String,
        payload: Vec<u8>,
        o: publish::PublishOptions,
    ) -> Result<(), String> {
        current::publish::Host::publish(self, queue, payload, options(o))
    }

    async fn publish_to_topic(
        &mut self,
        topic: String,
        route: String,
        payload: Vec<u8>,
        o: publish::PublishOptions,
    ) -> Result<u32, String> {
        current::publish::Host::publish_to_topic(self, topic, route, payload, options(o)).await
    }
}

impl kv::Host for HostState {
    async fn get(&mut self, key: String) -> Result<Option<Vec<u8>>, String> {
        current::kv::Host::get(self, key).await
    }

    async fn set(
        &mut self,
        key: String,
        value: Vec<u8>,
        ttl_ms: Option<u64>,
    ) -> Result<(), String> {
        current::kv::Host::set(self, key, value, ttl_ms).await
    }

    async fn delete(&mut self, key: String) -> Result<bool, String> {
        current::kv::Host::delete(self, key).await
    }

    async fn increment(&mut self, key: String, delta: i64) -> Result<i64, String> {
        current::kv::Host::increment(self, key, delta).await
    }
}
