//! Connections to a single Redis or to a cluster behind one
//! `ConnectionLike`, and how Redis errors become broker errors.

use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Pipeline, RedisError, RedisFuture, Value};

use crate::broker::BrokerError;

/// A connection to a single Redis or to a cluster. Both reconnect on their
/// own; a command issued while Redis is away fails, and callers back off.
#[derive(Clone)]
pub(super) enum Conn {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Single(c) => c.req_packed_command(cmd),
            Conn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Single(c) => c.req_packed_commands(cmd, offset, count),
            Conn::Cluster(c) => c.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
        }
    }
}

#[derive(Clone)]
pub(super) enum Client {
    Single(redis::Client),
    Cluster(Box<redis::cluster::ClusterClient>),
}

impl Client {
    pub(super) async fn connect(&self) -> redis::RedisResult<Conn> {
        match self {
            Client::Single(c) => {
                let config = ConnectionManagerConfig::new()
                    .set_number_of_retries(3)
                    .set_max_delay(Duration::from_secs(2))
                    .set_connection_timeout(Some(Duration::from_secs(2)))
                    .set_response_timeout(Some(Duration::from_secs(10)));
                Ok(Conn::Single(
                    ConnectionManager::new_with_config(c.clone(), config).await?,
                ))
            }
            Client::Cluster(c) => Ok(Conn::Cluster(c.get_async_connection().await?)),
        }
    }
}

pub(super) fn classify(e: RedisError) -> BrokerError {
    if e.is_io_error() || e.is_connection_dropped() || e.is_timeout() || e.is_connection_refusal() {
        BrokerError::Unavailable(format!("Redis: {e}"))
    } else {
        BrokerError::Storage(format!("Redis: {e}"))
    }
}
