//! The presence role on Redis: a queue's counts from its keys in one
//! `STATS` script, the known queues in the set `sluice:queues`, each host's
//! handler statuses as one JSON field of the hash `sluice:handlers`, and the
//! paused queues in the set `sluice:paused`.

use async_trait::async_trait;
use redis::Value;

use super::codec::{array, int, text};
use super::conn::classify;
use super::{GROUP, PAUSED_KEY, QUEUES_KEY, QueueKeys, RedisBroker, STATUS_KEY, scripts};
use crate::codec::{decode_statuses, encode_statuses};
use crate::{HandlerStatus, Presence, QueueStats, Result};

#[async_trait]
impl Presence for RedisBroker {
    async fn queue_stats(&self, queue: &str) -> Result<QueueStats> {
        let keys = QueueKeys::new(queue);
        let mut conn = self.conn.clone();
        let reply: Value = scripts::STATS
            .key(&keys.stream)
            .key(&keys.delayed)
            .key(&keys.bodies)
            .key(&keys.dead)
            .key(&keys.counters)
            .key(&keys.outbox)
            .key(&keys.groups)
            .arg(GROUP)
            .invoke_async(&mut conn)
            .await
            .map_err(classify)?;
        let paused: bool = redis::cmd("SISMEMBER")
            .arg(PAUSED_KEY)
            .arg(queue)
            .query_async(&mut conn)
            .await
            .map_err(classify)?;
        Ok(QueueStats {
            paused,
            ..parse_stats(queue, &reply)
        })
    }

    async fn stats(&self) -> Result<Vec<QueueStats>> {
        let queues = self.sorted_members(QUEUES_KEY).await?;
        let mut out = Vec::with_capacity(queues.len());
        for q in queues {
            out.push(self.queue_stats(&q).await?);
        }
        Ok(out)
    }

    async fn set_paused(&self, queue: &str, paused: bool) -> Result<()> {
        let mut conn = self.conn.clone();
        if paused {
            // Listed by `stats` even before its first message.
            redis::cmd("SADD")
                .arg(QUEUES_KEY)
                .arg(queue)
                .query_async::<()>(&mut conn)
                .await
                .map_err(classify)?;
        }
        redis::cmd(if paused { "SADD" } else { "SREM" })
            .arg(PAUSED_KEY)
            .arg(queue)
            .query_async::<()>(&mut conn)
            .await
            .map_err(classify)
    }

    async fn paused(&self) -> Result<Vec<String>> {
        self.sorted_members(PAUSED_KEY).await
    }

    async fn put_handler_statuses(&self, host: &str, statuses: Vec<HandlerStatus>) -> Result<()> {
        let mut conn = self.conn.clone();
        redis::cmd("HSET")
            .arg(STATUS_KEY)
            .arg(host)
            .arg(encode_statuses(&statuses))
            .query_async::<()>(&mut conn)
            .await
            .map_err(classify)
    }

    async fn handler_statuses(&self) -> Result<Vec<HandlerStatus>> {
        let mut conn = self.conn.clone();
        let all: Vec<(String, Vec<u8>)> = redis::cmd("HGETALL")
            .arg(STATUS_KEY)
            .query_async(&mut conn)
            .await
            .map_err(classify)?;
        let mut out: Vec<HandlerStatus> = all
            .iter()
            .flat_map(|(_, json)| decode_statuses(json))
            .collect();
        out.sort_by(|a, b| (&a.handler, &a.host).cmp(&(&b.handler, &b.host)));
        Ok(out)
    }
}

/// The `STATS` script's reply: {entries in the stream, pending, delayed,
/// dead, in the outbox, counters as field/value pairs, waiting in ordered
/// groups}. A message waiting for its group counts as delayed.
fn parse_stats(queue: &str, reply: &Value) -> QueueStats {
    let v = array(reply);
    let n = |i: usize| v.get(i).and_then(int).unwrap_or(0);
    let (in_stream, pending, delayed, dead, outbox) = (n(0), n(1), n(2), n(3), n(4));
    let mut s = QueueStats {
        queue: queue.to_string(),
        ready: in_stream.saturating_sub(pending),
        delayed: delayed + n(6),
        // Publishes waiting in the outbox are still in transit.
        in_flight: pending + outbox,
        dead,
        ..Default::default()
    };
    let counters = v.get(5).map(array).unwrap_or_default();
    for pair in counters.chunks(2) {
        if let [k, val] = pair {
            let count = int(val).unwrap_or(0);
            match text(k).as_deref() {
                Some("done") => s.done = count,
                Some("duplicates") => s.duplicates = count,
                Some("retried") => s.retried = count,
                Some("lost") => s.lost_leases = count,
                Some("ungrouped") => s.ungrouped = count,
                _ => {}
            }
        }
    }
    s
}
