//! Trace propagation end to end: a two-hop chain (`orders` publishes to
//! `shipping`) arrives at a real OTLP/HTTP receiver as one trace with the
//! right parent links, and the JSON log lines carry the trace id.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;

use crate::support::{Env, run_with_deadline};

const ORDERS: &str = r#"
[config]
followup_queue = "shipping"
"#;

const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const SENDER_SPAN: &str = "00f067aa0ba902b7";

/// An OTLP/HTTP receiver on loopback: keeps every JSON body posted to
/// `/v1/traces`.
struct Receiver {
    port: u16,
    bodies: Arc<Mutex<Vec<Value>>>,
    _runtime: tokio::runtime::Runtime,
}

impl Receiver {
    fn start() -> Receiver {
        use axum::routing::post;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let bodies: Arc<Mutex<Vec<Value>>> = Arc::default();
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let port = listener.local_addr().unwrap().port();
        let keep = bodies.clone();
        let app = axum::Router::new().route(
            "/v1/traces",
            post(move |body: String| {
                let keep = keep.clone();
                async move {
                    let v: Value = serde_json::from_str(&body).expect("OTLP JSON");
                    keep.lock().unwrap().push(v);
                    "{}"
                }
            }),
        );
        runtime.spawn(async move { axum::serve(listener, app).await.unwrap() });
        Receiver {
            port,
            bodies,
            _runtime: runtime,
        }
    }

    /// Every span received, flattened.
    fn spans(&self) -> Vec<Value> {
        let bodies = self.bodies.lock().unwrap();
        let mut out = Vec::new();
        for b in bodies.iter() {
            for rs in b["resourceSpans"].as_array().into_iter().flatten() {
                for ss in rs["scopeSpans"].as_array().into_iter().flatten() {
                    out.extend(ss["spans"].as_array().into_iter().flatten().cloned());
                }
            }
        }
        out
    }
}

fn attribute<'a>(span: &'a Value, key: &str) -> Option<&'a Value> {
    span["attributes"]
        .as_array()?
        .iter()
        .find(|a| a["key"] == key)
        .map(|a| &a["value"])
}

fn queue_of(span: &Value) -> &str {
    attribute(span, "messaging.destination.name").unwrap()["stringValue"]
        .as_str()
        .unwrap()
}

#[test]
fn a_chain_of_handlers_is_one_trace_with_the_right_parents() {
    let env = Env::new();
    env.deploy("orders", "orders", Some(ORDERS));
    env.deploy("hello", "shipping", None);
    let receiver = Receiver::start();
    // One message continues the sender's trace; one starts its own.
    let parent = format!("traceparent=00-{TRACE_ID}-{SENDER_SPAN}-01");
    env.send("orders", r#"{"id": 1, "qty": 2}"#, &["--header", &parent]);
    env.send("orders", r#"{"id": 2, "qty": 1}"#, &[]);
    let handlers = env.handlers.to_str().unwrap().to_string();
    let mut cmd = env.command(&["run", "--handlers", &handlers, "--until-idle"]);
    cmd.env(
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        format!("http://127.0.0.1:{}", receiver.port),
    )
    .env("SLUICE_LOG_FORMAT", "json");
    let out = run_with_deadline(cmd, Duration::from_secs(120));
    let log = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{log}");
    assert_eq!(env.count("shipping", "done"), 2, "{log}");

    // The spans were sent before the host exited.
    let spans = receiver.spans();
    assert_eq!(spans.len(), 4, "{spans:#?}");
    let in_trace = |trace: &str, queue: &str| -> Value {
        spans
            .iter()
            .find(|s| s["traceId"] == trace && queue_of(s) == queue)
            .unwrap_or_else(|| panic!("no {queue} span in trace {trace}: {spans:#?}"))
            .clone()
    };
    let orders = in_trace(TRACE_ID, "orders");
    let shipping = in_trace(TRACE_ID, "shipping");
    assert_eq!(orders["parentSpanId"], SENDER_SPAN, "{orders:#}");
    assert_eq!(shipping["parentSpanId"], orders["spanId"], "{shipping:#}");
    assert_eq!(
        attribute(&orders, "sluice.handler").unwrap()["stringValue"],
        "orders"
    );
    assert_eq!(
        attribute(&shipping, "sluice.attempt").unwrap()["intValue"],
        "1"
    );
    assert_eq!(
        attribute(&shipping, "sluice.outcome").unwrap()["stringValue"],
        "done"
    );

    // The message sent without a context started a trace of its own at the
    // send, and its chain is one trace too.
    let other = spans
        .iter()
        .find(|s| s["traceId"] != TRACE_ID && queue_of(s) == "orders")
        .expect("the second order's span");
    let trace = other["traceId"].as_str().unwrap();
    let next = in_trace(trace, "shipping");
    assert_eq!(next["parentSpanId"], other["spanId"]);
    assert_ne!(
        other["parentSpanId"], "",
        "the send is the attempt's parent"
    );

    // JSON log lines carry handler, queue, message id, attempt and trace id
    // as fields of their own.
    let lines: Vec<Value> = log
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let guest = lines
        .iter()
        .find(|l| {
            l["target"] == "sluice::guest"
                && l["handler"] == "shipping"
                && l["trace_id"] == TRACE_ID
        })
        .unwrap_or_else(|| panic!("no guest line of shipping in trace {TRACE_ID}:\n{log}"));
    assert_eq!(guest["queue"], "shipping");
    assert_eq!(guest["attempt"], 1);
    assert!(
        guest["message_id"]
            .as_str()
            .is_some_and(|id| !id.is_empty()),
        "{guest}"
    );
    assert!(
        guest["message"]
            .as_str()
            .unwrap()
            .contains("hello from sluice"),
        "{guest}"
    );
}

/// Without a collector, the context is still carried: what a handler
/// publishes is a child of its attempt, visible in the headers.
#[test]
fn without_export_the_context_is_still_carried() {
    let env = Env::new();
    env.deploy("orders", "orders", Some(ORDERS));
    let parent = format!("traceparent=00-{TRACE_ID}-{SENDER_SPAN}-01");
    env.send("orders", r#"{"id": 3, "qty": 1}"#, &["--header", &parent]);
    env.run_until_idle();
    let shipped = env.drain("shipping");
    assert_eq!(shipped.len(), 1);
    let tp = shipped[0].header("traceparent").expect("a traceparent");
    let parts: Vec<&str> = tp.split('-').collect();
    assert_eq!(parts.len(), 4, "{tp}");
    assert_eq!(parts[1], TRACE_ID, "same trace");
    assert_ne!(
        parts[2], SENDER_SPAN,
        "the parent is the attempt, not the sender"
    );
}
