//! Probes every ambient authority WASI might grant: filesystem, environment,
//! network, and stdio. Returns `done` when everything was denied and
//! `reject("sandbox leak: ...")` naming whatever succeeded.
use sluice_sdk::{Message, Reject, info};
use std::io::Write;

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

fn handle(_: &Message) -> sluice_sdk::Result {
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
    let out =
        writeln!(std::io::stdout(), "probe stdout line").and_then(|()| std::io::stdout().flush());
    let err = writeln!(std::io::stderr(), "probe stderr line");
    let stdio = format!(
        "stdout write: {}; stderr write: {}",
        out.map_or_else(|e| format!("error: {e}"), |()| "ok".to_string()),
        err.map_or_else(|e| format!("error: {e}"), |()| "ok".to_string()),
    );

    if r.leaked.is_empty() {
        for d in &r.denied {
            info!("denied as expected: {d}");
        }
        info!("{stdio}");
        Ok(())
    } else {
        info!("{stdio}");
        Err(Reject::new(format!(
            "sandbox leak: {}",
            r.leaked.join("; ")
        )))
    }
}

sluice_sdk::handler!(handle);
