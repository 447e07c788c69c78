//! The worlds a handler component may implement, and calling each: the
//! current package's `handler` and `batch-handler`, and the first
//! package's `handler`. Messages and outcomes are turned into each one's
//! generated types here and nowhere else.

use std::time::Duration;

use wasmtime::Store;
use wasmtime::component::{Component, InstancePre};

use crate::message::Delivery;
use crate::policy::Outcome;
use crate::sandbox::imports::HostState;
use crate::sandbox::wit;

/// A world sluice serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum World {
    /// `sluice:handler/handler@0.2.0`: `handle`, one message a call.
    Handler,
    /// `sluice:handler/batch-handler@0.2.0`: `handle-batch`.
    Batch,
    /// `sluice:handler/handler@0.1.0`: `handle`, without snooze or lease.
    HandlerV1,
}

impl World {
    /// The world's full name, as `sluice check` prints it.
    pub fn name(self) -> &'static str {
        match self {
            World::Handler => "sluice:handler/handler@0.2.0",
            World::Batch => "sluice:handler/batch-handler@0.2.0",
            World::HandlerV1 => "sluice:handler/handler@0.1.0",
        }
    }

    /// Whether its calls take a batch of messages.
    pub fn is_batch(self) -> bool {
        self == World::Batch
    }
}

/// A component linked and checked against its world, ready to instantiate.
#[derive(Clone)]
pub enum Pre {
    Handler(wit::HandlerPre<HostState>),
    Batch(wit::batch::BatchHandlerPre<HostState>),
    HandlerV1(wit::v1::HandlerPre<HostState>),
}

impl Pre {
    /// Check `pre` against each world, the current ones first. The error,
    /// when none fits, is the one of the world the component looks meant
    /// for: batch if it exports `handle-batch`, 0.1.0 if it imports from
    /// that package, the current `handler` otherwise.
    pub fn new(component: &Component, pre: InstancePre<HostState>) -> wasmtime::Result<Pre> {
        let single = match wit::HandlerPre::new(pre.clone()) {
            Ok(p) => return Ok(Pre::Handler(p)),
            Err(e) => e,
        };
        let batch = match wit::batch::BatchHandlerPre::new(pre.clone()) {
            Ok(p) => return Ok(Pre::Batch(p)),
            Err(e) => e,
        };
        let v1 = match wit::v1::HandlerPre::new(pre) {
            Ok(p) => return Ok(Pre::HandlerV1(p)),
            Err(e) => e,
        };
        let ty = component.component_type();
        let engine = component.engine();
        if ty.exports(engine).any(|(name, _)| name == "handle-batch") {
            return Err(batch);
        }
        if ty
            .imports(engine)
            .any(|(name, _)| name.starts_with("sluice:handler/") && name.ends_with("@0.1.0"))
        {
            return Err(v1);
        }
        Err(single)
    }

    pub fn world(&self) -> World {
        match self {
            Pre::Handler(_) => World::Handler,
            Pre::Batch(_) => World::Batch,
            Pre::HandlerV1(_) => World::HandlerV1,
        }
    }

    /// A new instance in `store`.
    pub async fn instantiate(&self, store: &mut Store<HostState>) -> wasmtime::Result<Instance> {
        Ok(match self {
            Pre::Handler(p) => Instance::Handler(p.instantiate_async(store).await?),
            Pre::Batch(p) => Instance::Batch(p.instantiate_async(store).await?),
            Pre::HandlerV1(p) => Instance::HandlerV1(p.instantiate_async(store).await?),
        })
    }
}

/// An instance of one of the worlds.
pub enum Instance {
    Handler(wit::Handler),
    Batch(wit::batch::BatchHandler),
    HandlerV1(wit::v1::Handler),
}

/// What a call answered: one outcome, or a batch handler's list (of any
/// length: the caller checks it).
#[derive(Debug)]
pub enum Answer {
    One(Outcome),
    Many(Vec<Outcome>),
}

impl Instance {
    /// Call the export for `deliveries`: one message for `handle`, any
    /// number for `handle-batch`.
    pub async fn call(
        &self,
        store: &mut Store<HostState>,
        deliveries: &[Delivery],
    ) -> wasmtime::Result<Answer> {
        match self {
            Instance::Handler(h) => {
                let outcome = h.call_handle(store, &message(&deliveries[0])).await?;
                Ok(Answer::One(from_wit(outcome)))
            }
            Instance::HandlerV1(h) => {
                let outcome = h.call_handle(store, &message_v1(&deliveries[0])).await?;
                Ok(Answer::One(from_v1(outcome)))
            }
            Instance::Batch(h) => {
                let messages: Vec<wit::Message> = deliveries.iter().map(message).collect();
                let outcomes = h.call_handle_batch(store, &messages).await?;
                Ok(Answer::Many(outcomes.into_iter().map(from_wit).collect()))
            }
        }
    }
}

fn message(d: &Delivery) -> wit::Message {
    wit::Message {
        id: d.id.clone(),
        key: d.key.clone(),
        queue: d.queue.clone(),
        payload: d.payload.clone(),
        headers: d.headers.clone(),
        attempt: d.attempt,
        enqueued_at_ms: d.enqueued_at_ms(),
    }
}

fn message_v1(d: &Delivery) -> wit::v1::Message {
    wit::v1::Message {
        id: d.id.clone(),
        key: d.key.clone(),
        queue: d.queue.clone(),
        payload: d.payload.clone(),
        headers: d.headers.clone(),
        attempt: d.attempt,
        enqueued_at_ms: d.enqueued_at_ms(),
    }
}

fn from_wit(outcome: wit::Outcome) -> Outcome {
    match outcome {
        wit::Outcome::Done => Outcome::Done,
        wit::Outcome::Retry(ms) => Outcome::Retry(ms.map(Duration::from_millis)),
        wit::Outcome::Reject(reason) => Outcome::Reject(reason),
        wit::Outcome::Snooze(ms) => Outcome::Snooze(Duration::from_millis(ms)),
    }
}

fn from_v1(outcome: wit::v1::Outcome) -> Outcome {
    match outcome {
        wit::v1::Outcome::Done => Outcome::Done,
        wit::v1::Outcome::Retry(ms) => Outcome::Retry(ms.map(Duration::from_millis)),
        wit::v1::Outcome::Reject(reason) => Outcome::Reject(reason),
    }
}
