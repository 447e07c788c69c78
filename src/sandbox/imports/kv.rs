//! `sluice:handler/kv`: the handler's own key-value store, kept in the
//! broker under the handler's name as its scope.
//!
//! Each call is checked here (the grant, the key and value sizes) and every
//! refusal is an error the guest sees, never a trap. A broker that is slow
//! to answer is bounded by the timer around the whole `handle` call (see
//! `Handler::call`), which ends the attempt as a timeout.

use super::HostState;
use crate::broker::{BrokerError, KvStore};
use crate::error::chain;
use crate::sandbox::wit::sluice::handler::kv::Host;
use crate::units::format_size;

/// The longest key, in bytes.
pub(crate) const MAX_KV_KEY: usize = 1024;
/// The largest value, in bytes.
pub(crate) const MAX_KV_VALUE: usize = 1 << 20;

impl HostState {
    /// The store for a call on `key`, or why the handler cannot have it.
    fn kv_store(&self, key: &str) -> Result<&dyn KvStore, String> {
        let h = &self.handler;
        if !h.capabilities.kv {
            return Err(format!(
                "handler {0} is not granted the key-value store: add `kv = true` under [capabilities] in {0}.toml",
                h.name
            ));
        }
        let Some(store) = h.kv.as_deref() else {
            return Err(format!(
                "handler {} is granted the key-value store, but this host was started without a broker to keep it in",
                h.name
            ));
        };
        if key.is_empty() {
            return Err("a key-value key must not be empty".into());
        }
        // Refused on every broker alike: PostgreSQL's text cannot hold it.
        if key.contains('\0') {
            return Err(format!(
                "a key-value key must not hold a NUL character: {key:?}"
            ));
        }
        if key.len() > MAX_KV_KEY {
            return Err(format!(
                "a key-value key may be at most {MAX_KV_KEY} bytes; this one is {} bytes",
                key.len()
            ));
        }
        Ok(store)
    }

    /// The guest's answer for `result` of key-value call `what` on `key`: a
    /// broker error becomes the guest's error, logged unless it is the
    /// guest's own (an invalid value or TTL).
    fn kv_answer<T>(
        &self,
        what: &str,
        key: &str,
        result: crate::broker::Result<T>,
    ) -> Result<T, String> {
        match result {
            Ok(value) => Ok(value),
            Err(BrokerError::Invalid(why)) => Err(why),
            Err(e) => {
                let e = chain(&e);
                tracing::warn!(
                    target: "sluice::guest", handler = %self.handler.name, key,
                    "key-value {what} failed: {e}"
                );
                Err(format!("key-value {what} of key {key:?} failed: {e}"))
            }
        }
    }
}

impl Host for HostState {
    async fn get(&mut self, key: String) -> Result<Option<Vec<u8>>, String> {
        let result = self.kv_store(&key)?.kv_get(&self.handler.name, &key).await;
        self.kv_answer("get", &key, result)
    }

    async fn set(
        &mut self,
        key: String,
        value: Vec<u8>,
        ttl_ms: Option<u64>,
    ) -> Result<(), String> {
        let store = self.kv_store(&key)?;
        if value.len() > MAX_KV_VALUE {
            return Err(format!(
                "a key-value value may be at most {}; the one for key {key:?} is {} bytes",
                format_size(MAX_KV_VALUE as u64),
                value.len()
            ));
        }
        // The TTL's bounds are the store's to check (`check_ttl`).
        let ttl = ttl_ms.map(std::time::Duration::from_millis);
        let result = store.kv_set(&self.handler.name, &key, value, ttl).await;
        self.kv_answer("set", &key, result)
    }

    async fn delete(&mut self, key: String) -> Result<bool, String> {
        let result = self
            .kv_store(&key)?
            .kv_delete(&self.handler.name, &key)
            .await;
        self.kv_answer("delete", &key, result)
    }

    async fn increment(&mut self, key: String, delta: i64) -> Result<i64, String> {
        let result = self
            .kv_store(&key)?
            .kv_increment(&self.handler.name, &key, delta)
            .await;
        self.kv_answer("increment", &key, result)
    }
}
