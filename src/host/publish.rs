//! `sluice:handler/publish`: publishes are held in the store and committed
//! with the ack by the worker, or dropped with the attempt.

use std::time::Duration;

use super::{HostState, MAX_HELD_PUBLISHES};
use crate::message::NewMessage;
use crate::runtime::bindings::sluice::handler::publish::{Host, PublishOptions};

impl Host for HostState {
    fn publish(
        &mut self,
        queue: String,
        payload: Vec<u8>,
        options: PublishOptions,
    ) -> Result<(), String> {
        if self.held.len() >= MAX_HELD_PUBLISHES {
            return Err(format!(
                "handler {} may publish at most {MAX_HELD_PUBLISHES} messages per message it handles",
                self.handler.name
            ));
        }
        let message = NewMessage {
            queue,
            payload,
            headers: options.headers,
            key: options.key,
            delay: Duration::from_millis(options.delay_ms.unwrap_or(0)),
        };
        message.validate(self.handler.max_message_size)?;
        self.held.push(message);
        Ok(())
    }
}
