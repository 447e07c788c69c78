//! A handler built against the frozen `sluice:handler@0.1.0` package
//! (`wit/0.1.0/handler.wit`), to prove the host still serves components made
//! before 0.2.0. So it generates its own bindings rather than use the
//! SDK (`sdk/rust`), which follows the current package.
//!
//! It logs `legacy: <payload>` at info, then decides by the payload:
//! `retry` → `retry(some(10))`, `reject` → `reject("rejected by legacy")`;
//! anything else is published unchanged to the queue of config `forward`
//! when that is set (a failed publish rejects with its error), then `done`.
#![allow(clippy::too_many_arguments)] // the generated `handle`: the flattened `message` record

wit_bindgen::generate!({ path: "../../../wit/0.1.0", world: "handler" });

use sluice::handler::config;
use sluice::handler::log::{Level, log};
use sluice::handler::publish::{PublishOptions, publish};

struct Legacy;

impl Guest for Legacy {
    fn handle(message: Message) -> Outcome {
        log(
            Level::Info,
            &format!("legacy: {}", String::from_utf8_lossy(&message.payload)),
        );
        match message.payload.as_slice() {
            b"retry" => return Outcome::Retry(Some(10)),
            b"reject" => return Outcome::Reject("rejected by legacy".into()),
            _ => {}
        }
        if let Some(queue) = config::get("forward") {
            let options = PublishOptions {
                headers: vec![],
                key: None,
                delay_ms: None,
            };
            if let Err(e) = publish(&queue, &message.payload, &options) {
                return Outcome::Reject(e);
            }
        }
        Outcome::Done
    }
}

export!(Legacy);
