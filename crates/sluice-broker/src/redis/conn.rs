//! Connections to a single Redis or to a cluster behind one
//! `ConnectionLike`, and how Redis errors become broker errors.

use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Pipeline, RedisError, RedisFuture, Value};

use crate::BrokerError;

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

/// Where new connections come from: one Redis, or a cluster (a client for
/// calls that answer at once, and one for readers, whose idle waits block
/// for up to [`IDLE_MOST`](crate::IDLE_MOST)).
#[derive(Clone)]
pub(super) enum Client {
    Single(redis::Client),
    Cluster(Box<[redis::cluster::ClusterClient; 2]>),
}

/// How long a call may go unanswered before its connection is taken for
/// lost.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(10);

/// The same, for a reader's connection, whose idle waits block.
const BLOCKING_RESPONSE_TIMEOUT: Duration =
    Duration::from_secs(crate::IDLE_MOST.as_secs() + RESPONSE_TIMEOUT.as_secs());

impl Client {
    /// The client for `url`, and whether it is a cluster: a node with
    /// cluster mode on is used through a cluster-aware client.
    pub(super) async fn open(url: &str) -> anyhow::Result<(Client, bool)> {
        let single =
            redis::Client::open(url).map_err(|e| anyhow::anyhow!("bad Redis URL {url:?}: {e}"))?;
        let mut probe = tokio::time::timeout(
            Duration::from_secs(5),
            single.get_multiplexed_async_connection(),
        )
        .await
        .map_err(|_| anyhow::anyhow!("cannot connect to Redis at {url}: timed out"))?
        .map_err(|e| anyhow::anyhow!("cannot connect to Redis at {url}: {e}"))?;
        let info: String = redis::cmd("INFO")
            .arg("cluster")
            .query_async(&mut probe)
            .await
            .map_err(|e| anyhow::anyhow!("Redis at {url} did not answer INFO: {e}"))?;
        if !info.contains("cluster_enabled:1") {
            return Ok((Client::Single(single), false));
        }
        let cluster = |timeout| {
            redis::cluster::ClusterClientBuilder::new(vec![url])
                .retries(6)
                .connection_timeout(Duration::from_secs(2))
                .response_timeout(timeout)
                .build()
                .map_err(|e| anyhow::anyhow!("bad Redis Cluster URL {url:?}: {e}"))
        };
        let clients = [
            cluster(RESPONSE_TIMEOUT)?,
            cluster(BLOCKING_RESPONSE_TIMEOUT)?,
        ];
        Ok((Client::Cluster(Box::new(clients)), true))
    }

    /// A new connection that reconnects on its own.
    pub(super) async fn connect(&self) -> redis::RedisResult<Conn> {
        self.connect_with(RESPONSE_TIMEOUT).await
    }

    /// A new connection for a reader, whose idle waits block for up to
    /// [`IDLE_MOST`](crate::IDLE_MOST).
    pub(super) async fn connect_blocking(&self) -> redis::RedisResult<Conn> {
        self.connect_with(BLOCKING_RESPONSE_TIMEOUT).await
    }

    async fn connect_with(&self, timeout: Duration) -> redis::RedisResult<Conn> {
        match self {
            Client::Single(c) => {
                let config = ConnectionManagerConfig::new()
                    .set_number_of_retries(3)
                    .set_max_delay(Duration::from_secs(2))
                    .set_connection_timeout(Some(Duration::from_secs(2)))
                    .set_response_timeout(Some(timeout));
                Ok(Conn::Single(
                    ConnectionManager::new_with_config(c.clone(), config).await?,
                ))
            }
            Client::Cluster(clients) => {
                let client = if timeout == RESPONSE_TIMEOUT {
                    &clients[0]
                } else {
                    &clients[1]
                };
                Ok(Conn::Cluster(client.get_async_connection().await?))
            }
        }
    }
}

/// A Redis error as a broker error: a connection that failed, dropped or
/// timed out, or a node that is loading, resharding, failing over, out of
/// memory or unable to persist, may answer the same command later; anything
/// else (a script error, a missing permission, a wrong type) is this
/// command's own failure.
pub(super) fn classify(e: RedisError) -> BrokerError {
    let transient = e.is_io_error()
        || e.is_connection_dropped()
        || e.is_timeout()
        || e.is_connection_refusal()
        || !matches!(e.retry_method(), redis::RetryMethod::NoRetry)
        || matches!(
            e.code(),
            Some(
                "LOADING"
                    | "TRYAGAIN"
                    | "CLUSTERDOWN"
                    | "MASTERDOWN"
                    | "BUSY"
                    | "READONLY"
                    | "OOM"
                    | "MISCONF"
                    | "NOREPLICAS"
            )
        );
    if transient {
        BrokerError::unavailable("Redis", e)
    } else {
        BrokerError::refused("Redis", e)
    }
}

#[cfg(test)]
mod tests {
    use redis::{ErrorKind, RedisError, ServerErrorKind};

    use super::classify;

    #[test]
    fn errors_that_may_clear_up_are_unavailable_and_the_rest_refused() {
        let server = |kind, text| RedisError::from((ErrorKind::Server(kind), text));
        let io = |kind| RedisError::from(std::io::Error::from(kind));
        // Each error, and whether the same call may succeed later.
        let cases = [
            (io(std::io::ErrorKind::ConnectionRefused), true),
            (io(std::io::ErrorKind::ConnectionReset), true),
            (server(ServerErrorKind::BusyLoading, "loading"), true),
            (server(ServerErrorKind::TryAgain, "resharding"), true),
            (server(ServerErrorKind::ClusterDown, "down"), true),
            (server(ServerErrorKind::MasterDown, "down"), true),
            // The client reconnects after a refused login: what it waits
            // for may be fixed meanwhile, and a settlement is never dropped.
            ((ErrorKind::AuthenticationFailed, "WRONGPASS").into(), true),
            (
                server(ServerErrorKind::ResponseError, "ERR in script"),
                false,
            ),
            (
                (ErrorKind::UnexpectedReturnType, "not an integer").into(),
                false,
            ),
        ];
        for (e, unavailable) in cases {
            let text = e.to_string();
            let classified = classify(e);
            assert_eq!(classified.is_unavailable(), unavailable, "{text}");
            // The client's error is kept as the cause.
            assert!(std::error::Error::source(&classified).is_some(), "{text}");
        }
    }
}
