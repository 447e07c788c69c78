//! The {{name}} batch handler for sluice: each call takes up to the
//! `batch_size` of {{name}}.toml messages and returns one outcome per
//! message, in the same order. Each message is settled by its own outcome.

wit_bindgen::generate!({ path: "wit", world: "batch-handler" });

use sluice::handler::config;
use sluice::handler::log::{Level, log};
use sluice::handler::publish::{PublishOptions, publish};

struct Handler;

impl Guest for Handler {
    fn handle_batch(messages: Vec<Message>) -> Vec<Outcome> {
        log(Level::Info, &format!("{{name}}: {} messages", messages.len()));
        // Exactly one outcome per message: a list of any other length fails
        // the whole call, as a panic would, and every message spends an
        // attempt. The timeout is for the whole call too; work that may
        // outlast it asks for more with sluice::handler::lease::extend(ms).
        messages.iter().map(handle).collect()
    }
}

/// Handles one message of the batch, as a `handler` world's `handle` would.
fn handle(message: &Message) -> Outcome {
    log(Level::Info, &format!("{{name}}: message {} attempt {}", message.id, message.attempt));

    // The payload is bytes; reject what can never succeed (dead-lettered at once).
    let Ok(text) = std::str::from_utf8(&message.payload) else {
        return Outcome::Reject("payload is not UTF-8".into());
    };

    // Values from the [config] table of {{name}}.toml.
    if let Some(target) = config::get("forward_to") {
        // Held until this call returns, then committed with the ack of the
        // batch's first `done` message, whichever message published: so
        // publish only once the message is sure to be done.
        let options = PublishOptions { headers: vec![], key: None, delay_ms: None };
        if let Err(e) = publish(&target, text.as_bytes(), &options) {
            log(Level::Warn, &format!("publish to {target} failed: {e}"));
            // A transient failure: try this message again after the policy's
            // backoff (or Outcome::Retry(Some(ms)) to choose the delay).
            return Outcome::Retry(None);
        }
    }
    // Also possible: Outcome::Snooze(ms) puts the message off without
    // spending an attempt.
    Outcome::Done
}

export!(Handler);
