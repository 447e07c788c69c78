//! Schedule ticks on PostgreSQL: the last tick of each schedule in
//! `schedule_ticks`. A fire is the schema's `fire_tick`, one transaction:
//! the upsert that records the tick only if it is later than the last one
//! holds the schedule's row lock, so hosts firing the same tick take turns
//! and only the first records it, and the tick's message is enqueued (by
//! the queue role's `enqueue`) in the same transaction or not at all.

use async_trait::async_trait;

use super::{PgBroker, classify};
use crate::Result;
use crate::codec::encode_headers;
use crate::message::new_id;
use crate::schedules::{self, LastTick, Schedules, Tick};

#[async_trait]
impl Schedules for PgBroker {
    async fn fire(&self, tick: Tick) -> Result<bool> {
        schedules::check(&tick)?;
        let context = format!(
            "firing the tick at {} ms of schedule {:?} of queue {:?}",
            tick.at_ms, tick.schedule, tick.queue
        );
        let m = tick.message.as_ref();
        let id = m.map(|_| new_id());
        let key = m.and_then(|m| m.key.as_deref());
        let payload = m.map(|m| m.payload.as_slice());
        let headers = m.and_then(|m| encode_headers(&m.headers));
        let delay = m.map(|m| m.delay.as_millis() as i64);
        let conn = self.conn(&context).await?;
        let row = conn
            .query_one(
                "SELECT fire_tick($1, $2, $3, $4, $5, $6, $7, $8)",
                &[
                    &tick.queue,
                    &tick.schedule,
                    &(tick.at_ms as i64),
                    &id,
                    &key,
                    &payload,
                    &headers,
                    &delay,
                ],
            )
            .await
            .map_err(|e| classify(&context, e))?;
        Ok(row.get(0))
    }

    async fn last_ticks(&self) -> Result<Vec<LastTick>> {
        let context = "reading the last ticks of schedules";
        let conn = self.conn(context).await?;
        let rows = conn
            .query(
                r#"SELECT queue, schedule, last_at FROM schedule_ticks
                   ORDER BY queue COLLATE "C", schedule COLLATE "C""#,
                &[],
            )
            .await
            .map_err(|e| classify(context, e))?;
        Ok(rows
            .iter()
            .map(|r| LastTick {
                queue: r.get(0),
                schedule: r.get(1),
                at_ms: r.get::<_, i64>(2) as u64,
            })
            .collect())
    }
}
