//! The example handlers in every guest language, through one table of
//! messages with identical expected outcomes.
//!
//! `orders` announces each forwarded order on the topic `order-events`. Its
//! two subscribers are the Rust `hello` in every language's run: they only
//! count what they get, and a Rust instance costs microseconds where a
//! Python or JavaScript one would carry a second interpreter.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde_json::Value;

use crate::support::{Env, lines_with, repo_root, run_with_deadline};

/// Where the compiled components of every test run are cached, so each
/// language's components are compiled once per build, not once per test.
fn shared_cache() -> PathBuf {
    repo_root().join("target/test-compiled-cache")
}

/// The `sluice.toml` lines that use the shared cache, with its own key (a
/// key per test would make every entry another test wrote fail its check).
pub fn shared_cache_config() -> String {
    let cache = shared_cache();
    format!(
        "cache_dir = {:?}\ncache_key = {:?}\n",
        cache.to_str().unwrap(),
        cache.with_extension("key").to_str().unwrap()
    )
}

pub fn component(lang: &str, name: &str) -> PathBuf {
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
    std::fs::write(env.dir.path().join("sluice.toml"), shared_cache_config()).unwrap();
    // `orders_nokv` is `orders` without the key-value grant; `orders_unbound`
    // announces on a topic no queue is bound to.
    for (name, source) in [
        ("hello", "hello"),
        ("orders", "orders"),
        ("orders_nokv", "orders"),
        ("orders_unbound", "orders"),
    ] {
        std::fs::copy(
            component(lang, source),
            env.handlers.join(format!("{name}.wasm")),
        )
        .unwrap();
    }
    let orders = sidecar(
        lang,
        "[retry]\nmax_attempts = 3\ndelays = [\"10ms\"]\n[config]\nfollowup_queue = \"shipping\"\nretry_delay_ms = 10\nevents_topic = \"order-events\"\n[capabilities]\nkv = true\n",
    );
    std::fs::write(env.handlers.join("orders.toml"), orders).unwrap();
    let nokv = sidecar(lang, "[config]\nfollowup_queue = \"nokv_shipping\"\n");
    std::fs::write(env.handlers.join("orders_nokv.toml"), nokv).unwrap();
    // Its follow-ups would go to `shipping`, whose exact contents the table
    // checks: a retried order must leave nothing there.
    let unbound = sidecar(
        lang,
        "[retry]\nmax_attempts = 3\ndelays = [\"10ms\"]\n[config]\nfollowup_queue = \"shipping\"\nevents_topic = \"order-alerts\"\n",
    );
    std::fs::write(env.handlers.join("orders_unbound.toml"), unbound).unwrap();
    std::fs::write(env.handlers.join("hello.toml"), sidecar(lang, "")).unwrap();
    // The subscribers: `audit` takes every order, `eu_desk` the eu ones. The
    // host binds every sidecar's topics before any handler serves, so both
    // are bound before `orders` takes its first message.
    for (name, route) in [("audit", "orders.#"), ("eu_desk", "orders.eu.*")] {
        env.deploy(
            "hello",
            name,
            Some(&format!(
                "[[subscribe]]\ntopic = \"order-events\"\nroute = \"{route}\"\n"
            )),
        );
    }
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
        ("bad region", r#"{"id": 13, "region": "e u"}"#),
        ("region not a string", r#"{"id": 14, "region": 7}"#),
        ("eu order", r#"{"id": "E-1", "region": "eu"}"#),
        ("not utf-8", at_binary.as_str()),
    ];
    let ids: BTreeMap<&str, String> = cases
        .iter()
        .map(|(label, payload)| (*label, env.send("orders", payload, &[])))
        .collect();
    let uncounted = env.send("orders_nokv", r#"{"id": 11}"#, &[]);
    let unannounced = env.send("orders_unbound", r#"{"id": 12}"#, &[]);
    let log = env.run_until_idle();

    let stats = env.stats();
    assert_eq!(stats["hello"]["done"], 3, "{lang}");
    assert_eq!(
        lines_with(&log, "hello from sluice: message").len(),
        3 + 6,
        "{lang}: three greetings, six announcements: {log}"
    );
    assert_eq!(stats["orders"]["done"], 5, "{lang}: {}", stats["orders"]);
    assert_eq!(stats["orders"]["dead"], 8, "{lang}: {}", stats["orders"]);
    assert_eq!(
        stats["orders"]["retried"], 4,
        "{lang}: two for `retries then done`, two for `always retry`"
    );
    assert_eq!(lines_with(&log, "forwarded to shipping").len(), 5, "{lang}");
    assert_eq!(
        lines_with(&log, "order Å-1 🚚 (qty 1) from message").len(),
        1,
        "{lang}: {log}"
    );
    forwards_are_counted(lang, &env, &log, &uncounted);
    announces_to_the_bound_queues(lang, &stats, &log);
    an_unbound_topic_retries(lang, &env, &stats, &log, &unannounced);

    let reason = |label: &str| -> String {
        let shown = env.sluice(&["--json", "dlq", "show", "orders", &ids[label]]);
        serde_json::from_str::<Value>(&shown).unwrap()["reason"]
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
    for label in ["bad region", "region not a string"] {
        assert_eq!(
            reason(label),
            "rejected: malformed order: `region` must be a word of letters, digits, - or _",
            "{lang}: {label}"
        );
    }
    assert_eq!(
        reason("not utf-8"),
        "rejected: payload is not UTF-8",
        "{lang}"
    );

    let mut shipped: Vec<(String, String)> = env
        .drain("shipping")
        .into_iter()
        .map(|d| {
            let body: Value = serde_json::from_slice(&d.payload).unwrap();
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
        ("E-1", "\"E-1\"/1"),
        ("Å-1 🚚", "\"Å-1 🚚\"/1"),
    ]
    .map(|(a, b)| (a.to_string(), b.to_string()));
    assert_eq!(shipped, expected, "{lang}: and nothing of order 12");
    copies_carry_the_topic(lang, &env);
}

/// Each forwarded order is announced on `order-events`: the eu one to both
/// subscribers, the others (region `default`) to `audit` alone.
fn announces_to_the_bound_queues(lang: &str, stats: &BTreeMap<String, Value>, log: &str) {
    let eu = lines_with(log, " announced on order-events as orders.eu.created to ");
    assert_eq!(eu.len(), 1, "{lang}: {log}");
    assert!(
        eu[0].contains("order E-1 announced on order-events as orders.eu.created to 2 queue(s)"),
        "{lang}: {}",
        eu[0]
    );
    let default = lines_with(
        log,
        " announced on order-events as orders.default.created to ",
    );
    assert_eq!(default.len(), 4, "{lang}: orders 7, A-1, Å-1 and 8: {log}");
    assert!(
        default
            .iter()
            .all(|l| l.contains("as orders.default.created to 1 queue(s)")),
        "{lang}: {default:?}"
    );
    assert_eq!(stats["audit"]["done"], 5, "{lang}: {}", stats["audit"]);
    assert_eq!(stats["eu_desk"]["done"], 1, "{lang}: {}", stats["eu_desk"]);
}

/// With no queue bound to its `events_topic`, step 10 fails on every attempt:
/// the order is retried until it is dead, and its follow-up, held with each
/// attempt, is dropped each time.
fn an_unbound_topic_retries(
    lang: &str,
    env: &Env,
    stats: &BTreeMap<String, Value>,
    log: &str,
    id: &str,
) {
    let q = &stats["orders_unbound"];
    assert_eq!(
        (&q["done"], &q["retried"], &q["dead"]),
        (&Value::from(0), &Value::from(2), &Value::from(1)),
        "{lang}: {q}"
    );
    let failed = lines_with(
        log,
        "order 12: publish to topic \"order-alerts\" failed: no queue is bound to topic \"order-alerts\" for routing key \"orders.default.created\"",
    );
    assert_eq!(failed.len(), 3, "{lang}: one per attempt: {log}");
    assert!(
        failed.iter().all(|l| l.contains("ERROR")),
        "{lang}: {failed:?}"
    );
    assert!(
        lines_with(log, "order 12 (qty 1)").is_empty(),
        "{lang}: never forwarded: {log}"
    );
    let shown = env.sluice(&["--json", "dlq", "show", "orders_unbound", id]);
    let dead: Value = serde_json::from_str(&shown).unwrap();
    assert_eq!(
        dead["reason"], "gave up after 3 attempt(s)",
        "{lang}: {dead}"
    );
    let topics: Vec<Value> = serde_json::from_str(&env.sluice(&["--json", "topics"])).unwrap();
    let alerts = topics.iter().find(|t| t["topic"] == "order-alerts");
    assert_eq!(
        alerts.map(|t| &t["unmatched"]),
        Some(&Value::from(3)),
        "{lang}: every refused publish is counted: {topics:?}"
    );
}

/// A subscriber that is not deployed keeps its binding, as a queue without a
/// handler keeps its messages: with `audit` and `eu_desk` taken away, the
/// next announcements wait in their queues, and their copies can be read.
fn copies_carry_the_topic(lang: &str, env: &Env) {
    for name in ["audit", "eu_desk"] {
        std::fs::remove_file(env.handlers.join(format!("{name}.wasm"))).unwrap();
    }
    let eu = env.send("orders", r#"{"id": "E-2", "region": "eu"}"#, &[]);
    let plain = env.send("orders", r#"{"id": 15}"#, &[]);
    env.run_until_idle();
    let copies = |queue: &str| -> Vec<(String, String, String)> {
        let mut got: Vec<(String, String, String)> = env
            .drain(queue)
            .iter()
            .map(|d| {
                assert_eq!(
                    d.header("sluice-topic"),
                    Some("order-events"),
                    "{lang}: {d:?}"
                );
                (
                    d.header("order-id").unwrap_or("-").to_string(),
                    d.header("sluice-route").unwrap_or("-").to_string(),
                    String::from_utf8(d.payload.clone()).unwrap(),
                )
            })
            .collect();
        got.sort();
        got
    };
    let eu_copy = (
        "E-2".to_string(),
        "orders.eu.created".to_string(),
        format!(r#"{{"order":"E-2","qty":1,"source":"{eu}"}}"#),
    );
    let plain_copy = (
        "15".to_string(),
        "orders.default.created".to_string(),
        format!(r#"{{"order":15,"qty":1,"source":"{plain}"}}"#),
    );
    assert_eq!(
        copies("audit"),
        [plain_copy, eu_copy.clone()],
        "{lang}: the follow-up's payload and header, with the topic's headers"
    );
    assert_eq!(copies("eu_desk"), [eu_copy], "{lang}");
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
    assert_eq!(counts, [1, 2, 3, 4, 5], "{lang}: one count per forward");
    let (rt, broker) = env.broker();
    let stored = rt.block_on(broker.kv_get("orders", "forwarded")).unwrap();
    assert_eq!(stored.as_deref(), Some(&b"5"[..]), "{lang}");

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

/// Fresh mode keeps nothing from one message to the next: `hello` counts
/// its instance's calls in a global, and every message of a fresh handler
/// sees 1, in every language. The same handler in reuse mode counts up, so
/// the count is one the test would see. With `scan` false the host runs
/// with `SLUICE_PAGEMAP_SCAN=off`, the reset a kernel without the scan gets.
fn fresh_instances_start_clean(lang: &str, guest: &str, scan: bool) {
    let env = Env::new();
    std::fs::write(env.dir.path().join("sluice.toml"), shared_cache_config()).unwrap();
    for (name, mode) in [("fresh", "fresh"), ("warm", "reuse")] {
        std::fs::copy(
            component(lang, guest),
            env.handlers.join(format!("{name}.wasm")),
        )
        .unwrap();
        std::fs::write(
            env.handlers.join(format!("{name}.toml")),
            format!("instance_mode = \"{mode}\"\nconcurrency = 1\n"),
        )
        .unwrap();
        for i in 0..5 {
            env.send(name, &format!("message {i}"), &[]);
        }
    }
    let log = if scan {
        env.run_until_idle()
    } else {
        let log = env.run_until_idle_with(&[("SLUICE_PAGEMAP_SCAN", "off")]);
        assert!(
            log.contains(
                "SLUICE_PAGEMAP_SCAN=off: fresh instances' memory is reset without PAGEMAP_SCAN"
            ),
            "{log}"
        );
        log
    };
    let calls = |handler: &str| -> Vec<u32> {
        lines_with(&log, "hello from sluice: message")
            .into_iter()
            .filter(|l| {
                l.contains(&format!("handler=\"{handler}\""))
                    || l.contains(&format!("handler={handler} "))
            })
            .map(|l| {
                let after = l.split(", call ").nth(1).expect("the call count");
                after.split(' ').next().unwrap().parse().unwrap()
            })
            .collect()
    };
    assert_eq!(calls("fresh"), [1, 1, 1, 1, 1], "{lang} {guest}: {log}");
    let mut warm = calls("warm");
    warm.sort();
    assert_eq!(
        warm,
        [1, 2, 3, 4, 5],
        "{lang} {guest}: one warm instance counts up"
    );
}

/// `hello` on each language's SDK, and `hello_raw` on the raw generated
/// bindings: components built the old way keep working.
#[test]
fn fresh_instances_start_clean_in_every_language() {
    for lang in ["rust", "c", "python", "js"] {
        for guest in ["hello", "hello_raw"] {
            fresh_instances_start_clean(lang, guest, true);
        }
    }
}

/// `sluice invoke` gets the same answers from `orders` in every language:
/// the outcome, its exit status and the follow-up, byte for byte.
#[test]
fn invoke_gives_the_same_answers_in_every_language() {
    let cases: [(&str, i32, &str); 5] = [
        (r#"{"id": 7, "qty": 2}"#, 0, r#"{"outcome":"done"}"#),
        (
            r#"{"id": 8, "retry_until_attempt": 3}"#,
            10,
            r#"{"delay_ms":10,"outcome":"retry"}"#,
        ),
        (
            r#"{"id": 9, "always_retry": true}"#,
            10,
            r#"{"delay_ms":null,"outcome":"retry"}"#,
        ),
        (
            "[1, 2]",
            11,
            r#"{"outcome":"reject","reason":"malformed order: not a JSON object"}"#,
        ),
        (
            r#"{"id": 10, "qty": 0}"#,
            11,
            r#"{"outcome":"reject","reason":"malformed order: `qty` must be a positive integer, got 0"}"#,
        ),
    ];
    let env = Env::new();
    std::fs::write(env.dir.path().join("sluice.toml"), shared_cache_config()).unwrap();
    for lang in ["rust", "c", "python", "js"] {
        let file = component(lang, "orders");
        for (payload, status, outcome) in cases {
            let out = env.sluice_raw(&[
                "--json",
                "invoke",
                file.to_str().unwrap(),
                "--payload",
                payload,
                "--id",
                "m-1",
            ]);
            let report: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
                panic!(
                    "{lang} {payload}: {e}: {}",
                    String::from_utf8_lossy(&out.stderr)
                )
            });
            assert_eq!(
                out.status.code(),
                Some(status),
                "{lang} {payload}: {report}"
            );
            let outcome: Value = serde_json::from_str(outcome).unwrap();
            assert_eq!(report["outcome"], outcome, "{lang} {payload}");
        }
        let out = env.sluice_raw(&[
            "--json",
            "invoke",
            file.to_str().unwrap(),
            "--payload",
            r#"{"id": "Å-1 🚚", "qty": 3}"#,
            "--id",
            "m-2",
        ]);
        let report: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(
            report["publishes"],
            serde_json::json!([{
                "queue": "shipping",
                "key": null,
                "delay_ms": 0,
                "headers": [["order-id", "Å-1 🚚"]],
                "payload": r#"{"order":"Å-1 🚚","qty":3,"source":"m-2"}"#,
            }]),
            "{lang}"
        );
    }
}

/// The same with the memory reset a kernel without `PAGEMAP_SCAN` gets.
#[test]
fn fresh_instances_start_clean_without_the_pagemap_scan() {
    for lang in ["rust", "c", "python", "js"] {
        fresh_instances_start_clean(lang, "hello", false);
    }
}

/// `sluice check` with the environment variable `var` set to `value`
/// fails, and its error says `message`.
fn refused_setting(var: &str, value: &str, message: &str) {
    let env = Env::new();
    let mut cmd = env.command(&["check", component("rust", "hello").to_str().unwrap()]);
    cmd.env(var, value);
    let out = run_with_deadline(cmd, Duration::from_secs(60));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains(message), "{stderr}");
}

/// A value of `SLUICE_PAGEMAP_SCAN` other than `auto` or `off` is refused,
/// with the variable named.
#[test]
fn an_unknown_pagemap_scan_setting_is_refused() {
    refused_setting(
        "SLUICE_PAGEMAP_SCAN",
        "no",
        r#"SLUICE_PAGEMAP_SCAN is "no": set it to "auto" (the default) or "off", or unset it"#,
    );
}

/// With `SLUICE_PROFILE=perfmap` the host names every compiled function of
/// its handlers in `/tmp/perf-PID.map`, the file its log names, for `perf
/// report`; the handler runs as without it.
#[test]
fn a_perf_map_names_the_handlers_functions() {
    let env = Env::new();
    std::fs::copy(component("rust", "hello"), env.handlers.join("hello.wasm")).unwrap();
    env.send("hello", "profiled", &[]);
    let log = env.run_until_idle_with(&[("SLUICE_PROFILE", "perfmap")]);
    assert!(
        log.contains("hello from sluice: message"),
        "the handler ran: {log}"
    );
    let line = lines_with(&log, "SLUICE_PROFILE=perfmap")
        .into_iter()
        .next()
        .unwrap_or_else(|| panic!("the map is logged: {log}"));
    let path = line
        .split("map=")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .expect("the map's path")
        .to_string();
    assert!(path.starts_with("/tmp/perf-"), "{line}");
    let map = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let _ = std::fs::remove_file(&path);
    // `perf`'s format: start address and size in hex, then the name.
    let functions: Vec<&str> = map
        .lines()
        .filter(|l| {
            let mut fields = l.splitn(3, ' ');
            let start = fields.next().unwrap_or("");
            let size = fields.next().unwrap_or("");
            let name = fields.next().unwrap_or("");
            start.starts_with("0x")
                && u64::from_str_radix(size, 16).is_ok_and(|n| n > 0)
                && name.starts_with("wasm[")
                && name.contains("::function[")
        })
        .collect();
    assert!(
        functions.len() >= 10,
        "the guest's functions are in {path}: {} of {} lines",
        functions.len(),
        map.lines().count()
    );
}

/// A value of `SLUICE_PROFILE` other than `perfmap` or `off` is refused,
/// with the variable named.
#[test]
fn an_unknown_profile_setting_is_refused() {
    refused_setting(
        "SLUICE_PROFILE",
        "jitdump",
        r#"SLUICE_PROFILE is "jitdump": set it to "perfmap""#,
    );
}
