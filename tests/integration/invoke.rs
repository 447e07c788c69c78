//! `sluice invoke`: one call of a real guest component on messages given on
//! the command line, no broker; what it prints, the files it reads and
//! writes, and its exit statuses.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};

use serde_json::Value;

use crate::support::{Env, run_with_deadline};

/// `guest_name` copied into the environment as `name.wasm`, with `sidecar`
/// beside it when given; returns its path.
fn handler(env: &Env, guest_name: &str, name: &str, sidecar: Option<&str>) -> PathBuf {
    env.deploy(guest_name, name, sidecar);
    env.handlers.join(format!("{name}.wasm"))
}

fn invoke(env: &Env, file: &Path, args: &[&str]) -> Output {
    let file = file.to_str().unwrap();
    let mut all = vec!["invoke", file];
    all.extend_from_slice(args);
    run_with_deadline(env.command(&all), std::time::Duration::from_secs(60))
}

/// `sluice --json invoke FILE ARGS`: its status and the object it printed.
fn invoke_json(env: &Env, file: &Path, args: &[&str]) -> (i32, Value) {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    let out = invoke(env, file, &all);
    let text = String::from_utf8_lossy(&out.stdout);
    let report: Value = serde_json::from_str(&text).unwrap_or_else(|e| {
        panic!(
            "not one JSON object ({e}):\n{text}\n{}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code().unwrap(), report)
}

/// A bad-input failure: status 2, one line on stderr that contains `says`,
/// nothing on stdout.
fn refused(out: &Output, says: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = err.lines().filter(|l| l.starts_with("error:")).collect();
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(lines.len(), 1, "{err}");
    assert!(lines[0].contains(says), "{says:?} not in {err}");
    assert!(
        out.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

const ORDERS: &str = "[capabilities]\nkv = true\n[config]\nfollowup_queue = \"shipping\"\n";

#[test]
fn an_order_is_done_with_its_follow_up_its_log_line_and_its_count() {
    let env = Env::new();
    let orders = handler(&env, "orders", "orders", Some(ORDERS));
    let kv = env.dir.path().join("kv.json");
    let kv_arg = kv.to_str().unwrap();
    let args = [
        "--payload",
        r#"{"id": 7, "qty": 2}"#,
        "--id",
        "m-1",
        "--kv",
        kv_arg,
    ];
    let (status, report) = invoke_json(&env, &orders, &args);
    assert_eq!(status, 0, "{report}");
    assert_eq!(report["status"], 0);
    assert_eq!(report["outcome"], serde_json::json!({"outcome": "done"}));
    assert_eq!(report["world"], "sluice:handler/handler@0.2.0");
    assert_eq!(
        report["publishes"],
        serde_json::json!([{
            "queue": "shipping",
            "key": null,
            "delay_ms": 0,
            "headers": [["order-id", "7"]],
            "payload": r#"{"order":7,"qty":2,"source":"m-1"}"#,
        }])
    );
    assert_eq!(report["publishes_committed"], true);
    assert_eq!(
        report["kv"],
        serde_json::json!([{"op": "increment", "key": "forwarded", "delta": 1, "value": 1}])
    );
    let logs = report["logs"].as_array().unwrap();
    assert!(
        logs.iter().any(|l| l["level"] == "info"
            && l["message"]
                == "order 7 (qty 2) from message m-1 forwarded to shipping (forwarded: 1)"),
        "{logs:?}"
    );
    assert!(report["took_ms"].as_f64().unwrap() > 0.0);
    assert!(report["memory_bytes"].as_u64().unwrap() > 0);
    // The store is written back, and the next call counts on from it.
    let saved: Value = serde_json::from_slice(&std::fs::read(&kv).unwrap()).unwrap();
    assert_eq!(saved, serde_json::json!({"forwarded": {"value": "1"}}));
    let (_, again) = invoke_json(&env, &orders, &args);
    assert_eq!(again["kv"][0]["value"], 2, "{again}");
}

#[test]
fn retry_reject_and_snooze_each_have_their_status() {
    let env = Env::new();
    let orders = handler(&env, "orders", "orders", None);
    let retrying = r#"{"id": 3, "retry_until_attempt": 2}"#;
    let (status, report) = invoke_json(
        &env,
        &orders,
        &["--payload", retrying, "--set", "retry_delay_ms=250"],
    );
    assert_eq!(status, 10, "{report}");
    assert_eq!(
        report["outcome"],
        serde_json::json!({"outcome": "retry", "delay_ms": 250})
    );
    assert_eq!(report["publishes"], serde_json::json!([]));
    // The second attempt goes through; without the kv grant it says so.
    let (status, report) = invoke_json(&env, &orders, &["--payload", retrying, "--attempt", "2"]);
    assert_eq!(status, 0, "{report}");
    let logs = report["logs"].to_string();
    assert!(
        logs.contains("not counted: handler orders is not granted the key-value store"),
        "{logs}"
    );

    let (status, report) = invoke_json(&env, &orders, &["--payload", "[1, 2]"]);
    assert_eq!(status, 11, "{report}");
    assert_eq!(
        report["outcome"]["reason"],
        "malformed order: not a JSON object"
    );

    let snoozer = handler(
        &env,
        "snoozer",
        "snoozer",
        Some("[capabilities]\nkv = true\n"),
    );
    let (status, report) = invoke_json(
        &env,
        &snoozer,
        &["--payload", r#"{"snoozes": 1, "delay_ms": 40}"#],
    );
    assert_eq!(status, 12, "{report}");
    assert_eq!(
        report["outcome"],
        serde_json::json!({"outcome": "snooze", "delay_ms": 40})
    );
}

#[test]
fn a_trap_a_timeout_and_the_memory_limit_end_the_call_as_run_logs_them() {
    let env = Env::new();
    for (guest_name, sidecar, status, kind, says) in [
        ("hostile_trap", None, 20, "trap", "attempt failed: trap: "),
        (
            "hostile_loop",
            Some("[limits]\ntimeout = \"300ms\"\n"),
            21,
            "timeout",
            "attempt failed: timeout: ",
        ),
        (
            "hostile_memory",
            Some("[limits]\nmemory = \"16MiB\"\n"),
            22,
            "memory_limit",
            "attempt failed: memory limit: memory limit of 16MiB exceeded",
        ),
    ] {
        let file = handler(&env, guest_name, guest_name, sidecar);
        let (code, report) = invoke_json(&env, &file, &["--payload", "x"]);
        assert_eq!(code, status, "{guest_name}: {report}");
        assert_eq!(report["outcome"]["outcome"], kind, "{report}");
        let out = invoke(&env, &file, &["--payload", "x"]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(says), "{guest_name}: {err}");
        assert_eq!(out.status.code(), Some(status));
    }
}

#[test]
fn a_batch_handler_takes_every_payload_and_answers_each() {
    let env = Env::new();
    let batch = handler(&env, "hello_batch", "hello_batch", None);
    let args = [
        "--payload",
        "a",
        "--payload",
        "retry",
        "--payload",
        "reject",
    ];
    let (status, report) = invoke_json(&env, &batch, &args);
    assert_eq!(status, 10, "the first message not done decides: {report}");
    let outcomes: Vec<&str> = report["outcomes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["outcome"].as_str().unwrap())
        .collect();
    assert_eq!(outcomes, ["done", "retry", "reject"]);
    assert_eq!(report["ids"].as_array().unwrap().len(), 3);
    assert_eq!(report["logs"][0]["message"], "hello_batch: 3 messages");
    // A single-message handler takes one.
    let hello = handler(&env, "hello", "hello", None);
    refused(
        &invoke(&env, &hello, &["--payload", "a", "--payload", "b"]),
        "is not a batch handler",
    );
}

#[test]
fn a_topic_publish_is_shown_with_its_route_and_the_text_report_names_everything() {
    let env = Env::new();
    let orders = handler(&env, "orders", "orders", None);
    let payload = r#"{"id": "A-1", "region": "eu"}"#;
    let (status, report) = invoke_json(
        &env,
        &orders,
        &["--payload", payload, "--set", "events_topic=order-events"],
    );
    assert_eq!(status, 0, "{report}");
    let topic = &report["publishes"][1];
    assert_eq!(topic["topic"], "order-events", "{report}");
    assert_eq!(topic["route"], "orders.eu.created");
    assert!(topic.get("queue").is_none());
    // The same call as text, the message from standard input.
    let mut cmd = env.command(&[
        "invoke",
        orders.to_str().unwrap(),
        "--set",
        "events_topic=order-events",
        "--header",
        "x-trial=1",
    ]);
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(payload.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8(out.stdout).unwrap();
    for part in [
        "orders: done",
        "publish to queue shipping",
        "publish to topic order-events as orders.eu.created",
        "header order-id: A-1",
        "log info  order A-1 announced on order-events as orders.eu.created to 1 queue(s)",
        "exit status 0",
    ] {
        assert!(text.contains(part), "{part:?} not in:\n{text}");
    }
}

#[test]
fn http_requests_are_refused_by_no_network_or_answered_by_fixtures() {
    let env = Env::new();
    let sidecar = "[capabilities]\nhttp_allow = [\"api.example.com\"]\n";
    let probe = handler(&env, "http_probe", "http_probe", Some(sidecar));
    let url = "http://api.example.com/rates";
    let (status, report) = invoke_json(&env, &probe, &["--payload", url, "--no-network"]);
    assert_eq!(status, 11, "{report}");
    assert_eq!(report["http"][0]["answer"], "refused: --no-network");
    let fixtures = env.dir.path().join("http.json");
    std::fs::write(
        &fixtures,
        format!(r#"[{{"url": "{url}", "headers": {{"content-type": "text/plain"}}, "body": "eur 1.08"}}]"#),
    )
    .unwrap();
    let fixture_arg = [
        "--payload",
        url,
        "--http-fixture",
        fixtures.to_str().unwrap(),
    ];
    let (status, report) = invoke_json(&env, &probe, &fixture_arg);
    assert_eq!(status, 0, "{report}");
    assert_eq!(report["http"][0]["answer"], "fixture");
    assert!(report["logs"].to_string().contains("eur 1.08"), "{report}");
    // A request with no fixture is refused; one the sidecar does not
    // allow is refused before any fixture is looked at.
    let other = [
        "--payload",
        "http://api.example.com/other",
        "--http-fixture",
        fixtures.to_str().unwrap(),
    ];
    let (status, report) = invoke_json(&env, &probe, &other);
    assert_eq!(status, 11, "{report}");
    assert_eq!(
        report["http"][0]["answer"],
        "refused: no fixture for this method and URL"
    );
    let denied = [
        "--payload",
        "http://elsewhere.example.com/rates",
        "--http-fixture",
        fixtures.to_str().unwrap(),
    ];
    let (_, report) = invoke_json(&env, &probe, &denied);
    assert_eq!(
        report["http"][0]["answer"],
        "refused: its host is not in [capabilities] http_allow"
    );
}

#[test]
fn bad_input_is_named_on_one_line_with_status_2_and_writes_nothing() {
    let env = Env::new();
    let orders = handler(&env, "orders", "orders", Some(ORDERS));
    let not_wasm = env.handlers.join("notes.wasm");
    std::fs::write(&not_wasm, "not a component").unwrap();
    refused(&invoke(&env, &not_wasm, &["--payload", "x"]), "notes.wasm");
    let wrong = handler(&env, "wrong_world", "wrong_world", None);
    refused(
        &invoke(&env, &wrong, &["--payload", "x"]),
        "wrong_world.wasm",
    );
    refused(
        &invoke(&env, &orders, &["--payload", "x", "--header", "novalue"]),
        "bad --header \"novalue\": give NAME=VALUE",
    );
    refused(
        &invoke(&env, &orders, &["--payload", "@/no/such/order.json"]),
        "--payload @FILE: ",
    );
    refused(
        &invoke(
            &env,
            &orders,
            &["--payload", "x", "--sidecar", "/no/such.toml"],
        ),
        "--sidecar /no/such.toml: no such file",
    );
    let bad_sidecar = env.dir.path().join("bad.toml");
    std::fs::write(&bad_sidecar, "concurrency = 0\n").unwrap();
    refused(
        &invoke(
            &env,
            &orders,
            &["--payload", "x", "--sidecar", bad_sidecar.to_str().unwrap()],
        ),
        "concurrency",
    );
    // An unreadable store is refused before the call, and left as it was.
    let kv = env.dir.path().join("kv.json");
    std::fs::write(&kv, "{not json").unwrap();
    refused(
        &invoke(
            &env,
            &orders,
            &["--payload", r#"{"id": 1}"#, "--kv", kv.to_str().unwrap()],
        ),
        &format!("--kv {}", kv.display()),
    );
    assert_eq!(std::fs::read_to_string(&kv).unwrap(), "{not json");
    // Usage errors are clap's, with the same status.
    let out = invoke(&env, &orders, &["--attempt", "0", "--payload", "x"]);
    assert_eq!(out.status.code(), Some(2));
    let missing = env.handlers.join("absent.wasm");
    refused(&invoke(&env, &missing, &["--payload", "x"]), "absent.wasm");
}
