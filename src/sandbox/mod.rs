//! The guest side: a handler component from its file to a call. The WIT
//! bindings, the host side of each interface a handler imports, the
//! wasmtime runtime that runs it under its limits, the check of a
//! component against the worlds, the compile cache and the loader.
//!
//! Each module depends only on those listed before it:
//! `wit`, `imports`, `runtime`, `check`, `cache`, `loader`.

pub(crate) mod cache;
pub(crate) mod check;
pub(crate) mod imports;
pub(crate) mod loader;
pub(crate) mod runtime;
pub(crate) mod wit;
