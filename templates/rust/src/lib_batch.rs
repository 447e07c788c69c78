//! The {{name}} batch handler for sluice: each call takes up to the
//! `batch_size` of {{name}}.toml messages and returns one outcome per
//! message, in the same order. Each message is settled by its own outcome.

use sluice_sdk::{Message, config, publish};

fn handle_batch(messages: &[Message]) -> Vec<sluice_sdk::Result> {
    sluice_sdk::info!("{{name}}: {} messages", messages.len());
    // Exactly one outcome per message: a list of any other length fails
    // the whole call, as a panic would, and every message spends an
    // attempt. The timeout is for the whole call too; work that may
    // outlast it asks for more with `sluice_sdk::lease::extend(d)`.
    messages.iter().map(handle).collect()
}

/// Handles one message of the batch, as a `handler` world's `handle` would.
fn handle(message: &Message) -> sluice_sdk::Result {
    sluice_sdk::info!(
        "{{name}}: message {} attempt {}",
        message.id(),
        message.attempt()
    );

    // The payload is bytes. One that is not UTF-8 can never succeed, so `?`
    // rejects this message: dead-lettered at once, no retries.
    // `message.json::<T>()` parses JSON into any serde type the same way.
    let text = message.text()?;

    // Values from the [config] table of {{name}}.toml.
    if let Some(target) = config::get("forward_to") {
        // Held until this call returns, then committed with the ack of the
        // batch's first `done` message, whichever message published: so
        // publish only once the message is sure to be done. When the host
        // refuses it, `?` retries this message after the policy's backoff.
        publish(target).payload(text).send()?;
    }
    // Also possible: `Err(Retry::after(d))`, `Err(Reject::new("why"))`, and
    // `Err(Snooze::after(d))`, which puts the message off without spending
    // an attempt.
    Ok(())
}

sluice_sdk::batch_handler!(handle_batch);

// `cargo test` runs these natively, against the SDK's fake host.
#[cfg(test)]
mod tests {
    use super::*;
    use sluice_sdk::testing::FakeHost;
    use sluice_sdk::{IntoOutcome, Outcome};

    #[test]
    fn settles_each_message_on_its_own() {
        let _host = FakeHost::new();
        let messages = [Message::new("hi"), Message::new(vec![0xff])];
        let outcomes: Vec<Outcome> = handle_batch(&messages)
            .into_iter()
            .map(IntoOutcome::into_outcome)
            .collect();
        assert_eq!(
            outcomes,
            [
                Outcome::Done,
                Outcome::Reject("payload is not UTF-8".into())
            ]
        );
    }
}
