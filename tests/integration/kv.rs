//! The key-value capability end to end: the `kv_probe` guest runs the
//! commands in its payload (`set k v; get k; incr n 5; del k`) and logs each
//! result, or rejects with the host's error text. On every broker, plus one
//! library-level test of the timeout while a call waits in the host.

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use sluice::broker::{KvStore, Result as BrokerResult};
use sluice::testkit::runtime::{Deadline, Failure, Runtime};

use crate::support::{Env, delivery, guest, lines_with};

const GRANTED: &str = "[capabilities]\nkv = true\n";

/// The one log line that says `text`, from handler `handler`.
fn logged(log: &str, handler: &str, text: &str) -> bool {
    lines_with(log, text).iter().any(|l| {
        l.contains(&format!("handler={handler}")) || l.contains(&format!("handler=\"{handler}\""))
    })
}

fn kv_handlers_are_isolated(env: Env) {
    env.deploy("kv_probe", "kv_a", Some(GRANTED));
    env.deploy("kv_probe", "kv_b", Some(GRANTED));
    env.send("kv_a", "set color blue; incr n 5", &[]);
    env.run_until_idle();
    // Handler B has a key of the same name: its own, and empty at first.
    env.send("kv_b", "get color; incr n 1; set color red", &[]);
    let log = env.run_until_idle();
    assert!(logged(&log, "kv_b", "get color = none"), "{log}");
    assert!(logged(&log, "kv_b", "incr n = 1"), "{log}");
    // B's writes did not touch A's keys.
    env.send("kv_a", "get color; incr n 1", &[]);
    let log = env.run_until_idle();
    assert!(logged(&log, "kv_a", "get color = some(blue)"), "{log}");
    assert!(logged(&log, "kv_a", "incr n = 6"), "{log}");
    assert_eq!(env.count("kv_a", "done"), 2);
    assert_eq!(env.count("kv_b", "done"), 1);

    // The scope in the broker is the handler's name.
    let (rt, broker) = env.broker();
    rt.block_on(async {
        let get = |scope: &'static str| broker.kv_get(scope, "color");
        assert_eq!(get("kv_a").await.unwrap().as_deref(), Some(&b"blue"[..]));
        assert_eq!(get("kv_b").await.unwrap().as_deref(), Some(&b"red"[..]));
    });
}

fn kv_without_grant_is_a_clear_error_and_the_host_keeps_serving(env: Env) {
    env.deploy("kv_probe", "plain", None);
    env.deploy("kv_probe", "kv_a", Some(GRANTED));
    let refused = env.send("plain", "set k v", &[]);
    env.send("plain", "", &[]); // no commands: done
    env.send("kv_a", "set k v; get k", &[]);
    let log = env.run_until_idle();
    let shown: serde_json::Value =
        serde_json::from_str(&env.sluice(&["--json", "dlq", "show", "plain", &refused])).unwrap();
    assert_eq!(
        shown["reason"],
        "rejected: set k v: handler plain is not granted the key-value store: add `kv = true` under [capabilities] in plain.toml",
        "{shown}"
    );
    assert_eq!(
        shown["attempts"], 1,
        "an error the guest handled, not a trap"
    );
    assert!(shown["last_error"].is_null(), "{shown}");
    assert_eq!(env.count("plain", "done"), 1, "the handler kept serving");
    assert_eq!(env.count("kv_a", "done"), 1, "{log}");
    assert!(logged(&log, "kv_a", "get k = some(v)"), "{log}");
    let (rt, broker) = env.broker();
    assert_eq!(rt.block_on(broker.kv_get("plain", "k")).unwrap(), None);

    // `sluice check` says what the import needs.
    let check = env.sluice(&["check", guest("kv_probe").to_str().unwrap()]);
    assert!(
        check.contains("import sluice:handler/kv@0.2.0  (refused: the key-value store is granted only by `kv = true` under [capabilities]"),
        "{check}"
    );
}

fn kv_limits_are_errors_the_guest_sees(env: Env) {
    env.deploy("kv_probe", "kv_a", Some(GRANTED));
    let long_key = "k".repeat(1025);
    let cases = [
        (
            format!("get {long_key}"),
            "a key-value key may be at most 1024 bytes; this one is 1025 bytes".to_string(),
        ),
        (
            "set t v 0".into(),
            "a key's time to live must be at least 1 ms (or none, for no expiry)".into(),
        ),
        (
            "set word abc; incr word 1".into(),
            "the value of key \"word\" is not a decimal integer in the s64 range, so it cannot be incremented".into(),
        ),
    ];
    let ids: Vec<String> = cases
        .iter()
        .map(|(p, _)| env.send("kv_a", p, &[]))
        .collect();
    // A NUL cannot be passed on a command line.
    env.publish(vec![sluice::broker::message::NewMessage::new(
        "kv_a",
        "set a\0b v",
    )]);
    env.run_until_idle();
    let nul = ": a key-value key must not hold a NUL character: \"a\\0b\"";
    assert!(
        env.dead("kv_a")
            .iter()
            .any(|d| d["reason"].as_str().unwrap().ends_with(nul)),
        "no dead letter ends with {nul}"
    );
    for ((payload, want), id) in cases.iter().zip(&ids) {
        let shown: serde_json::Value =
            serde_json::from_str(&env.sluice(&["--json", "dlq", "show", "kv_a", id])).unwrap();
        let reason = shown["reason"].as_str().unwrap();
        assert!(reason.ends_with(want.as_str()), "{payload}: {reason}");
    }
    assert_eq!(env.count("kv_a", "retried"), 0, "no call trapped");
}

fn kv_ttl_expires_end_to_end(env: Env) {
    env.deploy("kv_probe", "kv_a", Some(GRANTED));
    env.send("kv_a", "set brief v 300; set kept v; get brief", &[]);
    let log = env.run_until_idle();
    assert!(logged(&log, "kv_a", "get brief = some(v)"), "{log}");
    // The set was before the run ended: 400 ms from now it has expired.
    std::thread::sleep(Duration::from_millis(400));
    env.send("kv_a", "get brief; get kept; del brief", &[]);
    let log = env.run_until_idle();
    assert!(logged(&log, "kv_a", "get brief = none"), "{log}");
    assert!(logged(&log, "kv_a", "get kept = some(v)"), "{log}");
    assert!(logged(&log, "kv_a", "del brief = false"), "{log}");
}

on_every_backend!(env:
    kv_handlers_are_isolated,
    kv_without_grant_is_a_clear_error_and_the_host_keeps_serving,
    kv_limits_are_errors_the_guest_sees,
    kv_ttl_expires_end_to_end,
);

/// A store whose every call waits forever, like a broker that stopped
/// answering.
struct Stuck;

#[async_trait]
impl KvStore for Stuck {
    async fn kv_get(&self, _: &str, _: &str) -> BrokerResult<Option<Vec<u8>>> {
        std::future::pending().await
    }
    async fn kv_set(&self, _: &str, _: &str, _: Vec<u8>, _: Option<Duration>) -> BrokerResult<()> {
        std::future::pending().await
    }
    async fn kv_delete(&self, _: &str, _: &str) -> BrokerResult<bool> {
        std::future::pending().await
    }
    async fn kv_increment(&self, _: &str, _: &str, _: i64) -> BrokerResult<i64> {
        std::future::pending().await
    }
}

/// A guest blocked in a key-value call past its timeout fails its attempt
/// as a timeout, not later when the store answers, and not as a trap.
#[test]
fn kv_call_stuck_in_the_host_times_out() {
    let dir = tempfile::tempdir().unwrap();
    let wasm = dir.path().join("kv_a.wasm");
    std::fs::copy(guest("kv_probe"), &wasm).unwrap();
    std::fs::write(
        dir.path().join("kv_a.toml"),
        format!("{GRANTED}[limits]\ntimeout = \"300ms\"\n"),
    )
    .unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let runtime = Runtime::new().unwrap();
        let cache = sluice::testkit::cache::CompileCache::in_memory(&runtime);
        let handler = sluice::testkit::loader::load_file(&runtime, &cache, "kv_a", &wasm, 1 << 20)
            .unwrap()
            .with_kv(Arc::new(Stuck));
        for payload in ["get k", "incr n 1"] {
            let start = Instant::now();
            let deadline = Deadline::new(handler.spec.timeout, handler.spec.max_extend);
            let invocation = handler
                .invoke(&delivery("kv_a", 0, payload), &deadline)
                .await;
            let took = start.elapsed();
            assert_eq!(
                invocation.result,
                Err(Failure::Timeout("timed out after 300ms".into())),
                "{payload}"
            );
            assert!(
                took >= Duration::from_millis(290) && took < Duration::from_secs(2),
                "{payload}: took {took:?}"
            );
        }
    });
}
