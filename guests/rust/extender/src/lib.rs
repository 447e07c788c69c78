//! Asks for more time, then works past its timeout, for the `lease` tests.
//! The payload is JSON, `{"extend_ms": E, "sleep_ms": S}`.
//!
//! When E > 0 it calls `lease::extend(E)` and logs
//! `extender: extended, <ms left> ms left`; then it sleeps S ms, logs
//! `extender: <time_left()> ms left at the end` and returns `done`. A
//! payload it cannot read is rejected.
use sluice_guest::{Guest, Level, Message, Outcome, lease, log};
use std::time::Duration;

struct Extender;

/// `{"extend_ms": E, "sleep_ms": S}` as (E, S).
fn parse(payload: &[u8]) -> Option<(u64, u64)> {
    let v: serde_json::Value = serde_json::from_slice(payload).ok()?;
    Some((v["extend_ms"].as_u64()?, v["sleep_ms"].as_u64()?))
}

impl Guest for Extender {
    fn handle(message: Message) -> Outcome {
        let Some((extend_ms, sleep_ms)) = parse(&message.payload) else {
            return Outcome::Reject(r#"expected {"extend_ms": E, "sleep_ms": S}"#.into());
        };
        if extend_ms > 0 {
            let left = lease::extend(extend_ms);
            log(Level::Info, &format!("extender: extended, {left} ms left"));
        }
        std::thread::sleep(Duration::from_millis(sleep_ms));
        log(
            Level::Info,
            &format!("extender: {} ms left at the end", lease::time_left()),
        );
        Outcome::Done
    }
}

sluice_guest::export!(Extender);
