//! The example handlers in every guest language, through one table of
//! messages with identical expected outcomes.

use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::support::{Env, lines_with, repo_root};

/// Where the compiled components of every test run are cached, so each
/// language's components are compiled once per build, not once per test.
fn shared_cache() -> PathBuf {
    repo_root().join("target/test-compiled-cache")
}

fn component(lang: &str, name: &str) -> PathBuf {
    let path = repo_root()
        .join("guests/out")
        .join(lang)
        .join(format!("{name}.wasm"));
    assert!(
        path.is_file(),
        "the {lang} guest {name} is not built ({} is missing): run scripts/build-guests",
        path.display()
    );
    path
}

/// Python and JavaScript components carry an interpreter: warm instances.
fn sidecar(lang: &str, extra: &str) -> String {
    let mode = match lang {
        "python" | "js" => "instance_mode = \"reuse\"\n",
        _ => "",
    };
    format!("{mode}{extra}")
}

fn env_for(lang: &str) -> Env {
    let env = Env::new();
    std::fs::write(
        env.dir.path().join("sluice.toml"),
        format!("cache_dir = {:?}\n", shared_cache().to_str().unwrap()),
    )
    .unwrap();
    // `orders_nokv` is `orders` without the key-value grant.
    for (name, source) in [
        ("hello", "hello"),
        ("orders", "orders"),
        ("orders_nokv", "orders"),
    ] {
        std::fs::copy(
            component(lang, source),
            env.handlers.join(format!("{name}.wasm")),
        )
        .unwrap();
    }
    let orders = sidecar(
        lang,
        "[retry]\nmax_attempts = 3\ndelays = [\"10ms\"]\n[config]\nfollowup_queue = \"shipping\"\nretry_delay_ms = 10\n[capabilities]\nkv = true\n",
    );
    std::fs::write(env.handlers.join("orders.toml"), orders).unwrap();
    let nokv = sidecar(lang, "[config]\nfollowup_queue = \"nokv_shipping\"\n");
    std::fs::write(env.handlers.join("orders_nokv.toml"), nokv).unwrap();
    std::fs::write(env.handlers.join("hello.toml"), sidecar(lang, "")).unwrap();
    env
}

fn same_outcomes(lang: &str) {
    let env = env_for(lang);
    let binary = env.dir.path().join("binary.bin");
    std::fs::write(&binary, [0xff, 0xfe, 0x00]).unwrap();
    let at_binary = format!("@{}", binary.display());
    for i in 0..3 {
        env.send("hello", &format!("greeting {i}"), &[]);
    }
    let cases = [
        ("valid", r#"{"id": 7, "qty": 2}"#),
        ("string id", r#"{"id": "A-1"}"#),
        // Non-ASCII text through every string the guest passes to the host
        // (the log line, the header, the published JSON).
        ("unicode id", r#"{"id": "Å-1 🚚"}"#),
        (
            "retries then done",
            r#"{"id": 8, "retry_until_attempt": 3}"#,
        ),
        ("always retry", r#"{"id": 9, "always_retry": true}"#),
        ("not json", "not json"),
        ("not an object", "[1, 2]"),
        ("missing id", r#"{"qty": 1}"#),
        ("bad qty", r#"{"id": 10, "qty": 0}"#),
        ("not utf-8", at_binary.as_str()),
    ];
    let ids: BTreeMap<&str, String> = cases
        .iter()
        .map(|(label, payload)| (*label, env.send("orders", payload, &[])))
        .collect();
    let uncounted = env.send("orders_nokv", r#"{"id": 11}"#, &[]);
    let log = env.run_until_idle();

    let stats = env.stats();
    assert_eq!(stats["hello"]["done"], 3, "{lang}");
    assert_eq!(
        lines_with(&log, "hello from sluice: message").len(),
        3,
        "{lang}: {log}"
    );
    assert_eq!(stats["orders"]["done"], 4, "{lang}: {}", stats["orders"]);
    assert_eq!(stats["orders"]["dead"], 6, "{lang}: {}", stats["orders"]);
    assert_eq!(
        stats["orders"]["retried"], 4,
        "{lang}: two for `retries then done`, two for `always retry`"
    );
    assert_eq!(lines_with(&log, "forwarded to shipping").len(), 4, "{lang}");
    assert_eq!(
        lines_with(&log, "order Å-1 🚚 (qty 1) from message").len(),
        1,
        "{lang}: {log}"
    );
    forwards_are_counted(lang, &env, &log, &uncounted);

    let reason = |label: &str| -> String {
        let shown = env.sluice(&["--json", "dlq", "show", "orders", &ids[label]]);
        serde_json::from_str::<serde_json::Value>(&shown).unwrap()["reason"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert_eq!(
        reason("always retry"),
        "gave up after 3 attempt(s)",
        "{lang}"
    );
    assert!(
        reason("not json").starts_with("rejected: malformed order: "),
        "{lang}: {}",
        reason("not json")
    );
    assert_eq!(
        reason("not an object"),
        "rejected: malformed order: not a JSON object",
        "{lang}"
    );
    assert_eq!(
        reason("missing id"),
        "rejected: malformed order: missing `id`",
        "{lang}"
    );
    assert_eq!(
        reason("bad qty"),
        "rejected: malformed order: `qty` must be a positive integer, got 0",
        "{lang}"
    );
    assert_eq!(
        reason("not utf-8"),
        "rejected: payload is not UTF-8",
        "{lang}"
    );

    let mut shipped: Vec<(String, String)> = env
        .drain("shipping")
        .into_iter()
        .map(|d| {
            let body: serde_json::Value = serde_json::from_slice(&d.payload).unwrap();
            assert_eq!(body["source"].as_str().unwrap().len(), 32, "{lang}: {body}");
            let order_id = d.header("order-id").unwrap().to_string();
            (order_id, format!("{}/{}", body["order"], body["qty"]))
        })
        .collect();
    shipped.sort();
    let expected = [
        ("7", "7/2"),
        ("8", "8/1"),
        ("A-1", "\"A-1\"/1"),
        ("Å-1 🚚", "\"Å-1 🚚\"/1"),
    ]
    .map(|(a, b)| (a.to_string(), b.to_string()));
    assert_eq!(shipped, expected, "{lang}");
}

/// `orders` counts each forward in its key-value store and logs the count;
/// `orders_nokv`, not granted the store, warns and forwards all the same.
fn forwards_are_counted(lang: &str, env: &Env, log: &str, uncounted: &str) {
    let mut counts: Vec<u64> = lines_with(log, "forwarded to shipping (forwarded: ")
        .iter()
        .map(|l| {
            let n = l.split("(forwarded: ").nth(1).unwrap();
            n[..n.find(')').unwrap()].parse().unwrap()
        })
        .collect();
    counts.sort();
    assert_eq!(counts, [1, 2, 3, 4], "{lang}: one count per forward");
    let (rt, broker) = env.broker();
    let stored = rt.block_on(broker.kv_get("orders", "forwarded")).unwrap();
    assert_eq!(stored.as_deref(), Some(&b"4"[..]), "{lang}");

    assert_eq!(env.count("orders_nokv", "done"), 1, "{lang}");
    let warning = "order 11: not counted: handler orders_nokv is not granted the key-value store: add `kv = true` under [capabilities] in orders_nokv.toml";
    assert_eq!(lines_with(log, warning).len(), 1, "{lang}: {log}");
    let forwarded = format!("order 11 (qty 1) from message {uncounted} forwarded to nokv_shipping");
    let line = lines_with(log, &forwarded);
    assert!(
        line.len() == 1 && !line[0].contains("(forwarded: "),
        "{lang}: {log}"
    );
    assert_eq!(env.drain("nokv_shipping").len(), 1, "{lang}");
}

#[test]
fn rust_examples() {
    same_outcomes("rust");
}

#[test]
fn python_examples() {
    same_outcomes("python");
}

#[test]
fn js_examples() {
    same_outcomes("js");
}

#[test]
fn c_examples() {
    same_outcomes("c");
}
