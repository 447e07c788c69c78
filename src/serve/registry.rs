//! The live set of handlers: which version of which handler serves which
//! queue, right now. The registry swaps versions in, unloads removed
//! handlers and keeps account of refused files; loading a file is the
//! [`Loader`]'s job, and the directory watcher (`reload`) only says which
//! names changed.
//!
//! A swap starts a worker for the new version and tells the old one to
//! stop: new deliveries go to the new version at once, while the old
//! version's calls in flight finish on it, and what it had leased but not
//! started goes back to the queue without spending an attempt.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::{Mutex, watch};
use tokio::task::JoinHandle;

use crate::base::schedule::Schedule;
use crate::base::trace::Exporter;
use crate::broker::{Broker, HandlerStatus, InstanceCounts, PoolCounts};
use crate::config::HandlerSpec;
use crate::error::chain;
use crate::policy::RedrivePolicy;
use crate::sandbox::loader::Loader;
use crate::sandbox::runtime::Handler;
use crate::serve::bind;
use crate::serve::metrics::Metrics;
use crate::serve::pause::PauseBoard;
use crate::serve::stall::StallBoard;
use crate::serve::worker::{DEFAULT_BROKER_TIMEOUT, Observe, WorkerStats, supervise};

/// What the host's workers report to and are steered by: its metrics (when
/// it serves them), its span exporter (when it exports) and its view of
/// which queues are paused.
#[derive(Clone, Default)]
pub(crate) struct Observers {
    pub(crate) metrics: Option<Arc<Metrics>>,
    pub(crate) exporter: Option<Arc<Exporter>>,
    pub(crate) pauses: Arc<PauseBoard>,
    /// The bound on one broker call of a worker (`broker_timeout`); `None`:
    /// [`DEFAULT_BROKER_TIMEOUT`].
    pub(crate) broker_timeout: Option<Duration>,
    /// The queues the stall watchdog finds stalled.
    pub(crate) stalls: Arc<StallBoard>,
}

impl Observers {
    /// What the worker of `handler` reports to.
    fn for_worker(&self, handler: &Handler) -> Observe {
        Observe {
            metrics: self
                .metrics
                .as_ref()
                .map(|m| m.handler(&handler.spec.name, &handler.version, &handler.spec.queue)),
            exporter: self.exporter.clone(),
            paused: self.pauses.watch(&handler.spec.queue),
            broker_timeout: self.broker_timeout.unwrap_or(DEFAULT_BROKER_TIMEOUT),
        }
    }
}

/// A serving worker, as the stall watchdog sees it.
pub(crate) struct Watched {
    pub(crate) queue: String,
    pub(crate) spec: HandlerSpec,
    pub(crate) stats: Arc<WorkerStats>,
    pub(crate) paused: bool,
}

/// A handler version serving its queue: its worker task and how to stop it.
struct Running {
    handler: Arc<Handler>,
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
    stats: Arc<WorkerStats>,
    queue: String,
}

/// The last refusal of a handler's files, and how many there were.
struct Refused {
    count: u64,
    reason: String,
}

#[derive(Default)]
struct State {
    running: BTreeMap<String, Running>,
    /// Workers of replaced or removed versions, finishing their calls.
    retired: Vec<Running>,
    refused: BTreeMap<String, Refused>,
}

/// The handlers one host serves, by name, and those whose files it refused.
pub(crate) struct Registry {
    loader: Arc<Loader>,
    broker: Arc<dyn Broker>,
    dir: PathBuf,
    refusals: AtomicU64,
    state: Mutex<State>,
    observers: Observers,
}

impl Registry {
    /// A registry of the handlers in `dir`, loaded by `loader`, serving the
    /// queues of `broker`.
    pub(crate) fn new(loader: Loader, broker: Arc<dyn Broker>, dir: PathBuf) -> Self {
        Registry {
            loader: Arc::new(loader),
            broker,
            dir,
            refusals: AtomicU64::new(0),
            state: Mutex::new(State::default()),
            observers: Observers::default(),
        }
    }

    /// The registry, its workers reporting to `observers`.
    pub(crate) fn with_observers(mut self, observers: Observers) -> Self {
        self.observers = observers;
        self
    }

    /// What its workers report to.
    pub(crate) fn observers(&self) -> &Observers {
        &self.observers
    }

    /// Handler instances alive now, over every handler.
    pub(crate) fn instances_in_use(&self) -> usize {
        self.loader.runtime().instances_in_use()
    }

    /// Handler instances the host runs at once, over every handler.
    pub(crate) fn max_instances(&self) -> usize {
        self.loader.runtime().max_instances()
    }

    /// Spare fresh instances ready or being made, over every handler.
    pub(crate) fn spare_instances(&self) -> usize {
        self.loader.runtime().spare_instances()
    }

    /// The handlers directory.
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// Bring handler `name` in line with its files: load or swap in a new
    /// version, apply a changed sidecar, or unload it when its `.wasm` is gone.
    pub(crate) async fn apply(&self, name: &str) {
        let wasm = self.dir.join(format!("{name}.wasm"));
        // Gone: unload. Anything else by that name (a directory, a FIFO, a
        // dangling link) is refused by the loader, with why.
        if wasm.symlink_metadata().is_err() {
            self.unload(name).await;
            return;
        }
        let handler = match self.load(name, &wasm).await {
            Ok(handler) => handler,
            Err(reason) => return self.refuse(name, &wasm, reason).await,
        };
        // A handler refused for its queue must not bind topics to it.
        let pool = self.max_instances();
        let taken = cannot_serve(&*self.state.lock().await, name, &handler.spec, pool);
        if let Some(reason) = taken {
            return self.refuse(name, &wasm, reason).await;
        }
        // Outside the registry's lock: a broker that is away must not hold it.
        bind::bind(&*self.broker, &handler.spec).await;
        self.swap(name, &wasm, handler).await;
    }

    /// Load `wasm` off the async threads (compiling takes a while), and give
    /// the handler what it reaches through the broker. The error is the
    /// refusal's reason.
    async fn load(&self, name: &str, wasm: &Path) -> Result<Handler, String> {
        let loaded = {
            let (loader, name, wasm) = (self.loader.clone(), name.to_string(), wasm.to_path_buf());
            tokio::task::spawn_blocking(move || loader.load(&name, &wasm)).await
        };
        match loaded {
            // Topic publishes are routed by this broker's bindings, and a
            // granted handler keeps its key-value store in it.
            Ok(Ok(h)) if h.spec.capabilities.kv => Ok(h
                .with_topics(self.broker.clone())
                .with_kv(self.broker.clone())),
            Ok(Ok(h)) => Ok(h.with_topics(self.broker.clone())),
            Ok(Err(e)) => Err(chain(&e)),
            Err(e) => Err(format!("loading panicked: {e}")),
        }
    }

    /// Serve `name` with `handler` from now on, unless another handler took
    /// its queue meanwhile or the same version and spec serve already.
    async fn swap(&self, name: &str, wasm: &Path, handler: Handler) {
        let pool = self.max_instances();
        let mut state = self.state.lock().await;
        if let Some(reason) = cannot_serve(&state, name, &handler.spec, pool) {
            drop(state);
            return self.refuse(name, wasm, reason).await;
        }
        if let Some(current) = state.running.get(name)
            && current.handler.version == handler.version
            && current.handler.spec == handler.spec
        {
            return;
        }
        let previous = state.running.get(name).map(|r| r.handler.version.clone());
        tracing::info!(
            handler = name, queue = %handler.spec.queue, version = %handler.version,
            previous = previous.as_deref().unwrap_or("-"), mode = ?handler.spec.instance_mode,
            "handler serving from {}", wasm.display()
        );
        if let Some(m) = &self.observers.metrics {
            m.reloads.inc();
        }
        let handler = Arc::new(handler);
        handler.prepare();
        let running = self.start(handler);
        if let Some(old) = state.running.insert(name.to_string(), running) {
            retire(&mut state, old);
        }
        state.refused.remove(name);
    }

    /// Stop serving handler `name`; its queue's messages wait.
    pub(crate) async fn unload(&self, name: &str) {
        let mut state = self.state.lock().await;
        if let Some(old) = state.running.remove(name) {
            tracing::info!(handler = name, queue = %old.queue, version = %old.handler.version, "handler unloaded; its messages wait");
            retire(&mut state, old);
        }
    }

    /// Stop every worker and wait up to `grace` for their calls in flight.
    pub(crate) async fn stop_all(&self, grace: Duration) {
        let mut state = self.state.lock().await;
        let all: Vec<Running> = std::mem::take(&mut state.running)
            .into_values()
            .chain(std::mem::take(&mut state.retired))
            .collect();
        drop(state);
        for r in &all {
            let _ = r.stop.send(true);
        }
        let wait = async {
            for r in all {
                let _ = r.task.await;
            }
        };
        if tokio::time::timeout(grace + Duration::from_secs(1), wait)
            .await
            .is_err()
        {
            tracing::warn!("workers did not stop within the grace period");
        }
    }

    /// The queues served and the workers' live counts, retired ones included.
    pub(crate) async fn workers(&self) -> Vec<(String, Arc<WorkerStats>)> {
        let mut state = self.state.lock().await;
        state.retired.retain(|r| !r.task.is_finished());
        state
            .running
            .values()
            .chain(state.retired.iter())
            .map(|r| (r.queue.clone(), r.stats.clone()))
            .collect()
    }

    /// What the stall watchdog looks at: each serving worker, its queue's
    /// settings, its live counts and whether the queue is paused.
    pub(crate) async fn watched(&self) -> Vec<Watched> {
        let state = self.state.lock().await;
        state
            .running
            .values()
            .map(|r| Watched {
                queue: r.queue.clone(),
                spec: r.handler.spec.clone(),
                stats: r.stats.clone(),
                paused: self.observers.pauses.is_paused(&r.queue),
            })
            .collect()
    }

    /// The specs of the handlers serving now.
    pub(crate) async fn serving(&self) -> Vec<HandlerSpec> {
        let state = self.state.lock().await;
        state
            .running
            .values()
            .map(|r| r.handler.spec.clone())
            .collect()
    }

    /// The queues whose serving handler redrives its dead letters, and how.
    pub(crate) async fn redrives(&self) -> Vec<(String, RedrivePolicy)> {
        let state = self.state.lock().await;
        state
            .running
            .values()
            .filter_map(|r| Some((r.queue.clone(), r.handler.spec.redrive?)))
            .collect()
    }

    /// The cron schedules of every serving handler, with its queue.
    pub(crate) async fn schedules(&self) -> Vec<(String, Schedule)> {
        let state = self.state.lock().await;
        state
            .running
            .values()
            .flat_map(|r| {
                let queue = &r.queue;
                (r.handler.spec.schedules.iter()).map(move |s| (queue.clone(), s.clone()))
            })
            .collect()
    }

    /// Names of every handler the registry knows, serving or refused.
    pub(crate) async fn names(&self) -> Vec<String> {
        let state = self.state.lock().await;
        let mut names: Vec<String> = state
            .running
            .keys()
            .chain(state.refused.keys())
            .cloned()
            .collect();
        names.sort();
        names.dedup();
        names
    }

    /// Every handler the host knows, serving or refused, as `host` reports
    /// it at `now_ms`.
    pub(crate) async fn statuses(&self, host: &str, now_ms: u64) -> Vec<HandlerStatus> {
        let budget = self.loader.runtime().budget().clone();
        let pool = PoolCounts {
            in_use: budget.held() as u64,
            max_instances: budget.total() as u64,
        };
        let state = self.state.lock().await;
        let mut out: BTreeMap<&str, HandlerStatus> = BTreeMap::new();
        let status = |name: &str| HandlerStatus {
            host: host.to_string(),
            handler: name.to_string(),
            queue: None,
            version: None,
            refusals: 0,
            last_refusal: None,
            worker_restarts: 0,
            last_worker_failure: None,
            dropped_log_lines: 0,
            max_in_flight: None,
            rate: None,
            schedules: Vec::new(),
            world: None,
            instances: None,
            pool: Some(pool),
            updated_at_ms: now_ms,
        };
        for (name, r) in &state.running {
            let s = out.entry(name).or_insert_with(|| status(name));
            s.queue = Some(r.queue.clone());
            s.version = Some(r.handler.version.clone());
            s.world = Some(r.handler.world().name().to_string());
            s.worker_restarts = r.stats.restarts.load(Ordering::Relaxed);
            s.last_worker_failure = r.stats.last_failure.lock().expect("stats lock").clone();
            s.dropped_log_lines = r.handler.dropped_log_lines();
            let spec = &r.handler.spec;
            s.max_in_flight = spec.flow.max_in_flight;
            s.rate = spec.flow.rate.map(|r| r.to_string());
            s.schedules = spec.schedules.iter().map(Schedule::spec).collect();
            s.instances = Some(InstanceCounts {
                held: budget.held_by(name) as u64,
                floor: spec.min_concurrency as u64,
                cap: spec.concurrency as u64,
            });
        }
        for (name, refused) in &state.refused {
            let s = out.entry(name).or_insert_with(|| status(name));
            s.refusals = refused.count;
            s.last_refusal = Some(refused.reason.clone());
        }
        out.into_values().collect()
    }

    fn start(&self, handler: Arc<Handler>) -> Running {
        let spec = handler.spec.clone();
        let queue = spec.queue.clone();
        // The longest a call can take (asking for more time included), plus
        // time to settle it.
        let grace = spec.timeout + spec.max_extend + Duration::from_secs(5);
        let stats = Arc::new(WorkerStats::default());
        let (stop, stop_rx) = watch::channel(false);
        let queue_role: Arc<dyn crate::broker::Queue> = match &self.observers.metrics {
            Some(m) => m.metered(self.broker.clone()),
            None => self.broker.clone(),
        };
        let task = tokio::spawn(supervise(
            queue_role,
            handler.clone(),
            spec,
            stats.clone(),
            self.observers.for_worker(&handler),
            stop_rx,
            grace,
        ));
        Running {
            handler,
            stop,
            task,
            stats,
            queue,
        }
    }

    async fn refuse(&self, name: &str, file: &Path, reason: String) {
        self.refusals.fetch_add(1, Ordering::Relaxed);
        if let Some(m) = &self.observers.metrics {
            m.refused(name);
        }
        let mut state = self.state.lock().await;
        let serving = state.running.get(name).map(|r| r.handler.version.clone());
        tracing::error!(
            file = %file.display(),
            still_serving = serving.as_deref().unwrap_or("nothing"),
            "handler refused: {reason}"
        );
        let refused = state.refused.entry(name.to_string()).or_insert(Refused {
            count: 0,
            reason: String::new(),
        });
        refused.count += 1;
        refused.reason = reason;
    }
}

fn retire(state: &mut State, old: Running) {
    let _ = old.stop.send(true);
    old.handler.retire();
    state.retired.retain(|r| !r.task.is_finished());
    state.retired.push(old);
}

/// Why handler `name` cannot serve with `spec` beside the others: another
/// handler serves its queue, or the host's pool of `pool` instances has no
/// room for its floor.
fn cannot_serve(state: &State, name: &str, spec: &HandlerSpec, pool: usize) -> Option<String> {
    queue_taken(state, name, &spec.queue).or_else(|| pool_short(state, name, spec, pool))
}

/// Why the pool of `pool` instances cannot keep `spec.min_concurrency`
/// for handler `name` (which gives back what its running version keeps)
/// beside the floors of the others.
fn pool_short(state: &State, name: &str, spec: &HandlerSpec, pool: usize) -> Option<String> {
    let floor = spec.min_concurrency;
    let others: Vec<(&String, usize)> = state
        .running
        .iter()
        .filter(|(n, _)| n.as_str() != name)
        .map(|(n, r)| (n, r.handler.spec.min_concurrency))
        .collect();
    let taken: usize = others.iter().map(|(_, c)| c).sum();
    if taken + floor <= pool {
        return None;
    }
    let mut biggest = others;
    biggest.sort_by_key(|(_, c)| std::cmp::Reverse(*c));
    let list: Vec<String> = biggest
        .iter()
        .take(3)
        .map(|(n, c)| format!("{n} {c}"))
        .collect();
    Some(format!(
        "its `min_concurrency` of {floor} does not fit: the host runs at most {pool} handler instances at once (`max_instances` in sluice.toml), and the other {} handlers keep {taken} for themselves ({}); raise `max_instances`, or lower `min_concurrency` in {name}.toml or in theirs",
        biggest.len(),
        list.join(", ")
    ))
}

/// Why handler `name` cannot serve `queue`: another handler serves it.
fn queue_taken(state: &State, name: &str, queue: &str) -> Option<String> {
    let (other, _) = state
        .running
        .iter()
        .find(|(n, r)| n.as_str() != name && r.queue == queue)?;
    Some(format!(
        "queue {queue:?} is already served by {other}.wasm; bind this handler to another queue in its sidecar"
    ))
}
