//! What `sluice invoke` prints, as text or (`--json`) one JSON object, and
//! the exit status that says how the call ended.

use std::path::Path;
use std::time::Duration;

use anyhow::Result;
use base64::Engine as _;
use serde_json::{Value, json};

use super::Call;
use super::kv::{RecordingKv, Write};
use crate::message::Delivery;
use crate::policy::Outcome;
use crate::sandbox::imports::capture::{Capture, Line, Publish, Request, Target};
use crate::sandbox::runtime::{Failure, Handler};
use crate::units::format_size;

/// The exit statuses of `sluice invoke`, as `--help` shows them.
pub(crate) const EXIT_STATUSES: &str = "\
Exit status:
  0   done (a batch: every message done)
  10  retry
  11  reject
  12  snooze
  20  trap (the handler failed, or failed to start)
  21  timeout
  22  memory limit
  2   bad usage or bad input (nothing was called)
  1   any other error
A batch exits with the status of its first message that is not done.";

/// The exit status for how a call ended (see [`EXIT_STATUSES`]).
pub(crate) fn exit_status(result: &Result<Vec<Outcome>, Failure>) -> u8 {
    match result {
        Ok(outcomes) => outcomes
            .iter()
            .find_map(|o| match o {
                Outcome::Done => None,
                Outcome::Retry(_) => Some(10),
                Outcome::Reject(_) => Some(11),
                Outcome::Snooze(_) => Some(12),
                Outcome::Failed => Some(20),
            })
            .unwrap_or(0),
        Err(Failure::Trap(_) | Failure::Instantiate(_)) => 20,
        Err(Failure::Timeout(_)) => 21,
        Err(Failure::MemoryLimit(_)) => 22,
        Err(Failure::PoolFull(_)) => 1,
    }
}

/// Everything one call did.
pub(super) struct Report {
    handler: String,
    file: String,
    world: &'static str,
    ids: Vec<String>,
    call: Call,
    lines: Vec<Line>,
    publishes: Vec<Publish>,
    requests: Vec<Request>,
    writes: Vec<Write>,
}

impl Report {
    pub(super) fn new(
        file: &Path,
        handler: &Handler,
        deliveries: &[Delivery],
        call: Call,
        capture: &Capture,
        kv: &RecordingKv,
    ) -> Self {
        let (lines, publishes, requests) = capture.take();
        Report {
            handler: handler.spec.queue.clone(),
            file: file.display().to_string(),
            world: handler.world().name(),
            ids: deliveries.iter().map(|d| d.id.clone()).collect(),
            call,
            lines,
            publishes,
            requests,
            writes: kv.writes(),
        }
    }

    pub(super) fn status(&self) -> u8 {
        exit_status(&self.call.result)
    }

    /// Whether the publishes are committed: with a done, and (a batch) with
    /// its first done message.
    fn committed(&self) -> bool {
        matches!(&self.call.result, Ok(o) if o.contains(&Outcome::Done))
    }

    pub(super) fn print(&self, json: bool) -> Result<()> {
        if let Err(f) = &self.call.result {
            // The words `sluice run` logs for a failed attempt.
            eprintln!("error: attempt failed: {f}");
        }
        if json {
            return super::super::print_json(&self.json());
        }
        for line in self.text() {
            outln!("{line}");
        }
        Ok(())
    }

    fn json(&self) -> Value {
        let outcomes: Vec<Value> = match &self.call.result {
            Ok(outcomes) => outcomes.iter().map(outcome_json).collect(),
            Err(_) => Vec::new(),
        };
        json!({
            "handler": self.handler,
            "file": self.file,
            "world": self.world,
            "status": self.status(),
            "outcome": match &self.call.result {
                Ok(o) => o.first().map_or(Value::Null, outcome_json),
                Err(f) => json!({"outcome": f.kind(), "error": f.to_string()}),
            },
            "outcomes": outcomes,
            "ids": self.ids,
            "error": self.call.result.as_ref().err().map(|f| f.to_string()),
            "publishes": self.publishes.iter().map(publish_json).collect::<Vec<_>>(),
            "publishes_committed": self.committed(),
            "logs": self.lines.iter().map(|l| json!({
                "level": level(l),
                "stream": l.stream,
                "message": l.text,
            })).collect::<Vec<_>>(),
            "kv": self.writes.iter().map(write_json).collect::<Vec<_>>(),
            "http": self.requests.iter().map(|r| json!({
                "method": r.method,
                "url": r.url,
                "answer": r.answer,
            })).collect::<Vec<_>>(),
            "took_ms": self.call.took.as_secs_f64() * 1000.0,
            "memory_bytes": self.call.memory,
        })
    }

    fn text(&self) -> Vec<String> {
        let mut out = Vec::new();
        match &self.call.result {
            Ok(outcomes) if outcomes.len() == 1 => {
                out.push(format!("{}: {}", self.handler, outcome_text(&outcomes[0])));
            }
            Ok(outcomes) => {
                out.push(format!("{}: {} messages", self.handler, outcomes.len()));
                for (id, o) in self.ids.iter().zip(outcomes) {
                    out.push(format!("  message {id}: {}", outcome_text(o)));
                }
            }
            Err(f) => out.push(format!("{}: attempt failed: {f}", self.handler)),
        }
        for l in &self.lines {
            out.push(format!("  {} {:<5} {}", l.stream, level(l), l.text));
        }
        let fate = if self.committed() {
            ""
        } else {
            " (dropped: no message of the call is done)"
        };
        for p in &self.publishes {
            out.extend(publish_text(p, fate));
        }
        out.extend(
            self.writes
                .iter()
                .map(|w| format!("  kv {}", write_text(w))),
        );
        for r in &self.requests {
            out.push(format!("  http {} {}: {}", r.method, r.url, r.answer));
        }
        out.push(format!(
            "  took {}, memory {}; exit status {}",
            millis(self.call.took),
            format_size(self.call.memory),
            self.status()
        ));
        out
    }
}

fn level(l: &Line) -> &'static str {
    use crate::sandbox::wit::sluice::handler::log::Level;
    match l.level {
        Level::Trace => "trace",
        Level::Debug => "debug",
        Level::Info => "info",
        Level::Warn => "warn",
        Level::Error => "error",
    }
}

fn millis(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

fn outcome_json(o: &Outcome) -> Value {
    match o {
        Outcome::Done => json!({"outcome": "done"}),
        Outcome::Retry(delay) => {
            json!({"outcome": "retry", "delay_ms": delay.map(|d| d.as_millis() as u64)})
        }
        Outcome::Reject(reason) => json!({"outcome": "reject", "reason": reason}),
        Outcome::Snooze(d) => json!({"outcome": "snooze", "delay_ms": d.as_millis() as u64}),
        Outcome::Failed => json!({"outcome": "failed"}),
    }
}

fn outcome_text(o: &Outcome) -> String {
    match o {
        Outcome::Done => "done".into(),
        Outcome::Retry(None) => "retry, after the handler's backoff".into(),
        Outcome::Retry(Some(d)) => format!("retry in {}", millis(*d)),
        Outcome::Reject(reason) => format!("reject: {reason}"),
        Outcome::Snooze(d) => format!("snooze for {}", millis(*d)),
        Outcome::Failed => "failed".into(),
    }
}

/// Set `field` of `v` to `bytes` as text when they are UTF-8, else
/// `FIELD_base64` to them in base64.
fn put_bytes(v: &mut Value, field: &str, bytes: &[u8]) {
    match std::str::from_utf8(bytes) {
        Ok(text) => v[field] = json!(text),
        Err(_) => {
            let b64 = base64::engine::general_purpose::STANDARD.encode(bytes);
            v[format!("{field}_base64")] = json!(b64);
        }
    }
}

fn publish_json(p: &Publish) -> Value {
    let mut v = match &p.target {
        Target::Queue(queue) => json!({"queue": queue}),
        Target::Topic { topic, route } => json!({"topic": topic, "route": route}),
    };
    v["key"] = json!(p.key);
    v["delay_ms"] = json!(p.delay.as_millis() as u64);
    v["headers"] = json!(p.headers);
    put_bytes(&mut v, "payload", &p.payload);
    v
}

fn publish_text(p: &Publish, fate: &str) -> Vec<String> {
    let to = match &p.target {
        Target::Queue(queue) => format!("queue {queue}"),
        Target::Topic { topic, route } => format!("topic {topic} as {route}"),
    };
    let mut out = vec![format!("  publish to {to}{fate}")];
    if let Some(key) = &p.key {
        out.push(format!("    key {key}"));
    }
    if !p.delay.is_zero() {
        out.push(format!("    delay {}", millis(p.delay)));
    }
    for (name, value) in &p.headers {
        out.push(format!("    header {name}: {value}"));
    }
    out.push(match std::str::from_utf8(&p.payload) {
        Ok(text) => format!("    {text}"),
        Err(_) => format!("    ({}, not UTF-8)", format_size(p.payload.len() as u64)),
    });
    out
}

fn write_json(w: &Write) -> Value {
    match w {
        Write::Set { key, value, ttl } => {
            let mut v =
                json!({"op": "set", "key": key, "ttl_ms": ttl.map(|t| t.as_millis() as u64)});
            put_bytes(&mut v, "value", value);
            v
        }
        Write::Delete { key, existed } => json!({"op": "delete", "key": key, "existed": existed}),
        Write::Increment { key, delta, value } => {
            json!({"op": "increment", "key": key, "delta": delta, "value": value})
        }
    }
}

fn write_text(w: &Write) -> String {
    match w {
        Write::Set { key, value, ttl } => {
            let shown = match std::str::from_utf8(value) {
                Ok(text) => format!("{text:?}"),
                Err(_) => format!("({}, not UTF-8)", format_size(value.len() as u64)),
            };
            let ttl = ttl.map_or(String::new(), |t| format!(", expires in {}", millis(t)));
            format!("set {key:?} = {shown}{ttl}")
        }
        Write::Delete { key, existed } => {
            format!(
                "delete {key:?} ({})",
                if *existed { "was set" } else { "was not set" }
            )
        }
        Write::Increment { key, delta, value } => format!("increment {key:?} by {delta} = {value}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_statuses_follow_the_table() {
        let d = Duration::from_millis(5);
        for (result, status) in [
            (Ok(vec![Outcome::Done]), 0),
            (Ok(vec![Outcome::Retry(None)]), 10),
            (Ok(vec![Outcome::Reject("x".into())]), 11),
            (Ok(vec![Outcome::Snooze(d)]), 12),
            (
                Ok(vec![
                    Outcome::Done,
                    Outcome::Snooze(d),
                    Outcome::Retry(Some(d)),
                ]),
                12,
            ),
            (Ok(vec![Outcome::Done, Outcome::Done]), 0),
            (Err(Failure::Trap("t".into())), 20),
            (Err(Failure::Instantiate("i".into())), 20),
            (Err(Failure::Timeout("t".into())), 21),
            (Err(Failure::MemoryLimit("m".into())), 22),
        ] {
            assert_eq!(exit_status(&result), status, "{result:?}");
            // Every status is in the table --help shows.
            assert!(
                EXIT_STATUSES.contains(&format!("\n  {status:<2}  ")),
                "{status}"
            );
        }
    }

    #[test]
    fn payloads_are_text_or_base64() {
        let mut v = json!({});
        put_bytes(&mut v, "payload", b"hi");
        put_bytes(&mut v, "value", &[0xff]);
        assert_eq!(v, json!({"payload": "hi", "value_base64": "/w=="}));
    }
}
