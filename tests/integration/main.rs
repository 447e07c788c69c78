//! sluice's integration tests: one binary, one module per capability.
//!
//! Tests drive the real `sluice` binary (or the library) with real guest
//! components from `guests/` and real SQLite files. Guests are built by
//! `scripts/build-guests`, which `scripts/test` runs first; a missing guest is
//! a failure that says so, never a skip.
//!
//! Where new tests go: a new capability gets a new module here; shared
//! helpers live in `support`.

/// Run each named scenario, a `fn(Env)`, on the embedded broker and on a
/// Redis of its own: `mod sqlite` and `mod redis` get one test each.
macro_rules! on_every_broker {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $( #[test] fn $name() { super::$name(crate::support::Env::new()) } )*
        }
        mod redis {
            $( #[test] fn $name() { super::$name(crate::support::Env::redis()) } )*
        }
    };
}

mod bad_input;
mod conformance;
mod crash;
mod hostile;
mod http;
mod kv;
mod languages;
mod outcomes;
mod redis;
mod redis_support;
mod redrive;
mod reload;
mod scaffold;
mod shutdown;
mod support;
mod topics;
