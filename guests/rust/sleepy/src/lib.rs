//! Sleeps for config `sleep_ms` milliseconds (default 300), then acks.
//! Used to test what happens to in-flight work at shutdown.
//!
//! With config `count_key` (and `kv = true` granted), it also counts the
//! calls in progress on every host: it adds 1 to that key of its key-value
//! store before sleeping, logs `in handle: N` with the count it saw, and
//! takes the 1 away after.
use sluice_guest::{Guest, Level, Message, Outcome, config_get, kv, log};
use std::time::Duration;

struct Sleepy;

impl Guest for Sleepy {
    fn handle(message: Message) -> Outcome {
        let ms = config_get("sleep_ms")
            .and_then(|s| s.trim().parse::<u64>().ok())
            .unwrap_or(300);
        let count_key = config_get("count_key");
        if let Some(key) = &count_key {
            match kv::increment(key, 1) {
                Ok(n) => log(Level::Info, &format!("in handle: {n}")),
                Err(e) => {
                    log(Level::Error, &format!("kv increment: {e}"));
                    return Outcome::Retry(None);
                }
            }
        }
        log(
            Level::Debug,
            &format!("message {}: sleeping {ms} ms", message.id),
        );
        std::thread::sleep(Duration::from_millis(ms));
        if let Some(key) = &count_key
            && let Err(e) = kv::increment(key, -1)
        {
            log(Level::Error, &format!("kv decrement: {e}"));
        }
        log(
            Level::Info,
            &format!("message {}: slept {ms} ms", message.id),
        );
        Outcome::Done
    }
}

sluice_guest::export!(Sleepy);
