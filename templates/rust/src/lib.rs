//! The {{name}} handler for sluice: called with each message of the queue
//! `{{name}}`, it returns what to do with it.

use sluice_sdk::{Message, config, publish};

fn handle(message: &Message) -> sluice_sdk::Result {
    sluice_sdk::info!(
        "{{name}}: message {} attempt {}",
        message.id(),
        message.attempt()
    );

    // The payload is bytes. One that is not UTF-8 can never succeed, so `?`
    // rejects it: dead-lettered at once, no retries. `message.json::<T>()`
    // parses JSON into any serde type, rejecting what does not parse.
    let text = message.text()?;

    // Values from the [config] table of {{name}}.toml.
    if let Some(target) = config::get("forward_to") {
        // Held until this call returns; committed together with the ack.
        // When the host refuses it, `?` retries the message after the
        // policy's backoff and logs why.
        publish(target).payload(text).send()?;
    }
    // Also possible: `Err(Retry::after(Duration::from_secs(5)))` retries
    // after a delay of your choosing, `Err(Reject::new("why"))` dead-letters
    // the message now, `Err(Snooze::after(d))` puts it off without spending
    // an attempt. Work that may outlast the timeout asks for more time with
    // `sluice_sdk::lease::extend(d)`, and `sluice_sdk::kv` is the handler's
    // own key-value store (granted by `kv = true` under [capabilities]).
    Ok(())
}

sluice_sdk::handler!(handle);

// `cargo test` runs these natively, against the SDK's fake host.
#[cfg(test)]
mod tests {
    use super::*;
    use sluice_sdk::testing::{FakeHost, To};

    #[test]
    fn forwards_to_the_configured_queue() {
        let host = FakeHost::new().with_config("forward_to", "elsewhere");
        assert_eq!(handle(&Message::new("hi")), Ok(()));
        let published = host.published();
        assert_eq!(published[0].to, To::Queue("elsewhere".into()));
        assert_eq!(published[0].payload, b"hi");
    }
}
