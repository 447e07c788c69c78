//! `sluice:handler/publish`: publishes are held in the store and committed
//! with the ack by the worker, or dropped with the attempt. A topic publish
//! is routed when it is made, from the bindings the broker has then, and
//! held as one copy per queue.

use std::time::Duration;

use super::capture::{Capture, Publish, Target};
use super::{HostState, MAX_HELD_PUBLISHES};
use crate::error::chain;
use crate::message::NewMessage;
use crate::publish::{PublishError, fan_out};
use crate::sandbox::wit::sluice::handler::publish::{Host, PublishOptions};
use crate::topic::{validate_route, validate_topic_name};

impl HostState {
    fn hold(&mut self, messages: Vec<NewMessage>) -> Result<(), String> {
        if self.held.len() + messages.len() > self.held_limit {
            return Err(format!(
                "handler {} may publish at most {MAX_HELD_PUBLISHES} messages per message it handles",
                self.handler.name
            ));
        }
        for m in &messages {
            m.validate(self.handler.max_message_size)?;
        }
        let bytes: u64 = messages
            .iter()
            .map(|m| m.size() + m.queue.len() as u64)
            .sum();
        self.charge(bytes, "publish this")?;
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
    ) -> Result<u32, String> {
        if let Some(capture) = self.handler.capture.clone() {
            return self.record_topic_publish(&capture, topic, route, payload, options);
        }
        let Some(store) = self.handler.topics.as_deref() else {
            return Err(format!(
                "handler {} cannot publish to topics: this host was started without a broker",
                self.handler.name
            ));
        };
        // A broker slow to answer is bounded by the timer around the whole
        // `handle` call (see `Handler::call`).
        let routed = fan_out(
            store,
            &topic,
            &route,
            message(String::new(), payload, options),
        )
        .await;
        let copies = match routed {
            Ok(copies) => copies,
            Err(PublishError::Refused(why)) => return Err(why),
            Err(PublishError::Broker(e)) => {
                let e = chain(&e);
                tracing::warn!(target: "sluice::guest", handler = %self.handler.name, topic, "topic publish failed: {e}");
                return Err(format!("publish to topic {topic:?} failed: {e}"));
            }
        };
        let n = copies.len() as u32;
        self.hold(copies).map(|()| n)
    }

    fn publish(
        &mut self,
        queue: String,
        payload: Vec<u8>,
        options: PublishOptions,
    ) -> Result<(), String> {
        let m = message(queue, payload, options);
        let recorded = self.handler.capture.as_ref().map(|_| m.clone());
        self.hold(vec![m])?;
        if let (Some(capture), Some(m)) = (&self.handler.capture, recorded) {
            capture.publish(recorded_publish(Target::Queue(m.queue.clone()), m));
        }
        Ok(())
    }
}

impl HostState {
    /// A topic publish under a capture: checked and held as one copy, as a
    /// host would hold each, and recorded with its topic and routing key;
    /// no bindings are looked up.
    fn record_topic_publish(
        &mut self,
        capture: &Capture,
        topic: String,
        route: String,
        payload: Vec<u8>,
        options: PublishOptions,
    ) -> Result<u32, String> {
        validate_topic_name(&topic)?;
        validate_route(&route)?;
        let m = message(topic.clone(), payload, options);
        self.hold(vec![m.clone()])?;
        capture.publish(recorded_publish(Target::Topic { topic, route }, m));
        Ok(1)
    }
}

fn recorded_publish(target: Target, m: NewMessage) -> Publish {
    Publish {
        target,
        key: m.key,
        delay: m.delay,
        headers: m.headers,
        payload: m.payload,
    }
}

/// The message a guest's publish to `queue` makes.
fn message(queue: String, payload: Vec<u8>, options: PublishOptions) -> NewMessage {
    NewMessage {
        queue,
        payload,
        headers: options.headers,
        key: options.key,
        delay: Duration::from_millis(options.delay_ms.unwrap_or(0)),
    }
}
