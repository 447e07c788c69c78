//! Validating a component against the `handler` world, with errors that say
//! what is wrong and what to do. Used by `sluice check` and by every load.

use wasmtime::component::Component;

use crate::error::one_line;
use crate::sandbox::runtime::{Pre, Runtime};

/// The worlds a handler may implement, in the words of the errors.
pub(crate) const WORLDS: &str = "sluice:handler/handler@0.2.0 (export `handle: func(message) -> outcome`), sluice:handler/batch-handler@0.2.0 (export `handle-batch: func(list<message>) -> list<outcome>`) or sluice:handler/handler@0.1.0";

/// Why a file is not a component sluice can serve. The text says what to do.
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    #[error("the file is empty")]
    Empty,
    #[error("not a WebAssembly file (it does not start with \\0asm)")]
    NotWasm,
    #[error(
        "this is a core WebAssembly module, not a component: build it for wasm32-wasip2, or wrap it with `wasm-tools component new`"
    )]
    CoreModule,
    #[error("not a valid component: {0}")]
    Compile(String),
    #[error("it imports something sluice does not provide: {0}")]
    Imports(String),
    #[error("it does not implement a sluice world, {WORLDS}: {0}")]
    Exports(String),
}

/// What `sluice check` prints about a valid component.
#[derive(Debug, serde::Serialize)]
pub(crate) struct Report {
    /// The world it implements, e.g. `sluice:handler/handler@0.2.0`.
    pub(crate) world: &'static str,
    pub(crate) size: u64,
    pub(crate) imports: Vec<String>,
    pub(crate) exports: Vec<String>,
    /// Imports that link but whose use the host refuses (unless the sidecar
    /// grants it), with why.
    pub(crate) refused: Vec<Refused>,
}

/// An import that links, but whose use the host refuses unless granted.
#[derive(Debug, serde::Serialize)]
pub(crate) struct Refused {
    pub(crate) import: String,
    pub(crate) reason: &'static str,
}

/// Why the host refuses what an import offers, if it does. Handlers get
/// WASI with nothing granted: these interfaces link, and every call that
/// would reach outside the sandbox fails with an error the guest sees,
/// unless the handler's sidecar grants it (outgoing HTTP to listed hosts).
pub(crate) fn refusal(import: &str) -> Option<&'static str> {
    let interface = import.split('@').next().unwrap_or(import);
    match interface {
        i if i.starts_with("wasi:filesystem/") => {
            Some("no directories are granted: every file access fails")
        }
        i if i.starts_with("wasi:sockets/") => {
            Some("no network access is granted: every socket call fails")
        }
        "wasi:http/outgoing-handler" => Some(
            "outgoing HTTP is refused unless granted: list the hosts in `[capabilities] http_allow` of the handler's sidecar",
        ),
        "wasi:cli/environment" => {
            Some("no environment variables or arguments are granted: they read as empty")
        }
        "wasi:cli/stdin" => Some("stdin is empty"),
        "sluice:handler/kv" => Some(
            "the key-value store is granted only by `kv = true` under [capabilities] in the handler's sidecar; without it every call fails",
        ),
        _ => None,
    }
}

/// Refuse what is plainly not a component, without compiling anything.
pub(crate) fn precheck(bytes: &[u8]) -> Result<(), CheckError> {
    if bytes.is_empty() {
        return Err(CheckError::Empty);
    }
    if bytes.len() < 8 || &bytes[..4] != b"\0asm" {
        return Err(CheckError::NotWasm);
    }
    if bytes[4..8] == [1, 0, 0, 0] {
        return Err(CheckError::CoreModule);
    }
    Ok(())
}

/// Compile `bytes` as a component, after the cheap checks that it is one
/// (not a core module, not something else).
pub fn compile(runtime: &Runtime, bytes: &[u8]) -> Result<Component, CheckError> {
    precheck(bytes)?;
    runtime
        .compile(bytes)
        .map_err(|e| CheckError::Compile(one_line(&e)))
}

pub(crate) fn prepare_component(
    runtime: &Runtime,
    component: &Component,
) -> Result<Pre, CheckError> {
    let pre = runtime
        .linker()
        .instantiate_pre(component)
        .map_err(|e| CheckError::Imports(one_line(&e)))?;
    Pre::new(component, pre).map_err(|e| CheckError::Exports(one_line(&e)))
}

/// Validate and describe a component.
pub(crate) fn check(runtime: &Runtime, bytes: &[u8]) -> Result<Report, CheckError> {
    let component = compile(runtime, bytes)?;
    let world = prepare_component(runtime, &component)?.world();
    let ty = component.component_type();
    let engine = runtime.engine();
    let imports: Vec<String> = ty
        .imports(engine)
        .map(|(name, _)| name.to_string())
        .collect();
    let refused = imports
        .iter()
        .filter_map(|i| {
            refusal(i).map(|reason| Refused {
                import: i.clone(),
                reason,
            })
        })
        .collect();
    Ok(Report {
        world: world.name(),
        size: bytes.len() as u64,
        imports,
        exports: ty
            .exports(engine)
            .map(|(name, _)| name.to_string())
            .collect(),
        refused,
    })
}
