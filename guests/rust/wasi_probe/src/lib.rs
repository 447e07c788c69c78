//! Probes every ambient authority WASI might grant: filesystem, environment,
//! network, and stdio. Returns `done` when everything was denied and
//! `reject("sandbox leak: ...")` naming whatever succeeded.
use sluice_guest::{Guest, Level, Message, Outcome, log};
use std::io::Write;

struct WasiProbe;

#[derive(Default)]
struct Report {
    denied: Vec<String>,
    leaked: Vec<String>,
}

impl Report {
    fn check<T, E: std::fmt::Display>(
        &mut self,
        what: &str,
        result: Result<T, E>,
        describe: impl FnOnce(T) -> String,
    ) {
        match result {
            Ok(v) => self.leaked.push(format!("{what} ({})", describe(v))),
            Err(e) => self.denied.push(format!("{what}: {e}")),
        }
    }
}

impl Guest for WasiProbe {
    fn handle(_message: Message) -> Outcome {
        let mut r = Report::default();

        r.check(
            "read /etc/passwd",
            std::fs::read_to_string("/etc/passwd"),
            |s| format!("{} bytes", s.len()),
        );
        r.check("read_dir /", std::fs::read_dir("/"), |d| {
            format!("{} entries", d.count())
        });
        r.check("read_dir .", std::fs::read_dir("."), |d| {
            format!("{} entries", d.count())
        });
        r.check("env HOME", std::env::var("HOME"), |v| format!("HOME={v}"));
        let vars = std::env::vars_os().count();
        if vars == 0 {
            r.denied.push("env vars: none".to_string());
        } else {
            r.leaked.push(format!("env vars ({vars} set)"));
        }
        r.check(
            "tcp connect 127.0.0.1:6379",
            std::net::TcpStream::connect("127.0.0.1:6379"),
            |s| format!("connected, peer {:?}", s.peer_addr().ok()),
        );

        // Stdio is not an authority, but the host must cope with it (discard
        // or capture). Write errors are reported instead of panicking, as
        // println!/eprintln! would.
        let out = writeln!(std::io::stdout(), "probe stdout line")
            .and_then(|()| std::io::stdout().flush());
        let err = writeln!(std::io::stderr(), "probe stderr line");
        let stdio = format!(
            "stdout write: {}; stderr write: {}",
            out.map_or_else(|e| format!("error: {e}"), |()| "ok".to_string()),
            err.map_or_else(|e| format!("error: {e}"), |()| "ok".to_string()),
        );

        if r.leaked.is_empty() {
            for d in &r.denied {
                log(Level::Info, &format!("denied as expected: {d}"));
            }
            log(Level::Info, &stdio);
            Outcome::Done
        } else {
            log(Level::Info, &stdio);
            Outcome::Reject(format!("sandbox leak: {}", r.leaked.join("; ")))
        }
    }
}

sluice_guest::export!(WasiProbe);
