//! Write sluice message handlers in Rust.
//!
//! A handler is a WebAssembly component of the WIT world
//! `sluice:handler/handler@0.2.0` (or `batch-handler`): the host pulls
//! messages from a queue and calls the handler with each. This crate is that
//! world's Rust face: a handler is one function and one macro.
//!
//! ```no_run
//! use std::time::Duration;
//! use sluice_sdk::{Message, Reject, Retry, publish};
//!
//! #[derive(serde::Deserialize)]
//! struct Order { id: String, qty: u32 }
//!
//! fn handle(message: &Message) -> sluice_sdk::Result {
//!     // A payload that is not JSON of this shape rejects the message.
//!     let order: Order = message.json()?;
//!     if order.qty == 0 {
//!         return Err(Reject::new("qty must be positive"));
//!     }
//!     if message.attempt() < 2 {
//!         return Err(Retry::after(Duration::from_secs(1)));
//!     }
//!     // A refused publish is an error: `?` retries the message.
//!     publish("shipping").json(&order.id)?.header("order-id", &order.id).send()?;
//!     sluice_sdk::info!("order {} forwarded", order.id);
//!     Ok(())
//! }
//!
//! sluice_sdk::handler!(handle);
//! ```
//!
//! # The parts
//!
//! - [`Message`]: one delivery: [`text`](Message::text),
//!   [`json`](Message::json), headers, attempt, id, key, queue.
//! - [`Result`], [`Retry`], [`Reject`], [`Snooze`]: what a handler decides.
//!   `Ok(())` is done; the error half says what to do instead (see
//!   [`Error`] for what `?` does with other errors). [`Outcome`] is the same
//!   decision as a value, for batch handlers and tests.
//! - [`publish()`] and [`publish_to_topic()`]: new messages, held until the
//!   call returns and committed with the ack.
//! - [`kv`], [`config`], [`log`] (and the macros [`info!`], [`warn!`], ...),
//!   [`lease`]: the other imports of the world.
//! - [`handler!`] and [`batch_handler!`]: export a function as the
//!   component's `handle` or `handle-batch`.
//! - `testing` (native targets only): a fake host, so handlers can be unit
//!   tested with `cargo test`.
//!
//! # The two worlds
//!
//! The cargo feature `batch-handler` builds the world `batch-handler`
//! (export with [`batch_handler!`]); without it the world is `handler`
//! (export with [`handler!`]; the feature `handler` names it explicitly).
//! A crate builds one world: the component carries the world it was built
//! for, and a component carrying both would have to export both functions.
//! Features unify across a cargo workspace, so a workspace holding handlers
//! of both worlds builds its batch handlers with their own `cargo build -p`.
//!
//! Durations are [`std::time::Duration`] everywhere; they become whole
//! milliseconds, rounded up, at the edge to the host.
#![deny(missing_docs)]

#[cfg(all(feature = "handler", feature = "batch-handler"))]
compile_error!(
    "sluice-sdk: the features `handler` and `batch-handler` are both on, but a component \
     implements one world. Features unify across a cargo workspace: build the batch \
     handlers with a cargo command of their own (`cargo build -p NAME`)."
);

pub mod config;
mod export;
mod host;
pub mod kv;
pub mod lease;
pub mod log;
mod message;
mod outcome;
mod publish;
#[cfg(not(target_arch = "wasm32"))]
pub mod testing;

pub use export::IntoOutcome;
pub use host::HostError;
pub use message::{Malformed, Message};
pub use outcome::{Error, Outcome, Reject, Result, Retry, Snooze};
pub use publish::{Publish, Queue, Topic, publish, publish_to_topic};

/// What the macros expand to. Not a public API: it changes without notice.
#[doc(hidden)]
pub mod __private {
    pub use crate::export::{handle, handle_batch};

    /// The `wit-bindgen` bindings of the world this build implements,
    /// generated once, here.
    #[allow(missing_docs, clippy::too_many_arguments)] // generated; `handle` takes the flattened `message` record
    pub mod bindings {
        #[cfg(not(feature = "batch-handler"))]
        wit_bindgen::generate!({
            path: "wit",
            world: "handler",
            pub_export_macro: true,
            default_bindings_module: "sluice_sdk::__private::bindings",
        });
        #[cfg(feature = "batch-handler")]
        wit_bindgen::generate!({
            path: "wit",
            world: "batch-handler",
            pub_export_macro: true,
            default_bindings_module: "sluice_sdk::__private::bindings",
        });
    }

    pub use bindings::{Guest, export};
}

/// Exports a function as the component's `handle`: the host calls it with
/// each message and acts on what it returns.
///
/// The function takes `&`[`Message`] and returns a [`Result`] (or an
/// [`Outcome`], or anything else that is [`IntoOutcome`]):
///
/// ```no_run
/// fn handle(message: &sluice_sdk::Message) -> sluice_sdk::Result {
///     sluice_sdk::info!("got {}", message.id());
///     Ok(())
/// }
/// sluice_sdk::handler!(handle);
/// ```
///
/// Use it once per component. It needs the world `handler`, the one built
/// without the feature `batch-handler`.
#[cfg(not(feature = "batch-handler"))]
#[macro_export]
macro_rules! handler {
    ($handle:expr) => {
        const _: () = {
            struct SluiceHandler;
            impl $crate::__private::Guest for SluiceHandler {
                fn handle(
                    message: $crate::__private::bindings::Message,
                ) -> $crate::__private::bindings::Outcome {
                    $crate::__private::handle(message, $handle)
                }
            }
    $crate::__private::export!(SluiceHandler with_types_in $crate::__private::bindings);
        };
    };
}

/// Exports a function as the component's `handle`. Not in this build: the
/// feature `batch-handler` is on, so the component is a batch handler; use
/// [`batch_handler!`], or drop the feature.
#[cfg(feature = "batch-handler")]
#[macro_export]
macro_rules! handler {
    ($($any:tt)*) => {
        ::core::compile_error!(
            "sluice_sdk::handler! exports `handle` of the world `handler`, but this build has the \
             feature `batch-handler` on (features unify across a cargo workspace: build the batch \
             handlers with a cargo command of their own, `cargo build -p NAME`)"
        );
    };
}

/// Exports a function as the component's `handle-batch`: the host calls it
/// with up to the sidecar's `batch_size` messages at once.
///
/// The function takes `&[`[`Message`]`]` and returns one outcome per
/// message, in the same order: a `Vec` of [`Outcome`] or of [`Result`]. A
/// list of any other length fails the whole call, as a trap would.
///
/// ```ignore
/// fn handle_batch(messages: &[sluice_sdk::Message]) -> Vec<sluice_sdk::Result> {
///     messages.iter().map(|_| Ok(())).collect()
/// }
/// sluice_sdk::batch_handler!(handle_batch);
/// ```
///
/// It needs the world `batch-handler`: the feature of that name.
#[cfg(feature = "batch-handler")]
#[macro_export]
macro_rules! batch_handler {
    ($handle_batch:expr) => {
        const _: () = {
            struct SluiceBatchHandler;
            impl $crate::__private::Guest for SluiceBatchHandler {
                fn handle_batch(
                    messages: ::std::vec::Vec<$crate::__private::bindings::Message>,
                ) -> ::std::vec::Vec<$crate::__private::bindings::Outcome> {
                    $crate::__private::handle_batch(messages, $handle_batch)
                }
            }
            $crate::__private::export!(SluiceBatchHandler with_types_in $crate::__private::bindings);
        };
    };
}

/// Exports a function as the component's `handle-batch`. Not in this build:
/// it needs the feature `batch-handler`.
#[cfg(not(feature = "batch-handler"))]
#[macro_export]
macro_rules! batch_handler {
    ($($any:tt)*) => {
        ::core::compile_error!(
            "sluice_sdk::batch_handler! exports `handle-batch` of the world `batch-handler`: turn on \
             the feature of that name, features = [\"batch-handler\"] on sluice-sdk in Cargo.toml"
        );
    };
}
