//! What tests of sluice share, and what a test of a broker of one's own
//! can use: real servers the test starts and owns ([`PgServer`],
//! [`RedisServer`], [`RedisCluster`]), child processes with a deadline
//! ([`run_with_deadline`]), the broker [`conformance`] suite, and the stored
//! forms every backend writes alike ([`codec`]), for corpus tests.
//!
//! Built with the feature `testkit` only, never by default: it brings
//! `tempfile`, and the servers need their programs installed
//! (`redis-server` and `redis-cli`; PostgreSQL's `initdb`, `pg_ctl`,
//! `postgres` and `psql`). A missing program fails the test with what to
//! install; nothing here skips a test. Every wait has a deadline, so a
//! server that will not come up fails its test with the tail of its log
//! instead of hanging the suite, and a server is stopped when its value is
//! dropped, a panicking test's too.

pub mod conformance;
mod pg_server;
mod process;
mod redis_server;

pub use pg_server::PgServer;
pub use process::{reap, run_with_deadline};
pub use redis_server::{RedisCluster, RedisServer};

/// How every backend stores headers and words a lost lease, for tests that
/// check them against a corpus or a backend's rows.
pub mod codec {
    pub use crate::codec::{decode_headers, encode_headers, lease_expired};
}
