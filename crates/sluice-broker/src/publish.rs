//! Publishing, as the client library and a handler's `publish-to-topic` both
//! do it: why a publish is refused ([`PublishError`]) and how one publish to
//! a topic becomes a copy per bound queue ([`fan_out`]), by the bindings the
//! broker holds at that moment. The routing itself is pure, in
//! [`crate::topic`].

use crate::message::NewMessage;
use crate::topic::{
    ROUTE_HEADER, TOPIC_HEADER, queues_for, unmatched_error, validate_route, validate_topic_name,
};
use crate::{BrokerError, TopicStore};

/// Why a publish was not made. Nothing was enqueued when this is returned,
/// except where a topic publish's copies went to queues on several Redis
/// Cluster slots and the broker failed part way (then retry with the same
/// idempotency key).
#[derive(Debug, thiserror::Error)]
pub enum PublishError {
    /// Bad input: a queue, topic or routing key name, headers, an
    /// idempotency key or a delay that `NewMessage::validate` refuses, a
    /// message over the size limit, or a topic publish that no bound queue
    /// takes.
    #[error("{0}")]
    Refused(String),
    /// The broker could not be reached or failed.
    #[error(transparent)]
    Broker(#[from] BrokerError),
}

/// The copies of `message` that a publish to `topic` with `route` makes: one
/// per bound queue, each with the topic and route in its headers. A publish
/// that matches no pattern is counted; without a catch-all it is refused.
/// `message.queue` is ignored.
pub async fn fan_out(
    store: &dyn TopicStore,
    topic: &str,
    route: &str,
    message: NewMessage,
) -> Result<Vec<NewMessage>, PublishError> {
    validate_topic_name(topic).map_err(PublishError::Refused)?;
    validate_route(route).map_err(PublishError::Refused)?;
    let routed = queues_for(&store.bindings(topic).await?, route);
    if routed.unmatched {
        store.count_unmatched(topic, 1).await?;
        if routed.queues.is_empty() {
            return Err(PublishError::Refused(unmatched_error(topic, route)));
        }
    }
    let mut template = message;
    template
        .headers
        .push((TOPIC_HEADER.to_string(), topic.to_string()));
    template
        .headers
        .push((ROUTE_HEADER.to_string(), route.to_string()));
    Ok(routed
        .queues
        .into_iter()
        .map(|queue| NewMessage {
            queue,
            ..template.clone()
        })
        .collect())
}
