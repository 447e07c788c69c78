//! A broker that stops answering without closing its connections (a frozen
//! peer, a network that drops every packet): every call the host makes is
//! given up at `broker_timeout` with a log line saying so, and the drain
//! finishes once the broker answers again; and the stall watchdog reports
//! the queue stalled (log, `/readyz`, metrics) until it moves again, or
//! ends the host with `exit_on_stall`. On Redis and PostgreSQL, through a
//! proxy that freezes.

use std::process::Stdio;
use std::time::{Duration, Instant};

use sluice::broker::message::NewMessage;

use crate::proxy::Proxy;
use crate::support::{Env, Killed, wait_until};

const MESSAGES: u64 = 1500;

/// `env`'s broker URL, and the same through a proxy of its own.
fn proxied(env: &Env) -> (Proxy, String) {
    Proxy::in_front_of(&env.broker_url(), Duration::ZERO)
}

fn a_frozen_broker_is_given_up_at_the_bound_and_the_drain_finishes(env: Env) {
    let port = crate::admin::free_port();
    let config = "broker_timeout = \"1s\"\nstall_after = \"off\"\n";
    let (proxy, _host, log) = frozen_host(&env, config, port);
    proxy.freeze();
    let frozen_at = Instant::now();
    let text = || std::fs::read_to_string(&log).unwrap_or_default();
    wait_until(
        Duration::from_secs(8),
        "a call given up at the bound",
        || text().contains("did not answer a"),
    );
    let given_up = frozen_at.elapsed();
    proxy.thaw();
    assert!(
        env.count("hello", "done") < MESSAGES,
        "the drain ended before the freeze"
    );
    let line = text()
        .lines()
        .find(|l| l.contains("did not answer a"))
        .unwrap()
        .to_string();
    assert!(
        line.contains("within 1s") && line.contains("broker_timeout"),
        "{line}"
    );
    assert!(
        given_up < Duration::from_secs(5),
        "given up after {given_up:?}"
    );
    wait_until(Duration::from_secs(90), "every message done", || {
        env.count("hello", "done") == MESSAGES
    });
}

/// A host through a proxy, with the admin endpoint on `port` and
/// `sluice.toml` holding `config`, serving `MESSAGES` published to `hello`.
fn frozen_host(env: &Env, config: &str, port: u16) -> (Proxy, Killed, std::path::PathBuf) {
    env.deploy(
        "hello",
        "hello",
        Some("rate = \"300/s\"\nlease = \"5s\"\n[limits]\ntimeout = \"1s\"\n"),
    );
    std::fs::write(env.dir.path().join("sluice.toml"), config).unwrap();
    env.publish(
        (0..MESSAGES)
            .map(|i| NewMessage::new("hello", format!("m{i}")))
            .collect(),
    );
    let (proxy, url) = proxied(env);
    let handlers = env.handlers.to_str().unwrap().to_string();
    let log = env.dir.path().join("host.log");
    let admin = format!("127.0.0.1:{port}");
    let host = Killed(
        env.command(&[
            "run",
            "--handlers",
            &handlers,
            "--broker",
            &url,
            "--admin",
            &admin,
        ])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap(),
    );
    wait_until(Duration::from_secs(60), "some messages done", || {
        env.count("hello", "done") > 100
    });
    // The watchdog has read the broker's counts (every 500 ms here) before
    // the freeze: a host that never had them cannot tell ready messages
    // from none.
    std::thread::sleep(Duration::from_millis(1500));
    (proxy, host, log)
}

fn get(port: u16, path: &str) -> (u16, String) {
    let agent = crate::admin::agent();
    match agent.get(format!("http://127.0.0.1:{port}{path}")).call() {
        Ok(mut r) => (
            r.status().as_u16(),
            r.body_mut().read_to_string().unwrap_or_default(),
        ),
        Err(e) => (0, e.to_string()),
    }
}

fn the_watchdog_reports_a_stalled_queue_until_it_moves(env: Env) {
    let port = crate::admin::free_port();
    let config = "broker_timeout = \"1s\"\nstall_after = \"2s\"\n";
    let (proxy, _host, log) = frozen_host(&env, config, port);
    let text = || std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        !text().contains("is stalled"),
        "stalled before the freeze:\n{}",
        text()
    );
    proxy.freeze();
    let frozen = Instant::now();
    while !text().contains("queue hello is stalled") {
        assert!(
            frozen.elapsed() < Duration::from_secs(20),
            "no stall reported in 20 s:\n{}",
            text()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let line = text()
        .lines()
        .find(|l| l.contains("is stalled"))
        .unwrap()
        .to_string();
    assert!(
        line.contains("ERROR") && line.contains("waiting on"),
        "{line}"
    );
    let (status, body) = get(port, "/readyz");
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("queue hello is stalled"), "{body}");
    let (status, metrics) = get(port, "/metrics");
    assert_eq!(status, 200, "{metrics}");
    assert!(
        metrics.contains("sluice_queue_stalled{queue=\"hello\"} 1"),
        "{metrics}"
    );
    assert!(metrics.contains("sluice_broker_up 0"), "{metrics}");
    assert!(
        env.count("hello", "done") < MESSAGES,
        "the drain ended before the freeze"
    );
    proxy.thaw();
    wait_until(Duration::from_secs(30), "the stall cleared", || {
        text().contains("queue hello moves again")
    });
    wait_until(Duration::from_secs(90), "every message done", || {
        env.count("hello", "done") == MESSAGES
    });
    let (status, body) = get(port, "/api/queues/hello");
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("\"stalled\":null"), "{body}");
    let (_, metrics) = get(port, "/metrics");
    assert!(
        metrics.contains("sluice_queue_stalled{queue=\"hello\"} 0"),
        "{metrics}"
    );
    // One error line for the one stall.
    assert_eq!(
        text().matches("queue hello is stalled").count(),
        1,
        "{}",
        text()
    );
}

fn exit_on_stall_ends_the_host_with_an_error(env: Env) {
    let port = crate::admin::free_port();
    let config = "broker_timeout = \"1s\"\nstall_after = \"2s\"\nexit_on_stall = true\nshutdown_grace = \"2s\"\n";
    let (proxy, mut host, log) = frozen_host(&env, config, port);
    proxy.freeze();
    let started = Instant::now();
    let status = loop {
        if let Some(status) = host.0.try_wait().unwrap() {
            break status;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the host did not exit on the stall:\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    proxy.thaw();
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    assert_eq!(status.code(), Some(1), "{text}");
    assert!(
        text.contains("queue hello stalled") && text.contains("exit_on_stall"),
        "{text}"
    );
}

on_every_backend!(
    servers: a_frozen_broker_is_given_up_at_the_bound_and_the_drain_finishes,
    the_watchdog_reports_a_stalled_queue_until_it_moves,
    exit_on_stall_ends_the_host_with_an_error,
);

#[test]
fn bad_stall_settings_are_refused_with_their_bounds() {
    let env = Env::new();
    env.deploy("hello", "hello", None);
    let handlers = env.handlers.to_str().unwrap().to_string();
    for (bad, field) in [
        ("broker_timeout = \"10ms\"", "broker_timeout"),
        ("broker_timeout = \"2h\"", "broker_timeout"),
        ("stall_after = \"500ms\"", "stall_after"),
        ("stall_after = \"2h\"", "stall_after"),
        ("stall_after = \"soon\"", "stall_after"),
        (
            "stall_after = \"off\"\nexit_on_stall = true",
            "exit_on_stall",
        ),
    ] {
        std::fs::write(env.dir.path().join("sluice.toml"), format!("{bad}\n")).unwrap();
        let out = env.sluice_raw(&["run", "--handlers", &handlers, "--until-idle"]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{bad}");
        assert!(
            stderr.contains("sluice.toml") && stderr.contains(field),
            "{stderr}"
        );
    }
}
