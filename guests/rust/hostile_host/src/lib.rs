//! Hostile: tries to make the host allocate far beyond the handler's own
//! memory cap, one way per message, chosen by the payload:
//!
//! * `publish`: holds 1 MiB publishes until refused (1000 would be 1 GiB);
//! * `headers`: publishes messages of 60 headers each (a one-letter name,
//!   an empty value), until refused;
//! * `reject`: rejects with a 12 MiB reason;
//! * `log`: writes 3,000 log lines of 1 MiB;
//! * `stdout`: writes 64 MiB to stdout in one line;
//! * `fields`: makes 100,000 wasi:http `fields` of 1 KiB each (100 MiB);
//! * `ok`: nothing, `done`.
//!
//! And text no broker may be handed as it is (PostgreSQL's text holds no
//! NUL):
//!
//! * `nul-reject`: rejects with a reason that holds a NUL;
//! * `nul-key`: publishes with an idempotency key that holds a NUL, logs
//!   what came of it and returns `done`.
//!
//! Each logs how far it got and returns `done`, so the test can read what
//! the host allowed; a refusal it meets is an error value, never a trap.
use std::io::Write;

use sluice_sdk::{Message, Reject, info, publish};
use wasip2::http::types::Fields;

fn handle(message: &Message) -> sluice_sdk::Result {
    let what = String::from_utf8_lossy(message.payload()).to_string();
    match what.as_str() {
        "publish" => {
            let body = vec![b'x'; 1 << 20];
            let mut held = 0;
            let error = loop {
                match publish("sink").payload(body.as_slice()).send() {
                    Ok(()) if held < 1000 => held += 1,
                    Ok(()) => break "none".to_string(),
                    Err(e) => break e.to_string(),
                }
            };
            info!("hostile publish: held {held}, then: {error}");
        }
        "headers" => {
            let mut held = 0;
            let error = loop {
                let sixty = (0..60).fold(publish("sink"), |p, _| p.header("h", ""));
                match sixty.send() {
                    Ok(()) if held < 100_000 => held += 1,
                    Ok(()) => break "none".to_string(),
                    Err(e) => break e.to_string(),
                }
            };
            info!("hostile headers: held {held}, then: {error}");
        }
        "reject" => return Err(Reject::new("r".repeat(12 << 20))),
        "nul-reject" => return Err(Reject::new("bad\0reason")),
        "nul-key" => {
            let result = publish("sink").payload("x").key("a\0b").send();
            // The host's reason, as the Debug of a `Result<(), String>`.
            let result = result.map_err(|e| e.reason().to_string());
            info!("hostile nul key: {result:?}");
        }
        "log" => {
            let line = "l".repeat(1 << 20);
            for _ in 0..3000 {
                sluice_sdk::log::info(&line);
            }
        }
        "stdout" => {
            let chunk = vec![b'o'; 1 << 20];
            let mut out = std::io::stdout();
            for _ in 0..64 {
                let _ = out.write_all(&chunk);
            }
            let _ = out.write_all(b"\n");
            let _ = out.flush();
        }
        "fields" => {
            let value = vec![b'v'; 1 << 10];
            let mut kept = Vec::new();
            let mut error = "none".to_string();
            for i in 0..100_000 {
                let f = Fields::new();
                if let Err(e) = f.append("x-big", &value) {
                    error = format!("append {i}: {e:?}");
                    break;
                }
                kept.push(f);
            }
            info!("hostile fields: kept {}, then: {error}", kept.len());
        }
        _ => {}
    }
    Ok(())
}

sluice_sdk::handler!(handle);
