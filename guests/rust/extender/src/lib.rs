//! Asks for more time, then works past its timeout, for the `lease` tests.
//! The payload is JSON, `{"extend_ms": E, "sleep_ms": S}`.
//!
//! When E > 0 it calls `lease::extend(E)` and logs
//! `extender: extended, <ms left> ms left`; then it sleeps S ms, logs
//! `extender: <time_left()> ms left at the end` and returns `done`. A
//! payload it cannot read is rejected.
use sluice_sdk::{Message, Reject, info, lease};
use std::time::Duration;

/// `{"extend_ms": E, "sleep_ms": S}` as (E, S).
fn parse(payload: &[u8]) -> Option<(u64, u64)> {
    let v: serde_json::Value = serde_json::from_slice(payload).ok()?;
    Some((v["extend_ms"].as_u64()?, v["sleep_ms"].as_u64()?))
}

fn handle(message: &Message) -> sluice_sdk::Result {
    let Some((extend_ms, sleep_ms)) = parse(message.payload()) else {
        return Err(Reject::new(r#"expected {"extend_ms": E, "sleep_ms": S}"#));
    };
    if extend_ms > 0 {
        let left = lease::extend(Duration::from_millis(extend_ms));
        info!("extender: extended, {} ms left", left.as_millis());
    }
    std::thread::sleep(Duration::from_millis(sleep_ms));
    info!(
        "extender: {} ms left at the end",
        lease::time_left().as_millis()
    );
    Ok(())
}

sluice_sdk::handler!(handle);
