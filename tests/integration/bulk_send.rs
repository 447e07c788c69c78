//! `sluice send QUEUE --lines FILE`: one message per line of a file or of
//! stdin, in batches, with a one-line summary; flags that cannot go with it,
//! an over-size line and a broker lost mid-way are each one clear error that
//! says where to resume.

use std::io::Write as _;
use std::process::{Child, ChildStdin, Output, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::support::{Env, wait_until};

/// 2,500 lines with "\r\n" endings; line 1,234 is empty.
fn numbered_lines() -> String {
    (1..=2500)
        .map(|n| match n {
            1234 => "\r\n".to_string(),
            n => format!("{{\"n\":{n}}}\r\n"),
        })
        .collect()
}

fn every_line_of_a_file_becomes_a_message(env: Env) {
    let file = env.dir.path().join("lines.txt");
    std::fs::write(&file, numbered_lines()).unwrap();
    let file = file.to_str().unwrap();
    let out = env.sluice(&[
        "--json",
        "send",
        "bulk",
        "--lines",
        file,
        "--header",
        "source=file",
    ]);
    assert_eq!(out.lines().count(), 1, "one JSON object: {out}");
    let summary: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(summary["queue"], "bulk", "{summary}");
    assert_eq!(summary["sent"], 2499, "{summary}");
    assert_eq!(summary["skipped"], 1, "{summary}");
    assert!(summary["seconds"].as_f64().unwrap() >= 0.0, "{summary}");
    assert!(summary["rate"].as_u64().is_some(), "{summary}");
    assert_eq!(env.count("bulk", "ready"), 2499);

    let mut payloads: Vec<String> = env
        .drain("bulk")
        .into_iter()
        .map(|d| {
            assert_eq!(d.header("source"), Some("file"), "{d:?}");
            String::from_utf8(d.payload).unwrap()
        })
        .collect();
    payloads.sort();
    let mut expected: Vec<String> = (1..=2500)
        .filter(|&n| n != 1234)
        .map(|n| format!("{{\"n\":{n}}}"))
        .collect();
    expected.sort();
    assert_eq!(payloads, expected, "each line once, without its \\r\\n");

    let text = env.sluice(&["send", "again", "--lines", file]);
    assert!(
        text.starts_with("sent 2,499 messages to queue again in ")
            && text.contains(" msg/s)")
            && text.trim_end().ends_with("; skipped 1 empty line"),
        "{text}"
    );
}

#[test]
fn stdin_lines_with_a_delay() {
    let env = Env::new();
    let out = sluice_with_stdin(
        &env,
        &["send", "piped", "--lines", "-", "--delay", "1h"],
        b"one\ntwo\n\nthree",
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.starts_with("sent 3 messages to queue piped in ")
            && stdout.contains("; skipped 1 empty line"),
        "{stdout}"
    );
    assert_eq!(env.count("piped", "delayed"), 3, "--delay applies to each");
}

#[test]
fn flags_that_cannot_go_with_lines_are_named() {
    let env = Env::new();
    let file = env.dir.path().join("lines.txt");
    std::fs::write(&file, "a\nb\n").unwrap();
    let file = file.to_str().unwrap();
    let cases: [(&[&str], &[&str]); 4] = [
        (
            &["send", "q", "--lines", file, "--key", "k"],
            &["--key", "--lines", "duplicate"],
        ),
        (
            &["send", "q", "--lines", file, "--topic", "t", "--route", "r"],
            &["--lines", "--topic"],
        ),
        (
            &["send", "--lines", file, "--topic", "t"],
            &["--lines", "--topic"],
        ),
        (
            &["send", "q", "payload", "--lines", file],
            &["--lines", "only the queue"],
        ),
    ];
    for (args, words) in cases {
        let out = env.sluice_raw(args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} succeeded");
        for word in words {
            assert!(err.contains(word), "{args:?}: no {word:?} in {err}");
        }
    }
    assert_eq!(env.count("q", "ready"), 0, "nothing was sent");
}

#[test]
fn an_over_size_line_is_named_and_the_lines_before_it_are_sent() {
    let env = Env::new();
    let config = env.dir.path().join("small.toml");
    std::fs::write(&config, "max_message_size = \"1KiB\"\n").unwrap();
    let file = env.dir.path().join("lines.txt");
    let text: String = (1..=2500)
        .map(|n| match n {
            2100 => format!("{}\n", "x".repeat(4096)),
            n => format!("line {n}\n"),
        })
        .collect();
    std::fs::write(&file, text).unwrap();
    let config = config.to_str().unwrap();
    let out = env.sluice_raw(&[
        "--config",
        config,
        "send",
        "big",
        "--lines",
        file.to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    for word in [
        "line 2100 of",
        "1KiB",
        "max_message_size",
        "lines 1 to 2099 were sent (2,099 messages)",
        "resume from line 2100",
    ] {
        assert!(err.contains(word), "no {word:?} in {err}");
    }
    assert_eq!(env.count("big", "ready"), 2099);
}

#[test]
fn a_broker_lost_mid_way_says_where_to_resume() {
    let mut env = Env::redis();
    let (child, mut stdin) = spawn_with_stdin(&env, &["send", "q", "--lines", "-"]);
    // One full batch goes to the broker; the next waits for more lines.
    stdin.write_all(&lines(1..=1500)).unwrap();
    wait_until(Duration::from_secs(30), "the first batch", || {
        env.count("q", "ready") == 1000
    });
    env.redis_server().kill();
    stdin.write_all(&lines(1501..=2000)).unwrap();
    drop(stdin);
    let out = wait_with_deadline(child);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    for word in [
        "cannot publish lines 1001 to 2000 of stdin",
        "lines 1 to 1000 were sent (1,000 messages)",
        "resume from line 1001",
    ] {
        assert!(err.contains(word), "no {word:?} in {err}");
    }
}

/// "N\n" for each N.
fn lines(range: std::ops::RangeInclusive<u32>) -> Vec<u8> {
    range
        .map(|n| format!("{n}\n"))
        .collect::<String>()
        .into_bytes()
}

/// Run `sluice ARGS` with `input` on its stdin.
fn sluice_with_stdin(env: &Env, args: &[&str], input: &[u8]) -> Output {
    let (child, mut stdin) = spawn_with_stdin(env, args);
    stdin.write_all(input).unwrap();
    drop(stdin);
    wait_with_deadline(child)
}

/// Start `sluice ARGS` with a pipe to its stdin, capturing its output.
fn spawn_with_stdin(env: &Env, args: &[&str]) -> (Child, ChildStdin) {
    let mut child = env
        .command(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawning sluice");
    let stdin = child.stdin.take().unwrap();
    (child, stdin)
}

/// Wait for `child`; kill it and fail the test after a minute.
fn wait_with_deadline(child: Child) -> Output {
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || tx.send(child.wait_with_output()));
    match rx.recv_timeout(Duration::from_secs(60)) {
        Ok(out) => out.expect("waiting for sluice"),
        Err(_) => {
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
            panic!("sluice did not finish within a minute");
        }
    }
}

on_every_backend!(env: every_line_of_a_file_becomes_a_message);
