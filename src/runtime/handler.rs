//! One loaded handler version: its prepared component, its limits and, in
//! `reuse` mode, its warm instances. `invoke` runs one delivery and says how
//! it ended; it never fails the host.

use std::future::Future;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::{Duration, Instant};

use wasmtime::{Store, UpdateDeadline, WasmBacktrace};

use super::Runtime;
use super::limits::TimedOut;
use crate::broker::{KvStore, TopicStore};
use crate::config::{HandlerSpec, InstanceMode};
use crate::error::one_line;
use crate::host::budget::LogLimiter;
use crate::host::{HandlerContext, HostState};
use crate::message::{Delivery, NewMessage};
use crate::policy::Outcome;
use crate::wit::{self, HandlerPre};

/// Why an attempt failed without an outcome from the guest.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Failure {
    #[error("trap: {0}")]
    Trap(String),
    #[error("timeout: {0}")]
    Timeout(String),
    #[error("memory limit: {0}")]
    MemoryLimit(String),
    #[error("instantiation failed: {0}")]
    Instantiate(String),
    /// The engine's pool had no room for another instance right now (only
    /// while an old version's calls finish beside the new one's). Not the
    /// message's fault: it goes back without spending an attempt.
    #[error("no instance free: {0}")]
    PoolFull(String),
}

impl Failure {
    /// The failure's kind in one word, as spans and metrics name it.
    pub fn kind(&self) -> &'static str {
        match self {
            Failure::Trap(_) => "trap",
            Failure::Timeout(_) => "timeout",
            Failure::MemoryLimit(_) => "memory_limit",
            Failure::Instantiate(_) => "instantiate",
            Failure::PoolFull(_) => "pool_full",
        }
    }
}

/// How one call of `handle` ended, with the publishes it asked for.
#[derive(Debug)]
pub struct Invocation {
    pub result: Result<Outcome, Failure>,
    /// Held publishes; empty unless the guest returned an outcome.
    pub publishes: Vec<NewMessage>,
    /// How long making a fresh instance for the call took, if one was made.
    pub instantiate: Option<Duration>,
}

impl Invocation {
    /// A call that ended with `result`, on a warm instance.
    pub fn ended(result: Result<Outcome, Failure>, publishes: Vec<NewMessage>) -> Self {
        Invocation {
            result,
            publishes,
            instantiate: None,
        }
    }
}

struct Warm {
    store: Store<HostState>,
    instance: wit::Handler,
    uses: u32,
}

/// One loaded version of one handler: its prepared component, its spec and,
/// in `reuse` mode, its warm instances. Shared by the worker's callers.
pub struct Handler {
    pub spec: HandlerSpec,
    /// Content hash of the component (first 16 hex digits of its SHA-256).
    pub version: String,
    pub source: PathBuf,
    context: Arc<HandlerContext>,
    pre: HandlerPre<HostState>,
    runtime: Runtime,
    warm: Mutex<Vec<Warm>>,
}

impl Handler {
    /// A handler version ready to serve: `pre` is its component, linked and
    /// checked against the `handler` world.
    pub fn new(
        runtime: &Runtime,
        spec: HandlerSpec,
        source: PathBuf,
        version: String,
        pre: HandlerPre<HostState>,
        max_message_size: u64,
    ) -> Self {
        let context = Arc::new(HandlerContext {
            name: spec.name.clone(),
            version: version.clone(),
            config: spec.config.clone(),
            max_message_size,
            capabilities: spec.capabilities.clone(),
            kv: None,
            topics: None,
            call_budget: spec.call_budget,
            log: LogLimiter::new(spec.log_rate),
        });
        Handler {
            spec,
            version,
            source,
            context,
            pre,
            runtime: runtime.clone(),
            warm: Mutex::new(Vec::new()),
        }
    }

    /// Give the handler its key-value store, kept in `store` under the
    /// handler's name. Called before the handler serves, while no store of
    /// it shares its context yet. The host still refuses every call unless
    /// the sidecar grants `kv`.
    pub fn with_kv(mut self, store: Arc<dyn KvStore>) -> Self {
        Arc::get_mut(&mut self.context)
            .expect("a handler gets its key-value store before its first instance")
            .kv = Some(store);
        self
    }

    /// Give the handler the broker's topic bindings, for `publish-to-topic`.
    /// Called before the handler serves, like [`Handler::with_kv`].
    pub fn with_topics(mut self, store: Arc<dyn TopicStore>) -> Self {
        Arc::get_mut(&mut self.context)
            .expect("a handler gets its topics before its first instance")
            .topics = Some(store);
        self
    }

    /// Run `handle` for one delivery. The timeout counts from here: making
    /// a fresh instance (which may run the guest's start code) is part of
    /// the call.
    pub async fn invoke(&self, delivery: &Delivery) -> Invocation {
        let deadline = Instant::now() + self.spec.timeout;
        let warm = match self.spec.instance_mode {
            InstanceMode::Reuse => self.warm.lock().expect("warm pool lock").pop(),
            InstanceMode::Fresh => None,
        };
        let mut instantiate = None;
        let warm = match warm {
            Some(w) => w,
            None => {
                let started = Instant::now();
                let made = self.instantiate(deadline).await;
                instantiate = Some(started.elapsed());
                match made {
                    Ok(w) => w,
                    Err(f) => return failed(f, instantiate),
                }
            }
        };
        let Warm {
            mut store,
            instance,
            uses,
        } = warm;
        store.data_mut().begin_call(delivery, deadline);
        store.set_epoch_deadline(1);
        let message = to_wit(delivery);
        match self.call(&mut store, &instance, &message).await {
            Ok(outcome) => {
                let publishes = store.data_mut().take_publishes();
                let uses = uses + 1;
                if self.spec.instance_mode == InstanceMode::Reuse
                    && uses < self.spec.max_messages_per_instance
                {
                    self.warm.lock().expect("warm pool lock").push(Warm {
                        store,
                        instance,
                        uses,
                    });
                }
                Invocation {
                    result: Ok(from_wit(outcome)),
                    publishes,
                    instantiate,
                }
            }
            // The store, and with it a possibly broken instance, is dropped here.
            Err(f) => failed(f, instantiate),
        }
    }

    /// A new instance, made by `deadline`.
    async fn instantiate(&self, deadline: Instant) -> Result<Warm, Failure> {
        let mut store = self.new_store(deadline);
        let made = by_deadline(
            tokio::time::Instant::from_std(deadline),
            self.pre.instantiate_async(&mut store),
        )
        .await;
        match made {
            Ok(Ok(instance)) => Ok(Warm {
                store,
                instance,
                uses: 0,
            }),
            Ok(Err(e)) => Err(classify(e, &store, true)),
            Err(_elapsed) => Err(Failure::Timeout(format!(
                "{} (making the instance)",
                TimedOut(self.spec.timeout)
            ))),
        }
    }

    /// Call `handle`, ending the call at the handler's timeout. Epoch
    /// interruption stops a guest that computes past its deadline, but not
    /// one waiting in the host (for an HTTP response, a sleep), which runs
    /// no wasm: the timer around the call ends those. Dropping the call
    /// unwinds the guest; the caller then throws its store away.
    async fn call(
        &self,
        store: &mut Store<HostState>,
        instance: &wit::Handler,
        message: &wit::Message,
    ) -> Result<wit::Outcome, Failure> {
        let timeout = self.spec.timeout;
        let deadline = tokio::time::Instant::from_std(store.data().deadline());
        let result = by_deadline(deadline, instance.call_handle(&mut *store, message)).await;
        match result {
            Ok(Ok(outcome)) => Ok(outcome),
            Ok(Err(e)) => Err(classify(e, store, false)),
            Err(_elapsed) => Err(Failure::Timeout(TimedOut(timeout).to_string())),
        }
    }

    /// Log lines of this version dropped so far (over its rate or a call's
    /// budget).
    pub fn dropped_log_lines(&self) -> u64 {
        self.context.log.dropped()
    }

    /// Warm instances waiting in the pool (`reuse` mode).
    pub fn warm_instances(&self) -> usize {
        self.warm.lock().expect("warm pool lock").len()
    }

    fn new_store(&self, deadline: Instant) -> Store<HostState> {
        let mut store = Store::new(
            self.runtime.engine(),
            HostState::new(
                self.context.clone(),
                self.spec.memory,
                self.runtime.live_instance(),
            ),
        );
        store.limiter(|s| s.limiter());
        let timeout = self.spec.timeout;
        store.epoch_deadline_callback(move |ctx| {
            if Instant::now() >= ctx.data().deadline() {
                Err(wasmtime::Error::new(TimedOut(timeout)))
            } else {
                // Let other tasks on this thread run while the guest computes.
                Ok(UpdateDeadline::Yield(1))
            }
        });
        store.data_mut().set_deadline(deadline);
        store.set_epoch_deadline(1);
        store
    }
}

/// `work`, ended at `deadline`. Most work (a warm call, a fresh instance)
/// finishes in its first poll, running the guest to its end on the fiber:
/// it needs no timer, and arming one costs more than a warm call. Work that
/// waits (on a host future, or yielding at an epoch tick) gets the timer
/// that ends it at its deadline.
async fn by_deadline<F: Future>(
    deadline: tokio::time::Instant,
    work: F,
) -> Result<F::Output, tokio::time::error::Elapsed> {
    let mut work = std::pin::pin!(work);
    let first = std::future::poll_fn(|cx| Poll::Ready(work.as_mut().poll(cx))).await;
    match first {
        Poll::Ready(done) => Ok(done),
        Poll::Pending => tokio::time::timeout_at(deadline, work).await,
    }
}

fn to_wit(d: &Delivery) -> wit::Message {
    wit::Message {
        id: d.id.clone(),
        key: d.key.clone(),
        queue: d.queue.clone(),
        payload: d.payload.clone(),
        headers: d.headers.clone(),
        attempt: d.attempt,
        enqueued_at_ms: d.enqueued_at_ms,
    }
}

fn from_wit(outcome: wit::Outcome) -> Outcome {
    match outcome {
        wit::Outcome::Done => Outcome::Done,
        wit::Outcome::Retry(ms) => Outcome::Retry(ms.map(Duration::from_millis)),
        wit::Outcome::Reject(reason) => Outcome::Reject(reason),
    }
}

fn failed(f: Failure, instantiate: Option<Duration>) -> Invocation {
    Invocation {
        result: Err(f),
        publishes: Vec::new(),
        instantiate,
    }
}

fn classify(err: wasmtime::Error, store: &Store<HostState>, instantiating: bool) -> Failure {
    if let Some(full) = err.downcast_ref::<wasmtime::PoolConcurrencyLimitError>() {
        return Failure::PoolFull(full.to_string());
    }
    if let Some(hit) = store.data().memory_limit_hit() {
        return Failure::MemoryLimit(hit.to_string());
    }
    if let Some(t) = err.downcast_ref::<TimedOut>() {
        return Failure::Timeout(t.to_string());
    }
    if let Some(trap) = err.downcast_ref::<wasmtime::Trap>() {
        let place = err
            .downcast_ref::<WasmBacktrace>()
            .and_then(|bt| {
                bt.frames()
                    .iter()
                    .find_map(|f| f.func_name().map(str::to_string))
            })
            .map(|name| format!(" in {name}"))
            .unwrap_or_default();
        return Failure::Trap(format!("{trap}{place}"));
    }
    if instantiating {
        Failure::Instantiate(one_line(&err))
    } else {
        Failure::Trap(one_line(&err))
    }
}
