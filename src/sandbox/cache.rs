//! Compiled components, cached in memory and on disk by content hash and
//! engine configuration, so that a restart, a reload of a file seen before
//! or a sidecar change skips compilation.
//!
//! A disk entry is native code that the host runs, so the cache must not
//! take anyone else's word for what an entry holds:
//!
//! * The directory belongs to the host: it is created `0700`, and one that
//!   another user owns or that others can write to is refused. It is never
//!   the handlers directory, which is where deployers write.
//! * Each entry carries an HMAC-SHA256 tag, keyed with a per-host secret
//!   kept outside the cache (created on first use, `0600`), over the content
//!   hash of the component it was compiled from, the engine's configuration
//!   and the artifact. An entry copied from another component, edited, or
//!   written by anyone without the key fails the check before wasmtime sees
//!   a byte of it (deserializing trusts its input); it is deleted, logged at
//!   warn and compiled again.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::io::Write as _;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use anyhow::{Context as _, bail};
use hmac::{KeyInit, Mac};
use sha2::Sha256;
use wasmtime::component::Component;

use crate::sandbox::check::{self, CheckError};
use crate::sandbox::runtime::Runtime;

type HmacSha256 = hmac::Hmac<Sha256>;

/// What an entry starts with: its format, then the 32-byte tag.
const MAGIC: &[u8; 8] = b"sluice\x01\x00";
const TAG_LEN: usize = 32;
/// Bytes of a cache key.
const KEY_LEN: usize = 32;

/// Where a component came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// Already compiled in this process.
    Memory,
    /// Read back from the disk cache.
    Disk,
    /// Compiled now (and written to the disk cache, if there is one).
    Compiled,
    /// The disk entry failed its check; it was deleted and the component
    /// compiled anew.
    Rebuilt(String),
}

/// Where the disk cache lives and the secret its entries are keyed with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CacheFiles {
    /// The directory of entries.
    pub dir: PathBuf,
    /// The file that holds the per-host secret; outside `dir`.
    pub key: PathBuf,
}

impl CacheFiles {
    /// The default place: `$XDG_CACHE_HOME/sluice` (else `~/.cache/sluice`)
    /// with the key in `$XDG_CONFIG_HOME/sluice/cache.key` (else
    /// `~/.config/sluice/cache.key`). `None` without a home directory.
    pub fn default_for_user() -> Option<CacheFiles> {
        let base = |xdg: &str, fallback: &str| {
            std::env::var_os(xdg)
                .map(PathBuf::from)
                .filter(|p| p.is_absolute())
                .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(fallback)))
        };
        Some(CacheFiles {
            dir: base("XDG_CACHE_HOME", ".cache")?.join("sluice"),
            key: base("XDG_CONFIG_HOME", ".config")?.join("sluice/cache.key"),
        })
    }
}

/// Compiled components by content hash: in memory for this process, and on
/// disk when the host has a cache directory.
pub struct CompileCache {
    disk: Option<Disk>,
    /// Identifies the engine's configuration and wasmtime's version.
    engine_key: String,
    memory: Mutex<HashMap<String, Component>>,
}

struct Disk {
    dir: PathBuf,
    key: [u8; KEY_LEN],
}

impl CompileCache {
    /// A cache in memory only.
    pub fn in_memory(runtime: &Runtime) -> Self {
        CompileCache {
            disk: None,
            engine_key: engine_key(runtime),
            memory: Mutex::new(HashMap::new()),
        }
    }

    /// A cache in `files.dir`, made `0700` if missing, with entries keyed by
    /// the secret in `files.key`, made on first use. Refuses a directory or
    /// key file that another user owns or that others may write to (or, for
    /// the key, read), and a directory inside `handlers`.
    pub fn on_disk(runtime: &Runtime, files: &CacheFiles, handlers: &Path) -> anyhow::Result<Self> {
        if let Ok(handlers) = handlers.canonicalize()
            && resolve(&files.dir).starts_with(&handlers)
        {
            bail!(
                "cache_dir {} is inside the handlers directory {}, where deployers write: the cache holds native code the host runs, so keep it in a directory only the host can write (set cache_dir in sluice.toml, or leave it out for ~/.cache/sluice)",
                files.dir.display(),
                handlers.display()
            );
        }
        let dir = prepare_dir(&files.dir, "cache_dir")?;
        let key = load_key(&files.key)?;
        Ok(CompileCache {
            disk: Some(Disk { dir, key }),
            engine_key: engine_key(runtime),
            memory: Mutex::new(HashMap::new()),
        })
    }

    /// The disk cache's directory, if there is one.
    #[cfg(any(test, feature = "testkit"))]
    pub fn dir(&self) -> Option<&Path> {
        self.disk.as_ref().map(|d| d.dir.as_path())
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
        let mut failed = None;
        if let Some(disk) = &self.disk {
            let path = self.entry_path(disk, hash);
            match disk.read(runtime, &path, hash, &self.engine_key) {
                Ok(Some(component)) => {
                    self.remember(hash, &component);
                    return Ok((component, Source::Disk));
                }
                Ok(None) => {}
                Err(reason) => {
                    tracing::warn!(entry = %path.display(), "compiled-cache entry deleted and compiled again: {reason}");
                    let _ = std::fs::remove_file(&path);
                    failed = Some(reason);
                }
            }
        }
        let component = check::compile(runtime, bytes)?;
        if let Some(disk) = &self.disk {
            let path = self.entry_path(disk, hash);
            if let Err(e) = disk.write(&component, &path, hash, &self.engine_key) {
                tracing::warn!(entry = %path.display(), "cannot write the compiled cache: {e}");
            }
        }
        self.remember(hash, &component);
        Ok((component, failed.map_or(Source::Compiled, Source::Rebuilt)))
    }

    /// The disk entry for a content hash, if there is a disk cache.
    #[cfg(any(test, feature = "testkit"))]
    pub fn entry_for(&self, hash: &str) -> Option<PathBuf> {
        self.disk.as_ref().map(|d| self.entry_path(d, hash))
    }

    fn entry_path(&self, disk: &Disk, hash: &str) -> PathBuf {
        disk.dir.join(format!("{hash}-{}.cwasm", self.engine_key))
    }

    fn remember(&self, hash: &str, component: &Component) {
        self.memory
            .lock()
            .expect("cache lock")
            .insert(hash.to_string(), component.clone());
    }
}

impl Disk {
    /// The tag of an entry: what it was compiled from, for which engine,
    /// and the artifact itself.
    fn tag(&self, hash: &str, engine_key: &str, artifact: &[u8]) -> HmacSha256 {
        let mut mac = HmacSha256::new_from_slice(&self.key).expect("HMAC takes any key length");
        mac.update(MAGIC);
        mac.update(hash.as_bytes());
        mac.update(b"\0");
        mac.update(engine_key.as_bytes());
        mac.update(b"\0");
        mac.update(artifact);
        mac
    }

    /// `Ok(None)` when there is no entry; `Err` when there is one that
    /// fails its check (or cannot be read).
    fn read(
        &self,
        runtime: &Runtime,
        path: &Path,
        hash: &str,
        engine_key: &str,
    ) -> Result<Option<Component>, String> {
        let data = match std::fs::read(path) {
            Ok(d) => d,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(format!("cannot read it: {e}")),
        };
        let Some(rest) = data.strip_prefix(MAGIC.as_slice()) else {
            return Err("it is not a sluice cache entry of this version".into());
        };
        if rest.len() < TAG_LEN {
            return Err("it is shorter than its tag".into());
        }
        let (tag, artifact) = rest.split_at(TAG_LEN);
        if self
            .tag(hash, engine_key, artifact)
            .verify_slice(tag)
            .is_err()
        {
            return Err(
                "it failed its authentication check (damaged, copied from another component, or not written by this host)"
                    .into(),
            );
        }
        // SAFETY: the tag proves that this host wrote this artifact with
        // `Component::serialize` for this component and this engine
        // configuration, and wasmtime checks the configuration and version
        // it was made with.
        unsafe { Component::deserialize(runtime.engine(), artifact) }
            .map(Some)
            .map_err(|e| format!("wasmtime refused it: {e}"))
    }

    fn write(
        &self,
        component: &Component,
        path: &Path,
        hash: &str,
        engine_key: &str,
    ) -> std::io::Result<()> {
        let artifact = component.serialize().map_err(std::io::Error::other)?;
        let tag = self
            .tag(hash, engine_key, &artifact)
            .finalize()
            .into_bytes();
        // Write aside and rename, so a reader never sees half an entry.
        let tmp = path.with_extension(format!("tmp{}", std::process::id()));
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)?;
        file.write_all(MAGIC)?;
        file.write_all(&tag)?;
        file.write_all(&artifact)?;
        drop(file);
        std::fs::rename(tmp, path)
    }
}

fn engine_key(runtime: &Runtime) -> String {
    let mut hasher = std::hash::DefaultHasher::new();
    runtime
        .engine()
        .precompile_compatibility_hash()
        .hash(&mut hasher);
    format!("{:016x}", hasher.finish())
}

/// `path` made absolute through its nearest existing ancestor, with links
/// resolved there: where it is, or would be once made.
fn resolve(path: &Path) -> PathBuf {
    let mut rest = Vec::new();
    let mut at = path;
    loop {
        if let Ok(real) = at.canonicalize() {
            return rest.iter().rev().fold(real, |p, c| p.join(c));
        }
        match (at.file_name(), at.parent()) {
            (Some(name), Some(parent)) => {
                rest.push(name.to_os_string());
                at = if parent.as_os_str().is_empty() {
                    Path::new(".")
                } else {
                    parent
                };
            }
            _ => return path.to_path_buf(),
        }
    }
}

/// Make `dir` (`0700`) if it is missing and check that only this user can
/// write to it. Returns its canonical path. `what` names the setting.
fn prepare_dir(dir: &Path, what: &str) -> anyhow::Result<PathBuf> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .with_context(|| format!("cannot create the {what} {}", dir.display()))?;
    let meta = std::fs::metadata(dir)
        .with_context(|| format!("cannot read the {what} {}", dir.display()))?;
    check_owned(dir, &meta, 0o022, what)?;
    Ok(dir.canonicalize()?)
}

/// Refuse a file or directory that another user owns, or whose mode has
/// any bit of `forbidden` set.
fn check_owned(
    path: &Path,
    meta: &std::fs::Metadata,
    forbidden: u32,
    what: &str,
) -> anyhow::Result<()> {
    // SAFETY: geteuid cannot fail and touches no memory.
    let me = unsafe { libc::geteuid() };
    if meta.uid() != me {
        bail!(
            "the {what} {} belongs to user id {}, not to the user sluice runs as ({me}): the compiled cache holds native code the host runs, so it must be the host's own",
            path.display(),
            meta.uid()
        );
    }
    let mode = meta.mode() & 0o777;
    if mode & forbidden != 0 {
        bail!(
            "the {what} {} has mode {mode:03o}, open to other users: the compiled cache holds native code the host runs; run `chmod {:03o} {}` or choose another {what}",
            path.display(),
            mode & !forbidden,
            path.display()
        );
    }
    Ok(())
}

/// The secret in `path`, made (with its directory, `0700`) on first use.
/// A new key is written aside and linked into place, so hosts starting at
/// once agree on one key and none reads half of it.
fn load_key(path: &Path) -> anyhow::Result<[u8; KEY_LEN]> {
    if let Some(parent) = path.parent() {
        prepare_dir(parent, "directory of the cache key")?;
    }
    if path.exists() {
        return read_key(path);
    }
    let key: [u8; KEY_LEN] = rand::random();
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .and_then(|mut file| {
            file.write_all(&key)?;
            file.sync_all()
        });
    let linked = written.and_then(|()| std::fs::hard_link(&tmp, path));
    let _ = std::fs::remove_file(&tmp);
    match linked {
        Ok(()) => Ok(key),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => read_key(path),
        Err(e) => Err(e).with_context(|| format!("cannot create the cache key {}", path.display())),
    }
}

fn read_key(path: &Path) -> anyhow::Result<[u8; KEY_LEN]> {
    let meta = std::fs::metadata(path)
        .with_context(|| format!("cannot read the cache key {}", path.display()))?;
    check_owned(path, &meta, 0o077, "cache key")?;
    let bytes = std::fs::read(path)
        .with_context(|| format!("cannot read the cache key {}", path.display()))?;
    bytes.as_slice().try_into().map_err(|_| {
        anyhow::anyhow!(
            "the cache key {} is {} bytes, not {KEY_LEN}: delete it (and the cache directory's entries) and sluice makes a new one",
            path.display(),
            bytes.len()
        )
    })
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    fn files(root: &Path) -> CacheFiles {
        CacheFiles {
            dir: root.join("cache"),
            key: root.join("config/cache.key"),
        }
    }

    #[test]
    fn the_directory_and_key_are_made_private_and_the_key_is_kept() {
        let root = tempfile::tempdir().unwrap();
        let files = files(root.path());
        let runtime = Runtime::new().unwrap();
        let handlers = root.path().join("handlers");
        CompileCache::on_disk(&runtime, &files, &handlers).unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&files.dir), 0o700);
        assert_eq!(mode(&files.key), 0o600);
        assert_eq!(mode(files.key.parent().unwrap()), 0o700);
        let key = std::fs::read(&files.key).unwrap();
        CompileCache::on_disk(&runtime, &files, &handlers).unwrap();
        assert_eq!(std::fs::read(&files.key).unwrap(), key, "made once");
    }

    #[test]
    fn a_directory_others_can_write_or_inside_the_handlers_is_refused() {
        let root = tempfile::tempdir().unwrap();
        let files = files(root.path());
        let runtime = Runtime::new().unwrap();
        let handlers = root.path().join("handlers");
        std::fs::create_dir(&files.dir).unwrap();
        std::fs::set_permissions(&files.dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        let err = CompileCache::on_disk(&runtime, &files, &handlers)
            .err()
            .unwrap()
            .to_string();
        assert!(
            err.contains("mode 777") && err.contains("chmod 755"),
            "{err}"
        );

        let inside = CacheFiles {
            dir: root.path().join("handlers/.sluice-cache"),
            key: files.key.clone(),
        };
        std::fs::create_dir(&handlers).unwrap();
        let err = CompileCache::on_disk(&runtime, &inside, &handlers)
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("inside the handlers directory"), "{err}");

        let key_files = CacheFiles {
            dir: root.path().join("other"),
            key: files.key.clone(),
        };
        CompileCache::on_disk(&runtime, &key_files, &handlers).unwrap();
        std::fs::set_permissions(&files.key, std::fs::Permissions::from_mode(0o644)).unwrap();
        let err = CompileCache::on_disk(&runtime, &key_files, &handlers)
            .err()
            .unwrap()
            .to_string();
        assert!(
            err.contains("cache key") && err.contains("mode 644"),
            "{err}"
        );
    }
}
