//! Hostile: allocates 1 MiB blocks forever, touching every page and keeping
//! them all. The host's memory limit must stop it.
use sluice_sdk::Message;
use std::hint::black_box;

const BLOCK: usize = 1 << 20;
const PAGE: usize = 4096;

fn handle(_: &Message) -> sluice_sdk::Result {
    let mut kept: Vec<Vec<u8>> = Vec::new();
    let mut round: u8 = 0;
    loop {
        let mut block = Vec::<u8>::with_capacity(BLOCK);
        block.resize(BLOCK, round);
        for i in (0..BLOCK).step_by(PAGE) {
            block[i] = round ^ (i / PAGE) as u8;
        }
        kept.push(block);
        // The blocks escape, so the writes above cannot be elided.
        black_box(&mut kept);
        round = round.wrapping_add(1);
    }
}

sluice_sdk::handler!(handle);
