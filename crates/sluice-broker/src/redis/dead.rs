//! The dead-letter role on Redis: a queue's dead letters are the entries of
//! its `dead` stream, buried by the `SETTLE` script. An entry's id is its
//! time of death, so a replay's cut-off is the end of an `XRANGE`.

use async_trait::async_trait;
use redis::Value;

use super::codec::{self, Entry};
use super::conn::{Conn, classify};
use super::{QueueKeys, RedisBroker, key, scripts};
use crate::{DeadLetter, DeadLetters, ReplaySelector, Result};

/// Dead letters one replay script looks at before handing back.
const REPLAY_SCAN: usize = 1000;

#[async_trait]
impl DeadLetters for RedisBroker {
    async fn dead_letters(&self, queue: &str, limit: usize) -> Result<Vec<DeadLetter>> {
        let dead = self.read_dead(queue, Some(limit.max(1))).await?;
        Ok(dead
            .into_iter()
            .map(|e| e.into_dead_letter(queue))
            .collect())
    }

    async fn dead_letter(&self, queue: &str, id: &str) -> Result<Option<DeadLetter>> {
        let keys = QueueKeys::new(queue);
        let mut conn = self.conn.clone();
        let entry: Option<String> = redis::cmd("HGET")
            .arg(&keys.dead_index)
            .arg(id)
            .query_async(&mut conn)
            .await
            .map_err(classify)?;
        let found = match entry {
            Some(entry) => self.read_dead_range(queue, &entry, &entry, 1).await?,
            // Dead letters from before the index: looked for a page at a time.
            None => self.find_dead(queue, id).await?,
        };
        Ok(found
            .into_iter()
            .find(|e| e.id == id)
            .map(|e| e.into_dead_letter(queue)))
    }

    async fn replay(&self, queue: &str, selector: &ReplaySelector) -> Result<u64> {
        let mut conn = self.conn.clone();
        let keys = QueueKeys::new(queue);
        // The dead stream's entry ids are the times of death, so a cut-off
        // is the end of the range. The end is never past the last dead
        // letter there is now: the replay moves a thousand at a time, and a
        // message it moved may die again before it is over.
        let Some(last) = last_entry(&mut conn, &keys.dead).await? else {
            return Ok(0);
        };
        let last_ms = last.split('-').next().and_then(|ms| ms.parse::<u64>().ok());
        let until = match selector.died_before_ms {
            // The cut-off, unless the last dead letter died before it.
            Some(ms) if last_ms.is_none_or(|last_ms| ms < last_ms) => ms.to_string(),
            _ => last,
        };
        let max_redrives = selector.max_redrives.map_or(-1, i64::from);
        let mut after = "-".to_string();
        let mut moved = 0u64;
        loop {
            let left = match selector.limit {
                Some(limit) if moved >= limit as u64 => break,
                Some(limit) => limit as u64 - moved,
                None => 0,
            };
            let mut script = scripts::REPLAY.prepare_invoke();
            script.key(&keys.dead).key(&keys.dead_index);
            keys.enqueue_keys(&mut script)
                .arg(&after)
                .arg(&until)
                .arg(REPLAY_SCAN)
                .arg(left)
                .arg(max_redrives)
                .arg(u8::from(selector.redrive));
            for id in &selector.ids {
                script.arg(id);
            }
            let (n, last): (u64, String) =
                script.invoke_async(&mut conn).await.map_err(classify)?;
            moved += n;
            if last.is_empty() {
                return Ok(moved);
            }
            after = format!("({last}");
        }
        Ok(moved)
    }

    async fn purge(&self, queue: &str) -> Result<u64> {
        let mut conn = self.conn.clone();
        let keys = QueueKeys::new(queue);
        let mut script = scripts::PURGE.prepare_invoke();
        script.key(&keys.dead).key(&keys.dead_index);
        keys.enqueue_keys(&mut script)
            .invoke_async(&mut conn)
            .await
            .map_err(classify)
    }
}

impl RedisBroker {
    /// The entries of a queue's dead stream, oldest first, at most `count`.
    async fn read_dead(&self, queue: &str, count: Option<usize>) -> Result<Vec<Entry>> {
        self.read_dead_range(queue, "-", "+", count.unwrap_or(usize::MAX))
            .await
    }

    /// At most `count` entries of a queue's dead stream from `start` to
    /// `end` (XRANGE bounds).
    async fn read_dead_range(
        &self,
        queue: &str,
        start: &str,
        end: &str,
        count: usize,
    ) -> Result<Vec<Entry>> {
        let mut conn = self.conn.clone();
        let reply: Value = redis::cmd("XRANGE")
            .arg(key(queue, "dead"))
            .arg(start)
            .arg(end)
            .arg("COUNT")
            .arg(count)
            .query_async(&mut conn)
            .await
            .map_err(classify)?;
        Ok(codec::into_array(reply)
            .into_iter()
            .filter_map(Entry::parse)
            .collect())
    }

    /// The dead letter `id` of `queue`, looked for a page at a time.
    async fn find_dead(&self, queue: &str, id: &str) -> Result<Vec<Entry>> {
        let mut start = "-".to_string();
        loop {
            let page = self
                .read_dead_range(queue, &start, "+", REPLAY_SCAN)
                .await?;
            let Some(last) = page.last().map(|e| e.entry.clone()) else {
                return Ok(Vec::new());
            };
            if let Some(found) = page.into_iter().find(|e| e.id == id) {
                return Ok(vec![found]);
            }
            start = format!("({last}");
        }
    }
}

/// The id of the last entry of `stream`, if it has any.
async fn last_entry(conn: &mut Conn, stream: &str) -> Result<Option<String>> {
    let last: Vec<(String, Value)> = redis::cmd("XREVRANGE")
        .arg(stream)
        .arg("+")
        .arg("-")
        .arg("COUNT")
        .arg(1)
        .query_async(conn)
        .await
        .map_err(classify)?;
    Ok(last.into_iter().next().map(|(id, _)| id))
}
