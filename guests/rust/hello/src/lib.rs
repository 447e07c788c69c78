//! Minimal handler: logs one line and acks. Used as the benchmark guest.
use sluice_guest::{Guest, Level, Message, Outcome, log};

struct Hello;

impl Guest for Hello {
    fn handle(message: Message) -> Outcome {
        log(
            Level::Info,
            &format!(
                "hello from sluice: message {} attempt {}",
                message.id, message.attempt
            ),
        );
        Outcome::Done
    }
}

sluice_guest::export!(Hello);
