//! Loading the handlers directory: `NAME.wasm` serves queue `NAME`, or the
//! queue its sidecar `NAME.toml` names. A file that cannot be loaded is
//! reported and skipped; the others are served.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result};
use sha2::{Digest, Sha256};

use crate::config::HandlerSpec;
use crate::runtime::{Handler, MAX_HANDLER_MEMORY, Runtime};
use crate::units::format_size;

/// A handler file that was refused, and why.
#[derive(Debug, Clone)]
pub struct Refusal {
    pub path: PathBuf,
    pub reason: String,
}

/// The handlers found in a directory, by queue.
#[derive(Default)]
pub struct Loaded {
    pub handlers: BTreeMap<String, Arc<Handler>>,
    pub refused: Vec<Refusal>,
}

/// Short content hash used as a handler's version.
pub fn content_hash(bytes: &[u8]) -> String {
    let digest = Sha256::digest(bytes);
    digest[..8].iter().map(|b| format!("{b:02x}")).collect()
}

/// Load every `*.wasm` in `dir`.
pub fn load_dir(runtime: &Runtime, dir: &Path, max_message_size: u64) -> Result<Loaded> {
    let entries = std::fs::read_dir(dir).with_context(|| {
        format!(
            "cannot read handlers directory {}: create it and put NAME.wasm handler files in it",
            dir.display()
        )
    })?;
    let mut wasm_files: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "wasm") && p.is_file())
        .collect();
    wasm_files.sort();
    let mut loaded = Loaded::default();
    for path in wasm_files {
        match load_file(runtime, &path, max_message_size) {
            Ok(handler) => {
                let queue = handler.spec.queue.clone();
                if let Some(existing) = loaded.handlers.get(&queue) {
                    let reason = format!(
                        "queue {queue:?} is already served by {}; bind this handler to another queue in its sidecar",
                        existing.source.display()
                    );
                    tracing::error!(file = %path.display(), "handler refused: {reason}");
                    loaded.refused.push(Refusal { path, reason });
                    continue;
                }
                tracing::info!(
                    handler = %handler.spec.name, queue = %queue, version = %handler.version,
                    mode = ?handler.spec.instance_mode, "handler loaded from {}", path.display()
                );
                loaded.handlers.insert(queue, Arc::new(handler));
            }
            Err(reason) => {
                tracing::error!(file = %path.display(), "handler refused: {reason}");
                loaded.refused.push(Refusal { path, reason });
            }
        }
    }
    Ok(loaded)
}

/// Load one handler file and its sidecar. The error is one line, without
/// the file name (the caller adds it).
pub fn load_file(runtime: &Runtime, path: &Path, max_message_size: u64) -> Result<Handler, String> {
    let name = path
        .file_stem()
        .and_then(|s| s.to_str())
        .ok_or_else(|| "the file name is not valid UTF-8".to_string())?
        .to_string();
    let sidecar = path.with_extension("toml");
    let spec = if sidecar.exists() {
        HandlerSpec::load(&name, &sidecar)
    } else {
        HandlerSpec::defaults(&name)
    }
    .map_err(|e| format!("{e:#}"))?;
    if spec.memory > MAX_HANDLER_MEMORY {
        return Err(format!(
            "{}: `limits.memory` is {}, over the host's limit of {}",
            sidecar.display(),
            format_size(spec.memory),
            format_size(MAX_HANDLER_MEMORY)
        ));
    }
    let bytes = std::fs::read(path).map_err(|e| format!("{}: cannot read: {e}", path.display()))?;
    let pre = runtime
        .prepare(&bytes)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let version = content_hash(&bytes);
    Ok(Handler::new(
        runtime,
        spec,
        path.to_path_buf(),
        version,
        pre,
        max_message_size,
    ))
}
