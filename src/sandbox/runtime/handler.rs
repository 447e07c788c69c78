//! One loaded handler version: its prepared component, its limits and, in
//! `reuse` mode, its warm instances. `invoke` runs one delivery, and
//! `invoke_batch` a batch, and says how it ended; neither fails the host.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use wasmtime::{Store, WasmBacktrace};

use super::budget::{Account, Shed, Unit};
use super::instances::{Maker, Spares, Unmade, Warm};
use super::limits::{TimedOut, by_deadline};
use super::world::{Answer, Instance, Pre, World};
use super::{Deadline, Runtime};
use crate::broker::{KvStore, TopicStore};
use crate::config::{HandlerSpec, InstanceMode};
use crate::error::one_line;
use crate::message::{Delivery, NewMessage};
use crate::policy::Outcome;
use crate::sandbox::imports::budget::LogLimiter;
use crate::sandbox::imports::capture::Capture;
use crate::sandbox::imports::{HandlerContext, HostState};

/// Why an attempt failed without an outcome from the guest.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Failure {
    /// The guest trapped (a panic, an unreachable, a bad access).
    #[error("trap: {0}")]
    Trap(String),
    /// The call ran past its deadline.
    #[error("timeout: {0}")]
    Timeout(String),
    /// The guest grew its memory past its cap.
    #[error("memory limit: {0}")]
    MemoryLimit(String),
    /// No instance could be made for the call.
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
    /// The guest's outcome, or why there was none.
    pub result: Result<Outcome, Failure>,
    /// Held publishes; empty unless the guest returned an outcome.
    pub(crate) publishes: Vec<NewMessage>,
    /// How long making a fresh instance for the call took, if one was made.
    pub instantiate: Option<Duration>,
    /// Bytes of linear memory the instance had when the call ended (0 when
    /// no instance was made).
    pub memory: u64,
}

impl Invocation {
    /// A call that ended with `result`, on a warm instance.
    pub fn ended(result: Result<Outcome, Failure>, publishes: Vec<NewMessage>) -> Self {
        Invocation {
            result,
            publishes,
            instantiate: None,
            memory: 0,
        }
    }
}

/// How one call of `handle-batch` ended: one outcome per message, in order,
/// or the failure of the whole call.
#[derive(Debug)]
pub struct BatchInvocation {
    pub(crate) result: Result<Vec<Outcome>, Failure>,
    /// Held publishes; empty unless the guest returned its outcomes.
    pub(crate) publishes: Vec<NewMessage>,
    pub(crate) instantiate: Option<Duration>,
    /// As [`Invocation::memory`].
    pub(crate) memory: u64,
}

/// What a call may start on, once [`Handler::ready`] found it: a warm
/// instance, or a place in the host's pool for a new one. Empty, the call
/// finds its own when it starts.
#[derive(Default)]
pub struct Ready(Option<Slot>);

enum Slot {
    Warm(Warm),
    Unit(Unit),
}

/// How a call on an instance ended.
struct Called {
    result: Result<Answer, Failure>,
    publishes: Vec<NewMessage>,
    instantiate: Option<Duration>,
    memory: u64,
}

/// One loaded version of one handler: its prepared component, its spec and
/// its instances ready for a message: warm ones in `reuse` mode, spare
/// fresh ones in `fresh` mode. Shared by the worker's callers.
pub struct Handler {
    /// What its sidecar says.
    pub spec: HandlerSpec,
    /// Content hash of the component (first 16 hex digits of its SHA-256).
    pub(crate) version: String,
    maker: Maker,
    warm: Mutex<Vec<Warm>>,
    spares: Spares,
    /// Its share of the host's pool of instances.
    account: Account,
    /// Set when another version replaced it, or it was unloaded: its warm
    /// instances are dropped rather than kept.
    retired: AtomicBool,
}

impl Handler {
    /// A handler version ready to serve: `pre` is its component, linked and
    /// checked against its world.
    pub fn new(
        runtime: &Runtime,
        spec: HandlerSpec,
        version: String,
        pre: Pre,
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
            capture: None,
        });
        let spares = match spec.instance_mode {
            InstanceMode::Fresh => spec.concurrency,
            InstanceMode::Reuse => 0,
        };
        let account = runtime
            .budget()
            .account(&spec.name, spec.min_concurrency, spec.concurrency);
        Handler {
            maker: Maker {
                runtime: runtime.clone(),
                pre,
                context,
                memory: spec.memory,
                timeout: spec.timeout,
            },
            spec,
            version,
            warm: Mutex::new(Vec::new()),
            spares: Spares::new(spares),
            account,
            retired: AtomicBool::new(false),
        }
    }

    /// The world its component implements.
    pub fn world(&self) -> World {
        self.maker.pre.world()
    }

    /// Make spare fresh instances (`fresh` mode) in a task, so that the
    /// first messages find them ready; and let the host's pool ask it to
    /// drop idle warm instances another handler needs.
    pub fn prepare(self: &Arc<Self>) {
        let keeper: Weak<dyn Shed> = Arc::downgrade(self) as Weak<dyn Shed>;
        self.maker.runtime.budget().keep_watch(keeper);
        if self.spec.instance_mode == InstanceMode::Fresh
            && let Ok(tokio) = tokio::runtime::Handle::try_current()
        {
            let handler = self.clone();
            tokio.spawn(async move { handler.tidy().await });
        }
    }

    /// Drop the instances used by calls since the last tidy, and make spare
    /// fresh ones (`fresh` mode): work kept off the message path, for the
    /// caller to do once its call's settlement is passed on.
    pub async fn tidy(&self) {
        self.spares.tidy(&self.maker).await;
    }

    fn context(&mut self) -> &mut HandlerContext {
        Arc::get_mut(&mut self.maker.context)
            .expect("a handler gets its stores before its first instance")
    }

    /// Give the handler its key-value store, kept in `store` under the
    /// handler's name. Called before the handler serves, while no store of
    /// it shares its context yet. The host still refuses every call unless
    /// the sidecar grants `kv`.
    pub fn with_kv(mut self, store: Arc<dyn KvStore>) -> Self {
        self.context().kv = Some(store);
        self
    }

    /// Record what its calls do in `capture`, and answer their HTTP
    /// requests as it says (`sluice invoke`). Called before the handler
    /// serves, like [`Handler::with_kv`].
    pub(crate) fn with_capture(mut self, capture: Arc<Capture>) -> Self {
        self.context().capture = Some(capture);
        self
    }

    /// Give the handler the broker's topic bindings, for `publish-to-topic`.
    /// Called before the handler serves, like [`Handler::with_kv`].
    pub fn with_topics(mut self, store: Arc<dyn TopicStore>) -> Self {
        self.context().topics = Some(store);
        self
    }

    /// Stop keeping instances: another version serves now, or none. Its
    /// warm and spare instances are dropped, and so are those its calls in
    /// flight end on.
    pub(crate) fn retire(&self) {
        self.retired.store(true, Ordering::SeqCst);
        self.spares.stop();
        let warm = std::mem::take(&mut *self.warm.lock().expect("warm pool lock"));
        drop(warm);
    }

    /// Wait until a call may start now: a warm instance is free, or the
    /// host's pool has room for one more of this handler's (its floor, or
    /// a shared place up to its `concurrency`). Waiting spends nothing of
    /// the call's time: its deadline starts after.
    pub async fn ready(&self) -> Ready {
        if let Some(warm) = self.pop_warm() {
            return Ready(Some(Slot::Warm(warm)));
        }
        Ready(Some(Slot::Unit(self.account.unit().await)))
    }

    /// A warm instance, if one waits (`reuse` mode).
    fn pop_warm(&self) -> Option<Warm> {
        match self.spec.instance_mode {
            InstanceMode::Reuse => self.warm.lock().expect("warm pool lock").pop(),
            InstanceMode::Fresh => None,
        }
    }

    /// Keep `used` warm for the next call, unless the version retired.
    fn keep_warm(&self, used: Warm) {
        let mut warm = self.warm.lock().expect("warm pool lock");
        if !self.retired.load(Ordering::SeqCst) {
            warm.push(used);
        }
    }

    /// Run the handler for one delivery, by `deadline` (which counts from
    /// before the instance is made: making a fresh one may run the guest's
    /// start code), once an instance is free for it. A batch handler gets a
    /// batch of one.
    pub async fn invoke(&self, delivery: &Delivery, deadline: &Deadline) -> Invocation {
        self.invoke_on(Ready::default(), delivery, deadline).await
    }

    /// [`Handler::invoke`] on what [`Handler::ready`] found.
    pub async fn invoke_on(
        &self,
        ready: Ready,
        delivery: &Delivery,
        deadline: &Deadline,
    ) -> Invocation {
        let called = self
            .run(ready, std::slice::from_ref(delivery), deadline)
            .await;
        let result = match called.result {
            Ok(Answer::One(outcome)) => Ok(outcome),
            Ok(Answer::Many(outcomes)) => one_each(outcomes, 1).map(|mut o| o.remove(0)),
            Err(f) => Err(f),
        };
        Invocation {
            publishes: held_if_answered(&result, called.publishes),
            result,
            instantiate: called.instantiate,
            memory: called.memory,
        }
    }

    /// Run a batch handler for `deliveries` in one call, by `deadline`, on
    /// what [`Handler::ready`] found. A list of outcomes of another length
    /// fails the whole call, as a trap.
    pub async fn invoke_batch(
        &self,
        ready: Ready,
        deliveries: &[Delivery],
        deadline: &Deadline,
    ) -> BatchInvocation {
        let called = self.run(ready, deliveries, deadline).await;
        let result = match called.result {
            Ok(Answer::Many(outcomes)) => one_each(outcomes, deliveries.len()),
            Ok(Answer::One(outcome)) => one_each(vec![outcome], deliveries.len()),
            Err(f) => Err(f),
        };
        BatchInvocation {
            publishes: held_if_answered(&result, called.publishes),
            result,
            instantiate: called.instantiate,
            memory: called.memory,
        }
    }

    /// Call the handler for `deliveries` on a warm instance, a spare fresh
    /// one, or one made now, in the place `ready` holds in the host's pool
    /// (waiting for one first when it holds none).
    async fn run(&self, ready: Ready, deliveries: &[Delivery], deadline: &Deadline) -> Called {
        let slot = match ready.0 {
            Some(slot) => slot,
            None => self.ready().await.0.expect("ready finds a slot"),
        };
        let unit = match slot {
            Slot::Warm(warm) => return self.call_on(warm, None, deliveries, deadline).await,
            Slot::Unit(unit) => unit,
        };
        // A warm instance may have come back while the call waited.
        let ready = match self.spec.instance_mode {
            InstanceMode::Reuse => self.pop_warm().map(|w| (w, None)),
            InstanceMode::Fresh => self.spares.take().map(|s| (s.warm, Some(s.took))),
        };
        let (mut warm, instantiate) = match ready {
            Some(ready) => ready,
            None => {
                let started = Instant::now();
                let made = self.instantiate(deadline).await;
                let took = Some(started.elapsed());
                match made {
                    Ok(w) => (w, took),
                    Err(f) => return failed(f, took, 0),
                }
            }
        };
        // A spare or a new instance takes the call's place; a warm one
        // has its own, and the call's goes back.
        warm.unit.get_or_insert(unit);
        self.call_on(warm, instantiate, deliveries, deadline).await
    }

    /// Call the handler for `deliveries` on `warm`, then keep it or drop it.
    async fn call_on(
        &self,
        warm: Warm,
        instantiate: Option<Duration>,
        deliveries: &[Delivery],
        deadline: &Deadline,
    ) -> Called {
        let Warm {
            mut store,
            instance,
            uses,
            unit,
        } = warm;
        store.data_mut().begin_call(deliveries, deadline);
        store.set_epoch_deadline(1);
        let called = self.call(&mut store, &instance, deliveries).await;
        let memory = store.data().memory();
        match called {
            Ok(answer) => {
                let publishes = store.data_mut().take_publishes();
                let uses = uses + 1;
                let whole = !matches!(&answer, Answer::Many(o) if o.len() != deliveries.len());
                let used = Warm {
                    store,
                    instance,
                    uses,
                    unit,
                };
                match self.spec.instance_mode {
                    InstanceMode::Reuse if uses < self.spec.max_messages_per_instance && whole => {
                        self.keep_warm(used);
                    }
                    InstanceMode::Reuse => drop(used),
                    // Its memory is reset off the message path, by `tidy`.
                    InstanceMode::Fresh => self.spares.put_used(used),
                }
                Called {
                    result: Ok(answer),
                    publishes,
                    instantiate,
                    memory,
                }
            }
            // The store, and with it a possibly broken instance, is
            // dropped before its place in the pool is given back.
            Err(f) => {
                drop(store);
                drop(unit);
                failed(f, instantiate, memory)
            }
        }
    }

    /// A new instance, made by `deadline`.
    async fn instantiate(&self, deadline: &Deadline) -> Result<Warm, Failure> {
        match self.maker.make(deadline).await {
            Ok(warm) => Ok(warm),
            Err(Unmade::Failed(e, store)) => Err(classify(e, &store, true)),
            Err(Unmade::TimedOut) => Err(timed_out(&TimedOut(self.spec.timeout), true)),
        }
    }

    /// Call the handler, ending the call at its deadline. Epoch
    /// interruption stops a guest that computes past its deadline, but not
    /// one waiting in the host (for an HTTP response, a sleep), which runs
    /// no wasm: the timer around the call ends those. Dropping the call
    /// unwinds the guest; the caller then throws its store away.
    async fn call(
        &self,
        store: &mut Store<HostState>,
        instance: &Instance,
        deliveries: &[Delivery],
    ) -> Result<Answer, Failure> {
        let deadline = store.data().deadline().clone();
        let result = by_deadline(&deadline, instance.call(&mut *store, deliveries)).await;
        match result {
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(e)) => Err(classify(e, store, false)),
            Err(_) => Err(timed_out(&TimedOut(self.spec.timeout), false)),
        }
    }

    /// Log lines of this version dropped so far (over its rate or a call's
    /// budget).
    pub fn dropped_log_lines(&self) -> u64 {
        self.maker.context.log.dropped()
    }

    /// Warm instances waiting in the pool (`reuse` mode).
    #[cfg(any(test, feature = "testkit"))]
    pub fn warm_instances(&self) -> usize {
        self.warm.lock().expect("warm pool lock").len()
    }

    /// Spare fresh instances ready for a message (`fresh` mode).
    #[cfg(any(test, feature = "testkit"))]
    pub fn spare_instances(&self) -> usize {
        self.spares.ready()
    }
}

impl Drop for Handler {
    /// A retired version's spares give their places back at once.
    fn drop(&mut self) {
        self.spares.stop();
    }
}

impl Shed for Handler {
    /// An idle warm instance goes while the handler holds more than its
    /// floor.
    fn shed_one(&self) -> bool {
        if !self.account.above_floor() {
            return false;
        }
        let idle = self.warm.lock().expect("warm pool lock").pop();
        idle.is_some()
    }
}

/// The publishes a call held, kept only when it answered with its
/// outcome(s).
fn held_if_answered<T>(result: &Result<T, Failure>, held: Vec<NewMessage>) -> Vec<NewMessage> {
    match result {
        Ok(_) => held,
        Err(_) => Vec::new(),
    }
}

/// `outcomes` if there is one for each of `messages`; a list of another
/// length fails the call, as a trap.
fn one_each(outcomes: Vec<Outcome>, messages: usize) -> Result<Vec<Outcome>, Failure> {
    if outcomes.len() == messages {
        return Ok(outcomes);
    }
    Err(Failure::Trap(format!(
        "handle-batch returned {} outcome(s) for {messages} message(s): it must return one per message, in order",
        outcomes.len()
    )))
}

fn failed(f: Failure, instantiate: Option<Duration>, memory: u64) -> Called {
    Called {
        result: Err(f),
        publishes: Vec::new(),
        instantiate,
        memory,
    }
}

/// A call, or the making of its instance, that ran out of time: by the
/// call's own timer or by epoch interruption, the same words.
fn timed_out(t: &TimedOut, making: bool) -> Failure {
    let what = if making { " (making the instance)" } else { "" };
    Failure::Timeout(format!("{t}{what}"))
}

fn classify(err: wasmtime::Error, store: &Store<HostState>, instantiating: bool) -> Failure {
    if let Some(full) = err.downcast_ref::<wasmtime::PoolConcurrencyLimitError>() {
        return Failure::PoolFull(full.to_string());
    }
    if let Some(hit) = store.data().memory_limit_hit() {
        return Failure::MemoryLimit(hit.to_string());
    }
    if let Some(t) = err.downcast_ref::<TimedOut>() {
        return timed_out(t, instantiating);
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
