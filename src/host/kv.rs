//! `sluice:handler/kv`: the handler's own key-value store, kept in the
//! broker under the handler's name as its scope.
//!
//! Each call is checked here (the grant, the key and value sizes) and every
//! refusal is an error the guest sees, never a trap. The broker call is
//! bounded by the deadline of the current `handle` call: while the guest
//! waits in the host no wasm runs, so the epoch deadline cannot fire, and a
//! slow broker would otherwise hold the call past `limits.timeout`. Running
//! out of time is a trap carrying [`TimedOut`], so the attempt ends as a
//! timeout like any other.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{HandlerContext, HostState};
use crate::broker::kv::check_ttl;
use crate::broker::{BrokerError, KvStore};
use crate::runtime::bindings::sluice::handler::kv::Host;
use crate::runtime::limits::TimedOut;
use crate::units::format_size;

/// The longest key, in bytes.
pub const MAX_KV_KEY: usize = 1024;
/// The largest value, in bytes.
pub const MAX_KV_VALUE: usize = 1 << 20;

type Answer<T> = wasmtime::Result<Result<T, String>>;

/// What one call needs, taken from the store's state before it awaits.
struct Call {
    handler: Arc<HandlerContext>,
    store: Arc<dyn KvStore>,
    deadline: Instant,
}

impl HostState {
    /// The store for a call on `key`, or why the handler cannot have it.
    fn kv_call(&self, key: &str) -> Result<Call, String> {
        let h = &self.handler;
        if !h.capabilities.kv {
            return Err(format!(
                "handler {0} is not granted the key-value store: add `kv = true` under [capabilities] in {0}.toml",
                h.name
            ));
        }
        let Some(store) = h.kv.clone() else {
            return Err(format!(
                "handler {} is granted the key-value store, but this host was started without a broker to keep it in",
                h.name
            ));
        };
        if key.is_empty() {
            return Err("a key-value key must not be empty".into());
        }
        if key.len() > MAX_KV_KEY {
            return Err(format!(
                "a key-value key may be at most {MAX_KV_KEY} bytes; this one is {} bytes",
                key.len()
            ));
        }
        Ok(Call {
            handler: h.clone(),
            store,
            deadline: self.deadline,
        })
    }
}

impl Call {
    fn scope(&self) -> &str {
        &self.handler.name
    }

    /// Await `op` until the call's deadline; a broker error becomes the
    /// guest's error, running out of time a timeout trap.
    async fn bounded<T>(
        &self,
        what: &str,
        key: &str,
        op: impl Future<Output = crate::broker::Result<T>>,
    ) -> Answer<T> {
        let deadline = tokio::time::Instant::from_std(self.deadline);
        match tokio::time::timeout_at(deadline, op).await {
            Err(_) => Err(wasmtime::Error::new(TimedOut(self.handler.timeout))),
            Ok(Ok(value)) => Ok(Ok(value)),
            Ok(Err(BrokerError::Invalid(why))) => Ok(Err(why)),
            Ok(Err(e)) => {
                tracing::warn!(
                    target: "sluice::guest", handler = %self.handler.name, key,
                    "key-value {what} failed: {e}"
                );
                Ok(Err(format!("key-value {what} of key {key:?} failed: {e}")))
            }
        }
    }
}

impl Host for HostState {
    async fn get(&mut self, key: String) -> Answer<Option<Vec<u8>>> {
        let call = match self.kv_call(&key) {
            Ok(c) => c,
            Err(why) => return Ok(Err(why)),
        };
        let op = call.store.kv_get(call.scope(), &key);
        call.bounded("get", &key, op).await
    }

    async fn set(&mut self, key: String, value: Vec<u8>, ttl_ms: Option<u64>) -> Answer<()> {
        let call = match self.kv_call(&key) {
            Ok(c) => c,
            Err(why) => return Ok(Err(why)),
        };
        if value.len() > MAX_KV_VALUE {
            return Ok(Err(format!(
                "a key-value value may be at most {}; the one for key {key:?} is {} bytes",
                format_size(MAX_KV_VALUE as u64),
                value.len()
            )));
        }
        let ttl = ttl_ms.map(Duration::from_millis);
        if let Err(why) = check_ttl(ttl) {
            return Ok(Err(why.to_string()));
        }
        let op = call.store.kv_set(call.scope(), &key, value, ttl);
        call.bounded("set", &key, op).await
    }

    async fn delete(&mut self, key: String) -> Answer<bool> {
        let call = match self.kv_call(&key) {
            Ok(c) => c,
            Err(why) => return Ok(Err(why)),
        };
        let op = call.store.kv_delete(call.scope(), &key);
        call.bounded("delete", &key, op).await
    }

    async fn increment(&mut self, key: String, delta: i64) -> Answer<i64> {
        let call = match self.kv_call(&key) {
            Ok(c) => c,
            Err(why) => return Ok(Err(why)),
        };
        let op = call.store.kv_increment(call.scope(), &key, delta);
        call.bounded("increment", &key, op).await
    }
}
