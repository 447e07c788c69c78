//! Snoozes each message a given number of times, for the `snooze` tests.
//! The payload is JSON, `{"snoozes": N, "delay_ms": D}`.
//!
//! Each delivery adds 1 to the message's count in the key-value store
//! (`snoozed:<id>`) and returns `snooze(D)` while the count is at most N,
//! then `done`. Before deciding it records the delivery's attempt number as
//! `attempt:<id>` (decimal text), so a test can see that a snooze spends no
//! attempt. A failed key-value call logs a warning and returns
//! `retry(some(100))`; a payload it cannot read is rejected.
use sluice_guest::{Guest, Level, Message, Outcome, kv, log};

struct Snoozer;

/// `{"snoozes": N, "delay_ms": D}` as (N, D).
fn parse(payload: &[u8]) -> Option<(i64, u64)> {
    let v: serde_json::Value = serde_json::from_slice(payload).ok()?;
    Some((v["snoozes"].as_i64()?, v["delay_ms"].as_u64()?))
}

/// The outcome of one delivery, or the key-value error that stopped it.
fn decide(message: &Message, snoozes: i64, delay_ms: u64) -> Result<Outcome, String> {
    let count = kv::increment(&format!("snoozed:{}", message.id), 1)?;
    let attempt = message.attempt.to_string();
    kv::set(&format!("attempt:{}", message.id), attempt.as_bytes(), None)?;
    Ok(if count <= snoozes {
        Outcome::Snooze(delay_ms)
    } else {
        Outcome::Done
    })
}

impl Guest for Snoozer {
    fn handle(message: Message) -> Outcome {
        let Some((snoozes, delay_ms)) = parse(&message.payload) else {
            return Outcome::Reject(r#"expected {"snoozes": N, "delay_ms": D}"#.into());
        };
        decide(&message, snoozes, delay_ms).unwrap_or_else(|e| {
            log(Level::Warn, &format!("snoozer: key-value store: {e}"));
            Outcome::Retry(Some(100))
        })
    }
}

sluice_guest::export!(Snoozer);
