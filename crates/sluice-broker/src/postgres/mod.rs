//! The PostgreSQL broker: the queue in a database many hosts share, in a
//! schema of its own (`sluice` unless the URL says `?schema=NAME`).
//!
//! A message is one row of `messages` while it waits or is leased, and is
//! deleted when it is settled for good, so the hot table and its index hold
//! only live messages. Receiving takes due rows with `FOR UPDATE SKIP
//! LOCKED`, so hosts never wait on each other's picks. The rest of the
//! queue role runs in SQL functions of the schema (`claim`, `settle`,
//! `extend`, `enqueue`), one statement and one round trip per batch; the
//! same `publish` function lets any language enqueue inside its own
//! transaction.
//!
//! The schema is SQL files of its own, one a version
//! (`migrations/0001_schema.sql`, every role's tables and functions, then
//! `0002_….sql` on, what each later version changed); `migrate.rs` creates
//! the schema and brings it up to this build's version under an advisory
//! lock. The roles are one file each, as on the other backends; `wake.rs`
//! listens for the notifications that end an idle worker's wait,
//! `vacuum.rs` keeps the churned tables small, `tls.rs` speaks TLS when
//! the URL asks, and `in_transaction.rs` enqueues on the caller's own
//! connection (`sluice_broker::Client::publish_in`).
//!
//! Ordered groups and flow limits hold across all the hosts that share the
//! database, as on the other backends, and the broker passes the whole
//! conformance suite. A message's group is taken in SQL when it is
//! enqueued, so one published from SQL is grouped like any other; a
//! group's row in `groups` is what publishing to it and moving it on take
//! turns on (`groups.rs`). A queue with `max_in_flight` or
//! `rate` is received through `lease_limited`, whose receives take turns
//! on the queue's row of `flow` (which holds the rate bucket), so hosts
//! receiving at once never both take the last place; a queue without
//! limits keeps the plain, lock-free `SKIP LOCKED` pick.

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use tokio_postgres::error::SqlState;

use super::{BrokerError, Result};

mod dead;
mod groups;
mod in_transaction;
mod kv;
mod migrate;
mod presence;
mod queue;
mod schedules;
mod tls;
mod topics;
mod vacuum;
mod wake;

/// The schema the broker's tables live in when the URL names none.
pub(crate) const DEFAULT_SCHEMA: &str = "sluice";
/// Most connections one host opens.
const POOL_SIZE: usize = 16;
/// How long opening a connection may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The PostgreSQL broker: a pool of connections whose search path is the
/// broker's schema.
pub struct PgBroker {
    pool: Pool,
    schema: String,
    /// Receivers waiting for their queues' notifications (`wake.rs`).
    wakes: Arc<wake::Wakes>,
    /// Rows of `messages` changed since the last vacuum (`vacuum.rs`).
    churn: Arc<vacuum::Churn>,
}

impl PgBroker {
    /// Connect to the database `url` names (`postgres://USER[:PASSWORD]@HOST
    /// [:PORT]/DB[?schema=NAME][&sslmode=require[&sslrootcert=PATH]]`),
    /// then create or upgrade the broker's schema. Each way this can fail
    /// is one line that says what to fix.
    pub async fn connect(url: &str) -> anyhow::Result<Self> {
        let (mut config, schema, tls) = parse_url(url)?;
        let tls = tls
            .connector()
            .map_err(|e| anyhow::anyhow!("broker URL {url:?}: {e}"))?;
        let options = config.get_options().unwrap_or_default().to_string();
        // The schema first on the search path; no NOTICEs (`IF NOT
        // EXISTS` in migrations says "already exists, skipping"), which the
        // client would log at info on every command line; and no JIT: the
        // broker's statements touch a batch of rows each, and a planner
        // estimate made on a table without statistics can cost a JIT
        // compile of several hundred milliseconds per call.
        config.options(
            format!("{options} -c search_path={schema} -c client_min_messages=warning -c jit=off")
                .trim(),
        );
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(CONNECT_TIMEOUT);
        }
        let place = describe(&config);
        let (mut client, connection) = config
            .connect(tls.clone())
            .await
            .map_err(|e| anyhow::anyhow!("{}", connect_error(&config, &place, &e)))?;
        let driver = tokio::spawn(connection);
        let migrated = migrate::prepare(&mut client, &schema).await;
        drop(client);
        let _ = driver.await;
        migrated.map_err(|e| anyhow::anyhow!("PostgreSQL broker at {place}: {e:#}"))?;
        let wakes = Arc::new(wake::Wakes::default());
        tokio::spawn(wake::listen(
            config.clone(),
            tls.clone(),
            schema.clone(),
            Arc::downgrade(&wakes),
        ));
        let manager = Manager::from_config(
            config,
            tls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(POOL_SIZE)
            .build()
            .map_err(|e| anyhow::anyhow!("PostgreSQL broker at {place}: {e}"))?;
        let churn = Arc::new(vacuum::Churn::default());
        tokio::spawn(vacuum::run(pool.clone(), Arc::downgrade(&churn)));
        Ok(PgBroker {
            pool,
            schema,
            wakes,
            churn,
        })
    }

    /// The schema the broker's tables are in.
    pub fn schema(&self) -> &str {
        &self.schema
    }

    /// A connection of the pool, for `context`.
    async fn conn(&self, context: &str) -> Result<deadpool_postgres::Object> {
        self.pool.get().await.map_err(|e| match e {
            deadpool_postgres::PoolError::Backend(e) => classify(context, e),
            other => BrokerError::unavailable(context, std::io::Error::other(other.to_string())),
        })
    }
}

/// Split a broker URL into the client's settings, the schema (its own
/// `schema` parameter, which the client does not know) and TLS.
fn parse_url(url: &str) -> anyhow::Result<(tokio_postgres::Config, String, tls::TlsSettings)> {
    let hint = "write it like postgres://USER@HOST:PORT/DB (optionally ?schema=NAME)";
    let (base, query) = url.split_once('?').unwrap_or((url, ""));
    let mut schema = DEFAULT_SCHEMA.to_string();
    let mut tls = tls::TlsSettings::default();
    let mut rest = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        match pair.split_once('=') {
            Some(("schema", name)) => schema = name.to_string(),
            Some((key, value)) => {
                let taken = tls
                    .take(key, value)
                    .map_err(|e| anyhow::anyhow!("broker URL {url:?}: {e}"))?;
                if !taken {
                    rest.push(pair);
                }
            }
            None => rest.push(pair),
        }
    }
    if !is_identifier(&schema) {
        anyhow::bail!(
            "broker URL {url:?}: schema {schema:?} is not a plain name: use lower-case letters, digits and _, starting with a letter or _"
        );
    }
    let client_url = if rest.is_empty() {
        base.to_string()
    } else {
        format!("{base}?{}", rest.join("&"))
    };
    let mut config = tokio_postgres::Config::from_str(&client_url)
        .map_err(|e| anyhow::anyhow!("broker URL {url:?} does not parse ({e}): {hint}"))?;
    tls.apply(&mut config)
        .map_err(|e| anyhow::anyhow!("broker URL {url:?}: {e}"))?;
    if config.get_dbname().is_none() {
        anyhow::bail!("broker URL {url:?} names no database: {hint}");
    }
    if config.get_user().is_none() {
        anyhow::bail!("broker URL {url:?} names no user: {hint}");
    }
    Ok((config, schema, tls))
}

/// Whether `name` can be a schema name as written, unquoted.
fn is_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c == '_')
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        && name.len() <= 63
}

/// "database DB as USER on HOST:PORT", for messages.
fn describe(config: &tokio_postgres::Config) -> String {
    let host = match config.get_hosts().first() {
        Some(tokio_postgres::config::Host::Tcp(h)) => h.clone(),
        Some(tokio_postgres::config::Host::Unix(p)) => p.display().to_string(),
        None => "localhost".into(),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    format!(
        "database {:?} as {:?} on {host}:{port}",
        config.get_dbname().unwrap_or_default(),
        config.get_user().unwrap_or_default()
    )
}

/// One line on why connecting failed, and what to do about it.
fn connect_error(
    config: &tokio_postgres::Config,
    place: &str,
    e: &tokio_postgres::Error,
) -> String {
    let user = config.get_user().unwrap_or_default();
    let db = config.get_dbname().unwrap_or_default();
    let Some(db_error) = e.as_db_error() else {
        let text = with_causes(e);
        if text.contains("TLS") || text.contains("tls") {
            return format!(
                "TLS to PostgreSQL failed for {place}: {text}: check that the server has ssl = on and that sslrootcert names the CA that signed its certificate"
            );
        }
        return format!(
            "cannot reach PostgreSQL for {place}: {text}: is the server running and listening there?"
        );
    };
    let code = db_error.code();
    if *code == SqlState::INVALID_PASSWORD {
        format!(
            "PostgreSQL refused the login of role {user:?} ({}): put the right password in the broker URL, postgres://{user}:PASSWORD@HOST/{db}",
            db_error.message()
        )
    } else if *code == SqlState::INVALID_AUTHORIZATION_SPECIFICATION {
        format!(
            "PostgreSQL refused role {user:?} ({}): create the role (CREATE ROLE {user} LOGIN) or let it in through pg_hba.conf",
            db_error.message()
        )
    } else if *code == SqlState::INVALID_CATALOG_NAME {
        format!(
            "database {db:?} does not exist ({place}): create it with `createdb -O {user} {db}` or CREATE DATABASE"
        )
    } else {
        format!(
            "PostgreSQL refused the connection for {place}: {}",
            db_error.message()
        )
    }
}

/// An error and what caused it, in one line: the client's own text says
/// only what it was doing ("error performing TLS handshake").
fn with_causes(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let more = c.to_string();
        if !text.contains(&more) {
            text = format!("{text}: {more}");
        }
        cause = c.source();
    }
    text.replace('\n', " ")
}

/// A client error as a broker error: lost connections, shutdowns and
/// serialization conflicts may succeed later; anything else the server
/// refused.
fn classify(context: &str, e: tokio_postgres::Error) -> BrokerError {
    let transient = match e.code() {
        None => true,
        Some(code) => {
            let class = &code.code()[..2];
            // 08 connection exceptions, 57 operator intervention
            // (shutdowns), 40 transaction rollbacks (serialization,
            // deadlocks), 53 insufficient resources (too many connections).
            matches!(class, "08" | "57" | "40" | "53")
        }
    };
    if transient {
        BrokerError::unavailable(context, e)
    } else {
        BrokerError::refused(context, e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_gives_its_schema_and_the_client_the_rest() {
        let (config, schema, tls) =
            parse_url("postgres://me@db.example:6543/app?schema=jobs&connect_timeout=3").unwrap();
        assert_eq!(schema, "jobs");
        assert!(!tls.required, "no TLS unless the URL asks for it");
        assert_eq!(
            config.get_ssl_mode(),
            tokio_postgres::config::SslMode::Disable
        );
        assert_eq!(config.get_user(), Some("me"));
        assert_eq!(config.get_dbname(), Some("app"));
        assert_eq!(config.get_ports(), &[6543]);
        assert_eq!(config.get_connect_timeout(), Some(&Duration::from_secs(3)));
        let (_, schema, _) = parse_url("postgres://me@localhost/app").unwrap();
        assert_eq!(schema, DEFAULT_SCHEMA);
    }

    #[test]
    fn sslmode_require_asks_for_tls_with_the_root_certificates_named() {
        let (config, _, tls) =
            parse_url("postgres://me@localhost/app?sslmode=require&sslrootcert=/etc/ca.pem")
                .unwrap();
        assert!(tls.required);
        assert_eq!(tls.root_cert.as_deref(), Some("/etc/ca.pem"));
        assert_eq!(
            config.get_ssl_mode(),
            tokio_postgres::config::SslMode::Require
        );
        let (_, _, tls) = parse_url("postgres://me@localhost/app?sslmode=verify-full").unwrap();
        assert!(tls.required && tls.root_cert.is_none());
    }

    #[test]
    fn bad_urls_say_what_to_write() {
        for (url, says) in [
            (
                "postgres://me@localhost/app?schema=Jobs;drop",
                "is not a plain name",
            ),
            ("postgres://me@localhost", "names no database"),
            ("postgres://localhost/app", "names no user"),
            ("postgres://me@localhost:notaport/app", "does not parse"),
            ("postgres://me@localhost/app?nonsense=1", "does not parse"),
            (
                "postgres://me@localhost/app?sslmode=prefer",
                "would fall back to plain text",
            ),
            (
                "postgres://me@localhost/app?sslmode=on",
                "write sslmode=require",
            ),
            (
                "postgres://me@localhost/app?sslrootcert=/ca.pem",
                "add sslmode=require",
            ),
        ] {
            let err = parse_url(url).unwrap_err().to_string();
            assert!(err.contains(says), "{url}: {err}");
            assert!(err.contains(url), "{url}: the error names the URL: {err}");
        }
    }
}
