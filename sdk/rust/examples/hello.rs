//! A handler of the world `handler`: greets the name in its JSON payload and
//! passes the greeting on. Build it as a component with
//! `cargo build --release --target wasm32-wasip2 --example hello --features handler`.
use std::time::Duration;

use sluice_sdk::{Message, Reject, Snooze, publish};

#[derive(serde::Deserialize)]
struct Greeting {
    name: String,
}

fn handle(message: &Message) -> sluice_sdk::Result {
    // Not JSON of this shape: rejected, with the parser's message.
    let greeting: Greeting = message.json()?;
    if greeting.name.is_empty() {
        return Err(Reject::new("`name` is empty"));
    }
    if sluice_sdk::config::get("paused").as_deref() == Some("true") {
        return Err(Snooze::after(Duration::from_secs(60)));
    }
    // Refused by the host: `?` retries the message after the backoff.
    publish("greetings")
        .payload(format!("hello, {}", greeting.name))
        .header("from", message.id())
        .send()?;
    sluice_sdk::info!("greeted {}", greeting.name);
    Ok(())
}

sluice_sdk::handler!(handle);
