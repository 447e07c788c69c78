//! Bad input gets one clear line naming the file or field, and everything
//! else keeps being served.

use std::time::{Duration, Instant};

use crate::support::{Env, guest, lines_with};

#[test]
fn bad_handler_files_are_refused_and_the_rest_serve() {
    let env = Env::new();
    env.deploy("hello", "hello", None);
    let h = &env.handlers;
    let hello = std::fs::read(guest("hello")).unwrap();
    std::fs::write(h.join("truncated.wasm"), &hello[..hello.len() / 2]).unwrap();
    std::fs::write(h.join("empty.wasm"), b"").unwrap();
    std::fs::write(h.join("text.wasm"), b"this is not wasm").unwrap();
    std::fs::write(h.join("core.wasm"), b"\0asm\x01\0\0\0").unwrap();
    env.deploy("wrong_world", "wrong", None);
    env.deploy(
        "hello",
        "unknown_field",
        Some("[limits]\ntimeot = \"5s\"\n"),
    );
    env.deploy(
        "hello",
        "bad_duration",
        Some("[limits]\ntimeout = \"5 parsecs\"\n"),
    );
    env.deploy(
        "hello",
        "bad_cron",
        Some("[[schedule]]\ncron = \"*/5 * * *\"\n"),
    );
    // A schedule's message must fit max_message_size.
    std::fs::write(
        env.dir.path().join("sluice.toml"),
        "max_message_size = \"64KiB\"\n",
    )
    .unwrap();
    let big = "x".repeat(100 << 10);
    env.deploy(
        "hello",
        "big_tick",
        Some(&format!(
            "[[schedule]]\nname = \"big\"\ncron = \"* * * * *\"\npayload = \"{big}\"\n"
        )),
    );
    env.send("hello", "still served", &[]);
    let log = env.run_until_idle();
    assert_eq!(env.count("hello", "done"), 1, "{log}");

    let expect = [
        ("truncated.wasm", "not a valid component"),
        ("empty.wasm", "the file is empty"),
        ("text.wasm", "not a WebAssembly file"),
        ("core.wasm", "core WebAssembly module, not a component"),
        ("wrong.wasm", "no export `handle` found"),
        ("unknown_field.toml:2:1", "unknown field `timeot`"),
        ("bad_duration.toml:2:", "bad duration \"5 parsecs\""),
        (
            "bad_cron.toml",
            "field `schedule[0].cron`: \"*/5 * * *\" does not parse",
        ),
        ("big_tick.toml", "schedule \"big\": message for queue"),
    ];
    for (file, reason) in expect {
        let lines = lines_with(&log, file);
        assert!(
            lines
                .iter()
                .any(|l| l.contains("handler refused") && l.contains(reason)),
            "no refusal of {file} with {reason:?} in:\n{log}"
        );
    }
}

#[test]
fn check_names_what_is_wrong() {
    let env = Env::new();
    let ok = env.sluice(&["check", guest("orders").to_str().unwrap()]);
    assert!(
        ok.contains("ok, implements sluice:handler/handler@0.2.0"),
        "{ok}"
    );
    assert!(
        ok.contains("import sluice:handler/publish@0.2.0") && ok.contains("export handle"),
        "{ok}"
    );
    let json: serde_json::Value =
        serde_json::from_str(&env.sluice(&["--json", "check", guest("hello").to_str().unwrap()]))
            .unwrap();
    assert_eq!(json["world"], "sluice:handler/handler@0.2.0");
    assert!(json["size"].as_u64().unwrap() > 1000);

    // What the sandbox will refuse is named.
    let probe: serde_json::Value = serde_json::from_str(&env.sluice(&[
        "--json",
        "check",
        guest("wasi_probe").to_str().unwrap(),
    ]))
    .unwrap();
    let refused: Vec<&str> = probe["refused"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["import"].as_str().unwrap())
        .collect();
    assert!(
        refused.iter().any(|i| i.starts_with("wasi:filesystem/")),
        "{probe}"
    );
    assert!(
        refused.iter().any(|i| i.starts_with("wasi:sockets/")),
        "{probe}"
    );
    let text = env.sluice(&["check", guest("wasi_probe").to_str().unwrap()]);
    assert!(
        text.contains("(refused: no network access is granted"),
        "{text}"
    );
    let hello: serde_json::Value =
        serde_json::from_str(&env.sluice(&["--json", "check", guest("hello").to_str().unwrap()]))
            .unwrap();
    assert!(
        hello["refused"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["import"].as_str().unwrap().starts_with("wasi:cli/")),
        "{hello}"
    );

    let wrong = env.sluice_raw(&["check", guest("wrong_world").to_str().unwrap()]);
    assert!(!wrong.status.success());
    let err = String::from_utf8_lossy(&wrong.stderr);
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    assert!(
        err.contains("wrong_world.wasm") && err.contains("no export `handle` found"),
        "{err}"
    );
}

#[test]
fn config_file_with_unknown_field_is_one_clear_line() {
    let env = Env::new();
    let cfg = env.dir.path().join("sluice.toml");
    std::fs::write(&cfg, "broker = \"sqlite://x.db\"\nhandlers_dir = \"h\"\n").unwrap();
    let out = env.sluice_raw(&["--config", cfg.to_str().unwrap(), "stats"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("sluice.toml:2:1") && err.contains("unknown field `handlers_dir`"),
        "{err}"
    );
}

#[test]
fn payload_that_is_not_utf8_is_carried_and_shown_safely() {
    let env = Env::new();
    env.deploy("orders", "orders", None);
    env.deploy("hello", "hello", None);
    let file = env.dir.path().join("binary.bin");
    std::fs::write(&file, [0xff, 0xfe, 0x00, 0x80]).unwrap();
    let at = format!("@{}", file.display());
    let id = env.send("orders", &at, &[]);
    env.send("hello", &at, &[]);
    env.run_until_idle();
    assert_eq!(
        env.count("hello", "done"),
        1,
        "bytes pass through untouched"
    );
    let shown: serde_json::Value =
        serde_json::from_str(&env.sluice(&["--json", "dlq", "show", "orders", &id])).unwrap();
    assert_eq!(shown["reason"], "rejected: payload is not UTF-8");
    assert_eq!(shown["payload_base64"], "//4AgA==");
    let text = env.sluice(&["dlq", "show", "orders", &id]);
    assert!(
        text.contains("not UTF-8, 4 bytes, base64) //4AgA=="),
        "{text}"
    );
}

#[test]
fn message_over_the_size_limit_is_refused() {
    let env = Env::new();
    let big = env.dir.path().join("big.bin");
    std::fs::write(&big, vec![b'x'; (1 << 20) + 1]).unwrap();
    let out = env.sluice_raw(&["send", "orders", &format!("@{}", big.display())]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("\"orders\"") && err.contains("over the 1MiB limit"),
        "{err}"
    );
    assert_eq!(env.count("orders", "ready"), 0);
}

#[test]
fn guest_publish_over_the_size_limit_fails_that_attempt_only() {
    let env = Env::new();
    std::fs::write(
        env.dir.path().join("sluice.toml"),
        "max_message_size = \"64B\"\n",
    )
    .unwrap();
    env.deploy("orders", "orders", Some("[retry]\nmax_attempts = 1\n"));
    // The order fits; its follow-up (which carries the message id) does not.
    env.send("orders", r#"{"id": 1}"#, &[]);
    let log = env.run_until_idle();
    assert_eq!(env.count("orders", "dead"), 1);
    assert_eq!(env.count("shipping", "ready"), 0);
    assert!(
        !lines_with(&log, "over the 64B limit").is_empty(),
        "the guest saw and logged the error:\n{log}"
    );
}

#[test]
fn bad_broker_url_and_bad_header_are_clear() {
    let env = Env::new();
    let out = env.sluice_raw(&["--broker", "amqp://x", "stats"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("unknown broker URL \"amqp://x\""),
        "{err}"
    );
    let out = env.sluice_raw(&["--broker", "postgres://x", "stats"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("broker URL \"postgres://x\" names no database"),
        "{err}"
    );
    let out = env.sluice_raw(&["send", "q", "x", "--header", "novalue"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("bad --header \"novalue\""),
        "{err}"
    );
    let out = env.sluice_raw(&["send", "a/b", "x"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("bad queue name \"a/b\""),
        "{err}"
    );
}

/// Make a FIFO at `path`.
fn mkfifo(path: &std::path::Path) {
    let status = std::process::Command::new("mkfifo")
        .arg(path)
        .status()
        .expect("mkfifo (coreutils) runs");
    assert!(status.success(), "mkfifo {}", path.display());
}

/// Handler files that are not regular files, or too large, all at once in a
/// live handlers directory: each is refused with why (in the log and in
/// `stats --handlers`), nothing hangs or grows, and the rest serve.
fn files_that_are_not_regular_or_too_large_are_refused_and_the_rest_serve(env: Env) {
    std::fs::write(
        env.dir.path().join("sluice.toml"),
        "max_component_size = \"1MiB\"\n",
    )
    .unwrap();
    env.deploy("hello", "hello", None);
    let log = env.dir.path().join("run.log");
    let mut host = env.spawn_run(&log);
    let read_log = || std::fs::read_to_string(&log).unwrap_or_default();
    crate::support::wait_until(Duration::from_secs(30), "hello serving", || {
        read_log().contains("handler serving")
    });

    let h = &env.handlers;
    // A component linked to /dev/zero, and a sidecar linked to it.
    std::os::unix::fs::symlink("/dev/zero", h.join("zero.wasm")).unwrap();
    env.deploy("hello", "zerocfg", None);
    std::os::unix::fs::symlink("/dev/zero", h.join("zerocfg.toml")).unwrap();
    // A sidecar that is a FIFO no one writes to, and a component that is one.
    env.deploy("hello", "stuck", None);
    mkfifo(&h.join("stuck.toml"));
    mkfifo(&h.join("pipe.wasm"));
    // A directory named like a component, and a component over the limit.
    std::fs::create_dir(h.join("dir.wasm")).unwrap();
    let big = std::fs::File::create(h.join("big.wasm")).unwrap();
    big.set_len(3 << 20).unwrap();
    drop(big);
    // A sidecar over its 256 KiB limit.
    env.deploy("hello", "bigcfg", None);
    let comment = format!("# {}\n", "x".repeat(1021));
    std::fs::write(h.join("bigcfg.toml"), comment.repeat(300)).unwrap();

    let expect = [
        (
            "zero",
            "zero.wasm: is a character device, not a regular file",
        ),
        (
            "zerocfg",
            "zerocfg.toml: is a character device, not a regular file",
        ),
        (
            "stuck",
            "stuck.toml: is a FIFO (named pipe), not a regular file",
        ),
        (
            "pipe",
            "pipe.wasm: is a FIFO (named pipe), not a regular file",
        ),
        ("dir", "dir.wasm: is a directory, not a regular file"),
        ("bigcfg", "bigcfg.toml: is 300KiB, over the limit of 256KiB"),
        (
            "big",
            "big.wasm: is 3MiB, over the limit of 1MiB (raise max_component_size",
        ),
    ];
    let refused = || {
        env.sluice(&["--json", "stats", "--handlers"])
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
            .filter_map(|h| {
                let reason = h["last_refusal"].as_str()?.to_string();
                Some((h["handler"].as_str()?.to_string(), reason))
            })
            .collect::<std::collections::BTreeMap<_, _>>()
    };
    crate::support::wait_until(Duration::from_secs(30), "every bad file refused", || {
        let got = refused();
        expect
            .iter()
            .all(|(name, why)| got.get(*name).is_some_and(|r| r.contains(why)))
    });
    // The host still serves, and still follows the directory.
    env.send("hello", "still served", &[]);
    env.deploy("hello", "late", None);
    env.send("late", "new handler", &[]);
    crate::support::wait_until(Duration::from_secs(30), "served", || {
        env.count("hello", "done") == 1 && env.count("late", "done") == 1
    });
    let status = read_status(host.id());
    let rss_kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    assert!(rss_kib < 512 << 10, "the host grew to {rss_kib} KiB");
    host.kill().unwrap();
    host.wait().unwrap();

    // A start with all of them there ends as soon as the queues are idle.
    let start = Instant::now();
    env.send("hello", "after a restart", &[]);
    let log = env.run_until_idle();
    assert!(start.elapsed() < Duration::from_secs(20), "{log}");
    assert_eq!(env.count("hello", "done"), 2, "{log}");
    for (name, why) in expect {
        assert!(
            lines_with(&log, why)
                .iter()
                .any(|l| l.contains("handler refused")),
            "{name}: no refusal with {why:?} in:\n{log}"
        );
    }
}

fn read_status(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap()
}

on_every_backend!(env: files_that_are_not_regular_or_too_large_are_refused_and_the_rest_serve);
