//! `sluice run`: load the handlers, serve their queues, follow changes to
//! the handlers directory, redrive dead letters on schedule, stop cleanly.
//!
//! Besides the workers (started by the [`Registry`]), a running host has
//! six loops, each a named function here or in its module: [`report_loop`]
//! (statuses and topic bindings every [`STATUS_EVERY`]), [`follow_loop`]
//! (the directory watcher), [`wait_idle`] (`--until-idle`),
//! [`redrive::run`] (scheduled redrive), [`ticker::run`] (cron schedules)
//! and [`PauseBoard::follow`] (which queues are paused). The first of them
//! to end, or the shutdown future, stops the host. The admin endpoint, when on, serves beside them until
//! the workers have stopped.

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::Result;

use crate::base::trace::Exporter;
use crate::broker::{Broker, STATUS_EVERY};
use crate::error::chain;
use crate::sandbox::cache::{CacheFiles, CompileCache};
use crate::sandbox::loader::{self, LoadLimits, Loader};
use crate::sandbox::runtime::Runtime;
use crate::serve::admin::{self, Admin};
use crate::serve::bind;
use crate::serve::metrics::Metrics;
use crate::serve::pause::PauseBoard;
use crate::serve::redrive::{self, Clock, SystemClock};
use crate::serve::registry::{Observers, Registry};
use crate::serve::reload::{DirWatcher, RESCAN};
use crate::serve::ticker;
use crate::serve::watchdog;
use crate::serve::worker::DEFAULT_BROKER_TIMEOUT;

/// How `run` behaves.
#[derive(Clone, Debug)]
pub struct RunOptions {
    /// The handlers directory: `NAME.wasm` files and their `NAME.toml`
    /// sidecars.
    pub handlers: PathBuf,
    /// Exit once no bound queue has a ready, delayed or in-flight message.
    pub until_idle: bool,
    /// How long in-flight calls may finish after a stop.
    pub grace: Duration,
    /// The largest message (payload and headers) a handler may publish.
    pub max_message_size: u64,
    /// The largest handler component loaded.
    pub max_component_size: u64,
    /// Where compiled components are cached; `None` keeps them in memory only.
    pub cache: Option<CacheFiles>,
    /// Follow changes to the handlers directory.
    pub watch: bool,
    /// Serve the admin endpoint (metrics, health, API, dashboard).
    pub admin: Option<AdminOptions>,
    /// Export attempt spans to this OTLP/HTTP collector (base URL).
    pub otlp_endpoint: Option<String>,
    /// The bound on one broker call of a worker; `None`: the default.
    pub broker_timeout: Option<Duration>,
    /// How long a queue that could move may stand still before it is
    /// reported stalled; `None`: the watchdog is off.
    pub stall_after: Option<Duration>,
    /// Exit with an error when a queue stalls.
    pub exit_on_stall: bool,
    /// Handler instances the host runs at once, over every handler; `None`:
    /// the default for this machine's memory.
    pub max_instances: Option<usize>,
}

/// Where the admin endpoint listens, and the token it asks for.
#[derive(Clone, Debug)]
pub struct AdminOptions {
    /// `HOST:PORT` to listen on.
    pub addr: String,
    /// The bearer token asked of every request; required on an address
    /// other than loopback.
    pub token: Option<String>,
    /// Host names the endpoint answers to besides its own address,
    /// `localhost` and loopback (`admin_hosts`).
    pub hosts: Vec<String>,
}

/// Serve every handler in `options.handlers` until `shutdown` resolves (or
/// the queues are idle, with `until_idle`).
pub async fn run(
    broker: Arc<dyn Broker>,
    options: RunOptions,
    shutdown: impl Future<Output = ()>,
) -> Result<()> {
    run_with_clock(broker, options, shutdown, Arc::new(SystemClock)).await
}

/// [`run`], with the clock that schedules redrives of dead letters and
/// fires cron schedules.
pub async fn run_with_clock(
    broker: Arc<dyn Broker>,
    options: RunOptions,
    shutdown: impl Future<Output = ()>,
    clock: Arc<dyn Clock>,
) -> Result<()> {
    let loader = loader(&options)?;
    // The admin endpoint binds first: a taken address stops the host
    // before it leases anything.
    let listener = match &options.admin {
        Some(a) => Some(admin::bind(&a.addr, a.token.as_deref()).await?),
        None => None,
    };
    let observers = observers(listener.is_some(), &options)?;
    let registry = Arc::new(
        Registry::new(loader, broker.clone(), options.handlers.clone())
            .with_observers(observers.clone()),
    );
    let admin = listener.map(|listener| {
        let a = options
            .admin
            .as_ref()
            .expect("a listener comes from admin options");
        AdminTask::spawn(listener, &broker, &registry, a)
    });
    // Watch before the first scan, so nothing that changes in between is missed.
    let watcher = (options.watch)
        .then(|| DirWatcher::start(&options.handlers))
        .transpose()?;
    read_pauses(&*broker, &observers.pauses).await;
    start(&*broker, &registry).await?;
    if let Some(a) = &admin {
        a.admin.mark_started();
    }
    let host = host_id();
    report(&*broker, &registry, &host).await;
    let mut stalled = Ok(());
    tokio::select! {
        _ = shutdown => tracing::info!("stopping: finishing messages in flight (up to {:?})", options.grace),
        r = wait_idle(&*broker, &registry, options.until_idle) => {
            r?;
            tracing::info!("all bound queues are idle; exiting");
        }
        _ = follow_loop(watcher, &*broker, &registry, &host) => {}
        _ = report_loop(&*broker, &registry, &host) => {}
        _ = redrive::run(broker.clone(), registry.clone(), clock.clone()) => {}
        _ = ticker::run(broker.clone(), registry.clone(), clock) => {}
        _ = observers.pauses.follow(&*broker) => {}
        r = watch_stalls(&broker, &registry, &options) => stalled = r,
    }
    stop(&*broker, &registry, &host, &options).await;
    if let Some(a) = admin {
        a.stop().await;
    }
    if let Some(exporter) = observers.exporter {
        // Sending the last spans blocks.
        let _ = tokio::task::spawn_blocking(move || exporter.shutdown()).await;
    }
    stalled
}

/// The stall watchdog, with the stalled queues shown in the metrics; never
/// ends when it is off. Ends with an error on a stall with `exit_on_stall`.
async fn watch_stalls(
    broker: &Arc<dyn Broker>,
    registry: &Arc<Registry>,
    options: &RunOptions,
) -> Result<()> {
    let Some(stall_after) = options.stall_after else {
        return std::future::pending().await;
    };
    let settings = watchdog::WatchSettings {
        stall_after,
        exit_on_stall: options.exit_on_stall,
        broker_timeout: options.broker_timeout.unwrap_or(DEFAULT_BROKER_TIMEOUT),
    };
    let metrics = registry.observers().metrics.clone();
    let shown = move |stalled: &std::collections::BTreeMap<String, String>| {
        if let Some(m) = &metrics {
            m.set_stalled(stalled);
        }
    };
    watchdog::run(broker.clone(), registry.clone(), settings, shown).await
}

/// The loader of handler files: a new engine, the compiled cache.
fn loader(options: &RunOptions) -> Result<Loader> {
    let runtime = match options.max_instances {
        Some(n) => Runtime::with_max_instances(n)?,
        None => Runtime::new()?,
    };
    let cache = match &options.cache {
        Some(files) => CompileCache::on_disk(&runtime, files, &options.handlers)?,
        None => CompileCache::in_memory(&runtime),
    };
    let limits = LoadLimits {
        max_message_size: options.max_message_size,
        max_component_size: options.max_component_size,
    };
    Ok(Loader::new(runtime, cache, limits))
}

/// Take the paused queues from the broker before any worker starts, so
/// that workers of a paused queue start paused.
async fn read_pauses(broker: &dyn Broker, board: &PauseBoard) {
    match broker.paused().await {
        Ok(paused) => board.set(paused),
        Err(e) => {
            tracing::warn!(error = %chain(&e), "cannot read which queues are paused; taking none for paused until the broker answers")
        }
    }
}

/// What the workers report to: metrics when the admin endpoint serves them,
/// the span exporter when there is a collector, and the pause board.
fn observers(metrics: bool, options: &RunOptions) -> Result<Observers> {
    let exporter = (options.otlp_endpoint.as_deref())
        .map(Exporter::new)
        .transpose()?;
    if let Some(e) = &exporter {
        tracing::info!(endpoint = e.endpoint(), "exporting attempt spans over OTLP");
    }
    Ok(Observers {
        metrics: metrics.then(Metrics::new),
        exporter,
        pauses: Arc::new(PauseBoard::default()),
        broker_timeout: options.broker_timeout,
        stalls: Arc::default(),
    })
}

/// How long requests to the admin endpoint may finish when the host stops.
const ADMIN_STOP: Duration = Duration::from_secs(2);

/// The admin endpoint, serving in a task of its own until stopped.
struct AdminTask {
    admin: Arc<Admin>,
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<Result<()>>,
}

impl AdminTask {
    fn spawn(
        listener: tokio::net::TcpListener,
        broker: &Arc<dyn Broker>,
        registry: &Arc<Registry>,
        options: &AdminOptions,
    ) -> Self {
        let metrics =
            (registry.observers().metrics.clone()).expect("metrics are on with the admin endpoint");
        let admin = Admin::new(
            broker.clone(),
            registry.clone(),
            metrics,
            options.token.clone(),
            options.hosts.clone(),
        );
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(admin::serve(listener, admin.clone(), async {
            let _ = stopped.await;
        }));
        AdminTask { admin, stop, task }
    }

    /// Stop serving; requests under way finish first.
    async fn stop(self) {
        let _ = self.stop.send(());
        match tokio::time::timeout(ADMIN_STOP, self.task).await {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(e))) => {
                tracing::warn!(error = %crate::error::one_line(&e), "the admin endpoint failed")
            }
            Ok(Err(e)) => tracing::warn!("the admin endpoint panicked: {e}"),
            Err(_) => tracing::debug!(
                "the admin endpoint's connections did not close within {ADMIN_STOP:?}; leaving them"
            ),
        }
    }
}

/// Bind every sidecar's topics, then load every handler in the directory.
async fn start(broker: &dyn Broker, registry: &Registry) -> Result<()> {
    let names = loader::scan(registry.dir())?;
    bind::bind_sidecars(broker, registry.dir(), &names).await;
    for name in &names {
        registry.apply(name).await;
    }
    if registry.workers().await.is_empty() {
        tracing::warn!(
            dir = %registry.dir().display(),
            "no handlers loaded; messages wait in their queues until a handler for them is deployed"
        );
    }
    Ok(())
}

/// Stop the workers, pass on the last held publishes and withdraw this
/// host's status report, each broker call bounded by `broker_timeout`: a
/// host stopping because its broker hangs must still stop.
async fn stop(broker: &dyn Broker, registry: &Registry, host: &str, options: &RunOptions) {
    let bound = options.broker_timeout.unwrap_or(DEFAULT_BROKER_TIMEOUT);
    registry.stop_all(options.grace).await;
    // Publishes committed with the last acks may still wait in an outbox;
    // left there, they would wait for the relay of another running host.
    match tokio::time::timeout(bound, broker.flush()).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => {
            tracing::warn!(error = %chain(&e), "could not pass on the last held publishes; the relay of any running host, or the next to start, will")
        }
        Err(_) => tracing::warn!(
            "the broker did not take the last held publishes within {bound:?}; the relay of any running host, or the next to start, will"
        ),
    }
    let cleared = tokio::time::timeout(bound, broker.put_handler_statuses(host, Vec::new())).await;
    if !matches!(cleared, Ok(Ok(()))) {
        tracing::debug!("could not clear this host's handler status; it goes stale on its own");
    }
}

/// Every [`STATUS_EVERY`]: bind the serving handlers' topics again (so that
/// bindings lost with a broker's data, or not written while it was away,
/// come back) and report the handlers' statuses. Never ends.
async fn report_loop(broker: &dyn Broker, registry: &Registry, host: &str) {
    loop {
        tokio::time::sleep(STATUS_EVERY).await;
        bind::rebind_all(broker, &registry.serving().await).await;
        report(broker, registry, host).await;
    }
}

/// Apply each change the watcher reports, then report the statuses. Never
/// ends; without a watcher it waits forever.
async fn follow_loop(
    watcher: Option<DirWatcher>,
    broker: &dyn Broker,
    registry: &Registry,
    host: &str,
) {
    let Some(mut watcher) = watcher else {
        return std::future::pending().await;
    };
    loop {
        let mut names = watcher.changed().await;
        if names.iter().any(|n| n == RESCAN) {
            // Whatever is in the directory now, and whatever was loaded or
            // refused before (it may be gone).
            names = loader::scan(registry.dir()).unwrap_or_default();
            names.extend(registry.names().await);
            names.sort();
            names.dedup();
        }
        for name in names {
            registry.apply(&name).await;
        }
        report(broker, registry, host).await;
    }
}

/// This process, as `stats` names it: host name and process id.
fn host_id() -> String {
    format!("{}-{}", crate::message::hostname(), std::process::id())
}

/// Tell the broker what this host serves and refused, for `sluice stats`.
async fn report(broker: &dyn Broker, registry: &Registry, host: &str) {
    let statuses = registry.statuses(host, crate::message::now_ms()).await;
    if let Err(e) = broker.put_handler_statuses(host, statuses).await {
        tracing::warn!(error = %chain(&e), "could not report handler status to the broker");
    }
}

/// Resolves when every served queue is idle twice in a row; never, unless
/// `enabled`.
async fn wait_idle(broker: &dyn Broker, registry: &Registry, enabled: bool) -> Result<()> {
    if !enabled {
        return std::future::pending().await;
    }
    let mut idle_rounds = 0;
    loop {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let mut idle = true;
        for (queue, stats) in registry.workers().await {
            if stats.in_flight.load(Ordering::Relaxed) > 0
                || broker.queue_stats(&queue).await?.pending() > 0
            {
                idle = false;
                break;
            }
        }
        idle_rounds = if idle { idle_rounds + 1 } else { 0 };
        if idle_rounds >= 2 {
            return Ok(());
        }
    }
}
