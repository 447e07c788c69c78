//! Topics end to end through the `sluice` binary, on every broker: bindings
//! from sidecars and the command line, fan-out to several handlers that
//! succeed or fail independently, unmatched publishes, and a guest's own
//! topic publishes committed with its ack.

use serde_json::Value;

use crate::support::{Env, lines_with};

/// `hello`, bound to every `orders` route.
const AUDIT: &str = "[[subscribe]]\ntopic = \"orders\"\nroute = \"orders.#\"\n";
/// A handler that traps on every call, bound to created orders only.
const FRAGILE: &str = "[[subscribe]]\ntopic = \"orders\"\nroute = \"orders.*.created\"\n[retry]\nmax_attempts = 2\ndelays = [\"10ms\"]\n";

/// `sluice send --topic`: the queues each copy went to.
fn send_topic(env: &Env, route: &str, payload: &str) -> Vec<String> {
    env.sluice(&["send", "--topic", "orders", "--route", route, payload])
        .lines()
        .map(|l| l.split_whitespace().next().unwrap().to_string())
        .collect()
}

/// `sluice topics --json`, by topic.
fn topics(env: &Env) -> Vec<Value> {
    serde_json::from_str(&env.sluice(&["--json", "topics"])).unwrap()
}

fn unmatched(env: &Env, topic: &str) -> u64 {
    topics(env)
        .iter()
        .find(|t| t["topic"] == topic)
        .map_or(0, |t| t["unmatched"].as_u64().unwrap())
}

fn fan_out_to_two_handlers_with_independent_failure(env: Env) {
    env.deploy("hello", "audit", Some(AUDIT));
    env.deploy("hostile_trap", "fragile", Some(FRAGILE));
    // A host binds the sidecars' subscriptions when it loads the handlers.
    env.run_until_idle();
    let bound = topics(&env);
    assert_eq!(bound.len(), 1, "{bound:?}");
    let origins: Vec<&str> = bound[0]["bindings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["origin"].as_str().unwrap())
        .collect();
    assert_eq!(origins, ["handler:audit", "handler:fragile"]);

    for i in 0..5 {
        let mut queues = send_topic(&env, "orders.eu.created", &format!("created {i}"));
        queues.sort();
        assert_eq!(queues, ["audit", "fragile"]);
    }
    for i in 0..2 {
        assert_eq!(
            send_topic(&env, "orders.eu.deleted", &format!("deleted {i}")),
            ["audit"]
        );
    }
    let log = env.run_until_idle();
    let stats = env.stats();
    // Each handler handled every event it is bound to, once, whatever the
    // other did with its copy.
    let audit = &stats["audit"];
    assert_eq!(
        (audit["done"].as_u64(), audit["retried"].as_u64()),
        (Some(7), Some(0)),
        "{audit}"
    );
    assert_eq!(audit["dead"], 0);
    let fragile = &stats["fragile"];
    assert_eq!(
        (fragile["dead"].as_u64(), fragile["done"].as_u64()),
        (Some(5), Some(0)),
        "{fragile}"
    );
    assert_eq!(fragile["retried"], 5, "one retry each before giving up");
    assert_eq!(lines_with(&log, "hello from sluice").len(), 7, "{log}");
    let dead = env.dead("fragile");
    assert!(
        dead.iter()
            .all(|d| d["last_error"].as_str().unwrap().contains("trap")),
        "{dead:?}"
    );
}

fn unmatched_publishes_are_refused_or_caught(env: Env) {
    env.deploy("hello", "audit", Some(AUDIT));
    env.run_until_idle();
    // Nothing matches `refunds.*` and the topic has no catch-all: refused.
    let out = env.sluice_raw(&["send", "--topic", "orders", "--route", "refunds.x", "r1"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("no queue is bound to topic \"orders\" for routing key \"refunds.x\""),
        "{err}"
    );
    assert_eq!(unmatched(&env, "orders"), 1);
    // A topic nobody is bound to is refused the same way, and counted too.
    let out = env.sluice_raw(&["send", "--topic", "nobody", "--route", "a", "x"]);
    assert!(!out.status.success());
    assert_eq!(unmatched(&env, "nobody"), 1);

    // A catch-all bound on the command line takes what no pattern matches.
    env.sluice(&["topics", "bind", "orders", "parked", "--unmatched"]);
    assert_eq!(send_topic(&env, "refunds.x", "r2"), ["parked"]);
    assert_eq!(
        send_topic(&env, "orders.us.created", "o1"),
        ["audit"],
        "a match never reaches the catch-all"
    );
    assert_eq!(unmatched(&env, "orders"), 2);
    let parked = env.drain("parked");
    assert_eq!(parked.len(), 1);
    assert_eq!(parked[0].payload, b"r2");
    assert_eq!(parked[0].header("sluice-route"), Some("refunds.x"));

    // Bad names are one-line errors that say what to write.
    let out = env.sluice_raw(&["send", "--topic", "orders", "--route", "a..b", "x"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("bad routing key \"a..b\""));
    let out = env.sluice_raw(&["send", "--topic", "orders", "x"]);
    assert!(!out.status.success(), "--topic needs --route");
}

fn sidecar_bindings_follow_the_sidecar(env: Env) {
    env.deploy("hello", "audit", Some(AUDIT));
    env.run_until_idle();
    env.sluice(&["topics", "bind", "orders", "audit", "--route", "manual.*"]);
    // The sidecar now subscribes to another topic instead.
    std::fs::write(
        env.handlers.join("audit.toml"),
        "[[subscribe]]\ntopic = \"refunds\"\nunmatched = true\n",
    )
    .unwrap();
    env.run_until_idle();
    let all = topics(&env);
    let routes = |topic: &str| -> Vec<(String, String)> {
        all.iter()
            .find(|t| t["topic"] == topic)
            .map(|t| {
                t["bindings"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|b| {
                        (
                            b["pattern"].to_string(),
                            b["origin"].as_str().unwrap().to_string(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default()
    };
    assert_eq!(
        routes("orders"),
        [("\"manual.*\"".to_string(), "cli".to_string())],
        "the sidecar's old binding is gone, the command line's stays"
    );
    assert_eq!(
        routes("refunds"),
        [("null".to_string(), "handler:audit".to_string())]
    );
    assert_eq!(
        env.sluice(&["topics", "unbind", "orders", "audit", "--route", "manual.*"])
            .trim(),
        "removed 1 binding(s) of audit to topic orders"
    );
    let out = env.sluice_raw(&["topics", "unbind", "orders", "audit", "--route", "manual.*"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("no such binding"));
}

/// `orders` announces each order on its `events_topic`: the copies reach the
/// bound queues with the ack, and an order nobody takes is retried, its
/// follow-up dropped with the attempt.
fn guest_topic_publishes_commit_with_the_ack(env: Env) {
    let orders = "[retry]\nmax_attempts = 2\ndelays = [\"10ms\"]\n[config]\nevents_topic = \"order-events\"\n";
    env.deploy("orders", "orders", Some(orders));
    env.deploy(
        "hello",
        "audit",
        Some("[[subscribe]]\ntopic = \"order-events\"\nroute = \"orders.#\"\n"),
    );
    env.deploy(
        "hello",
        "eu_desk",
        Some("[[subscribe]]\ntopic = \"order-events\"\nroute = \"orders.eu.*\"\n"),
    );
    env.run_until_idle();
    env.send("orders", r#"{"id": 1, "region": "eu"}"#, &[]);
    env.send("orders", r#"{"id": 2}"#, &[]);
    let log = env.run_until_idle();
    assert_eq!(
        lines_with(
            &log,
            "order 1 announced on order-events as orders.eu.created to 2 queue(s)"
        )
        .len(),
        1,
        "{log}"
    );
    assert_eq!(
        lines_with(
            &log,
            "order 2 announced on order-events as orders.default.created to 1 queue(s)"
        )
        .len(),
        1,
        "{log}"
    );
    let stats = env.stats();
    assert_eq!(
        (
            stats["audit"]["done"].as_u64(),
            stats["eu_desk"]["done"].as_u64()
        ),
        (Some(2), Some(1))
    );
    assert_eq!(env.drain("shipping").len(), 2);

    // Unbind everything: the announcement fails, the order is retried until
    // dead, and its follow-up never reaches `shipping`.
    env.sluice(&["topics", "unbind", "order-events", "audit", "--all"]);
    env.sluice(&["topics", "unbind", "order-events", "eu_desk", "--all"]);
    std::fs::remove_file(env.handlers.join("audit.wasm")).unwrap();
    std::fs::remove_file(env.handlers.join("eu_desk.wasm")).unwrap();
    env.send("orders", r#"{"id": 3}"#, &[]);
    let log = env.run_until_idle();
    assert_eq!(
        lines_with(
            &log,
            "order 3: publish to topic \"order-events\" failed: no queue is bound"
        )
        .len(),
        2,
        "{log}"
    );
    assert_eq!(env.count("orders", "dead"), 1);
    assert!(
        env.drain("shipping").is_empty(),
        "the retried attempts' follow-ups were dropped"
    );
}

/// A host binds every sidecar's topics before any handler serves: an order
/// waiting before the first start is announced to a subscriber whose name
/// sorts after the publisher's, without a retry.
fn subscribers_are_bound_before_any_handler_serves(env: Env) {
    env.deploy(
        "orders",
        "orders",
        Some("[config]\nevents_topic = \"order-events\"\n"),
    );
    env.deploy(
        "hello",
        "zz_audit",
        Some("[[subscribe]]\ntopic = \"order-events\"\n"),
    );
    env.send("orders", r#"{"id": 1}"#, &[]);
    let log = env.run_until_idle();
    let stats = env.stats();
    assert_eq!(
        (
            stats["orders"]["done"].as_u64(),
            stats["orders"]["retried"].as_u64()
        ),
        (Some(1), Some(0)),
        "{log}"
    );
    assert_eq!(stats["zz_audit"]["done"], 1);
}

/// A handler refused because another serves its queue binds nothing: its
/// subscriptions would send that other handler messages it never asked for.
fn a_handler_refused_for_its_queue_binds_no_topics(env: Env) {
    env.deploy("hello", "a_desk", Some("queue = \"desk\"\n"));
    env.deploy(
        "hello",
        "b_desk",
        Some("queue = \"desk\"\n[[subscribe]]\ntopic = \"refunds\"\n"),
    );
    let log = env.run_until_idle();
    assert!(
        log.contains("queue \"desk\" is already served by a_desk.wasm"),
        "{log}"
    );
    let all = topics(&env);
    assert!(
        all.iter().all(|t| t["topic"] != "refunds"),
        "b_desk's subscription was bound: {all:?}"
    );
}

on_every_backend!(env:
    a_handler_refused_for_its_queue_binds_no_topics,
    subscribers_are_bound_before_any_handler_serves,
    fan_out_to_two_handlers_with_independent_failure,
    unmatched_publishes_are_refused_or_caught,
    sidecar_bindings_follow_the_sidecar,
    guest_topic_publishes_commit_with_the_ack,
);
