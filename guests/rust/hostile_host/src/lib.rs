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

use sluice_guest::{Guest, Level, Message, Outcome, PublishOptions, log, publish};
use wasip2::http::types::Fields;

struct HostileHost;

fn options(headers: Vec<(String, String)>) -> PublishOptions {
    PublishOptions {
        headers,
        key: None,
        delay_ms: None,
    }
}

impl Guest for HostileHost {
    fn handle(message: Message) -> Outcome {
        let what = String::from_utf8_lossy(&message.payload).to_string();
        match what.as_str() {
            "publish" => {
                let body = vec![b'x'; 1 << 20];
                let mut held = 0;
                let error = loop {
                    match publish::publish("sink", &body, &options(Vec::new())) {
                        Ok(()) if held < 1000 => held += 1,
                        Ok(()) => break "none".to_string(),
                        Err(e) => break e,
                    }
                };
                log(Level::Info, &format!("hostile publish: held {held}, then: {error}"));
            }
            "headers" => {
                let headers = vec![("h".to_string(), String::new()); 60];
                let mut held = 0;
                let error = loop {
                    match publish::publish("sink", b"", &options(headers.clone())) {
                        Ok(()) if held < 100_000 => held += 1,
                        Ok(()) => break "none".to_string(),
                        Err(e) => break e,
                    }
                };
                log(Level::Info, &format!("hostile headers: held {held}, then: {error}"));
            }
            "reject" => return Outcome::Reject("r".repeat(12 << 20)),
            "nul-reject" => return Outcome::Reject("bad\0reason".into()),
            "nul-key" => {
                let options = PublishOptions {
                    headers: Vec::new(),
                    key: Some("a\0b".into()),
                    delay_ms: None,
                };
                let result = publish::publish("sink", b"x", &options);
                log(Level::Info, &format!("hostile nul key: {result:?}"));
            }
            "log" => {
                let line = "l".repeat(1 << 20);
                for _ in 0..3000 {
                    log(Level::Info, &line);
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
                log(Level::Info, &format!("hostile fields: kept {}, then: {error}", kept.len()));
            }
            _ => {}
        }
        Outcome::Done
    }
}

sluice_guest::export!(HostileHost);
