//! Watching the handlers directory: which handler names changed, once their
//! files are complete.
//!
//! A file is taken up when a writer closes it (`cp` over the file, an
//! editor's save), when it is renamed into place (the safe way to deploy:
//! write `NAME.wasm.tmp`, then `mv` it to `NAME.wasm`), or when it is removed.
//! Writes alone only postpone: a file still being written is never loaded
//! half-written. Events are debounced, so a burst of them is one reload.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use notify::event::{AccessKind, AccessMode, EventKind, ModifyKind};
use notify::{RecommendedWatcher, RecursiveMode, Watcher};
use tokio::sync::mpsc;

use crate::sandbox::loader::handler_name;

/// Quiet time after the last event before a name is reported.
pub(crate) const DEBOUNCE: Duration = Duration::from_millis(50);
/// A name whose file was written but never closed is reported after this.
const WRITE_WITHOUT_CLOSE: Duration = Duration::from_secs(5);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Seen {
    /// The file is complete: closed after writing, renamed or removed.
    Settled,
    /// The file is being written.
    Writing,
}

/// Everything under the directory changed (events were lost): rescan.
pub(crate) const RESCAN: &str = "*";

/// Watches the handlers directory and reports which handler names changed.
pub(crate) struct DirWatcher {
    _watcher: RecommendedWatcher,
    events: mpsc::UnboundedReceiver<(String, Seen)>,
}

impl DirWatcher {
    pub(crate) fn start(dir: &Path) -> Result<Self> {
        let (tx, events) = mpsc::unbounded_channel();
        let mut watcher = notify::recommended_watcher(move |res: notify::Result<notify::Event>| {
            let event = match res {
                Ok(e) => e,
                Err(e) => {
                    tracing::warn!(error = %e, "watching the handlers directory failed; rescanning it");
                    let _ = tx.send((RESCAN.to_string(), Seen::Settled));
                    return;
                }
            };
            if event.need_rescan() {
                let _ = tx.send((RESCAN.to_string(), Seen::Settled));
                return;
            }
            let seen = match event.kind {
                EventKind::Access(AccessKind::Close(AccessMode::Write))
                | EventKind::Modify(ModifyKind::Name(_))
                | EventKind::Remove(_) => Seen::Settled,
                EventKind::Create(_) | EventKind::Modify(ModifyKind::Data(_) | ModifyKind::Any) => Seen::Writing,
                _ => return,
            };
            for path in &event.paths {
                if let Some(name) = handler_name(path) {
                    // Nothing is written into a link, a directory or a FIFO:
                    // it is complete (and refused) as soon as it is made.
                    let seen = match path.symlink_metadata() {
                        Ok(meta) if seen == Seen::Writing && !meta.is_file() => Seen::Settled,
                        _ => seen,
                    };
                    let _ = tx.send((name, seen));
                }
            }
        })
        .context("cannot watch the handlers directory")?;
        watcher
            .watch(dir, RecursiveMode::NonRecursive)
            .with_context(|| format!("cannot watch the handlers directory {}", dir.display()))?;
        Ok(DirWatcher {
            _watcher: watcher,
            events,
        })
    }

    /// The next set of changed names (or [`RESCAN`]), once quiet.
    pub(crate) async fn changed(&mut self) -> Vec<String> {
        // name -> (what was seen last, when first written without a close)
        let mut pending: BTreeMap<String, (Seen, Instant)> = BTreeMap::new();
        loop {
            let ready = pending.values().any(|(seen, since)| {
                *seen == Seen::Settled || since.elapsed() >= WRITE_WITHOUT_CLOSE
            });
            let wait = if pending.is_empty() {
                None
            } else if ready {
                Some(DEBOUNCE)
            } else {
                Some(Duration::from_millis(250))
            };
            let next = match wait {
                None => self.events.recv().await,
                Some(d) => match tokio::time::timeout(d, self.events.recv()).await {
                    Ok(ev) => ev,
                    Err(_) if ready => break,
                    Err(_) => continue,
                },
            };
            let Some((name, seen)) = next else { break };
            let since = pending.get(&name).map_or_else(Instant::now, |(_, t)| *t);
            pending.insert(name, (seen, since));
        }
        let (done, _): (Vec<_>, Vec<_>) = pending.into_iter().partition(|(_, (seen, since))| {
            *seen == Seen::Settled || since.elapsed() >= WRITE_WITHOUT_CLOSE
        });
        // Names still being written come back with their next event.
        done.into_iter().map(|(name, _)| name).collect()
    }
}
