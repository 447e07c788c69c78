//! Hostile guests fail their own messages and nothing else.

use crate::support::{Env, lines_with};

const LIMITS: &str = r#"
[limits]
timeout = "300ms"
memory = "16MiB"
[retry]
max_attempts = 2
delays = ["10ms"]
"#;

#[test]
fn every_hostile_guest_fails_only_its_own_message() {
    let env = Env::new();
    let hostile = [
        ("hostile_loop", "timeout: timed out after 300ms"),
        (
            "hostile_memory",
            "memory limit: memory limit of 16MiB exceeded",
        ),
        ("hostile_trap", "unreachable"),
        ("hostile_stack", "call stack exhausted"),
        // Instances that never finish starting: one computes (epoch
        // interruption ends it), one waits in the host (the call's timer).
        (
            "hostile_start_loop",
            "timeout: timed out after 300ms (making the instance)",
        ),
        (
            "hostile_start_wait",
            "timeout: timed out after 300ms (making the instance)",
        ),
    ];
    for (name, _) in hostile {
        env.deploy(name, name, Some(LIMITS));
        env.send(name, "x", &[]);
    }
    env.deploy("hello", "hello", None);
    for i in 0..50 {
        env.send("hello", &format!("{i}"), &[]);
    }
    let log = env.run_until_idle();
    let stats = env.stats();
    assert_eq!(
        stats["hello"]["done"], 50,
        "the well-behaved handler is unaffected"
    );
    assert_eq!(stats["hello"]["dead"], 0);
    for (name, expected) in hostile {
        assert_eq!(stats[name]["dead"], 1, "{name}");
        assert_eq!(
            stats[name]["retried"], 1,
            "{name}: the failure counted as an attempt and was retried"
        );
        let dead = env.dead(name);
        let error = dead[0]["last_error"].as_str().unwrap();
        assert!(error.contains(expected), "{name}: {error}");
        assert_eq!(dead[0]["attempts"], 2, "{name}");
        assert!(!lines_with(&log, "attempt failed").is_empty());
    }
}

#[test]
fn wasi_access_is_denied_and_stdio_goes_to_the_log() {
    let env = Env::new();
    // The probe returns done only when every file, env and socket access failed.
    env.deploy(
        "wasi_probe",
        "wasi_probe",
        Some("[retry]\nmax_attempts = 1\n"),
    );
    env.send("wasi_probe", "probe", &[]);
    let log = env.run_until_idle();
    let stats = env.stats();
    assert_eq!(
        stats["wasi_probe"]["done"],
        1,
        "sandbox leak; dead letters: {:?}\n{log}",
        env.dead("wasi_probe")
    );
    for needle in ["read /etc/passwd", "env HOME", "tcp connect"] {
        assert!(
            lines_with(&log, needle)
                .iter()
                .any(|l| l.contains("denied as expected")),
            "no denial logged for {needle}:\n{log}"
        );
    }
    let stdout = lines_with(&log, "probe stdout line");
    assert_eq!(stdout.len(), 1, "{log}");
    assert!(
        stdout[0].contains("handler=\"wasi_probe\"") && stdout[0].contains("stdout"),
        "{}",
        stdout[0]
    );
    let stderr = lines_with(&log, "probe stderr line");
    assert!(
        stderr[0].contains("handler=\"wasi_probe\"") && stderr[0].contains("stderr"),
        "{}",
        stderr[0]
    );
}

#[test]
fn a_guest_waiting_in_the_host_is_timed_out_too() {
    // Epoch interruption only fires while wasm runs; `sleepy` waits in the
    // host (a WASI clock), so this is the call's own timer at work.
    let env = Env::new();
    env.deploy(
        "sleepy",
        "sleepy",
        Some("[limits]\ntimeout = \"300ms\"\n[retry]\nmax_attempts = 1\n[config]\nsleep_ms = 20000\n"),
    );
    env.send("sleepy", "zzz", &[]);
    let started = std::time::Instant::now();
    env.run_until_idle();
    let took = started.elapsed();
    assert!(
        took < std::time::Duration::from_secs(10),
        "the sleep was not cut short: {took:?}"
    );
    let dead = env.dead("sleepy");
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0]["last_error"], "timeout: timed out after 300ms");
}

/// The host's pool is shared: each handler keeps its floor
/// (`min_concurrency`, 1 by default) and the rest goes to whoever needs it,
/// up to each one's `concurrency`. In a pool of 16, a flooded `sleepy`
/// (concurrency 1000) runs 15 calls at once and no more: `hello` still has
/// its floor and finishes while sleepy's backlog stands. A floor that does
/// not fit beside the others is refused with why. Waiting for an instance,
/// through a swap of sleepy's version while its calls sleep, never spends
/// an attempt: `hello` and sleepy, with one attempt each, never die.
#[test]
fn a_busy_handler_cannot_take_another_handlers_floor() {
    use std::time::Duration;

    use sluice::broker::message::NewMessage;

    let env = Env::new();
    std::fs::write(
        env.dir.path().join("sluice.toml"),
        "max_instances = 16
",
    )
    .unwrap();
    env.deploy("hello", "hello", Some("[retry]\nmax_attempts = 1\n"));
    let sleepy = |sleep_ms: u64| {
        format!(
            "concurrency = 1000\nprefetch = 1000\n[limits]\ntimeout = \"30s\"\n[retry]\nmax_attempts = 1\n[config]\nsleep_ms = {sleep_ms}\n"
        )
    };
    env.deploy("sleepy", "sleepy", Some(&sleepy(3000)));
    // Floors of 1 + 1 + 15 do not fit in 16; the last to load is refused.
    env.deploy(
        "hello",
        "zealous",
        Some("concurrency = 15\nmin_concurrency = 15\n"),
    );
    let log_path = env.dir.path().join("run.log");
    let mut host = env.spawn_run(&log_path);
    let read_log = || std::fs::read_to_string(&log_path).unwrap_or_default();
    crate::support::wait_until(Duration::from_secs(30), "two serving, one refused", || {
        let log = read_log();
        lines_with(&log, "handler serving").len() == 2 && log.contains("handler refused")
    });
    let log = read_log();
    assert!(
        lines_with(&log, "zealous.wasm")
            .iter()
            .any(|l| l.contains("handler refused")
                && l.contains("`min_concurrency` of 15 does not fit")
                && l.contains("max_instances")),
        "{log}"
    );
    env.publish(
        (0..60)
            .map(|i| NewMessage::new("sleepy", i.to_string()))
            .collect(),
    );
    crate::support::wait_until(Duration::from_secs(30), "sleepy busy", || {
        env.count("sleepy", "in_flight") >= 15
    });
    // Sleepy's calls take 3 s each, 15 at a time: its backlog stands for
    // 12 s. Hello, with the one instance kept for it, is done long before.
    std::fs::write(env.handlers.join("sleepy.toml"), sleepy(2000)).unwrap();
    env.publish(
        (0..20)
            .map(|i| NewMessage::new("hello", i.to_string()))
            .collect(),
    );
    let sent = std::time::Instant::now();
    crate::support::wait_until(Duration::from_secs(60), "hello done", || {
        env.count("hello", "done") == 20
    });
    let sleepy_left = env.count("sleepy", "ready") + env.count("sleepy", "in_flight");
    assert!(
        sleepy_left > 0,
        "sleepy's backlog was gone in {:?} before hello finished: the test proved nothing",
        sent.elapsed()
    );
    // The host reported its pool when sleepy's sidecar changed, its old
    // version's calls still running.
    let statuses = env.sluice(&["--json", "stats", "--handlers"]);
    let sleepy_status: serde_json::Value = statuses
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|h| h["handler"] == "sleepy")
        .expect("sleepy reported");
    let instances = &sleepy_status["instances"];
    assert_eq!(instances["floor"], 1, "{sleepy_status}");
    assert_eq!(instances["cap"], 1000, "{sleepy_status}");
    assert!(
        instances["held"].as_u64().unwrap() <= 15,
        "sleepy took hello's floor: {sleepy_status}"
    );
    assert_eq!(
        sleepy_status["pool"]["max_instances"], 16,
        "{sleepy_status}"
    );
    crate::support::wait_until(Duration::from_secs(90), "sleepy done", || {
        env.count("sleepy", "done") == 60
    });
    host.kill().unwrap();
    host.wait().unwrap();
    let log = read_log();
    assert_eq!(env.count("hello", "dead"), 0, "{log}");
    assert_eq!(env.count("sleepy", "dead"), 0, "{log}");
    let failed = lines_with(&log, "attempt failed");
    assert!(
        failed.is_empty(),
        "attempts failed for want of an instance: {failed:#?}"
    );
}

/// The host's peak resident memory while a hostile guest tries every way
/// of making it allocate (see `guests/rust/hostile_host`) beside a handler
/// that drains: the documented bound of the README's "Sandbox" section.
const HOSTILE_PEAK_RSS_MIB: u64 = 192;

/// A guest capped at 32 MiB tries to make the host hold far more: each try
/// ends at a limit (an error it sees, a cut, a dropped line or a failed
/// attempt of its own message), the host stays under its bound, and the
/// neighbour handler finishes everything.
fn a_guest_cannot_make_the_host_allocate_beyond_its_limits(env: Env) {
    use std::time::Duration;

    use sluice::broker::message::NewMessage;

    env.deploy(
        "hostile_host",
        "greedy",
        Some("[limits]\nmemory = \"32MiB\"\ntimeout = \"20s\"\n[retry]\nmax_attempts = 1\n"),
    );
    env.deploy("hello", "hello", None);
    env.publish(
        (0..3000)
            .map(|i| NewMessage::new("hello", i.to_string()))
            .collect(),
    );
    let tries = [
        "publish", "headers", "reject", "log", "stdout", "fields", "ok",
    ];
    env.publish(
        tries
            .iter()
            .map(|t| NewMessage::new("greedy", *t))
            .collect(),
    );
    let log_path = env.dir.path().join("run.log");
    let mut host = env.spawn_run(&log_path);
    let read_log = || std::fs::read_to_string(&log_path).unwrap_or_default();
    crate::support::wait_until(Duration::from_secs(120), "everything settled", || {
        let greedy = env.count("greedy", "done") + env.count("greedy", "dead");
        env.count("hello", "done") == 3000 && greedy == tries.len() as u64
    });
    let status = std::fs::read_to_string(format!("/proc/{}/status", host.id())).unwrap();
    // The dropped log lines are counted where `stats --handlers` shows them.
    crate::support::wait_until(
        Duration::from_secs(30),
        "the dropped lines reported",
        || {
            env.sluice(&["--json", "stats", "--handlers"])
                .lines()
                .any(|l| {
                    let h: serde_json::Value = serde_json::from_str(l).unwrap();
                    h["handler"] == "greedy" && h["dropped_log_lines"].as_u64().unwrap_or(0) > 0
                })
        },
    );
    host.kill().unwrap();
    host.wait().unwrap();
    let peak_kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    let log = read_log();
    eprintln!("hostile guest: host peak RSS {} MiB", peak_kib >> 10);
    assert!(
        peak_kib >> 10 < HOSTILE_PEAK_RSS_MIB,
        "the host grew to {} MiB",
        peak_kib >> 10
    );
    let line = |needle: &str| {
        lines_with(&log, needle)
            .first()
            .unwrap_or_else(|| panic!("no {needle:?} in the log"))
            .to_string()
    };
    // Publishes stop at the call budget (8 MiB by default), with an error
    // the guest sees, not at a thousand.
    let published = line("hostile publish: held");
    assert!(
        published.contains("held 7, then") && published.contains("call_budget"),
        "{published}"
    );
    // Headers are not free (32 bytes each beyond their text): 1000 messages
    // of 60 one-letter ones stay under 2 MiB, and the count of held
    // publishes ends them.
    let headers = line("hostile headers: held");
    assert!(
        headers.contains("held 1000, then: handler greedy may publish at most 1000"),
        "{headers}"
    );
    // The 12 MiB reason is kept cut to 4 KiB.
    let dead = env.dead("greedy");
    let rejected = dead
        .iter()
        .find(|d| d["reason"].as_str().unwrap().starts_with("rejected"))
        .unwrap();
    let reason = rejected["reason"].as_str().unwrap();
    assert!(
        reason.len() < 5 << 10 && reason.contains("[cut: "),
        "{} bytes",
        reason.len()
    );
    // Log lines are cut to 8 KiB, and those over the budget or rate dropped.
    assert!(
        log.contains("log lines of handler greedy dropped"),
        "no dropped lines"
    );
    let longest = log.lines().map(str::len).max().unwrap();
    assert!(longest < 16 << 10, "a log line of {longest} bytes");
    // Nothing else of greedy's failed any message but its own: every hello
    // is done (above), and nothing of hello is dead.
    assert_eq!(env.count("hello", "dead"), 0);
    // wasi:http resources are capped (256 without an HTTP grant): the
    // 100,000th is never made; the guest's own message fails.
    let fields = dead
        .iter()
        .find_map(|d| d["last_error"].as_str().filter(|e| e.contains("fields")))
        .unwrap_or_else(|| panic!("no failed fields attempt: {dead:?}"));
    assert!(
        fields.contains("resource table has no free keys"),
        "{fields}"
    );
    // 64 MiB on stdout is one line, cut.
    let stdout = line("stream=\"stdout\"");
    assert!(
        stdout.contains("[cut: 67100672 more bytes]"),
        "{}",
        &stdout[stdout.len() - 200..]
    );
    // What the guest held within its limits was committed with its `done`.
    assert_eq!(env.count("sink", "ready"), 7 + 1000);
}

/// Text with a NUL character, which PostgreSQL's text cannot hold, reaches
/// no broker as it is, so every broker keeps the same: a reject reason
/// holding one is stored with U+FFFD in its place, a publish with such an
/// idempotency key is refused with an error the guest sees, and a key read
/// from a header that holds one is taken with U+FFFD. Each message settles
/// at once rather than being refused by the broker and delivered again.
fn text_with_a_nul_reaches_no_broker_as_it_is(env: Env) {
    use sluice::broker::message::NewMessage;

    env.deploy(
        "hostile_host",
        "greedy",
        Some("[retry]\nmax_attempts = 1\n"),
    );
    env.deploy(
        "hello",
        "keyed",
        Some("[idempotency]\nkey_header = \"k\"\n"),
    );
    env.send("greedy", "nul-reject", &[]);
    env.send("greedy", "nul-key", &[]);
    let mut keyed = NewMessage::new("keyed", "x");
    keyed.headers = vec![("k".into(), "a\0b".into())];
    env.publish(vec![keyed.clone(), keyed]);
    let log = env.run_until_idle();
    let dead = env.dead("greedy");
    assert_eq!(dead.len(), 1, "{dead:?}");
    assert_eq!(dead[0]["reason"], "rejected: bad\u{FFFD}reason");
    assert_eq!(dead[0]["attempts"], 1, "settled by its first attempt");
    let published = lines_with(&log, "hostile nul key:");
    assert!(
        published.len() == 1 && published[0].contains("NUL character in its idempotency key"),
        "{published:?}"
    );
    assert_eq!(env.count("greedy", "done"), 1);
    assert_eq!(env.count("sink", "ready"), 0);
    // One key for both: the second is a duplicate.
    assert_eq!(
        (env.count("keyed", "done"), env.count("keyed", "duplicates")),
        (1, 1)
    );
    assert!(!log.contains("the broker refused"), "{log}");
}

on_every_backend!(env:
    a_guest_cannot_make_the_host_allocate_beyond_its_limits,
    text_with_a_nul_reaches_no_broker_as_it_is,
);
