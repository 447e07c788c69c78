//! `sluice:handler@0.2.0` end to end, through the `sluice` binary with real
//! guests: a 0.1.0 component served unchanged beside it, `snooze`, the
//! `lease` imports, and batch handlers in every guest language.

use crate::languages::{component, shared_cache_config};
use crate::support::{Env, lines_with};

fn legacy_components_are_served_unchanged(env: Env) {
    env.deploy(
        "legacy",
        "legacy",
        Some("[retry]\nmax_attempts = 2\ndelays = [\"10ms\"]\n[config]\nforward = \"next\"\n"),
    );
    for payload in ["hi", "retry", "reject"] {
        env.send("legacy", payload, &[]);
    }
    let log = env.run_until_idle();
    let stats = env.stats();
    assert_eq!(stats["legacy"]["done"], 1, "{log}");
    assert_eq!(stats["legacy"]["retried"], 1);
    assert_eq!(stats["legacy"]["dead"], 2);
    assert_eq!(lines_with(&log, "legacy: hi").len(), 1, "{log}");
    let forwarded = env.drain("next");
    assert_eq!(forwarded.len(), 1, "its publish was committed with the ack");
    assert_eq!(forwarded[0].payload, b"hi");
    let mut reasons: Vec<String> = env
        .dead("legacy")
        .iter()
        .map(|d| d["reason"].as_str().unwrap().to_string())
        .collect();
    reasons.sort();
    assert_eq!(
        reasons,
        ["gave up after 2 attempt(s)", "rejected: rejected by legacy"]
    );
}

fn check_names_each_world() {
    let env = Env::new();
    for (guest, world) in [
        (
            crate::support::guest("legacy"),
            "sluice:handler/handler@0.1.0",
        ),
        (
            crate::support::guest("hello"),
            "sluice:handler/handler@0.2.0",
        ),
        (
            component("rust", "hello_batch"),
            "sluice:handler/batch-handler@0.2.0",
        ),
    ] {
        let out = env.sluice(&["check", guest.to_str().unwrap()]);
        assert!(
            out.contains(&format!("ok, implements {world} (")),
            "{world}: {out}"
        );
        let upgrade = out.contains("built for sluice:handler@0.1.0");
        assert_eq!(upgrade, world.ends_with("@0.1.0"), "{out}");
        let json = env.sluice(&["--json", "check", guest.to_str().unwrap()]);
        let json: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(json["world"], world);
    }
}

fn a_snooze_spends_no_attempt_until_the_snoozes_run_out(env: Env) {
    // One attempt in all: a snooze that spent one would kill the message.
    env.deploy(
        "snoozer",
        "snoozer",
        Some("[retry]\nmax_attempts = 1\nmax_snoozes = 3\n[capabilities]\nkv = true\n"),
    );
    let patient = env.send("snoozer", r#"{"snoozes": 3, "delay_ms": 20}"#, &[]);
    let restless = env.send("snoozer", r#"{"snoozes": 10, "delay_ms": 20}"#, &[]);
    let log = env.run_until_idle();
    let stats = env.stats();
    assert_eq!(stats["snoozer"]["done"], 1, "{log}");
    assert_eq!(stats["snoozer"]["dead"], 1, "{log}");
    assert_eq!(stats["snoozer"]["retried"], 0, "snoozes are not retries");
    let dead = env.dead("snoozer");
    assert_eq!(dead[0]["id"], restless.as_str());
    assert_eq!(
        dead[0]["reason"],
        "snoozed 3 time(s), the most `retry.max_snoozes` allows, and asked for 20ms more"
    );
    assert_eq!(dead[0]["attempts"], 1);
    // What the guest saw on its last delivery of each: still attempt 1.
    let (rt, broker) = env.broker();
    for id in [&patient, &restless] {
        let attempt = rt
            .block_on(broker.kv_get("snoozer", &format!("attempt:{id}")))
            .unwrap();
        assert_eq!(attempt.as_deref(), Some(&b"1"[..]), "{id}");
        let count = rt
            .block_on(broker.kv_get("snoozer", &format!("snoozed:{id}")))
            .unwrap();
        assert_eq!(
            count.as_deref(),
            Some(&b"4"[..]),
            "{id}: 3 snoozes, then the end"
        );
    }
}

fn a_call_that_asks_for_more_time_keeps_its_lease(env: Env) {
    // The call sleeps past its timeout and past its lease: it runs to the
    // end only because it asked, and its lease was kept meanwhile.
    env.deploy(
        "extender",
        "extender",
        Some(
            "lease = \"2s\"\n[limits]\ntimeout = \"300ms\"\nmax_extend = \"4s\"\n[retry]\nmax_attempts = 1\n",
        ),
    );
    env.send("extender", r#"{"extend_ms": 3500, "sleep_ms": 2800}"#, &[]);
    env.send("extender", r#"{"extend_ms": 0, "sleep_ms": 600}"#, &[]);
    env.send("extender", r#"{"extend_ms": 600000, "sleep_ms": 0}"#, &[]);
    let log = env.run_until_idle();
    let stats = env.stats();
    assert_eq!(stats["extender"]["done"], 2, "{log}");
    assert_eq!(stats["extender"]["dead"], 1, "{log}");
    assert_eq!(stats["extender"]["lost_leases"], 0, "{log}");
    let extended = lines_with(&log, "extender: extended, ");
    assert_eq!(extended.len(), 2, "each handled once: {log}");
    let left: Vec<u64> = extended
        .iter()
        .map(|l| {
            let after = l.split("extender: extended, ").nth(1).unwrap();
            after.split(' ').next().unwrap().parse().unwrap()
        })
        .collect();
    assert!(
        left.iter().all(|&ms| ms <= 4300),
        "never past timeout + max_extend: {left:?}"
    );
    assert!(left.iter().any(|&ms| ms > 3000), "{left:?}");
    let dead = env.dead("extender");
    assert!(
        dead[0]["last_error"]
            .as_str()
            .is_some_and(|e| e.starts_with("timeout")),
        "without asking, the timeout holds: {dead:?}"
    );
}

/// The sidecar of a batch handler in `lang`'s test: interpreters keep warm
/// instances.
fn batch_sidecar(lang: &str, extra: &str) -> String {
    let mode = match lang {
        "python" | "js" => "instance_mode = \"reuse\"\n",
        _ => "",
    };
    format!(
        "{mode}batch_size = 8\nbatch_wait = \"100ms\"\n{extra}[retry]\nmax_attempts = 2\ndelays = [\"10ms\"]\nmax_snoozes = 2\n"
    )
}

/// An environment serving `lang`'s `hello_batch` as the handler `batch`,
/// with the sidecar `sidecar`.
fn batch_env(lang: &str, sidecar: &str) -> Env {
    let env = Env::new();
    std::fs::write(env.dir.path().join("sluice.toml"), shared_cache_config()).unwrap();
    std::fs::copy(
        component(lang, "hello_batch"),
        env.handlers.join("batch.wasm"),
    )
    .unwrap();
    std::fs::write(env.handlers.join("batch.toml"), sidecar).unwrap();
    env
}

/// Every message of a batch is settled by its own outcome.
fn batches_settle_each_message_on_its_own(lang: &str) {
    let env = batch_env(lang, &batch_sidecar(lang, ""));
    for i in 0..10 {
        env.send("batch", &format!("hello {i}"), &[]);
    }
    for payload in ["retry", "retry", "reject", "snooze"] {
        env.send("batch", payload, &[]);
    }
    let log = env.run_until_idle();
    let stats = env.stats();
    assert_eq!(stats["batch"]["done"], 10, "{lang}: {log}");
    assert_eq!(stats["batch"]["retried"], 2, "{lang}");
    assert_eq!(stats["batch"]["dead"], 4, "{lang}");
    let mut reasons: Vec<String> = env
        .dead("batch")
        .iter()
        .map(|d| d["reason"].as_str().unwrap().to_string())
        .collect();
    reasons.sort();
    assert_eq!(
        reasons,
        [
            "gave up after 2 attempt(s)",
            "gave up after 2 attempt(s)",
            "rejected: rejected by hello_batch",
            "snoozed 2 time(s), the most `retry.max_snoozes` allows, and asked for 50ms more",
        ],
        "{lang}"
    );
    // Deliveries: 10 done, 2 × 2 retried, 1 rejected, 3 of the snoozer.
    let sizes: Vec<usize> = lines_with(&log, "hello_batch: ")
        .iter()
        .map(|l| {
            let after = l.split("hello_batch: ").nth(1).unwrap();
            after.split(' ').next().unwrap().parse().unwrap()
        })
        .collect();
    assert_eq!(sizes.iter().sum::<usize>(), 18, "{lang}: {sizes:?}");
    assert!(sizes.iter().all(|&n| n <= 8), "{lang}: {sizes:?}");
    assert!(
        sizes.iter().any(|&n| n > 1),
        "{lang}: calls took batches: {sizes:?}"
    );
}

/// A list of the wrong length fails the whole batch, as a trap: each
/// message spends its attempt, and the error gives the lengths.
fn a_wrong_length_fails_the_whole_batch(lang: &str) {
    let sidecar =
        batch_sidecar(lang, "concurrency = 1\n").replace("max_attempts = 2", "max_attempts = 1");
    let env = batch_env(lang, &sidecar);
    for payload in ["a", "wrong-length", "b"] {
        env.send("batch", payload, &[]);
    }
    let log = env.run_until_idle();
    assert_eq!(env.count("batch", "dead"), 3, "{lang}: {log}");
    for d in env.dead("batch") {
        assert_eq!(
            d["last_error"],
            "trap: handle-batch returned 4 outcome(s) for 3 message(s): it must return one per message, in order",
            "{lang}"
        );
    }
}

#[test]
fn rust_batches() {
    batches_settle_each_message_on_its_own("rust");
    a_wrong_length_fails_the_whole_batch("rust");
}

#[test]
fn python_batches() {
    batches_settle_each_message_on_its_own("python");
    a_wrong_length_fails_the_whole_batch("python");
}

#[test]
fn js_batches() {
    batches_settle_each_message_on_its_own("js");
    a_wrong_length_fails_the_whole_batch("js");
}

#[test]
fn c_batches() {
    batches_settle_each_message_on_its_own("c");
    a_wrong_length_fails_the_whole_batch("c");
}

#[test]
fn sluice_check_names_each_world() {
    check_names_each_world();
}

/// Batches on Redis too: the settlements of one call go to the broker
/// together.
#[test]
fn batches_on_redis() {
    let env = Env::redis();
    env.deploy("hello_batch", "batch", Some(&batch_sidecar("rust", "")));
    for i in 0..40 {
        env.send("batch", &format!("hello {i}"), &[]);
    }
    env.send("batch", "retry", &[]);
    let log = env.run_until_idle();
    let stats = env.stats();
    assert_eq!(stats["batch"]["done"], 40, "{log}");
    assert_eq!(stats["batch"]["dead"], 1);
}

on_every_backend!(env:
    legacy_components_are_served_unchanged,
    a_snooze_spends_no_attempt_until_the_snoozes_run_out,
    a_call_that_asks_for_more_time_keeps_its_lease,
);
