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
use sluice_guest::{Guest, Message, Outcome, PublishOptions, publish};

struct Publisher;

/// What to publish: the queue, the payload and the options.
struct Request {
    queue: String,
    payload: Vec<u8>,
    options: PublishOptions,
}

/// The request in `payload`, or why it cannot be read.
fn parse(payload: &[u8]) -> Result<Request, String> {
    let v: Value = serde_json::from_slice(payload).map_err(|e| e.to_string())?;
    let queue = v["queue"].as_str().ok_or("`queue` must be a string")?;
    let len = v["payload_len"]
        .as_u64()
        .ok_or("`payload_len` must be a number")?;
    let mut headers = Vec::new();
    for pair in v["headers"].as_array().map_or(&[][..], Vec::as_slice) {
        match pair.as_array().map(Vec::as_slice) {
            Some([Value::String(k), Value::String(v)]) => headers.push((k.clone(), v.clone())),
            _ => return Err("`headers` must be [[name, value], ...] of strings".into()),
        }
    }
    let key = match &v["key"] {
        Value::Null => None,
        Value::String(k) => Some(k.clone()),
        _ => return Err("`key` must be a string or null".into()),
    };
    let delay_ms = match &v["delay_ms"] {
        Value::Null => None,
        d => Some(
            d.as_u64()
                .ok_or("`delay_ms` must be a number of ms or null")?,
        ),
    };
    Ok(Request {
        queue: queue.to_string(),
        payload: vec![b'x'; len as usize],
        options: PublishOptions {
            headers,
            key,
            delay_ms,
        },
    })
}

impl Guest for Publisher {
    fn handle(message: Message) -> Outcome {
        let request = match parse(&message.payload) {
            Ok(request) => request,
            Err(why) => return Outcome::Reject(format!("malformed: {why}")),
        };
        match publish::publish(&request.queue, &request.payload, &request.options) {
            Ok(()) => Outcome::Done,
            Err(why) => Outcome::Reject(format!("refused: {why}")),
        }
    }
}

sluice_guest::export!(Publisher);
