//! Schedule ticks on Redis: each queue's hash `schedules` holds the last
//! tick of each of its schedules, by name, and `FIRE` checks it, records
//! the tick and enqueues its message in one step on the queue's hash slot.

use async_trait::async_trait;

use super::conn::classify;
use super::groups::enqueue_under;
use super::queue::message_args;
use super::{QUEUES_KEY, QueueKeys, RedisBroker, scripts};
use crate::Result;
use crate::message::new_id;
use crate::schedules::{self, LastTick, Schedules, Tick};

#[async_trait]
impl Schedules for RedisBroker {
    async fn fire(&self, tick: Tick) -> Result<bool> {
        schedules::check(&tick)?;
        self.register([tick.queue.as_str()]).await?;
        let keys = QueueKeys::new(&tick.queue);
        let fired = enqueue_under(
            &mut self.conn.clone(),
            &self.orderings,
            &tick.queue,
            |spec, ordering| {
                let mut script = scripts::FIRE.prepare_invoke();
                keys.enqueue_keys(&mut script)
                    .key(&keys.schedules)
                    .arg(&tick.schedule)
                    .arg(tick.at_ms)
                    .arg(spec);
                if let Some(m) = &tick.message {
                    message_args(&mut script, &new_id(), m, ordering);
                }
                script
            },
        )
        .await?;
        Ok(fired == 1)
    }

    async fn last_ticks(&self) -> Result<Vec<LastTick>> {
        let mut conn = self.conn.clone();
        let mut out = Vec::new();
        for queue in self.sorted_members(QUEUES_KEY).await? {
            let mut ticks: Vec<(String, u64)> = redis::cmd("HGETALL")
                .arg(QueueKeys::new(&queue).schedules)
                .query_async(&mut conn)
                .await
                .map_err(classify)?;
            ticks.sort();
            out.extend(ticks.into_iter().map(|(schedule, at_ms)| LastTick {
                queue: queue.clone(),
                schedule,
                at_ms,
            }));
        }
        Ok(out)
    }
}
