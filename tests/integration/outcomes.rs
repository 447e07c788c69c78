//! Each outcome a handler can return, end to end through the `sluice`
//! binary, on every broker: the CLI must behave the same on each.

use std::time::{Duration, Instant};

use crate::support::{Env, lines_with};

const ORDERS: &str = r#"
[retry]
max_attempts = 3
delays = ["10ms"]
[config]
followup_queue = "shipping"
retry_delay_ms = 10
"#;

fn done_acks_and_counts(env: Env) {
    env.deploy("hello", "hello", None);
    for i in 0..5 {
        env.send("hello", &format!("message {i}"), &[]);
    }
    assert_eq!(env.count("hello", "ready"), 5);
    let log = env.run_until_idle();
    let stats = env.stats();
    assert_eq!(stats["hello"]["done"], 5);
    assert_eq!(stats["hello"]["ready"], 0);
    assert_eq!(stats["hello"]["dead"], 0);
    assert_eq!(lines_with(&log, "hello from sluice").len(), 5, "{log}");
}

fn retry_then_done_and_publish_arrives_on_other_queue(env: Env) {
    env.deploy("orders", "orders", Some(ORDERS));
    env.send(
        "orders",
        r#"{"id": 41, "qty": 3, "retry_until_attempt": 3}"#,
        &[],
    );
    env.run_until_idle();
    let stats = env.stats();
    assert_eq!(stats["orders"]["done"], 1);
    assert_eq!(
        stats["orders"]["retried"], 2,
        "attempts 1 and 2 asked for a retry"
    );
    assert_eq!(stats["orders"]["dead"], 0);
    let shipped = env.drain("shipping");
    assert_eq!(
        shipped.len(),
        1,
        "exactly one follow-up, from the attempt that succeeded"
    );
    let body: serde_json::Value = serde_json::from_slice(&shipped[0].payload).unwrap();
    assert_eq!(body["order"], 41);
    assert_eq!(body["qty"], 3);
    assert_eq!(shipped[0].header("order-id"), Some("41"));
}

fn retry_until_dead_keeps_attempts_and_error(env: Env) {
    env.deploy("orders", "orders", Some(ORDERS));
    let id = env.send("orders", r#"{"id": 1, "always_retry": true}"#, &[]);
    env.run_until_idle();
    let stats = env.stats();
    assert_eq!(stats["orders"]["dead"], 1);
    assert_eq!(stats["orders"]["retried"], 2);
    assert_eq!(stats["orders"]["done"], 0);
    let dead = env.dead("orders");
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0]["id"], id.as_str());
    assert_eq!(dead[0]["attempts"], 3);
    assert_eq!(dead[0]["reason"], "gave up after 3 attempt(s)");
    assert_eq!(dead[0]["last_error"], "handler asked for a retry");
    assert!(
        dead[0]["handler_version"]
            .as_str()
            .is_some_and(|v| v.len() == 16)
    );
    assert!(
        env.drain("shipping").is_empty(),
        "publishes of failed attempts are discarded"
    );
}

fn reject_goes_to_dead_letters_at_once(env: Env) {
    env.deploy("orders", "orders", Some(ORDERS));
    let id = env.send("orders", "not json", &[]);
    env.run_until_idle();
    let stats = env.stats();
    assert_eq!(stats["orders"]["dead"], 1);
    assert_eq!(stats["orders"]["retried"], 0, "a reject is never retried");
    let shown: serde_json::Value =
        serde_json::from_str(&env.sluice(&["--json", "dlq", "show", "orders", &id])).unwrap();
    assert_eq!(shown["attempts"], 1);
    assert!(
        shown["reason"]
            .as_str()
            .unwrap()
            .starts_with("rejected: malformed order"),
        "{shown}"
    );
    assert_eq!(shown["payload"], "not json");
    let text = env.sluice(&["dlq", "show", "orders", &id]);
    assert!(text.contains("payload:   not json"), "{text}");
}

fn replay_after_fixing_config_then_done_and_purge(env: Env) {
    // One attempt only: an order that needs two attempts dies.
    env.deploy(
        "orders",
        "orders",
        Some("[retry]\nmax_attempts = 1\n[config]\nretry_delay_ms = 10\n"),
    );
    let id = env.send("orders", r#"{"id": 9, "retry_until_attempt": 2}"#, &[]);
    env.send("orders", "not json", &[]);
    env.run_until_idle();
    assert_eq!(env.count("orders", "dead"), 2);

    // Fix the policy and replay just the first one.
    env.deploy("orders", "orders", Some(ORDERS));
    let out = env.sluice(&["dlq", "replay", "orders", "--id", &id]);
    assert!(out.contains("replayed 1"), "{out}");
    assert_eq!(env.count("orders", "dead"), 1);
    assert_eq!(env.count("orders", "ready"), 1);
    env.run_until_idle();
    let stats = env.stats();
    assert_eq!(stats["orders"]["done"], 1);
    assert_eq!(stats["orders"]["dead"], 1);
    assert_eq!(env.drain("shipping").len(), 1);

    let missing = env.sluice_raw(&["dlq", "replay", "orders", "--id", "nope"]);
    assert!(!missing.status.success());
    let purged = env.sluice(&["--json", "dlq", "purge", "orders"]);
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&purged).unwrap()["purged"],
        1
    );
    assert_eq!(env.count("orders", "dead"), 0);
}

fn duplicate_keys_are_not_handled_twice(env: Env) {
    env.deploy("orders", "orders", Some(ORDERS));
    env.send("orders", r#"{"id": 1}"#, &["--key", "order-1"]);
    env.send("orders", r#"{"id": 1}"#, &["--key", "order-1"]);
    env.send("orders", r#"{"id": 2}"#, &["--key", "order-2"]);
    env.run_until_idle();
    // Sent again after the first completed: still a duplicate.
    env.send("orders", r#"{"id": 1}"#, &["--key", "order-1"]);
    env.run_until_idle();
    let stats = env.stats();
    assert_eq!(stats["orders"]["done"], 2);
    assert_eq!(stats["orders"]["duplicates"], 2);
    assert_eq!(
        env.drain("shipping").len(),
        2,
        "one follow-up per distinct key"
    );
}

fn idempotency_key_from_header_or_json_pointer(env: Env) {
    env.deploy(
        "orders",
        "by_header",
        Some("[idempotency]\nkey_header = \"Idempotency-Key\"\n"),
    );
    env.deploy(
        "orders",
        "by_pointer",
        Some("[idempotency]\nkey_pointer = \"/id\"\n"),
    );
    env.send(
        "by_header",
        r#"{"id": 1}"#,
        &["--header", "Idempotency-Key=a"],
    );
    env.send(
        "by_header",
        r#"{"id": 2}"#,
        &["--header", "Idempotency-Key=a"],
    );
    env.send(
        "by_header",
        r#"{"id": 3}"#,
        &["--header", "Idempotency-Key=b"],
    );
    env.send("by_pointer", r#"{"id": 7, "qty": 1}"#, &[]);
    env.send("by_pointer", r#"{"id": 7, "qty": 2}"#, &[]);
    env.send("by_pointer", r#"{"id": "7"}"#, &[]);
    env.run_until_idle();
    let stats = env.stats();
    assert_eq!(
        (
            stats["by_header"]["done"].as_u64(),
            stats["by_header"]["duplicates"].as_u64()
        ),
        (Some(2), Some(1))
    );
    // The number 7 and the string "7" are the same key.
    assert_eq!(
        (
            stats["by_pointer"]["done"].as_u64(),
            stats["by_pointer"]["duplicates"].as_u64()
        ),
        (Some(1), Some(2))
    );
}

fn idempotency_can_be_turned_off(env: Env) {
    env.deploy("hello", "hello", Some("[idempotency]\nenabled = false\n"));
    env.send("hello", "a", &["--key", "same"]);
    env.send("hello", "b", &["--key", "same"]);
    env.run_until_idle();
    assert_eq!(env.count("hello", "done"), 2);
    assert_eq!(env.count("hello", "duplicates"), 0);
}

fn delayed_message_is_not_delivered_early(env: Env) {
    env.deploy("hello", "hello", None);
    let sent = Instant::now();
    env.send("hello", "later", &["--delay", "2s"]);
    let stats = env.stats();
    assert_eq!(
        (
            stats["hello"]["delayed"].as_u64(),
            stats["hello"]["ready"].as_u64()
        ),
        (Some(1), Some(0))
    );
    // Nothing may be handed out before it is due.
    assert!(env.drain("hello").is_empty());
    let log = env.run_until_idle();
    assert!(
        sent.elapsed() >= Duration::from_secs(2),
        "run ended after {:?}",
        sent.elapsed()
    );
    assert_eq!(env.count("hello", "done"), 1);
    assert_eq!(lines_with(&log, "hello from sluice").len(), 1);
}

fn queue_without_handler_keeps_its_messages(env: Env) {
    env.deploy("hello", "hello", None);
    env.send("nobody", "waiting", &[]);
    env.send("hello", "hi", &[]);
    env.run_until_idle();
    let stats = env.stats();
    assert_eq!(stats["hello"]["done"], 1);
    assert_eq!(stats["nobody"]["ready"], 1);
    assert_eq!(stats["nobody"]["dead"], 0);
    let waiting = env.drain("nobody");
    assert_eq!(
        waiting[0].attempt, 1,
        "attempts unchanged while no handler is loaded"
    );
}

fn reuse_mode_handles_every_message(env: Env) {
    env.deploy(
        "hello",
        "hello",
        Some("instance_mode = \"reuse\"\nmax_messages_per_instance = 3\n"),
    );
    for i in 0..20 {
        env.send("hello", &format!("{i}"), &[]);
    }
    let log = env.run_until_idle();
    assert_eq!(env.count("hello", "done"), 20);
    assert_eq!(lines_with(&log, "hello from sluice").len(), 20);
}

fn on_dead_notice_arrives_with_the_dead_letter(env: Env) {
    env.deploy(
        "orders",
        "orders",
        Some("[retry]\nmax_attempts = 2\ndelays = [\"10ms\"]\non_dead = \"orders_dead\"\n"),
    );
    let rejected = env.send("orders", "not json", &[]);
    let exhausted = env.send("orders", r#"{"id": 3, "always_retry": true}"#, &[]);
    env.send("orders", r#"{"id": 4}"#, &[]);
    env.run_until_idle();
    assert_eq!(env.count("orders", "dead"), 2);
    let mut notices: Vec<serde_json::Value> = env
        .drain("orders_dead")
        .iter()
        .map(|d| serde_json::from_slice(&d.payload).unwrap())
        .collect();
    notices.sort_by_key(|n| n["attempts"].as_u64());
    assert_eq!(
        notices.len(),
        2,
        "one notice per dead letter, none for the order that was done"
    );
    assert_eq!(notices[0]["id"], rejected.as_str());
    assert_eq!(notices[0]["queue"], "orders");
    assert_eq!(notices[0]["key"], rejected.as_str());
    assert!(
        notices[0]["reason"]
            .as_str()
            .unwrap()
            .starts_with("rejected: malformed order")
    );
    assert_eq!(notices[0]["attempts"], 1);
    assert!(notices[0]["last_error"].is_null());
    assert_eq!(notices[1]["id"], exhausted.as_str());
    assert_eq!(notices[1]["reason"], "gave up after 2 attempt(s)");
    assert_eq!(notices[1]["attempts"], 2);
    assert_eq!(notices[1]["last_error"], "handler asked for a retry");
    let version = env.dead("orders")[0]["handler_version"].clone();
    assert_eq!(notices[0]["handler_version"], version);
}

on_every_backend!(env:
    on_dead_notice_arrives_with_the_dead_letter,
    done_acks_and_counts,
    retry_then_done_and_publish_arrives_on_other_queue,
    retry_until_dead_keeps_attempts_and_error,
    reject_goes_to_dead_letters_at_once,
    replay_after_fixing_config_then_done_and_purge,
    duplicate_keys_are_not_handled_twice,
    idempotency_key_from_header_or_json_pointer,
    idempotency_can_be_turned_off,
    delayed_message_is_not_delivered_early,
    queue_without_handler_keeps_its_messages,
    reuse_mode_handles_every_message,
);

/// A settlement the broker refuses (here a SQLite trigger refuses to store
/// rejected messages as dead letters) is given up on its own: the messages
/// settled after it are not held up behind it, and the refused message is
/// not lost but stays leased, to be delivered again when its lease expires.
/// (SQLite only: a trigger is how a test makes a real broker refuse one
/// entry and take the rest.)
#[test]
fn a_refused_settlement_does_not_hold_up_the_messages_after_it() {
    let env = Env::new();
    // A lease far longer than the test: the refused message stays leased.
    env.deploy(
        "orders",
        "orders",
        Some(&format!("lease = \"10m\"\n{ORDERS}")),
    );
    let poison = env.send("orders", "not json", &[]);
    rusqlite::Connection::open(&env.db)
        .unwrap()
        .execute_batch(
            "CREATE TRIGGER refuse_rejects BEFORE INSERT ON dead
             WHEN NEW.reason LIKE 'rejected:%'
             BEGIN SELECT RAISE(ABORT, 'this test refuses rejected messages'); END;",
        )
        .unwrap();
    let log = env.dir.path().join("run.log");
    let mut host = env.spawn_run(&log);
    let read_log = || std::fs::read_to_string(&log).unwrap_or_default();
    crate::support::wait_until(Duration::from_secs(20), "the refusal", || {
        read_log().contains("the broker refused to settle this message")
    });
    for id in 1..=3 {
        env.send("orders", &format!(r#"{{"id": {id}}}"#), &[]);
    }
    let started = Instant::now();
    while env.count("orders", "done") < 3 {
        if started.elapsed() > Duration::from_secs(20) {
            host.kill().unwrap();
            panic!(
                "the messages after the refused one were not settled:\n{}",
                read_log()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    host.kill().unwrap();
    host.wait().unwrap();
    let orders = &env.stats()["orders"];
    assert_eq!(
        orders["in_flight"], 1,
        "the refused message is leased: {orders}"
    );
    assert_eq!(orders["dead"], 0, "{orders}");
    let refusals = lines_with(&read_log(), "refused to settle this message").len();
    assert_eq!(refusals, 1, "given up once, not retried:\n{}", read_log());
    assert!(read_log().contains(&poison), "the log names the message");
}
