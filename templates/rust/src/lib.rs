//! The {{name}} handler for sluice.

wit_bindgen::generate!({ path: "wit", world: "handler" });

use sluice::handler::config;
use sluice::handler::log::{Level, log};
use sluice::handler::publish::{PublishOptions, publish};

struct Handler;

impl Guest for Handler {
    fn handle(message: Message) -> Outcome {
        log(Level::Info, &format!("{{name}}: message {} attempt {}", message.id, message.attempt));

        // The payload is bytes; reject what can never succeed (dead-lettered at once).
        let Ok(text) = std::str::from_utf8(&message.payload) else {
            return Outcome::Reject("payload is not UTF-8".into());
        };

        // Values from the [config] table of {{name}}.toml.
        if let Some(target) = config::get("forward_to") {
            // Held until this call returns; committed together with the ack.
            let options = PublishOptions { headers: vec![], key: None, delay_ms: None };
            if let Err(e) = publish(&target, text.as_bytes(), &options) {
                log(Level::Warn, &format!("publish to {target} failed: {e}"));
                // A transient failure: try again after the policy's backoff
                // (or Outcome::Retry(Some(ms)) to choose the delay).
                return Outcome::Retry(None);
            }
        }
        // Also possible: Outcome::Snooze(ms) puts the message off without
        // spending an attempt (say, until a resource is free); and work that
        // may outlast the timeout asks for more time with
        // sluice::handler::lease::extend(ms) (`lease::time_left()` says
        // how much is left).
        Outcome::Done
    }
}

export!(Handler);
