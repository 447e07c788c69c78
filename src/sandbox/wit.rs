//! The `bindgen!`s: Rust types and traits generated from the WIT packages in
//! `wit/`. Both sides of the boundary use them: [`crate::sandbox::runtime`] calls the
//! exports, and [`crate::sandbox::imports`] implements the imported interfaces (one
//! file per interface).
//!
//! The current package, `sluice:handler@0.2.0` (`wit/handler.wit`), is
//! generated at the root of this module for its `handler` world, and in
//! [`batch`] for its `batch-handler` world, which shares the root's
//! interfaces. The first package, `sluice:handler@0.1.0`
//! (`wit/0.1.0/handler.wit`), is generated in [`v1`]: its components are
//! still served, their imports forwarded to the current ones.

wasmtime::component::bindgen!({
    path: "wit",
    world: "handler",
    // `handle` runs on a fiber so that the epoch deadline can yield to
    // tokio and time the call out.
    exports: { default: async },
    // The key-value calls and topic publishes wait on the broker: async,
    // so the fiber yields to tokio meanwhile (and the timer around the
    // call can end one that outlives the handler's timeout). The other
    // imports are quick, plain calls.
    imports: {
        "sluice:handler/kv": async,
        "sluice:handler/publish.publish-to-topic": async,
    },
});

/// The `batch-handler` world of the current package: its interfaces are
/// the root module's.
pub(crate) mod batch {
    wasmtime::component::bindgen!({
        path: "wit",
        world: "batch-handler",
        exports: { default: async },
        with: {
            "sluice:handler/types": super::sluice::handler::types,
            "sluice:handler/log": super::sluice::handler::log,
            "sluice:handler/publish": super::sluice::handler::publish,
            "sluice:handler/config": super::sluice::handler::config,
            "sluice:handler/kv": super::sluice::handler::kv,
            "sluice:handler/lease": super::sluice::handler::lease,
        },
    });
}

/// The `handler` world of `sluice:handler@0.1.0`.
pub(crate) mod v1 {
    wasmtime::component::bindgen!({
        path: "wit/0.1.0",
        world: "handler",
        exports: { default: async },
        imports: {
            "sluice:handler/kv": async,
            "sluice:handler/publish.publish-to-topic": async,
        },
    });
}
