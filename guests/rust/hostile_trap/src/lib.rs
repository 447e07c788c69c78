//! Hostile: traps immediately (wasm `unreachable`).
use sluice_guest::{Guest, Message, Outcome};

struct HostileTrap;

impl Guest for HostileTrap {
    fn handle(_message: Message) -> Outcome {
        #[cfg(target_arch = "wasm32")]
        core::arch::wasm32::unreachable();
        #[cfg(not(target_arch = "wasm32"))]
        panic!("hostile_trap");
    }
}

sluice_guest::export!(HostileTrap);
