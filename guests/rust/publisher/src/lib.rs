//! Publishes the message its payload describes, for the tests that run the
//! same inputs through every publish entry point
//! (`tests/integration/entry_points.rs`).
//!
//! The payload is JSON, `{"queue": Q, "payload_len": N, "headers": [[K,
//! V], ...], "key": K or null, "delay_ms": D or null}`: publish N bytes of
//! `x` to Q with those options. Returns `done` when the host took the
//! publish, `reject("refused: <the host's error>")` when it refused it, and
//! `reject("malformed: ...")` for a payload it cannot read.
use serde_json::Value;
use std::time::Duration;

use sluice_sdk::{Message, Publish, Queue, Reject, publish};

/// The publish `payload` asks for, or why it cannot be read.
fn parse(payload: &[u8]) -> Result<Publish<Queue>, String> {
    let v: Value = serde_json::from_slice(payload).map_err(|e| e.to_string())?;
    let queue = v["queue"].as_str().ok_or("`queue` must be a string")?;
    let len = v["payload_len"]
        .as_u64()
        .ok_or("`payload_len` must be a number")?;
    let mut request = publish(queue).payload(vec![b'x'; len as usize]);
    for pair in v["headers"].as_array().map_or(&[][..], Vec::as_slice) {
        match pair.as_array().map(Vec::as_slice) {
            Some([Value::String(k), Value::String(v)]) => request = request.header(k, v),
            _ => return Err("`headers` must be [[name, value], ...] of strings".into()),
        }
    }
    match &v["key"] {
        Value::Null => {}
        Value::String(k) => request = request.key(k),
        _ => return Err("`key` must be a string or null".into()),
    }
    match &v["delay_ms"] {
        Value::Null => {}
        d => {
            let ms = d
                .as_u64()
                .ok_or("`delay_ms` must be a number of ms or null")?;
            request = request.delay(Duration::from_millis(ms));
        }
    }
    Ok(request)
}

fn handle(message: &Message) -> sluice_sdk::Result {
    let request =
        parse(message.payload()).map_err(|why| Reject::new(format!("malformed: {why}")))?;
    request
        .send()
        .map_err(|why| Reject::new(format!("refused: {why}")))
}

sluice_sdk::handler!(handle);
