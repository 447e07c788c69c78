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
use sluice_sdk::{Message, Reject, Retry, error, info, kv};

fn handle(message: &Message) -> sluice_sdk::Result {
    let Ok(m) = message.json::<serde_json::Value>() else {
        return Err(Reject::new("not JSON"));
    };
    let (Some(group), Some(seq)) = (m["g"].as_str(), m["seq"].as_i64()) else {
        return Err(Reject::new("no g or seq"));
    };
    if m["retry"].as_bool() == Some(true) && message.attempt() == 1 {
        return Err(Retry::backoff());
    }
    let key = format!("last:{group}");
    let last = match kv::get(&key) {
        Ok(v) => v
            .and_then(|b| String::from_utf8(b).ok())
            .and_then(|s| s.parse::<i64>().ok())
            .unwrap_or(0),
        Err(e) => {
            error!("kv get: {e}");
            return Err(Retry::backoff());
        }
    };
    if seq == last {
        info!("again: {group} {seq}");
        return Ok(());
    }
    if seq != last + 1 {
        error!("OUT OF ORDER: {group} {seq} after {last}");
        return Err(Reject::new(format!("{group} {seq} after {last}")));
    }
    if let Err(e) = kv::set(&key, seq.to_string(), None) {
        error!("kv set: {e}");
        return Err(Retry::backoff());
    }
    info!("in order: {group} {seq}");
    Ok(())
}

sluice_sdk::handler!(handle);
