//! `hello` on the raw `wit-bindgen` bindings, without the SDK: the proof
//! that a component built that way keeps working, and the baseline the
//! SDK's `hello` is measured against. It behaves exactly as `hello` does:
//! logs one line and acks. The line counts the calls of this instance in a
//! global, so a test can see that a fresh instance starts clean (`call 1`)
//! and a reused one not.
#![allow(clippy::too_many_arguments)] // the generated `handle`: the flattened `message` record

use std::sync::atomic::{AtomicU32, Ordering};

wit_bindgen::generate!({ path: "../../../wit", world: "handler" });

use sluice::handler::log::{Level, log};

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

export!(Hello);
