//! Hostile: unbounded, non-tail recursion. Exhausts the wasm call stack.
//! Only scalar locals, so it uses wasm frames (not the shadow stack in linear
//! memory) and the host should see a "call stack exhausted" trap.
use sluice_sdk::{Message, Reject};
use std::hint::black_box;

#[inline(never)]
#[allow(unconditional_recursion)]
fn recurse(depth: u64) -> u64 {
    let next = black_box(depth.wrapping_add(1));
    // The result is used after the call, so this is not a tail call.
    let below = black_box(recurse(next));
    below.wrapping_add(black_box(depth))
}

fn handle(_: &Message) -> sluice_sdk::Result {
    let n = recurse(black_box(0));
    // Unreachable in practice; keeps the result alive.
    Err(Reject::new(format!("recursion returned {n}")))
}

sluice_sdk::handler!(handle);
