//! Hostile: waits in the host (a WASI sleep of a minute) while its instance
//! is being made, before any message reaches it. A core module's
//! `_initialize` export runs as the component's start, so epoch
//! interruption never fires (no wasm runs): making the instance must end at
//! the call's own timer, like a call that waits, and free its pool slot.
use sluice_sdk::Message;

#[unsafe(no_mangle)]
pub extern "C" fn _initialize() {
    std::thread::sleep(std::time::Duration::from_secs(60));
}

fn handle(_: &Message) -> sluice_sdk::Result {
    Ok(())
}

sluice_sdk::handler!(handle);
