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

/// The schedules role's part of version 1 of the schema.
pub(super) const SCHEMA: &str = "
CREATE TABLE schedule_ticks (
    queue    text NOT NULL,
    schedule text NOT NULL,
    last_at  bigint NOT NULL,
    PRIMARY KEY (queue, schedule)
);

-- Fire tick at_ms of schedule s of queue q unless a tick at or after it
-- fired already: record it as the schedule's last and, when m_id is not
-- NULL, enqueue its message to q. Whether this call fired it.
CREATE FUNCTION fire_tick(q text, s text, at_ms bigint, m_id text, m_key text,
                          m_payload bytea, m_headers text, m_delay bigint)
RETURNS boolean
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
  INSERT INTO schedule_ticks AS t (queue, schedule, last_at) VALUES (q, s, at_ms)
  ON CONFLICT (queue, schedule) DO UPDATE SET last_at = EXCLUDED.last_at
    WHERE t.last_at < EXCLUDED.last_at;
  IF NOT FOUND THEN
    RETURN false;
  END IF;
  IF m_id IS NOT NULL THEN
    PERFORM enqueue(ARRAY[m_id], ARRAY[q], ARRAY[m_key], ARRAY[m_payload],
                    ARRAY[m_headers], ARRAY[m_delay]);
  END IF;
  RETURN true;
END
$$;
";

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
