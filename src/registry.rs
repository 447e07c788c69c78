//! The live set of handlers: which version of which handler serves which
//! queue, right now. Loading a file, swapping a version in and unloading a
//! removed handler all happen here; the directory watcher (`reload`) only
//! says which names changed.
//!
//! A swap starts a worker for the new version and tells the old one to
//! stop: new deliveries go to the new version at once, while the old
//! version's calls in flight finish on it, and what it had leased but not
//! started goes back to the queue without spending an attempt.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{Context, Result};
use sha2::{Digest, Sha256};
use tokio::sync::{Mutex, watch};
use tokio::task::JoinHandle;

use crate::broker::{Broker, STATUS_EVERY};
use crate::cache::{CompileCache, Source};
use crate::check;
use crate::config::HandlerSpec;
use crate::policy::RedrivePolicy;
use crate::runtime::{Handler, MAX_HANDLER_MEMORY, Runtime};
use crate::topic::Binding;
use crate::units::format_size;
use crate::worker::{QueueWorker, WorkerStats};

/// Short content hash used as a handler's version.
pub fn content_hash(bytes: &[u8]) -> String {
    short_hash(&full_hash(bytes))
}

/// The SHA-256 of `bytes` in hex: the compiled cache's key.
fn full_hash(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The version: the first 16 hex digits of the full hash.
fn short_hash(full: &str) -> String {
    full[..16].to_string()
}

/// The last refusal of a handler file.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Refusal {
    pub file: PathBuf,
    pub reason: String,
}

/// A handler's state, for `stats` and logs.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Status {
    pub handler: String,
    pub queue: Option<String>,
    pub version: Option<String>,
    /// Files of this handler refused since the host started.
    pub refusals: u64,
    pub last_refusal: Option<String>,
}

struct Running {
    handler: Arc<Handler>,
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
    stats: Arc<WorkerStats>,
    queue: String,
}

#[derive(Default)]
struct State {
    running: BTreeMap<String, Running>,
    /// Workers of replaced or removed versions, finishing their calls.
    retired: Vec<Running>,
    refused: BTreeMap<String, (u64, Refusal)>,
}

pub struct Registry {
    runtime: Runtime,
    broker: Arc<dyn Broker>,
    cache: Arc<CompileCache>,
    dir: PathBuf,
    max_message_size: u64,
    refusals: AtomicU64,
    state: Mutex<State>,
}

impl Registry {
    pub fn new(
        runtime: Runtime,
        broker: Arc<dyn Broker>,
        cache: CompileCache,
        dir: PathBuf,
        max_message_size: u64,
    ) -> Self {
        Registry {
            runtime,
            broker,
            cache: Arc::new(cache),
            dir,
            max_message_size,
            refusals: AtomicU64::new(0),
            state: Mutex::new(State::default()),
        }
    }

    /// Names of every handler file (`NAME.wasm`) in the directory.
    pub fn scan(&self) -> Result<Vec<String>> {
        let entries = std::fs::read_dir(&self.dir).with_context(|| {
            format!(
                "cannot read handlers directory {}: create it and put NAME.wasm handler files in it",
                self.dir.display()
            )
        })?;
        let mut names: Vec<String> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter_map(|p| handler_name(&p).filter(|_| p.extension().is_some_and(|x| x == "wasm")))
            .collect();
        names.sort();
        Ok(names)
    }

    /// Bring handler `name` in line with its files: load or swap in a new
    /// version, apply a changed sidecar, or unload it when its `.wasm` is gone.
    pub async fn apply(&self, name: &str) {
        let wasm = self.dir.join(format!("{name}.wasm"));
        if !wasm.is_file() {
            self.unload(name).await;
            return;
        }
        let (runtime, cache, max) = (
            self.runtime.clone(),
            self.cache.clone(),
            self.max_message_size,
        );
        let loaded = {
            let name = name.to_string();
            let wasm = wasm.clone();
            tokio::task::spawn_blocking(move || load_file(&runtime, &cache, &name, &wasm, max))
                .await
        };
        let handler = match loaded {
            // Topic publishes are routed by this broker's bindings, and a
            // granted handler keeps its key-value store in it.
            Ok(Ok(h)) if h.spec.capabilities.kv => h
                .with_topics(self.broker.clone())
                .with_kv(self.broker.clone()),
            Ok(Ok(h)) => h.with_topics(self.broker.clone()),
            Ok(Err(reason)) => return self.refuse(name, &wasm, reason).await,
            Err(e) => {
                return self
                    .refuse(name, &wasm, format!("loading panicked: {e}"))
                    .await;
            }
        };
        // A handler refused for its queue must not bind topics to it.
        let taken = queue_taken(&*self.state.lock().await, name, &handler.spec.queue);
        if let Some(reason) = taken {
            return self.refuse(name, &wasm, reason).await;
        }
        // Outside the registry's lock: a broker that is away must not hold it.
        bind(&*self.broker, &handler.spec).await;
        let mut state = self.state.lock().await;
        if let Some(reason) = queue_taken(&state, name, &handler.spec.queue) {
            drop(state);
            return self.refuse(name, &wasm, reason).await;
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
        let running = self.start(Arc::new(handler));
        if let Some(old) = state.running.insert(name.to_string(), running) {
            retire(&mut state, old);
        }
        state.refused.remove(name);
    }

    /// Stop serving handler `name`; its queue's messages wait.
    pub async fn unload(&self, name: &str) {
        let mut state = self.state.lock().await;
        if let Some(old) = state.running.remove(name) {
            tracing::info!(handler = name, queue = %old.queue, version = %old.handler.version, "handler unloaded; its messages wait");
            retire(&mut state, old);
        }
    }

    /// Stop every worker and wait up to `grace` for their calls in flight.
    pub async fn stop_all(&self, grace: Duration) {
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
    pub async fn workers(&self) -> Vec<(String, Arc<WorkerStats>)> {
        let mut state = self.state.lock().await;
        state.retired.retain(|r| !r.task.is_finished());
        state
            .running
            .values()
            .chain(state.retired.iter())
            .map(|r| (r.queue.clone(), r.stats.clone()))
            .collect()
    }

    /// Bind the topics of the handlers in the directory from their sidecars
    /// alone, before any of them serves: a handler that publishes to a topic
    /// must not start before the handlers that subscribe to it are bound,
    /// whatever order they load in. A sidecar that does not parse is left to
    /// the load, which reports it.
    /// Of two sidecars naming one queue, only the first name's is bound, as
    /// only the first loads.
    pub async fn bind_sidecars(&self, names: &[String]) {
        let mut queues = BTreeSet::new();
        for name in names {
            let sidecar = self.dir.join(format!("{name}.toml"));
            if let Ok(spec) = load_spec(name, &sidecar)
                && queues.insert(spec.queue.clone())
            {
                bind(&*self.broker, &spec).await;
            }
        }
    }

    /// Bind every serving handler's topics again, so that bindings lost with
    /// a broker's data, or not written while it was away, come back.
    pub async fn sync_bindings(&self) {
        let specs: Vec<Arc<Handler>> = {
            let state = self.state.lock().await;
            state.running.values().map(|r| r.handler.clone()).collect()
        };
        for h in specs {
            bind(&*self.broker, &h.spec).await;
        }
    }

    /// The queues whose serving handler redrives its dead letters, and how.
    pub async fn redrives(&self) -> Vec<(String, RedrivePolicy)> {
        let state = self.state.lock().await;
        state
            .running
            .values()
            .filter_map(|r| Some((r.queue.clone(), r.handler.spec.redrive?)))
            .collect()
    }

    /// Every handler the host knows, serving or refused.
    pub async fn statuses(&self) -> Vec<Status> {
        let state = self.state.lock().await;
        let mut out: BTreeMap<String, Status> = BTreeMap::new();
        for (name, r) in &state.running {
            out.insert(
                name.clone(),
                Status {
                    handler: name.clone(),
                    queue: Some(r.queue.clone()),
                    version: Some(r.handler.version.clone()),
                    refusals: 0,
                    last_refusal: None,
                },
            );
        }
        for (name, (count, refusal)) in &state.refused {
            let s = out.entry(name.clone()).or_insert_with(|| Status {
                handler: name.clone(),
                queue: None,
                version: None,
                refusals: 0,
                last_refusal: None,
            });
            s.refusals = *count;
            s.last_refusal = Some(refusal.reason.clone());
        }
        out.into_values().collect()
    }

    /// Files refused since the host started.
    pub fn refusals(&self) -> u64 {
        self.refusals.load(Ordering::Relaxed)
    }

    fn start(&self, handler: Arc<Handler>) -> Running {
        let spec = handler.spec.clone();
        let queue = spec.queue.clone();
        // The longest a call can take, plus time to settle it.
        let grace = spec.timeout + Duration::from_secs(5);
        let worker = QueueWorker::new(self.broker.clone(), handler.clone(), spec);
        let stats = worker.stats.clone();
        let (stop, stop_rx) = watch::channel(false);
        let task = tokio::spawn(worker.serve(stop_rx, grace));
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
        let mut state = self.state.lock().await;
        let serving = state.running.get(name).map(|r| r.handler.version.clone());
        tracing::error!(
            file = %file.display(),
            still_serving = serving.as_deref().unwrap_or("nothing"),
            "handler refused: {reason}"
        );
        let entry = state.refused.entry(name.to_string()).or_insert_with(|| {
            (
                0,
                Refusal {
                    file: file.to_path_buf(),
                    reason: String::new(),
                },
            )
        });
        entry.0 += 1;
        entry.1 = Refusal {
            file: file.to_path_buf(),
            reason,
        };
    }
}

fn retire(state: &mut State, old: Running) {
    let _ = old.stop.send(true);
    state.retired.retain(|r| !r.task.is_finished());
    state.retired.push(old);
}

/// `NAME` for `DIR/NAME.wasm` or `DIR/NAME.toml`; `None` for anything else
/// (temporary files, hidden files, other extensions).
pub fn handler_name(path: &Path) -> Option<String> {
    let ext = path.extension()?.to_str()?;
    if ext != "wasm" && ext != "toml" {
        return None;
    }
    let stem = path.file_stem()?.to_str()?;
    (!stem.is_empty() && !stem.starts_with('.') && !stem.contains('.')).then(|| stem.to_string())
}

/// Handler `name`'s spec from its sidecar, or the defaults without one.
fn load_spec(name: &str, sidecar: &Path) -> anyhow::Result<HandlerSpec> {
    if sidecar.exists() {
        HandlerSpec::load(name, sidecar)
    } else {
        HandlerSpec::defaults(name)
    }
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

/// Load one handler file and its sidecar. The error is one line, naming the
/// file at fault.
pub fn load_file(
    runtime: &Runtime,
    cache: &CompileCache,
    name: &str,
    path: &Path,
    max_message_size: u64,
) -> Result<Handler, String> {
    let sidecar = path.with_extension("toml");
    let spec = load_spec(name, &sidecar).map_err(|e| format!("{e:#}"))?;
    if spec.memory > MAX_HANDLER_MEMORY {
        return Err(format!(
            "{}: `limits.memory` is {}, over the host's limit of {}",
            sidecar.display(),
            format_size(spec.memory),
            format_size(MAX_HANDLER_MEMORY)
        ));
    }
    let bytes = std::fs::read(path).map_err(|e| format!("{}: cannot read: {e}", path.display()))?;
    // Hashed once: the full hash keys the cache, its prefix is the version.
    let full = full_hash(&bytes);
    let version = short_hash(&full);
    let (component, source) = cache
        .component(runtime, &bytes, &full)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    if source != Source::Memory {
        tracing::debug!(handler = name, version = %version, ?source, "component ready");
    }
    let pre = check::prepare_component(runtime, &component)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(Handler::new(
        runtime,
        spec,
        path.to_path_buf(),
        version,
        pre,
        max_message_size,
    ))
}

/// Make the broker's bindings from this handler's sidecar exactly those its
/// `[[subscribe]]` tables declare. Bindings made on the command line are
/// left alone. A broker that is away is tried again with the next report.
async fn bind(broker: &dyn Broker, spec: &HandlerSpec) {
    let origin = Binding::origin_of_handler(&spec.name);
    let bindings: Vec<Binding> = spec
        .subscriptions
        .iter()
        .map(|s| Binding {
            topic: s.topic.clone(),
            queue: spec.queue.clone(),
            pattern: s.pattern.clone(),
            origin: origin.clone(),
        })
        .collect();
    if let Err(e) = broker.replace_bindings(&origin, &bindings).await {
        tracing::error!(handler = %spec.name, "could not bind its topics: {e}; trying again in {STATUS_EVERY:?}");
    }
}
