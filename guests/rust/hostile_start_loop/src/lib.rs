//! Hostile: spins forever while its instance is being made, before any
//! message reaches it. A core module's `_initialize` export runs as the
//! component's start, so making the instance never ends by itself: it must
//! end at the call's timeout, like any call, and free its pool slot.
use sluice_sdk::Message;
use std::hint::black_box;

#[unsafe(no_mangle)]
pub extern "C" fn _initialize() {
    let mut n: u64 = 0;
    loop {
        n = black_box(n.wrapping_add(1));
    }
}

fn handle(_: &Message) -> sluice_sdk::Result {
    Ok(())
}

sluice_sdk::handler!(handle);
