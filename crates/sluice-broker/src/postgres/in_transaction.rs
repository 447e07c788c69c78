//! Enqueue inside the caller's own transaction: the message is committed
//! with the business row beside it, or rolled back with it, so there is
//! never an order without its follow-up nor a follow-up without its order.
//! `sluice_broker::Client::publish_in` is the Rust way in (tokio-postgres); the
//! schema's `publish` function (`migrations/0001_schema.sql`, its checks
//! `0008_publish_checks.sql`) is every other language's.

use tokio_postgres::GenericClient;

use super::queue::Publishes;
use super::{PgBroker, classify};
use crate::Result;
use crate::message::{NewMessage, new_id};

impl PgBroker {
    /// Enqueue `messages` on `client`, a connection of the caller's to the
    /// broker's database, usually inside an open transaction: they are in
    /// the queue once it commits, and never were if it rolls back. The
    /// receivers are woken on commit. Returns the message ids in order.
    pub async fn publish_in(
        &self,
        client: &impl GenericClient,
        messages: &[NewMessage],
    ) -> Result<Vec<String>> {
        let ids: Vec<String> = messages.iter().map(|_| new_id()).collect();
        let mut batch = Publishes::default();
        for (id, m) in ids.iter().zip(messages) {
            batch.push(id.clone(), m);
        }
        batch
            .enqueue(client, &format!("{}.enqueue", self.schema))
            .await
            .map_err(|e| classify("publishing in the caller's transaction", e))?;
        Ok(ids)
    }
}
