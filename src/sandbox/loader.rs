//! Loading a handler file: read it, hash it, read its sidecar, compile it
//! through the cache and check it against the `handler` world. What comes
//! out is a [`Handler`] ready to serve, or a [`LoadError`] that names the
//! file at fault and says what is wrong. Loading changes nothing that is
//! running: swapping versions is the registry's job.

use std::path::{Path, PathBuf};

use anyhow::Context;
use sha2::{Digest, Sha256};

use crate::base::files::{DEFAULT_MAX_COMPONENT_SIZE, FileError, read_regular};
use crate::config::HandlerSpec;
use crate::message::DEFAULT_MAX_MESSAGE_SIZE;
use crate::sandbox::cache::{CompileCache, Source};
use crate::sandbox::check::{self, CheckError};
use crate::sandbox::runtime::{Handler, Runtime};

/// Why a handler file could not be loaded. The text names the file; the
/// cause, where there is one, is the source (see [`crate::error::chain`]).
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The sidecar does not parse or says something invalid. The text names
    /// the sidecar and the field.
    #[error("{0}")]
    Sidecar(String),
    /// The `.wasm` file could not be read: missing, not a regular file, or
    /// over the size limit.
    #[error(transparent)]
    Read(#[from] FileError),
    /// The file is not a valid component of the `handler` world.
    #[error("{}", .path.display())]
    Component {
        path: PathBuf,
        #[source]
        source: CheckError,
    },
}

/// The sizes a loader holds handlers to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct LoadLimits {
    /// The largest message a handler may publish.
    pub(crate) max_message_size: u64,
    /// The largest component file read.
    pub(crate) max_component_size: u64,
}

impl Default for LoadLimits {
    fn default() -> Self {
        LoadLimits {
            max_message_size: DEFAULT_MAX_MESSAGE_SIZE,
            max_component_size: DEFAULT_MAX_COMPONENT_SIZE,
        }
    }
}

/// Loads handler files for one host: its runtime, its compiled cache and
/// its limits.
pub(crate) struct Loader {
    runtime: Runtime,
    cache: CompileCache,
    limits: LoadLimits,
}

impl Loader {
    /// A loader compiling for `runtime` through `cache`.
    pub(crate) fn new(runtime: Runtime, cache: CompileCache, limits: LoadLimits) -> Self {
        Loader {
            runtime,
            cache,
            limits,
        }
    }

    /// The runtime it compiles for.
    pub(crate) fn runtime(&self) -> &Runtime {
        &self.runtime
    }

    /// Load handler `name` from `path` and its sidecar beside it (`NAME.toml`).
    pub(crate) fn load(&self, name: &str, path: &Path) -> Result<Handler, LoadError> {
        load_with(&self.runtime, &self.cache, name, path, self.limits)
    }
}

/// Load handler `name` from `path` and its sidecar, compiling through
/// `cache`, with the default component size limit: what `Loader::load`
/// does, for tests that have no loader.
#[cfg(any(test, feature = "testkit"))]
pub fn load_file(
    runtime: &Runtime,
    cache: &CompileCache,
    name: &str,
    path: &Path,
    max_message_size: u64,
) -> Result<Handler, LoadError> {
    let limits = LoadLimits {
        max_message_size,
        ..LoadLimits::default()
    };
    load_with(runtime, cache, name, path, limits)
}

fn load_with(
    runtime: &Runtime,
    cache: &CompileCache,
    name: &str,
    path: &Path,
    limits: LoadLimits,
) -> Result<Handler, LoadError> {
    let sidecar = path.with_extension("toml");
    let spec = load_spec(name, &sidecar).map_err(|e| LoadError::Sidecar(format!("{e:#}")))?;
    for s in &spec.schedules {
        // A tick's message must be one the broker takes.
        (s.message(&spec.queue, 0).validate(limits.max_message_size)).map_err(|e| {
            LoadError::Sidecar(format!("{}: schedule {:?}: {e}", sidecar.display(), s.name))
        })?;
    }
    load_component(runtime, cache, spec, path, limits)
}

/// Load the component at `path` as a handler with `spec`, compiling
/// through `cache`: what [`Loader::load`] does once it has the spec.
pub(crate) fn load_component(
    runtime: &Runtime,
    cache: &CompileCache,
    spec: HandlerSpec,
    path: &Path,
    limits: LoadLimits,
) -> Result<Handler, LoadError> {
    let name = spec.name.clone();
    let bytes = read_regular(
        path,
        limits.max_component_size,
        "raise max_component_size in sluice.toml",
    )?;
    let component = |source| LoadError::Component {
        path: path.to_path_buf(),
        source,
    };
    // Hashed once: the full hash keys the cache, its prefix is the version.
    let full = full_hash(&bytes);
    let version = short_hash(&full);
    let (compiled, source) = cache.component(runtime, &bytes, &full).map_err(component)?;
    if source != Source::Memory {
        tracing::debug!(handler = %name, version = %version, ?source, "component ready");
    }
    let pre = check::prepare_component(runtime, &compiled).map_err(component)?;
    Ok(Handler::new(
        runtime,
        spec,
        version,
        pre,
        limits.max_message_size,
    ))
}

/// Handler `name`'s spec from its sidecar, or the defaults without one. A
/// sidecar that is there but cannot be read (a dangling link, a FIFO) is
/// an error, not a missing sidecar.
pub(crate) fn load_spec(name: &str, sidecar: &Path) -> anyhow::Result<HandlerSpec> {
    if sidecar.symlink_metadata().is_ok() {
        HandlerSpec::load(name, sidecar)
    } else {
        HandlerSpec::defaults(name)
    }
}

/// Names of every handler file (`NAME.wasm`) in `dir`, sorted.
pub(crate) fn scan(dir: &Path) -> anyhow::Result<Vec<String>> {
    let entries = std::fs::read_dir(dir).with_context(|| {
        format!(
            "cannot read handlers directory {}: create it and put NAME.wasm handler files in it",
            dir.display()
        )
    })?;
    let mut names: Vec<String> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter_map(|p| handler_name(&p).filter(|_| p.extension().is_some_and(|x| x == "wasm")))
        .collect();
    names.sort();
    Ok(names)
}

/// `NAME` for `DIR/NAME.wasm` or `DIR/NAME.toml`; `None` for anything else
/// (temporary files, hidden files, other extensions).
pub(crate) fn handler_name(path: &Path) -> Option<String> {
    let ext = path.extension()?.to_str()?;
    if ext != "wasm" && ext != "toml" {
        return None;
    }
    let stem = path.file_stem()?.to_str()?;
    (!stem.is_empty() && !stem.starts_with('.') && !stem.contains('.')).then(|| stem.to_string())
}

/// Short content hash used as a handler's version.
#[cfg(any(test, feature = "testkit"))]
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
