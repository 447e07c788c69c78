//! Sleeps for config `sleep_ms` milliseconds (default 300), then acks.
//! Used to test what happens to in-flight work at shutdown.
use sluice_guest::{Guest, Level, Message, Outcome, config_get, log};
use std::time::Duration;

struct Sleepy;

impl Guest for Sleepy {
    fn handle(message: Message) -> Outcome {
        let ms = config_get("sleep_ms")
            .and_then(|s| s.trim().parse::<u64>().ok())
            .unwrap_or(300);
        log(
            Level::Debug,
            &format!("message {}: sleeping {ms} ms", message.id),
        );
        std::thread::sleep(Duration::from_millis(ms));
        log(
            Level::Info,
            &format!("message {}: slept {ms} ms", message.id),
        );
        Outcome::Done
    }
}

sluice_guest::export!(Sleepy);
