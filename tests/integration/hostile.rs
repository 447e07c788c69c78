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
