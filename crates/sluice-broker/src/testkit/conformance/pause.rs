//! Pausing: stored in the broker, listed, and shown in the queue's counts,
//! alike on every backend. (That hosts honour it is in `admin.rs`.)

use std::sync::Arc;

use crate::Broker;

use super::msg;

/// A pause is listed and counted until resumed; pausing twice or resuming
/// a queue that is not paused changes nothing; a queue paused before its
/// first message is listed by `stats`.
pub async fn a_pause_is_stored_listed_and_undone(b: Arc<dyn Broker>) {
    b.publish(vec![msg("a", "x")]).await.unwrap();
    assert!(b.paused().await.unwrap().is_empty());
    b.set_paused("a", true).await.unwrap();
    b.set_paused("a", true).await.unwrap();
    b.set_paused("later", true).await.unwrap();
    assert_eq!(b.paused().await.unwrap(), ["a", "later"]);
    let a = b.queue_stats("a").await.unwrap();
    assert!(a.paused && a.ready == 1, "{a:?}");
    let all = b.stats().await.unwrap();
    let later = all.iter().find(|s| s.queue == "later").expect("listed");
    assert!(later.paused && later.pending() == 0, "{later:?}");
    b.set_paused("a", false).await.unwrap();
    b.set_paused("never", false).await.unwrap();
    assert_eq!(b.paused().await.unwrap(), ["later"]);
    assert!(!b.queue_stats("a").await.unwrap().paused);
}
