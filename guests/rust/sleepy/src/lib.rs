//! Sleeps for config `sleep_ms` milliseconds (default 300), then acks.
//! Used to test what happens to in-flight work at shutdown.
//!
//! With config `count_key` (and `kv = true` granted), it also counts the
//! calls in progress on every host: it adds 1 to that key of its key-value
//! store before sleeping, logs `in handle: N` with the count it saw, and
//! takes the 1 away after.
use sluice_sdk::{Message, Retry, config, debug, error, info, kv};
use std::time::Duration;

fn handle(message: &Message) -> sluice_sdk::Result {
    let ms = config::get("sleep_ms")
        .and_then(|s| s.trim().parse::<u64>().ok())
        .unwrap_or(300);
    let count_key = config::get("count_key");
    if let Some(key) = &count_key {
        match kv::increment(key, 1) {
            Ok(n) => info!("in handle: {n}"),
            Err(e) => {
                error!("kv increment: {e}");
                return Err(Retry::backoff());
            }
        }
    }
    debug!("message {}: sleeping {ms} ms", message.id());
    std::thread::sleep(Duration::from_millis(ms));
    if let Some(key) = &count_key
        && let Err(e) = kv::increment(key, -1)
    {
        error!("kv decrement: {e}");
    }
    info!("message {}: slept {ms} ms", message.id());
    Ok(())
}

sluice_sdk::handler!(handle);
