//! The batch twin of `hello` (world `batch-handler`): logs one line per
//! call, `hello_batch: N messages`, and decides each message by its payload:
//!
//! * `retry` → `retry(some(10))`;
//! * `reject` → `reject("rejected by hello_batch")`;
//! * `snooze` → `snooze(50)`;
//! * anything else → `done`.
//!
//! When any payload is exactly `wrong-length` it returns one outcome too
//! many (an extra `done`), which the host must refuse, failing the whole
//! batch. The Python, JS and C `hello_batch` guests behave the same.
use std::time::Duration;

use sluice_sdk::{Message, Outcome};

/// The outcome one message asks for.
fn outcome(payload: &[u8]) -> Outcome {
    match payload {
        b"retry" => Outcome::Retry(Some(Duration::from_millis(10))),
        b"reject" => Outcome::Reject("rejected by hello_batch".into()),
        b"snooze" => Outcome::Snooze(Duration::from_millis(50)),
        _ => Outcome::Done,
    }
}

fn handle_batch(messages: &[Message]) -> Vec<Outcome> {
    sluice_sdk::info!("hello_batch: {} messages", messages.len());
    let mut outcomes: Vec<Outcome> = messages.iter().map(|m| outcome(m.payload())).collect();
    if messages.iter().any(|m| m.payload() == b"wrong-length") {
        outcomes.push(Outcome::Done);
    }
    outcomes
}

sluice_sdk::batch_handler!(handle_batch);
