//! The one `bindgen!`: Rust types and traits generated from the WIT package
//! in `wit/` for the `handler` world. Both sides of the boundary use them:
//! [`crate::runtime`] calls the exported `handle`, and [`crate::host`]
//! implements the imported interfaces (one file per interface).

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
