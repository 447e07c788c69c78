//! A fake host for unit tests of handlers on the native target (`cargo
//! test`), where the component's imports do not exist.
//!
//! Make a [`FakeHost`] at the start of a test: until it is dropped, every
//! call the SDK makes on that thread (log, publish, kv, config, lease) goes
//! to it, and the test reads afterwards what the handler did.
//!
//! ```
//! use sluice_sdk::testing::{FakeHost, To};
//! use sluice_sdk::{IntoOutcome, Message, Outcome, log::Level};
//!
//! fn handle(message: &Message) -> sluice_sdk::Result {
//!     let queue = sluice_sdk::config::get("forward_to").unwrap_or("out".into());
//!     sluice_sdk::publish(queue).payload(message.payload()).send()?;
//!     sluice_sdk::info!("forwarded {}", message.id());
//!     Ok(())
//! }
//!
//! let host = FakeHost::new().with_config("forward_to", "elsewhere");
//! assert_eq!(handle(&Message::new("hi")).into_outcome(), Outcome::Done);
//! assert_eq!(host.published()[0].to, To::Queue("elsewhere".into()));
//! assert_eq!(host.logs(), [(Level::Info, "forwarded m-1".to_string())]);
//! ```
//!
//! Only on targets other than wasm32: inside a component the host is real.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;
use std::time::Duration;

use crate::log::Level;

/// Where a publish went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum To {
    /// [`publish`](crate::publish()) to this queue.
    Queue(String),
    /// [`publish_to_topic`](crate::publish_to_topic()) to this topic with
    /// this routing key.
    Topic {
        /// The topic.
        topic: String,
        /// The routing key.
        route: String,
    },
}

/// One publish the fake host took.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Published {
    /// Where it went.
    pub to: To,
    /// The payload.
    pub payload: Vec<u8>,
    /// The headers, in order.
    pub headers: Vec<(String, String)>,
    /// The idempotency key, if set.
    pub key: Option<String>,
    /// The delay, in whole milliseconds as the host sees it, if set.
    pub delay_ms: Option<u64>,
}

#[derive(Debug)]
struct State {
    config: Vec<(String, String)>,
    /// The key-value store; `None` when it is not granted.
    kv: Option<BTreeMap<String, Vec<u8>>>,
    /// How many queues each topic reaches.
    topics: BTreeMap<String, u32>,
    refuse_publish: Option<String>,
    time_left_ms: u64,
    logs: Vec<(Level, String)>,
    published: Vec<Published>,
}

thread_local! {
    static CURRENT: RefCell<Option<Rc<RefCell<State>>>> = const { RefCell::new(None) };
}

/// A host for native unit tests: config values, a key-value store, topics,
/// and a record of the logs and publishes. See the [module](self) docs.
#[derive(Debug)]
pub struct FakeHost {
    state: Rc<RefCell<State>>,
}

impl Default for FakeHost {
    fn default() -> Self {
        Self::new()
    }
}

impl FakeHost {
    /// A host with no config, no key-value grant and no topics, whose
    /// publishes succeed and whose lease has 30 s left; it serves the
    /// calls made on this thread from now on, in place of any other.
    pub fn new() -> Self {
        let state = Rc::new(RefCell::new(State {
            config: Vec::new(),
            kv: None,
            topics: BTreeMap::new(),
            refuse_publish: None,
            time_left_ms: 30_000,
            logs: Vec::new(),
            published: Vec::new(),
        }));
        CURRENT.with(|c| *c.borrow_mut() = Some(Rc::clone(&state)));
        FakeHost { state }
    }

    /// Sets the config value `key`, as the sidecar's `[config]` would.
    pub fn with_config(self, key: &str, value: &str) -> Self {
        self.state
            .borrow_mut()
            .config
            .push((key.to_string(), value.to_string()));
        self
    }

    /// Grants the key-value store (empty). Without it every key-value call
    /// fails, as with a sidecar that does not set `kv = true`.
    pub fn with_kv(self) -> Self {
        self.state.borrow_mut().kv = Some(BTreeMap::new());
        self
    }

    /// Makes `topic` reach `queues` queues: a publish to it returns that
    /// number. A publish to any other topic fails.
    pub fn with_topic(self, topic: &str, queues: u32) -> Self {
        self.state
            .borrow_mut()
            .topics
            .insert(topic.to_string(), queues);
        self
    }

    /// Refuses every publish with `reason`.
    pub fn refusing_publishes(self, reason: &str) -> Self {
        self.state.borrow_mut().refuse_publish = Some(reason.to_string());
        self
    }

    /// Sets the time left before the call's deadline.
    pub fn with_time_left(self, left: Duration) -> Self {
        self.state.borrow_mut().time_left_ms = crate::outcome::millis(left);
        self
    }

    /// Every line logged so far, in order.
    pub fn logs(&self) -> Vec<(Level, String)> {
        self.state.borrow().logs.clone()
    }

    /// Every publish taken so far, in order.
    pub fn published(&self) -> Vec<Published> {
        self.state.borrow().published.clone()
    }

    /// The value of `key` in the key-value store, if it is granted and set.
    pub fn kv_value(&self, key: &str) -> Option<Vec<u8>> {
        self.state.borrow().kv.as_ref()?.get(key).cloned()
    }
}

impl Drop for FakeHost {
    fn drop(&mut self) {
        CURRENT.with(|c| {
            let mut current = c.borrow_mut();
            if current.as_ref().is_some_and(|s| Rc::ptr_eq(s, &self.state)) {
                *current = None;
            }
        });
    }
}

/// The imports, served by this thread's [`FakeHost`].
pub(crate) mod imports {
    use super::{CURRENT, Published, State, To};
    use crate::host::PublishOptions;
    use crate::log::Level;

    fn with<T>(f: impl FnOnce(&mut State) -> T) -> T {
        let state = CURRENT.with(|c| c.borrow().clone()).expect(
            "sluice_sdk: no host. The imports exist only inside sluice; in a native test, \
             make a sluice_sdk::testing::FakeHost first",
        );
        f(&mut state.borrow_mut())
    }

    /// The fake store, or the error a handler without the grant gets.
    fn store(state: &mut State) -> Result<&mut super::BTreeMap<String, Vec<u8>>, String> {
        state
            .kv
            .as_mut()
            .ok_or_else(|| "the handler is not granted the key-value store".to_string())
    }

    fn valid_key(key: &str) -> Result<(), String> {
        match key.len() {
            0 => Err("the key is empty".to_string()),
            1..=1024 => Ok(()),
            n => Err(format!("the key is {n} bytes, over 1024")),
        }
    }

    fn record(state: &mut State, to: To, payload: &[u8], options: &PublishOptions) {
        state.published.push(Published {
            to,
            payload: payload.to_vec(),
            headers: options.headers.clone(),
            key: options.key.clone(),
            delay_ms: options.delay_ms,
        });
    }

    pub(crate) fn log(level: Level, message: &str) {
        with(|s| s.logs.push((level, message.to_string())));
    }

    pub(crate) fn config_get(key: &str) -> Option<String> {
        with(|s| {
            s.config
                .iter()
                .rev()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v.clone())
        })
    }

    pub(crate) fn config_get_all() -> Vec<(String, String)> {
        with(|s| s.config.clone())
    }

    pub(crate) fn publish(
        queue: &str,
        payload: &[u8],
        options: &PublishOptions,
    ) -> Result<(), String> {
        with(|s| {
            if let Some(reason) = &s.refuse_publish {
                return Err(reason.clone());
            }
            record(s, To::Queue(queue.to_string()), payload, options);
            Ok(())
        })
    }

    pub(crate) fn publish_to_topic(
        topic: &str,
        route: &str,
        payload: &[u8],
        options: &PublishOptions,
    ) -> Result<u32, String> {
        with(|s| {
            if let Some(reason) = &s.refuse_publish {
                return Err(reason.clone());
            }
            let Some(&queues) = s.topics.get(topic) else {
                return Err(format!("no queue is bound to topic {topic:?}"));
            };
            let to = To::Topic {
                topic: topic.to_string(),
                route: route.to_string(),
            };
            record(s, to, payload, options);
            Ok(queues)
        })
    }

    pub(crate) fn kv_get(key: &str) -> Result<Option<Vec<u8>>, String> {
        with(|s| {
            valid_key(key)?;
            Ok(store(s)?.get(key).cloned())
        })
    }

    /// Sets the key; the fake keeps no expiry, but refuses a TTL of 0 as
    /// the host does.
    pub(crate) fn kv_set(key: &str, value: &[u8], ttl_ms: Option<u64>) -> Result<(), String> {
        with(|s| {
            valid_key(key)?;
            if ttl_ms == Some(0) {
                return Err("the TTL must be at least 1 ms".to_string());
            }
            store(s)?.insert(key.to_string(), value.to_vec());
            Ok(())
        })
    }

    pub(crate) fn kv_delete(key: &str) -> Result<bool, String> {
        with(|s| {
            valid_key(key)?;
            Ok(store(s)?.remove(key).is_some())
        })
    }

    pub(crate) fn kv_increment(key: &str, delta: i64) -> Result<i64, String> {
        with(|s| {
            valid_key(key)?;
            let store = store(s)?;
            let now = match store.get(key) {
                None => 0,
                Some(v) => std::str::from_utf8(v)
                    .ok()
                    .and_then(|t| t.parse::<i64>().ok())
                    .ok_or_else(|| format!("the value of {key:?} is not a decimal integer"))?,
            };
            let new = now
                .checked_add(delta)
                .ok_or_else(|| format!("{now} + {delta} overflows"))?;
            store.insert(key.to_string(), new.to_string().into_bytes());
            Ok(new)
        })
    }

    pub(crate) fn lease_time_left() -> u64 {
        with(|s| s.time_left_ms)
    }

    pub(crate) fn lease_extend(ms: u64) -> u64 {
        with(|s| {
            s.time_left_ms = s.time_left_ms.max(ms);
            s.time_left_ms
        })
    }
}
