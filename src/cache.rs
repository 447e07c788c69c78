//! Compiled components, cached in memory and on disk by content hash and
//! engine configuration, so that a restart, a reload of a file seen before
//! or a sidecar change skips compilation.
//!
//! A disk entry is the SHA-256 of the artifact followed by the artifact.
//! The checksum is verified before wasmtime sees the bytes: deserializing
//! trusts its input, so a damaged entry must never reach it. A damaged
//! entry is deleted and rebuilt.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use sha2::{Digest, Sha256};
use wasmtime::component::Component;

use crate::check::{self, CheckError};
use crate::runtime::Runtime;

/// Where a component came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// Already compiled in this process.
    Memory,
    /// Read back from the disk cache.
    Disk,
    /// Compiled now (and written to the disk cache, if there is one).
    Compiled,
    /// The disk entry was damaged; it was deleted and the component compiled anew.
    Rebuilt(String),
}

/// Compiled components by content hash: in memory for this process, and on
/// disk when a directory is given.
pub struct CompileCache {
    dir: Option<PathBuf>,
    /// Identifies the engine's configuration and wasmtime's version.
    engine_key: String,
    memory: Mutex<HashMap<String, Component>>,
}

impl CompileCache {
    /// A cache in `dir`, or in memory only when `None`.
    pub fn new(runtime: &Runtime, dir: Option<PathBuf>) -> Self {
        let mut hasher = std::hash::DefaultHasher::new();
        runtime
            .engine()
            .precompile_compatibility_hash()
            .hash(&mut hasher);
        let engine_key = format!("{:016x}", hasher.finish());
        CompileCache {
            dir,
            engine_key,
            memory: Mutex::new(HashMap::new()),
        }
    }

    pub fn dir(&self) -> Option<&Path> {
        self.dir.as_deref()
    }

    /// The component for `bytes`, whose content hash is `hash`.
    pub fn component(
        &self,
        runtime: &Runtime,
        bytes: &[u8],
        hash: &str,
    ) -> Result<(Component, Source), CheckError> {
        if let Some(c) = self.memory.lock().expect("cache lock").get(hash) {
            return Ok((c.clone(), Source::Memory));
        }
        // Refuse what is plainly not a component before touching the disk.
        check::precheck(bytes)?;
        let mut damaged = None;
        if let Some(path) = self.entry_path(hash) {
            match read_entry(runtime, &path) {
                Ok(Some(component)) => {
                    self.remember(hash, &component);
                    return Ok((component, Source::Disk));
                }
                Ok(None) => {}
                Err(reason) => {
                    tracing::warn!(entry = %path.display(), "damaged compiled-cache entry deleted: {reason}");
                    let _ = std::fs::remove_file(&path);
                    damaged = Some(reason);
                }
            }
        }
        let component = check::compile(runtime, bytes)?;
        if let Some(path) = self.entry_path(hash)
            && let Err(e) = write_entry(&component, &path)
        {
            tracing::warn!(entry = %path.display(), "cannot write the compiled cache: {e}");
        }
        self.remember(hash, &component);
        Ok((component, damaged.map_or(Source::Compiled, Source::Rebuilt)))
    }

    /// The disk entry for a content hash.
    pub fn entry_path(&self, hash: &str) -> Option<PathBuf> {
        self.dir
            .as_ref()
            .map(|d| d.join(format!("{hash}-{}.cwasm", self.engine_key)))
    }

    fn remember(&self, hash: &str, component: &Component) {
        self.memory
            .lock()
            .expect("cache lock")
            .insert(hash.to_string(), component.clone());
    }
}

/// `Ok(None)` when there is no entry; `Err` when there is a damaged one.
fn read_entry(runtime: &Runtime, path: &Path) -> Result<Option<Component>, String> {
    let data = match std::fs::read(path) {
        Ok(d) => d,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("cannot read it: {e}")),
    };
    if data.len() < 32 {
        return Err("shorter than its checksum".into());
    }
    let (sum, artifact) = data.split_at(32);
    if Sha256::digest(artifact).as_slice() != sum {
        return Err("checksum mismatch".into());
    }
    // SAFETY: the artifact is byte for byte what `Component::serialize`
    // wrote for this engine configuration (the checksum says so), and
    // wasmtime checks the configuration and version it was made with.
    unsafe { Component::deserialize(runtime.engine(), artifact) }
        .map(Some)
        .map_err(|e| format!("wasmtime refused it: {e}"))
}

fn write_entry(component: &Component, path: &Path) -> std::io::Result<()> {
    let artifact = component.serialize().map_err(std::io::Error::other)?;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let mut data = Sha256::digest(&artifact).to_vec();
    data.extend_from_slice(&artifact);
    // Write aside and rename, so a reader never sees half an entry.
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    std::fs::write(&tmp, data)?;
    std::fs::rename(tmp, path)
}
