//! sluice's integration tests: one binary, one module per capability.
//!
//! Tests drive the real `sluice` binary (or the library) with real guest
//! components from `guests/` and real SQLite files. Guests are built by
//! `scripts/build-guests`, which `scripts/test` runs first; a missing guest is
//! a failure that says so, never a skip.
//!
//! Where new tests go: a new capability gets a new module here; shared
//! helpers live in `support`.

/// Run each named test once on every backend. Two kinds of test take part:
///
/// * `on_every_backend!(env: a, b)`: scenarios, a `fn(Env)` each, that drive
///   hosts end to end. `mod sqlite`, `mod redis` and `mod postgres` get one
///   test each, on the embedded broker and on a Redis and a PostgreSQL of
///   the test's own. `on_every_backend!(servers: a, b)`: scenarios of many
///   hosts sharing a server (`mod redis` and `mod postgres`).
/// * `on_every_backend!(broker: a, b)`: broker checks, an
///   `async fn(Arc<dyn Broker>)` each (the conformance suite). `mod
///   sqlite_broker`, `mod redis_broker`, `mod redis_cluster_broker` and
///   `mod postgres_broker` get one test each.
///
/// A module of either ends with one call of this.
macro_rules! on_every_backend {
    (env: $($name:ident),* $(,)?) => {
        mod sqlite {
            $( #[test] fn $name() { super::$name(crate::support::Env::new()) } )*
        }
        on_every_backend!(servers: $($name),*);
    };
    (servers: $($name:ident),* $(,)?) => {
        mod redis {
            $( #[test] fn $name() { super::$name(crate::support::Env::redis()) } )*
        }
        mod postgres {
            $( #[test] fn $name() { super::$name(crate::support::Env::postgres()) } )*
        }
    };
    (broker: $($name:ident),* $(,)?) => {
        on_every_backend!(@broker sqlite_broker, sqlite; $($name),*);
        on_every_backend!(@broker redis_broker, redis; $($name),*);
        on_every_backend!(@broker redis_cluster_broker, redis_cluster; $($name),*);
        on_every_backend!(@broker postgres_broker, postgres; $($name),*);
    };
    (@broker $backend:ident, $make:ident; $($name:ident),*) => {
        mod $backend {
            $(
                #[tokio::test]
                async fn $name() {
                    let (_guard, broker) = crate::conformance::$make().await;
                    super::$name(broker).await;
                }
            )*
        }
    };
}

mod admin;
mod admin_guard;
mod bad_input;
mod book;
mod bulk_send;
mod clock;
mod conformance;
mod corpus;
mod crash;
mod dashboard;
mod demo;
mod entry_points;
mod faults;
mod flow;
mod groups;
mod hostile;
mod http;
mod instances;
mod invoke;
mod kv;
mod languages;
mod layout;
mod many;
mod outcomes;
mod overlap;
mod pg_dead;
mod pg_groups;
mod pg_store;
mod postgres;
mod proxy;
mod redis;
mod redrive;
mod reload;
mod scaffold;
mod scale;
mod schedules;
mod servers;
mod shutdown;
mod signals;
mod soak;
mod sqlite;
mod stalls;
mod support;
mod topics;
mod traces;
mod wit_versions;
