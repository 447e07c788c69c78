//! Checks that each group's messages come in order. A message is JSON,
//! `{"g": "GROUP", "seq": N, "retry": BOOL}`; the guest keeps the last
//! sequence number it finished of each group in its key-value store
//! (`last:GROUP`, so every host shares it) and logs one line per message:
//!
//! * `in order: GROUP N` when N follows the last one;
//! * `again: GROUP N` when N is the last one (delivered again after a host
//!   died between finishing it and its ack);
//! * `OUT OF ORDER: GROUP N after M` otherwise, and rejects the message.
//!
//! A message with `"retry": true` asks for a retry on its first attempt.
use sluice_guest::{Guest, Level, Message, Outcome, kv, log};

struct Sequence;

impl Guest for Sequence {
    fn handle(message: Message) -> Outcome {
        let Ok(m) = serde_json::from_slice::<serde_json::Value>(&message.payload) else {
            return Outcome::Reject("not JSON".into());
        };
        let (Some(group), Some(seq)) = (m["g"].as_str(), m["seq"].as_i64()) else {
            return Outcome::Reject("no g or seq".into());
        };
        if m["retry"].as_bool() == Some(true) && message.attempt == 1 {
            return Outcome::Retry(None);
        }
        let key = format!("last:{group}");
        let last = match kv::get(&key) {
            Ok(v) => v
                .and_then(|b| String::from_utf8(b).ok())
                .and_then(|s| s.parse::<i64>().ok())
                .unwrap_or(0),
            Err(e) => {
                log(Level::Error, &format!("kv get: {e}"));
                return Outcome::Retry(None);
            }
        };
        if seq == last {
            log(Level::Info, &format!("again: {group} {seq}"));
            return Outcome::Done;
        }
        if seq != last + 1 {
            log(
                Level::Error,
                &format!("OUT OF ORDER: {group} {seq} after {last}"),
            );
            return Outcome::Reject(format!("{group} {seq} after {last}"));
        }
        if let Err(e) = kv::set(&key, seq.to_string().as_bytes(), None) {
            log(Level::Error, &format!("kv set: {e}"));
            return Outcome::Retry(None);
        }
        log(Level::Info, &format!("in order: {group} {seq}"));
        Outcome::Done
    }
}

sluice_guest::export!(Sequence);
