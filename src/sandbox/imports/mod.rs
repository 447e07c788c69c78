//! What a handler's store holds, and the host side of each imported
//! interface: one file per interface (`log`, `publish`, `config`, `kv`,
//! `lease`, `http`, and `stdio` for WASI's stdout and stderr), each just the
//! `impl` of that interface's `Host` trait from [`crate::sandbox::wit`]; `v1` forwards
//! the imports of the first package version to them.
//!
//! A store serves one call at a time. The runtime opens each call with
//! [`HostState::begin_call`] and, when the guest answers, takes what it
//! published with [`HostState::take_publishes`]; nothing else of the store
//! is the runtime's to touch.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use wasmtime::component::ResourceTable;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

use crate::broker::{KvStore, TopicStore};
use crate::config::Capabilities;
use crate::message::Delivery;
use crate::message::NewMessage;

pub(crate) mod budget;
pub(crate) mod capture;
mod config;
mod deadline;
mod http;
mod kv;
mod lease;
pub(crate) mod limits;
mod log;
mod publish;
mod stdio;
mod v1;

pub use deadline::Deadline;
pub(crate) use limits::{MemoryLimitHit, MemoryLimiter};

/// Most publishes one message may hold before its outcome (a batch call,
/// this many for each of its messages).
pub(crate) const MAX_HELD_PUBLISHES: usize = 1000;

/// Facts about a handler that every one of its stores shares.
pub struct HandlerContext {
    pub(crate) name: String,
    /// Content hash of the component, short form.
    pub(crate) version: String,
    pub(crate) config: BTreeMap<String, String>,
    pub(crate) max_message_size: u64,
    /// What the sidecar grants.
    pub(crate) capabilities: Capabilities,
    /// Where the key-value store lives; set only when `capabilities.kv`
    /// grants it and the host has a broker.
    pub(crate) kv: Option<Arc<dyn KvStore>>,
    /// Where topic bindings are looked up for `publish-to-topic`.
    pub(crate) topics: Option<Arc<dyn TopicStore>>,
    /// Bytes one call may hand the host (see [`budget`]).
    pub(crate) call_budget: u64,
    /// The rate of its log lines, and the count of those dropped.
    pub(crate) log: budget::LogLimiter,
    /// What a one-off call records (`sluice invoke`); `None` in a host.
    pub(crate) capture: Option<Arc<capture::Capture>>,
}

/// How many stores (handler instances) are alive, over every handler.
#[derive(Clone, Default)]
pub(crate) struct LiveCount(Arc<AtomicUsize>);

impl LiveCount {
    pub(crate) fn get(&self) -> usize {
        self.0.load(Ordering::Relaxed)
    }

    /// Count one more until the returned guard is dropped.
    pub(crate) fn enter(&self) -> LiveInstance {
        self.0.fetch_add(1, Ordering::Relaxed);
        LiveInstance(self.0.clone())
    }
}

/// One store's place in a [`LiveCount`], given back when it is dropped.
pub struct LiveInstance(Arc<AtomicUsize>);

impl Drop for LiveInstance {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The data of one store: one instance of one handler.
pub struct HostState {
    wasi: WasiCtx,
    table: ResourceTable,
    limiter: MemoryLimiter,
    handler: Arc<HandlerContext>,
    /// The message being handled, for log lines.
    message_id: String,
    /// Its queue, attempt and trace, for log lines.
    queue: String,
    attempt: u32,
    trace_id: Option<crate::base::trace::TraceParent>,
    /// Publishes held until the outcome, and how many the call may hold.
    held: Vec<NewMessage>,
    held_limit: usize,
    /// What is left of the current call's byte budget.
    budget_left: u64,
    /// When the current call must have finished.
    deadline: Deadline,
    http: wasmtime_wasi_http::WasiHttpCtx,
    http_hooks: http::Hooks,
    /// Counts this store among the live instances while it exists.
    _live: LiveInstance,
}

impl HostState {
    /// The state of a new store of `handler`, its memory capped at
    /// `memory_cap`, counted among the live instances by `live`.
    pub fn new(
        handler: Arc<HandlerContext>,
        memory_cap: u64,
        live: LiveInstance,
        deadline: Deadline,
    ) -> Self {
        // Nothing is granted: no preopened directories, no environment, no
        // arguments, no sockets. Clocks and randomness are allowed.
        let wasi = WasiCtx::builder()
            .stdout(stdio::LogStream::new(
                handler.clone(),
                stdio::Stream::Stdout,
            ))
            .stderr(stdio::LogStream::new(
                handler.clone(),
                stdio::Stream::Stderr,
            ))
            .allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false)
            .build();
        let http_hooks = http::Hooks::new(handler.clone());
        let (table, http) = http::limited(&handler);
        let budget_left = handler.call_budget;
        HostState {
            wasi,
            table,
            limiter: MemoryLimiter::new(memory_cap),
            handler,
            message_id: String::new(),
            queue: String::new(),
            attempt: 0,
            trace_id: None,
            held: Vec::new(),
            held_limit: MAX_HELD_PUBLISHES,
            budget_left,
            deadline,
            http,
            http_hooks,
            _live: live,
        }
    }

    /// Start a call for `deliveries` (one, or a batch) that must end by
    /// `deadline`: whatever an earlier call held is dropped. Log lines of a
    /// batch call name its first message and how many follow.
    pub fn begin_call(&mut self, deliveries: &[Delivery], deadline: &Deadline) {
        let Some(first) = deliveries.first() else {
            return;
        };
        self.message_id.clear();
        self.message_id.push_str(&first.id);
        if deliveries.len() > 1 {
            use std::fmt::Write as _;
            let _ = write!(self.message_id, " (+{})", deliveries.len() - 1);
        }
        self.queue.clear();
        self.queue.push_str(&first.queue);
        self.attempt = first.attempt;
        self.trace_id = crate::base::trace::TraceParent::from_headers(&first.headers);
        self.held.clear();
        self.held_limit = MAX_HELD_PUBLISHES * deliveries.len();
        self.budget_left = self.handler.call_budget;
        self.deadline = deadline.clone();
    }

    /// Take `bytes` from the call's budget for `what`; the error, when it
    /// is spent, is the guest's.
    fn charge(&mut self, bytes: u64, what: &str) -> Result<(), String> {
        match self.budget_left.checked_sub(bytes) {
            Some(left) => {
                self.budget_left = left;
                Ok(())
            }
            None => Err(format!(
                "handler {} cannot {what}: one call may hand the host at most {} (held publishes and log lines); raise `call_budget` under [limits] in {}.toml",
                self.handler.name,
                crate::units::format_size(self.handler.call_budget),
                self.handler.name
            )),
        }
    }

    /// When the current call must have finished.
    pub fn deadline(&self) -> &Deadline {
        &self.deadline
    }

    /// The publishes the current call holds, taken out of the store.
    pub fn take_publishes(&mut self) -> Vec<NewMessage> {
        std::mem::take(&mut self.held)
    }

    /// The store's memory limiter, for `Store::limiter`.
    pub fn limiter(&mut self) -> &mut MemoryLimiter {
        &mut self.limiter
    }

    /// Bytes of the instance's linear memory, all memories together.
    pub fn memory(&self) -> u64 {
        self.limiter.total()
    }

    /// The memory-limit refusal that ended a call, if one did.
    pub fn memory_limit_hit(&self) -> Option<&MemoryLimitHit> {
        self.limiter.hit()
    }
}

impl WasiView for HostState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl crate::sandbox::wit::sluice::handler::types::Host for HostState {}
