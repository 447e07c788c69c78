//! Schedule ticks on SQLite: the last tick of each schedule in
//! `schedule_ticks`. A fire is one job on the broker thread, so the check,
//! the record and the publish commit together.

use async_trait::async_trait;
use rusqlite::{Connection, OptionalExtension, params};

use super::{SqliteBroker, classify, queue};
use crate::Result;
use crate::message::now_ms;
use crate::schedules::{self, LastTick, Schedules, Tick};

#[async_trait]
impl Schedules for SqliteBroker {
    async fn fire(&self, tick: Tick) -> Result<bool> {
        schedules::check(&tick)?;
        self.call(move |conn| fire(conn, &tick)).await
    }

    async fn last_ticks(&self) -> Result<Vec<LastTick>> {
        self.read(|conn| {
            let mut stmt = conn
                .prepare_cached(
                    "SELECT queue, schedule, last_at FROM schedule_ticks ORDER BY queue, schedule",
                )
                .map_err(classify)?;
            let rows = stmt
                .query_map([], |r| {
                    Ok(LastTick {
                        queue: r.get(0)?,
                        schedule: r.get(1)?,
                        at_ms: r.get::<_, i64>(2)? as u64,
                    })
                })
                .map_err(classify)?;
            rows.collect::<rusqlite::Result<_>>().map_err(classify)
        })
        .await
    }
}

fn fire(conn: &Connection, tick: &Tick) -> Result<bool> {
    let last: Option<i64> = conn
        .prepare_cached("SELECT last_at FROM schedule_ticks WHERE queue = ?1 AND schedule = ?2")
        .and_then(|mut s| {
            s.query_row(params![tick.queue, tick.schedule], |r| r.get(0))
                .optional()
        })
        .map_err(classify)?;
    if last.is_some_and(|last| last >= tick.at_ms as i64) {
        return Ok(false);
    }
    conn.prepare_cached(
        "INSERT INTO schedule_ticks (queue, schedule, last_at) VALUES (?1, ?2, ?3)
         ON CONFLICT (queue, schedule) DO UPDATE SET last_at = ?3",
    )
    .and_then(|mut s| s.execute(params![tick.queue, tick.schedule, tick.at_ms as i64]))
    .map_err(classify)?;
    if let Some(message) = &tick.message {
        queue::insert_messages(conn, std::slice::from_ref(message), now_ms())?;
    }
    Ok(true)
}
