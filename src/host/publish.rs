//! `sluice:handler/publish`: publishes are held in the store and committed
//! with the ack by the worker, or dropped with the attempt. A topic publish
//! is routed when it is made, from the bindings the broker has then, and
//! held as one copy per queue.

use std::time::Duration;

use super::{HostState, MAX_HELD_PUBLISHES};
use crate::client::PublishError;
use crate::message::NewMessage;
use crate::runtime::bindings::sluice::handler::publish::{Host, PublishOptions};
use crate::runtime::limits::TimedOut;
use crate::topic::fan_out;

impl HostState {
    fn hold(&mut self, messages: Vec<NewMessage>) -> Result<(), String> {
        if self.held.len() + messages.len() > MAX_HELD_PUBLISHES {
            return Err(format!(
                "handler {} may publish at most {MAX_HELD_PUBLISHES} messages per message it handles",
                self.handler.name
            ));
        }
        for m in &messages {
            m.validate(self.handler.max_message_size)?;
        }
        self.held.extend(messages);
        Ok(())
    }
}

impl Host for HostState {
    async fn publish_to_topic(
        &mut self,
        topic: String,
        route: String,
        payload: Vec<u8>,
        options: PublishOptions,
    ) -> wasmtime::Result<Result<u32, String>> {
        let Some(store) = self.handler.topics.clone() else {
            return Ok(Err(format!(
                "handler {} cannot publish to topics: this host was started without a broker",
                self.handler.name
            )));
        };
        let message = NewMessage {
            queue: String::new(),
            payload,
            headers: options.headers,
            key: options.key,
            delay: Duration::from_millis(options.delay_ms.unwrap_or(0)),
        };
        // Waiting on the broker runs no wasm, so the epoch deadline cannot
        // end a slow call: bound it by the call's own deadline.
        let deadline = tokio::time::Instant::from_std(self.deadline);
        let routed = tokio::time::timeout_at(deadline, fan_out(&*store, &topic, &route, message));
        let copies = match routed.await {
            Err(_) => return Err(wasmtime::Error::new(TimedOut(self.handler.timeout))),
            Ok(Err(PublishError::Refused(why))) => return Ok(Err(why)),
            Ok(Err(PublishError::Broker(e))) => {
                tracing::warn!(target: "sluice::guest", handler = %self.handler.name, topic, "topic publish failed: {e}");
                return Ok(Err(format!("publish to topic {topic:?} failed: {e}")));
            }
            Ok(Ok(copies)) => copies,
        };
        let n = copies.len() as u32;
        Ok(self.hold(copies).map(|()| n))
    }

    fn publish(
        &mut self,
        queue: String,
        payload: Vec<u8>,
        options: PublishOptions,
    ) -> Result<(), String> {
        let message = NewMessage {
            queue,
            payload,
            headers: options.headers,
            key: options.key,
            delay: Duration::from_millis(options.delay_ms.unwrap_or(0)),
        };
        self.hold(vec![message])
    }
}
