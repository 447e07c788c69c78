//! Shared bindings for sluice handler guests.
//!
//! Generates the `sluice:handler/handler` world (`wit/handler.wit`, version
//! 0.2.0) once and re-exports what a guest needs. A guest implements
//! [`Guest`] and calls [`export!`]:
//!
//! ```ignore
//! use sluice_guest::{Guest, Message, Outcome};
//! struct Handler;
//! impl Guest for Handler {
//!     fn handle(message: Message) -> Outcome { Outcome::Done }
//! }
//! sluice_guest::export!(Handler);
//! ```
//!
//! A batch handler (world `batch-handler`) uses the sibling crate
//! `sluice-guest-batch` instead: one crate cannot generate both worlds, as
//! a component built from it would then have to export both functions.

/// The generated bindings. Kept in a module of their own: generating them at
/// the crate root with `pub_export_macro` makes the macro names collide.
#[allow(clippy::too_many_arguments)] // the flattened `message` record
pub mod bindings {
    wit_bindgen::generate!({
        path: "../../../wit",
        world: "handler",
        pub_export_macro: true,
        default_bindings_module: "sluice_guest::bindings",
    });
}

pub use bindings::sluice::handler::config;
/// The handler's own key-value store (`get`, `set`, `delete`, `increment`);
/// every call fails unless the sidecar grants `kv = true` under
/// `[capabilities]`.
pub use bindings::sluice::handler::kv;
/// The call's deadline: `lease::time_left()` and `lease::extend(ms)`, for
/// work that may outlast the handler's `limits.timeout`.
pub use bindings::sluice::handler::lease;
pub use bindings::sluice::handler::log::Level;
pub use bindings::sluice::handler::publish::{self, PublishOptions};
pub use bindings::sluice::handler::types::{DelayMs, Message, Outcome};
pub use bindings::{Guest, export};

/// Writes one line to the host's log.
pub fn log(level: Level, message: &str) {
    bindings::sluice::handler::log::log(level, message);
}

/// The config value for `key`, if set.
pub fn config_get(key: &str) -> Option<String> {
    config::get(key)
}
