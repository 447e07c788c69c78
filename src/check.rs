//! Validating a component against the `handler` world, with errors that say
//! what is wrong and what to do. Used by `sluice check` and by every load.

use wasmtime::component::Component;

use crate::host::HostState;
use crate::runtime::Runtime;
use crate::runtime::bindings::HandlerPre;

/// The world a handler must implement.
pub const WORLD: &str = "sluice:handler/handler@0.1.0";

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
    #[error(
        "it does not implement the {WORLD} world (export `handle: func(message) -> outcome`): {0}"
    )]
    Exports(String),
}

/// What `sluice check` prints about a valid component.
#[derive(Debug, serde::Serialize)]
pub struct Report {
    pub world: &'static str,
    pub size: u64,
    pub imports: Vec<String>,
    pub exports: Vec<String>,
}

/// Refuse what is plainly not a component, without compiling anything.
pub fn precheck(bytes: &[u8]) -> Result<(), CheckError> {
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

pub fn compile(runtime: &Runtime, bytes: &[u8]) -> Result<Component, CheckError> {
    precheck(bytes)?;
    runtime
        .compile(bytes)
        .map_err(|e| CheckError::Compile(one_line(&e)))
}

pub fn prepare_component(
    runtime: &Runtime,
    component: &Component,
) -> Result<HandlerPre<HostState>, CheckError> {
    let pre = runtime
        .linker()
        .instantiate_pre(component)
        .map_err(|e| CheckError::Imports(one_line(&e)))?;
    HandlerPre::new(pre).map_err(|e| CheckError::Exports(one_line(&e)))
}

/// Validate and describe a component.
pub fn check(runtime: &Runtime, bytes: &[u8]) -> Result<Report, CheckError> {
    let component = compile(runtime, bytes)?;
    prepare_component(runtime, &component)?;
    let ty = component.component_type();
    let engine = runtime.engine();
    Ok(Report {
        world: WORLD,
        size: bytes.len() as u64,
        imports: ty
            .imports(engine)
            .map(|(name, _)| name.to_string())
            .collect(),
        exports: ty
            .exports(engine)
            .map(|(name, _)| name.to_string())
            .collect(),
    })
}

/// An error chain on one line: "outer: inner: root".
pub fn one_line(err: &dyn std::fmt::Display) -> String {
    let text = format!("{err:#}");
    text.split('\n')
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}
