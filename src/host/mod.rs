//! What a handler's store holds, and the host side of each imported
//! interface: one file per interface.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use wasmtime::component::ResourceTable;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

use crate::broker::{KvStore, TopicStore};
use crate::config::Capabilities;
use crate::message::NewMessage;
use crate::runtime::limits::MemoryLimiter;

mod config;
mod http;
mod kv;
mod log;
mod publish;
mod stdio;

/// Most publishes one message may hold before its outcome.
pub const MAX_HELD_PUBLISHES: usize = 1000;

pub use kv::{MAX_KV_KEY, MAX_KV_VALUE};

/// Facts about a handler that every one of its stores shares.
pub struct HandlerContext {
    pub name: String,
    /// Content hash of the component, short form.
    pub version: String,
    pub config: BTreeMap<String, String>,
    pub max_message_size: u64,
    /// What the sidecar grants.
    pub capabilities: Capabilities,
    /// Where the key-value store lives; set only when `capabilities.kv`
    /// grants it and the host has a broker.
    pub kv: Option<Arc<dyn KvStore>>,
    /// Where topic bindings are looked up for `publish-to-topic`.
    pub topics: Option<Arc<dyn TopicStore>>,
}

/// The data of one store: one instance of one handler.
pub struct HostState {
    wasi: WasiCtx,
    table: ResourceTable,
    pub(crate) limiter: MemoryLimiter,
    pub(crate) handler: Arc<HandlerContext>,
    /// The message being handled, for log lines.
    pub(crate) message_id: String,
    /// Publishes held until the outcome.
    pub(crate) held: Vec<NewMessage>,
    /// When the current call must have finished.
    pub(crate) deadline: Instant,
    http: wasmtime_wasi_http::WasiHttpCtx,
    http_hooks: http::Hooks,
}

impl HostState {
    pub fn new(handler: Arc<HandlerContext>, memory_cap: u64) -> Self {
        // Nothing is granted: no preopened directories, no environment, no
        // arguments, no sockets. Clocks and randomness are allowed.
        let wasi = WasiCtx::builder()
            .stdout(stdio::LogStream::new(&handler.name, stdio::Stream::Stdout))
            .stderr(stdio::LogStream::new(&handler.name, stdio::Stream::Stderr))
            .allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false)
            .build();
        let http_hooks = http::Hooks::new(handler.clone());
        HostState {
            wasi,
            table: ResourceTable::new(),
            limiter: MemoryLimiter::new(memory_cap),
            handler,
            message_id: String::new(),
            held: Vec::new(),
            deadline: Instant::now(),
            http: wasmtime_wasi_http::WasiHttpCtx::new(),
            http_hooks,
        }
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

impl crate::runtime::bindings::sluice::handler::types::Host for HostState {}
