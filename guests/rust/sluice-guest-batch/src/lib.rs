//! Shared bindings for sluice batch handler guests.
//!
//! The twin of `sluice-guest` for the other world of `wit/handler.wit`
//! (version 0.2.0): generates `sluice:handler/batch-handler` once and
//! re-exports the same names, so a guest moves between the two by changing
//! the crate and its one function. A guest implements [`Guest`] and calls
//! [`export!`]:
//!
//! ```ignore
//! use sluice_guest_batch::{Guest, Message, Outcome};
//! struct Handler;
//! impl Guest for Handler {
//!     fn handle_batch(messages: Vec<Message>) -> Vec<Outcome> {
//!         messages.iter().map(|_| Outcome::Done).collect()
//!     }
//! }
//! sluice_guest_batch::export!(Handler);
//! ```
//!
//! It is a crate of its own because each `generate!` embeds its world in the
//! component, and a component carrying both worlds would have to export both
//! `handle` and `handle-batch`.

/// The generated bindings. Kept in a module of their own: generating them at
/// the crate root with `pub_export_macro` makes the macro names collide.
pub mod bindings {
    wit_bindgen::generate!({
        path: "../../../wit",
        world: "batch-handler",
        pub_export_macro: true,
        default_bindings_module: "sluice_guest_batch::bindings",
    });
}

pub use bindings::sluice::handler::config;
/// The handler's own key-value store (`get`, `set`, `delete`, `increment`);
/// every call fails unless the sidecar grants `kv = true` under
/// `[capabilities]`.
pub use bindings::sluice::handler::kv;
/// The call's deadline, shared by the whole batch: `lease::time_left()` and
/// `lease::extend(ms)`, for work that may outlast the handler's
/// `limits.timeout`.
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
