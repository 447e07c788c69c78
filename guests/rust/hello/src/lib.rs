//! Minimal handler: logs one line and acks. Used as the benchmark guest.
//! The line counts the calls of this instance in a global, so a test can
//! see that a fresh instance starts clean (`call 1`) and a reused one not.
use std::sync::atomic::{AtomicU32, Ordering};

use sluice_sdk::Message;

static CALLS: AtomicU32 = AtomicU32::new(0);

fn handle(message: &Message) -> sluice_sdk::Result {
    let call = CALLS.fetch_add(1, Ordering::Relaxed) + 1;
    sluice_sdk::info!(
        "hello from sluice: message {} attempt {}, call {call} of this instance",
        message.id(),
        message.attempt()
    );
    Ok(())
}

sluice_sdk::handler!(handle);
