//! Publishing from Rust applications: [`Client`] puts messages into sluice
//! queues and topics on any broker, the same way `sluice send` does, and on
//! PostgreSQL inside the application's own transactions
//! (`Client::publish_in`, with the feature `postgres`).
//!
//! ```no_run
//! # async fn demo() -> anyhow::Result<()> {
//! use sluice_broker::client::{Client, PublishOptions};
//!
//! let client = Client::connect("sqlite://sluice.db").await?;
//! // One message into one queue; the id comes back.
//! let id = client.publish("orders", br#"{"id": 7, "qty": 2}"#).await?;
//! // With an idempotency key, a header and a delay.
//! let options = PublishOptions::default()
//!     .key("order-7")
//!     .header("source", "shop")
//!     .delay(std::time::Duration::from_secs(5));
//! client.publish_with("orders", b"...", options).await?;
//! // Into every queue bound to a topic with a matching route.
//! let copies = client
//!     .publish_to_topic("orders", "orders.eu.created", b"...")
//!     .await?;
//! println!("{id}; the topic publish reached {} queues", copies.len());
//! # Ok(())
//! # }
//! ```

use std::sync::Arc;
use std::time::Duration;

use crate::Broker;
#[cfg(feature = "postgres")]
use crate::PgBroker;
use crate::message::{DEFAULT_MAX_MESSAGE_SIZE, NewMessage};
pub use crate::publish::PublishError;
use crate::publish::fan_out;
use crate::trace;
/// The PostgreSQL client [`Client::publish_in`] takes transactions of.
#[cfg(feature = "postgres")]
pub use tokio_postgres;

/// Optional settings of one publish.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PublishOptions {
    /// Headers, in order; a `traceparent` among them is continued.
    pub headers: Vec<(String, String)>,
    /// Idempotency key; the new message's id when `None`.
    pub key: Option<String>,
    /// Deliver no earlier than this long after the publish.
    pub delay: Duration,
}

impl PublishOptions {
    /// With idempotency key `key`: of the messages with one key, a handler
    /// completes one within the key's retention.
    pub fn key(mut self, key: impl Into<String>) -> Self {
        self.key = Some(key.into());
        self
    }

    /// With header `name: value` added after those already given.
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// Delivered no earlier than `delay` after the publish.
    pub fn delay(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }

    fn message(self, queue: &str, payload: &[u8]) -> NewMessage {
        NewMessage {
            queue: queue.to_string(),
            payload: payload.to_vec(),
            headers: self.headers,
            key: self.key,
            delay: self.delay,
        }
    }
}

/// One copy of a topic publish: the queue it went to and its message id.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct TopicCopy {
    /// The queue the copy went to.
    pub queue: String,
    /// The copy's message id in that queue.
    pub id: String,
}

/// A publisher on one broker. Cheap to clone; share one per application.
#[derive(Clone)]
pub struct Client {
    broker: Arc<dyn Broker>,
    /// The same broker when it is PostgreSQL, for [`Client::publish_in`].
    #[cfg(feature = "postgres")]
    postgres: Option<Arc<PgBroker>>,
    max_message_size: u64,
}

impl Client {
    /// Connect to `sqlite://PATH`, `redis://HOST:PORT[/DB]` or
    /// `postgres://USER@HOST:PORT/DB[?schema=NAME]`.
    pub async fn connect(url: &str) -> anyhow::Result<Self> {
        #[cfg(feature = "postgres")]
        if crate::is_postgres(url) {
            return Ok(Client::from_postgres(Arc::new(
                PgBroker::connect(url).await?,
            )));
        }
        Ok(Client::from_broker(crate::connect(url).await?))
    }

    /// Publish through a broker that is already open.
    pub fn from_broker(broker: Arc<dyn Broker>) -> Self {
        Client {
            broker,
            #[cfg(feature = "postgres")]
            postgres: None,
            max_message_size: DEFAULT_MAX_MESSAGE_SIZE,
        }
    }

    /// Publish through a PostgreSQL broker that is already open; this one
    /// can also publish inside the caller's transactions
    /// ([`Client::publish_in`]).
    #[cfg(feature = "postgres")]
    pub fn from_postgres(broker: Arc<PgBroker>) -> Self {
        Client {
            postgres: Some(broker.clone()),
            ..Client::from_broker(broker)
        }
    }

    /// Refuse messages over `bytes` of payload and headers (default 1 MiB,
    /// as `max_message_size` in `sluice.toml`).
    pub fn with_max_message_size(mut self, bytes: u64) -> Self {
        self.max_message_size = bytes;
        self
    }

    /// Publish `payload` to `queue`; returns the message id.
    pub async fn publish(&self, queue: &str, payload: &[u8]) -> Result<String, PublishError> {
        self.publish_with(queue, payload, PublishOptions::default())
            .await
    }

    /// Publish `payload` to `queue` with `options`; returns the message id.
    pub async fn publish_with(
        &self,
        queue: &str,
        payload: &[u8],
        options: PublishOptions,
    ) -> Result<String, PublishError> {
        let ids = self
            .publish_all(vec![options.message(queue, payload)])
            .await?;
        Ok(ids.into_iter().next().expect("one id per message"))
    }

    /// Publish several messages, to any queues, in one broker call; returns
    /// their ids in order. On SQLite they commit together.
    ///
    /// Each message carries a W3C trace context: the `traceparent` header it
    /// has, continued, or else a new trace's, so that the handlers' attempt
    /// spans (and what they publish) join one trace.
    pub async fn publish_all(
        &self,
        mut messages: Vec<NewMessage>,
    ) -> Result<Vec<String>, PublishError> {
        for m in &mut messages {
            m.validate(self.max_message_size)
                .map_err(PublishError::Refused)?;
            trace::start_or_continue(&mut m.headers);
        }
        Ok(self.broker.publish(messages).await?)
    }

    /// Publish `messages` inside `tx`, a transaction the caller holds open
    /// on the broker's PostgreSQL database (a `tokio_postgres::Transaction`,
    /// or a client in autocommit): the messages are in their queues once it
    /// commits, and never were if it rolls back. Returns their ids in order.
    /// Only a client connected to a `postgres://` broker can do this; the
    /// caller's role needs `USAGE` on the broker's schema and `EXECUTE` on
    /// its functions (the owner has both).
    ///
    /// ```no_run
    /// # async fn demo(db: &mut tokio_postgres::Client) -> anyhow::Result<()> {
    /// use sluice_broker::client::Client;
    /// use sluice_broker::message::NewMessage;
    ///
    /// let sluice = Client::connect("postgres://shop@localhost/shop").await?;
    /// let tx = db.transaction().await?;
    /// tx.execute("INSERT INTO orders (id) VALUES (7)", &[]).await?;
    /// sluice
    ///     .publish_in(&tx, vec![NewMessage::new("orders", r#"{"id": 7}"#)])
    ///     .await?;
    /// tx.commit().await?; // the order and its message, or neither
    /// # Ok(())
    /// # }
    /// ```
    #[cfg(feature = "postgres")]
    pub async fn publish_in(
        &self,
        tx: &impl tokio_postgres::GenericClient,
        mut messages: Vec<NewMessage>,
    ) -> Result<Vec<String>, PublishError> {
        let Some(postgres) = &self.postgres else {
            return Err(PublishError::Refused(
                "publish_in needs a client connected to a postgres:// broker: the messages go into the caller's PostgreSQL transaction".into(),
            ));
        };
        for m in &mut messages {
            m.validate(self.max_message_size)
                .map_err(PublishError::Refused)?;
            trace::start_or_continue(&mut m.headers);
        }
        Ok(postgres.publish_in(tx, &messages).await?)
    }

    /// Publish `payload` to `topic` with routing key `route`: one copy into
    /// every queue whose binding matches, or into the topic's catch-all
    /// queues when none does. Refused when no queue would take it.
    pub async fn publish_to_topic(
        &self,
        topic: &str,
        route: &str,
        payload: &[u8],
    ) -> Result<Vec<TopicCopy>, PublishError> {
        self.publish_to_topic_with(topic, route, payload, PublishOptions::default())
            .await
    }

    /// [`Client::publish_to_topic`] with `options`, given to every copy.
    pub async fn publish_to_topic_with(
        &self,
        topic: &str,
        route: &str,
        payload: &[u8],
        options: PublishOptions,
    ) -> Result<Vec<TopicCopy>, PublishError> {
        // Every copy is in the same trace.
        let mut message = options.message("", payload);
        trace::start_or_continue(&mut message.headers);
        let copies = fan_out(&*self.broker, topic, route, message).await?;
        let queues: Vec<String> = copies.iter().map(|c| c.queue.clone()).collect();
        let ids = self.publish_all(copies).await?;
        Ok(queues
            .into_iter()
            .zip(ids)
            .map(|(queue, id)| TopicCopy { queue, id })
            .collect())
    }

    /// The broker this client publishes to.
    pub fn broker(&self) -> &Arc<dyn Broker> {
        &self.broker
    }
}
