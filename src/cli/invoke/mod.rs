//! `sluice invoke HANDLER.wasm`: one call of a handler on messages given on
//! the command line, in the sandbox `sluice run` uses, without a broker.
//! It prints what the handler did (its outcome, publishes, log lines,
//! key-value writes and HTTP requests, the time and memory the call took)
//! and exits with a status that says how the call ended ([`exit_status`]),
//! so that a script or another language's test runner can assert on it.

mod input;
mod kv;
mod report;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use anyhow::Result;
use clap::Args;

use super::{BadInput, Context};
use crate::config::HandlerSpec;
use crate::error::chain;
use crate::message::{Delivery, new_id, now_ms};
use crate::sandbox::cache::CompileCache;
use crate::sandbox::imports::capture::Capture;
use crate::sandbox::loader::{self, LoadError, LoadLimits};
use crate::sandbox::runtime::{Deadline, Handler, Runtime};

pub(crate) use report::EXIT_STATUSES;

/// The arguments of `sluice invoke`.
#[derive(Debug, Args)]
pub(crate) struct InvokeArgs {
    /// The handler component (`NAME.wasm`).
    pub(crate) file: PathBuf,
    /// Its sidecar (default: `NAME.toml` beside the file, when there is one).
    #[arg(long, value_name = "FILE")]
    pub(crate) sidecar: Option<PathBuf>,
    /// The message's body: TEXT, or @FILE for a file's bytes. Repeat it to
    /// call a batch handler with several messages. Default: standard input.
    #[arg(long, value_name = "TEXT|@FILE")]
    pub(crate) payload: Vec<String>,
    /// A header of every message, NAME=VALUE; repeat for more.
    #[arg(long = "header", value_name = "NAME=VALUE")]
    pub(crate) headers: Vec<String>,
    /// The idempotency key of every message (default: its id).
    #[arg(long)]
    pub(crate) key: Option<String>,
    /// Which delivery this is: 1 for the first attempt.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) attempt: u32,
    /// The message id of every message (default: a new id each).
    #[arg(long)]
    pub(crate) id: Option<String>,
    /// Set a value of the sidecar's [config] for this call, KEY=VALUE; repeat for more.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub(crate) set: Vec<String>,
    /// The key-value store, as a JSON file: read before the call and
    /// written back after it when the call wrote to it (default: an empty
    /// store, kept nowhere).
    #[arg(long, value_name = "FILE")]
    pub(crate) kv: Option<PathBuf>,
    /// Refuse every outgoing HTTP request, even those the sidecar allows.
    #[arg(long, conflicts_with = "http_fixture")]
    pub(crate) no_network: bool,
    /// Answer the HTTP requests the sidecar allows from recorded responses
    /// (a JSON file); a request with none is refused.
    #[arg(long, value_name = "FILE")]
    pub(crate) http_fixture: Option<PathBuf>,
}

/// Run `sluice invoke`: the exit status says how the call ended.
pub(crate) async fn invoke(ctx: &Context, args: InvokeArgs) -> Result<ExitCode> {
    let name = handler_name(&args.file)?;
    let spec = spec(&name, &args)?;
    let bodies = input::payloads(&args.payload)?;
    let headers = input::pairs(&args.headers, "--header", "NAME=VALUE")?;
    let store = Arc::new(kv::RecordingKv::load(args.kv.as_deref(), &name)?);
    let network = input::network(args.no_network, args.http_fixture.as_deref())?;
    let handler = load(ctx, spec, &args.file)?;
    if bodies.len() > 1 && !handler.world().is_batch() {
        return Err(BadInput(format!(
            "{} is not a batch handler (it implements {}): give one --payload",
            args.file.display(),
            handler.world().name()
        ))
        .into());
    }
    let capture = Arc::new(Capture::new(network));
    let handler = handler.with_kv(store.clone()).with_capture(capture.clone());
    let deliveries = deliveries(&handler.spec, &args, bodies, &headers);
    let call = call(&handler, &deliveries).await;
    store.save(args.kv.as_deref())?;
    let report = report::Report::new(&args.file, &handler, &deliveries, call, &capture, &store);
    report.print(ctx.json)?;
    Ok(ExitCode::from(report.status()))
}

/// `NAME` of `NAME.wasm`: the handler's name, and its queue's by default.
fn handler_name(file: &Path) -> Result<String> {
    loader::handler_name(file)
        .filter(|_| file.extension().is_some_and(|x| x == "wasm"))
        .ok_or_else(|| {
            BadInput(format!(
                "{}: a handler file is named NAME.wasm, NAME of letters, digits, - or _",
                file.display()
            ))
            .into()
        })
}

/// The handler's spec: its sidecar's (`--sidecar`, else beside the file),
/// with the `--set` values over its `[config]`.
fn spec(name: &str, args: &InvokeArgs) -> Result<HandlerSpec> {
    let sidecar = match &args.sidecar {
        Some(path) if path.symlink_metadata().is_err() => {
            return Err(BadInput(format!("--sidecar {}: no such file", path.display())).into());
        }
        Some(path) => path.clone(),
        None => args.file.with_extension("toml"),
    };
    let mut spec = loader::load_spec(name, &sidecar).map_err(|e| BadInput(format!("{e:#}")))?;
    for (key, value) in input::pairs(&args.set, "--set", "KEY=VALUE")? {
        spec.config.insert(key, value);
    }
    Ok(spec)
}

/// The handler, compiled through the cache `sluice run` uses (or in memory
/// when there is none), checked against its world.
fn load(ctx: &Context, spec: HandlerSpec, file: &Path) -> Result<Handler> {
    let runtime = Runtime::new()?;
    let dir = file.parent().unwrap_or(Path::new("."));
    let cache = super::run::cache_files(ctx)
        .and_then(|files| match CompileCache::on_disk(&runtime, &files, dir) {
            Ok(cache) => Some(cache),
            Err(e) => {
                tracing::debug!("compiling in memory: {}", chain(&*e));
                None
            }
        })
        .unwrap_or_else(|| CompileCache::in_memory(&runtime));
    let limits = LoadLimits {
        max_message_size: ctx.config.max_message_size(),
        max_component_size: ctx.config.max_component_size(),
    };
    loader::load_component(&runtime, &cache, spec, file, limits).map_err(|e| match e {
        LoadError::Sidecar(_) | LoadError::Read(_) | LoadError::Component { .. } => {
            BadInput(chain(&e)).into()
        }
    })
}

/// The deliveries of the call: one per body, each with the options given.
fn deliveries(
    spec: &HandlerSpec,
    args: &InvokeArgs,
    bodies: Vec<Vec<u8>>,
    headers: &[(String, String)],
) -> Vec<Delivery> {
    let now = now_ms();
    bodies
        .into_iter()
        .map(|payload| {
            let id = args.id.clone().unwrap_or_else(new_id);
            Delivery {
                key: args.key.clone().unwrap_or_else(|| id.clone()),
                id,
                queue: spec.queue.clone(),
                payload,
                headers: headers.to_vec(),
                attempt: args.attempt,
                enqueued_at_us: now * 1000,
                last_error: None,
                receipt: String::new(),
                lease_until_ms: now + spec.timeout.as_millis() as u64,
                group: None,
                snoozes: 0,
            }
        })
        .collect()
}

/// How the call ended, and how long it took (making the instance included).
pub(crate) struct Call {
    pub(crate) result: Result<Vec<crate::policy::Outcome>, crate::sandbox::runtime::Failure>,
    pub(crate) took: std::time::Duration,
    pub(crate) memory: u64,
}

async fn call(handler: &Handler, deliveries: &[Delivery]) -> Call {
    let deadline = Deadline::new(handler.spec.timeout, handler.spec.max_extend);
    let started = Instant::now();
    if handler.world().is_batch() {
        let done = handler
            .invoke_batch(Default::default(), deliveries, &deadline)
            .await;
        return Call {
            took: started.elapsed(),
            memory: done.memory,
            result: done.result,
        };
    }
    let done = handler.invoke(&deliveries[0], &deadline).await;
    Call {
        took: started.elapsed(),
        memory: done.memory,
        result: done.result.map(|o| vec![o]),
    }
}
