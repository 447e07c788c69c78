//! Signals a host must live through, and a command's output to a reader
//! that went away.
//!
//! A host writes to broker sockets that a restart of the broker may have
//! closed: the write must fail with EPIPE, which the client library turns
//! into a reconnect, and must not raise SIGPIPE, whose default action ends
//! the process without a word in its log.

use std::process::Stdio;
use std::time::Duration;

use crate::support::{Env, Killed, wait_until};

#[test]
fn a_host_lives_through_sigpipe() {
    let env = Env::new();
    env.deploy("hello", "hello", None);
    let log = env.dir.path().join("host.log");
    let mut host = Killed(env.spawn_run(&log));
    env.send("hello", "first", &[]);
    wait_until(
        Duration::from_secs(60),
        "the first message is handled",
        || env.count("hello", "done") == 1,
    );
    // What a write to a socket the broker closed raises.
    for _ in 0..3 {
        unsafe { libc::kill(host.0.id() as i32, libc::SIGPIPE) };
    }
    std::thread::sleep(Duration::from_millis(500));
    let status = host.0.try_wait().unwrap();
    assert!(
        status.is_none(),
        "the host died of SIGPIPE ({status:?}); its log:\n{}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    env.send("hello", "second", &[]);
    wait_until(Duration::from_secs(30), "the host still serves", || {
        env.count("hello", "done") == 2
    });
}

#[test]
fn a_command_whose_reader_went_away_ends_quietly() {
    let env = Env::new();
    for i in 0..40 {
        env.send(&format!("queue-{i}"), "x", &[]);
    }
    let mut cmd = env.command(&["stats"]);
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("spawning sluice stats");
    // The reader goes away before the command writes.
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(141), "{:?}: {stderr}", out.status);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(stderr.is_empty(), "{stderr}");
}
