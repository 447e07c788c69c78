//! Hostile: spins forever. The host must interrupt it (epoch / fuel / timeout).
use sluice_sdk::Message;
use std::hint::black_box;

fn handle(_: &Message) -> sluice_sdk::Result {
    let mut n: u64 = 0;
    loop {
        // black_box keeps the optimiser from proving the loop side-effect free.
        n = black_box(n.wrapping_add(1));
    }
}

sluice_sdk::handler!(handle);
