//! Snoozes each message a given number of times, for the `snooze` tests.
//! The payload is JSON, `{"snoozes": N, "delay_ms": D}`.
//!
//! Each delivery adds 1 to the message's count in the key-value store
//! (`snoozed:<id>`) and returns `snooze(D)` while the count is at most N,
//! then `done`. Before deciding it records the delivery's attempt number as
//! `attempt:<id>` (decimal text), so a test can see that a snooze spends no
//! attempt. A failed key-value call logs a warning and returns
//! `retry(some(100))`; a payload it cannot read is rejected.
use std::time::Duration;

use sluice_sdk::{HostError, Message, Outcome, Reject, kv, warn};

/// `{"snoozes": N, "delay_ms": D}` as (N, D).
fn parse(payload: &[u8]) -> Option<(i64, u64)> {
    let v: serde_json::Value = serde_json::from_slice(payload).ok()?;
    Some((v["snoozes"].as_i64()?, v["delay_ms"].as_u64()?))
}

/// The outcome of one delivery, or the key-value error that stopped it.
fn decide(message: &Message, snoozes: i64, delay_ms: u64) -> Result<Outcome, HostError> {
    let count = kv::increment(&format!("snoozed:{}", message.id()), 1)?;
    let attempt = message.attempt().to_string();
    kv::set(&format!("attempt:{}", message.id()), attempt, None)?;
    Ok(if count <= snoozes {
        Outcome::Snooze(Duration::from_millis(delay_ms))
    } else {
        Outcome::Done
    })
}

fn handle(message: &Message) -> Outcome {
    let Some((snoozes, delay_ms)) = parse(message.payload()) else {
        return Reject::new(r#"expected {"snoozes": N, "delay_ms": D}"#).into();
    };
    decide(message, snoozes, delay_ms).unwrap_or_else(|e| {
        warn!("snoozer: key-value store: {e}");
        Outcome::Retry(Some(Duration::from_millis(100)))
    })
}

sluice_sdk::handler!(handle);
