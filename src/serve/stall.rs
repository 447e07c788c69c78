//! The queues this host finds stalled, as the watchdog last judged them:
//! read by `/readyz`, the admin API, the dashboard and the metrics.

use std::collections::BTreeMap;
use std::sync::Mutex;

/// Stalled queues, each with what it waits on, in words.
#[derive(Debug, Default)]
pub(crate) struct StallBoard {
    stalled: Mutex<BTreeMap<String, String>>,
}

impl StallBoard {
    /// Take `now` for the stalled queues.
    pub(crate) fn set(&self, now: BTreeMap<String, String>) {
        *self.stalled.lock().expect("stall board lock") = now;
    }

    /// Every stalled queue, with why.
    pub(crate) fn all(&self) -> BTreeMap<String, String> {
        self.stalled.lock().expect("stall board lock").clone()
    }

    /// Why `queue` is stalled, if it is.
    pub(crate) fn of(&self, queue: &str) -> Option<String> {
        self.stalled
            .lock()
            .expect("stall board lock")
            .get(queue)
            .cloned()
    }
}
