//! Drives the key-value store from the payload, for the tests: a list of
//! commands separated by `;`, each logged at info with its result.
//!
//! - `get KEY` logs `get KEY = some(VALUE)` or `get KEY = none`;
//! - `set KEY VALUE [TTL_MS]` logs `set KEY ok`;
//! - `del KEY` logs `del KEY = true|false` (whether it was set);
//! - `incr KEY DELTA` logs `incr KEY = NEW_VALUE`.
//!
//! The first call that fails rejects the message with `CMD: ERROR`, so the
//! host's error text ends up in the dead letter. A command it cannot parse
//! rejects saying which commands there are.
use std::error::Error;
use std::time::Duration;

use sluice_sdk::{Message, Reject, info, kv};

/// Run one command; the text to log, or the error to reject with.
fn run(command: &str) -> Result<String, Box<dyn Error>> {
    let words: Vec<&str> = command.split_whitespace().collect();
    let number = |w: &str| w.parse::<i64>().map_err(|_| format!("bad number {w:?}"));
    match words.as_slice() {
        ["get", key] => Ok(match kv::get(key)? {
            Some(v) => format!("get {key} = some({})", String::from_utf8_lossy(&v)),
            None => format!("get {key} = none"),
        }),
        ["set", key, value] => {
            kv::set(key, value, None)?;
            Ok(format!("set {key} ok"))
        }
        ["set", key, value, ttl] => {
            let ttl = Duration::from_millis(number(ttl)? as u64);
            kv::set(key, value, Some(ttl))?;
            Ok(format!("set {key} ok"))
        }
        ["del", key] => Ok(format!("del {key} = {}", kv::delete(key)?)),
        ["incr", key, delta] => Ok(format!(
            "incr {key} = {}",
            kv::increment(key, number(delta)?)?
        )),
        _ => Err(
            "not a command: use get KEY, set KEY VALUE [TTL_MS], del KEY or incr KEY DELTA".into(),
        ),
    }
}

fn handle(message: &Message) -> sluice_sdk::Result {
    for command in message
        .text()?
        .split(';')
        .map(str::trim)
        .filter(|c| !c.is_empty())
    {
        match run(command) {
            Ok(line) => info!("{line}"),
            Err(e) => return Err(Reject::new(format!("{command}: {e}"))),
        }
    }
    Ok(())
}

sluice_sdk::handler!(handle);
