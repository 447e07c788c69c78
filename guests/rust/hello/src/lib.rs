//! Minimal handler: logs one line and acks. Used as the benchmark guest.
//! The line counts the calls of this instance in a global, so a test can
//! see that a fresh instance starts clean (`call 1`) and a reused one not.
use std::sync::atomic::{AtomicU32, Ordering};

use sluice_guest::{Guest, Level, Message, Outcome, log};

static CALLS: AtomicU32 = AtomicU32::new(0);

struct Hello;

impl Guest for Hello {
    fn handle(message: Message) -> Outcome {
        let call = CALLS.fetch_add(1, Ordering::Relaxed) + 1;
        log(
            Level::Info,
            &format!(
                "hello from sluice: message {} attempt {}, call {call} of this instance",
                message.id, message.attempt
            ),
        );
        Outcome::Done
    }
}

sluice_guest::export!(Hello);
