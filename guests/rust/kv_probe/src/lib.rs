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
use sluice_guest::{Guest, Level, Message, Outcome, kv, log};

struct KvProbe;

/// Run one command; the text to log, or the error to reject with.
fn run(command: &str) -> Result<String, String> {
    let words: Vec<&str> = command.split_whitespace().collect();
    let number = |w: &str| w.parse::<i64>().map_err(|_| format!("bad number {w:?}"));
    match words.as_slice() {
        ["get", key] => Ok(match kv::get(key)? {
            Some(v) => format!("get {key} = some({})", String::from_utf8_lossy(&v)),
            None => format!("get {key} = none"),
        }),
        ["set", key, value] => kv::set(key, value.as_bytes(), None).map(|()| format!("set {key} ok")),
        ["set", key, value, ttl] => {
            let ttl = number(ttl)? as u64;
            kv::set(key, value.as_bytes(), Some(ttl)).map(|()| format!("set {key} ok"))
        }
        ["del", key] => kv::delete(key).map(|was| format!("del {key} = {was}")),
        ["incr", key, delta] => kv::increment(key, number(delta)?).map(|n| format!("incr {key} = {n}")),
        _ => Err("not a command: use get KEY, set KEY VALUE [TTL_MS], del KEY or incr KEY DELTA".into()),
    }
}

impl Guest for KvProbe {
    fn handle(message: Message) -> Outcome {
        let Ok(text) = std::str::from_utf8(&message.payload) else {
            return Outcome::Reject("payload is not UTF-8".into());
        };
        for command in text.split(';').map(str::trim).filter(|c| !c.is_empty()) {
            match run(command) {
                Ok(line) => log(Level::Info, &line),
                Err(e) => return Outcome::Reject(format!("{command}: {e}")),
            }
        }
        Outcome::Done
    }
}

sluice_guest::export!(KvProbe);
