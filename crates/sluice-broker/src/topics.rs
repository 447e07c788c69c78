//! The store of topic bindings: a role of its own, kept in the broker's
//! storage so that every host and every publisher routes the same way. The
//! routing itself is pure and lives in [`crate::topic`].

use async_trait::async_trait;

use super::Result;
use crate::topic::{Binding, TopicStats};

/// The broker's store of bindings, shared by every host and publisher.
#[async_trait]
pub trait TopicStore: Send + Sync {
    /// Every binding of `topic`.
    async fn bindings(&self, topic: &str) -> Result<Vec<Binding>>;

    /// Add bindings; one that exists already (same topic, queue and pattern)
    /// takes the new origin.
    async fn bind(&self, bindings: &[Binding]) -> Result<()>;

    /// Remove `queue`'s bindings to `topic`: the one with `pattern` (the
    /// catch-all when `None`), or all of them when `all`. Returns how many.
    async fn unbind(
        &self,
        topic: &str,
        queue: &str,
        pattern: Option<&str>,
        all: bool,
    ) -> Result<u64>;

    /// Make `origin`'s bindings exactly `bindings` (each with that origin):
    /// add what is new, remove what it no longer declares.
    async fn replace_bindings(&self, origin: &str, bindings: &[Binding]) -> Result<()>;

    /// Count `n` publishes to `topic` that matched no pattern.
    async fn count_unmatched(&self, topic: &str, n: u64) -> Result<()>;

    /// Every topic that has bindings or unmatched publishes, by name.
    async fn topic_stats(&self) -> Result<Vec<TopicStats>>;
}
