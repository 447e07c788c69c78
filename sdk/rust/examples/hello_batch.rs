//! A handler of the world `batch-handler`: each message of the batch is
//! settled by its own outcome. Build it as a component with
//! `cargo build --release --target wasm32-wasip2 --example hello_batch --features batch-handler`.
use sluice_sdk::{Message, Reject};

fn handle(message: &Message) -> sluice_sdk::Result {
    match message.text()? {
        "" => Err(Reject::new("empty")),
        text => {
            sluice_sdk::info!("{}: {text}", message.id());
            Ok(())
        }
    }
}

fn handle_batch(messages: &[Message]) -> Vec<sluice_sdk::Result> {
    sluice_sdk::info!("{} messages", messages.len());
    messages.iter().map(handle).collect()
}

sluice_sdk::batch_handler!(handle_batch);
