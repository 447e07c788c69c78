//! Hostile: spins forever. The host must interrupt it (epoch / fuel / timeout).
use sluice_guest::{Guest, Message, Outcome};
use std::hint::black_box;

struct HostileLoop;

impl Guest for HostileLoop {
    fn handle(_message: Message) -> Outcome {
        let mut n: u64 = 0;
        loop {
            // black_box keeps the optimiser from proving the loop side-effect free.
            n = black_box(n.wrapping_add(1));
        }
    }
}

sluice_guest::export!(HostileLoop);
