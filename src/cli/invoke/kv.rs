//! The key-value store of one `sluice invoke`: kept in memory, loaded from
//! and saved to the `--kv` JSON file, recording each write the handler made.
//!
//! The file maps each key to `{"value": TEXT}` or, for bytes that are not
//! UTF-8, `{"base64": B64}`, with `"expires_at_ms"` (milliseconds since the
//! Unix epoch) for a key that expires. Keys that have expired are left out
//! when it is written back. It is written only when the call wrote to the
//! store, through a temporary file renamed over it.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

use anyhow::{Context as _, Result};
use async_trait::async_trait;
use base64::Engine as _;
use serde::{Deserialize, Serialize};

use super::BadInput;
use crate::broker::{KvStore, MemoryEntry, MemoryKv};

/// One key of the file.
#[derive(Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
struct FileEntry {
    #[serde(skip_serializing_if = "Option::is_none")]
    value: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    base64: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    expires_at_ms: Option<u64>,
}

/// One write the handler made, as it made it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Write {
    Set {
        key: String,
        value: Vec<u8>,
        ttl: Option<Duration>,
    },
    Delete {
        key: String,
        existed: bool,
    },
    Increment {
        key: String,
        delta: i64,
        value: i64,
    },
}

/// The store, and what was written to it.
pub(super) struct RecordingKv {
    scope: String,
    store: MemoryKv,
    writes: Mutex<Vec<Write>>,
}

impl RecordingKv {
    /// The store of handler `scope`, loaded from `file` when it is given
    /// and exists.
    pub(super) fn load(file: Option<&Path>, scope: &str) -> Result<Self> {
        let kv = RecordingKv {
            scope: scope.to_string(),
            store: MemoryKv::new(),
            writes: Mutex::new(Vec::new()),
        };
        let Some(path) = file.filter(|p| p.symlink_metadata().is_ok()) else {
            return Ok(kv);
        };
        let what = format!("--kv {}", path.display());
        let bytes = super::input::read(path, &what)?;
        let entries: BTreeMap<String, FileEntry> = serde_json::from_slice(&bytes).map_err(|e| {
            BadInput(format!(
                "{what}: {e}: give a JSON object of KEY: {{\"value\": TEXT}} or {{\"base64\": B64}}, each with \"expires_at_ms\" if it expires"
            ))
        })?;
        for (key, entry) in entries {
            let value = match (entry.value, entry.base64) {
                (Some(text), None) => text.into_bytes(),
                (None, Some(b64)) => base64::engine::general_purpose::STANDARD
                    .decode(b64.trim())
                    .map_err(|e| BadInput(format!("{what}: key {key:?}: base64: {e}")))?,
                _ => {
                    return Err(BadInput(format!(
                        "{what}: key {key:?}: give exactly one of \"value\" and \"base64\""
                    ))
                    .into());
                }
            };
            let expires_at_ms = entry.expires_at_ms;
            kv.store.insert(
                scope,
                &key,
                MemoryEntry {
                    value,
                    expires_at_ms,
                },
            );
        }
        Ok(kv)
    }

    /// The writes made so far, in order.
    pub(super) fn writes(&self) -> Vec<Write> {
        self.writes.lock().expect("kv writes lock").clone()
    }

    /// Write the store to `file` if the call wrote to it.
    pub(super) fn save(&self, file: Option<&Path>) -> Result<()> {
        let Some(path) = file else { return Ok(()) };
        if self.writes.lock().expect("kv writes lock").is_empty() {
            return Ok(());
        }
        let entries: BTreeMap<String, FileEntry> = self
            .store
            .entries(&self.scope)
            .into_iter()
            .map(|(key, e)| (key, file_entry(e)))
            .collect();
        let mut text = serde_json::to_string_pretty(&entries)?;
        text.push('\n');
        let tmp = path.with_extension("tmp-sluice-invoke");
        std::fs::write(&tmp, text)
            .and_then(|()| std::fs::rename(&tmp, path))
            .with_context(|| format!("cannot write the key-value store to {}", path.display()))
    }

    fn wrote(&self, write: Write) {
        self.writes.lock().expect("kv writes lock").push(write);
    }
}

fn file_entry(e: MemoryEntry) -> FileEntry {
    let (value, base64) = match String::from_utf8(e.value) {
        Ok(text) => (Some(text), None),
        Err(bytes) => (
            None,
            Some(base64::engine::general_purpose::STANDARD.encode(bytes.as_bytes())),
        ),
    };
    FileEntry {
        value,
        base64,
        expires_at_ms: e.expires_at_ms,
    }
}

#[async_trait]
impl KvStore for RecordingKv {
    async fn kv_get(&self, scope: &str, key: &str) -> crate::broker::Result<Option<Vec<u8>>> {
        self.store.kv_get(scope, key).await
    }

    async fn kv_set(
        &self,
        scope: &str,
        key: &str,
        value: Vec<u8>,
        ttl: Option<Duration>,
    ) -> crate::broker::Result<()> {
        self.store.kv_set(scope, key, value.clone(), ttl).await?;
        self.wrote(Write::Set {
            key: key.to_string(),
            value,
            ttl,
        });
        Ok(())
    }

    async fn kv_delete(&self, scope: &str, key: &str) -> crate::broker::Result<bool> {
        let existed = self.store.kv_delete(scope, key).await?;
        self.wrote(Write::Delete {
            key: key.to_string(),
            existed,
        });
        Ok(existed)
    }

    async fn kv_increment(&self, scope: &str, key: &str, delta: i64) -> crate::broker::Result<i64> {
        let value = self.store.kv_increment(scope, key, delta).await?;
        self.wrote(Write::Increment {
            key: key.to_string(),
            delta,
            value,
        });
        Ok(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_file_round_trips_bytes_text_and_expiry() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kv.json");
        std::fs::write(
            &path,
            r#"{"count": {"value": "41"}, "bin": {"base64": "AP8="}, "later": {"value": "x", "expires_at_ms": 99999999999999}, "gone": {"value": "y", "expires_at_ms": 1}}"#,
        )
        .unwrap();
        let kv = RecordingKv::load(Some(&path), "h").unwrap();
        assert_eq!(kv.kv_get("h", "gone").await.unwrap(), None);
        assert_eq!(kv.kv_get("h", "bin").await.unwrap(), Some(vec![0, 0xff]));
        assert_eq!(kv.kv_increment("h", "count", 1).await.unwrap(), 42);
        kv.save(Some(&path)).unwrap();
        let saved: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        assert_eq!(
            saved,
            serde_json::json!({
                "bin": {"base64": "AP8="},
                "count": {"value": "42"},
                "later": {"value": "x", "expires_at_ms": 99999999999999u64},
            })
        );
        assert_eq!(
            kv.writes(),
            [Write::Increment {
                key: "count".into(),
                delta: 1,
                value: 42
            }]
        );
    }

    #[test]
    fn a_call_that_writes_nothing_leaves_the_file_alone_and_a_bad_file_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kv.json");
        std::fs::write(&path, "{\"k\": {\"value\": \"v\"}} ").unwrap();
        let kv = RecordingKv::load(Some(&path), "h").unwrap();
        kv.save(Some(&path)).unwrap();
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "{\"k\": {\"value\": \"v\"}} "
        );
        for bad in [
            "[1]",
            "{\"k\": {}}",
            "{\"k\": {\"value\": \"v\", \"ttl\": 1}}",
        ] {
            std::fs::write(&path, bad).unwrap();
            let e = RecordingKv::load(Some(&path), "h").err().unwrap();
            assert!(e.is::<BadInput>(), "{e}");
            assert!(
                e.to_string()
                    .starts_with(&format!("--kv {}", path.display())),
                "{e}"
            );
        }
        // A file that is not there yet is an empty store.
        assert!(RecordingKv::load(Some(&dir.path().join("new.json")), "h").is_ok());
    }
}
