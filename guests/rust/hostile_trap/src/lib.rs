//! Hostile: traps immediately (wasm `unreachable`).
use sluice_sdk::Message;

fn handle(_: &Message) -> sluice_sdk::Result {
    #[cfg(target_arch = "wasm32")]
    core::arch::wasm32::unreachable();
    #[cfg(not(target_arch = "wasm32"))]
    panic!("hostile_trap");
}

sluice_sdk::handler!(handle);
