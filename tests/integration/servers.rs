//! The test servers of `sluice_broker::testkit` (what every broker test
//! stands on): a Redis that starts, is killed and restarts with its AOF
//! data, a cluster that forms, and a server gone with its value. Checks go
//! through `redis-cli`, as the servers' own readiness checks do.

use std::process::Command;
use std::time::{Duration, Instant};

use sluice_broker::testkit::{RedisCluster, RedisServer, run_with_deadline};

/// `redis-cli -h 127.0.0.1 -p PORT ARGS` within a second: trimmed stdout,
/// or why it failed (the testkit's readiness probe).
fn probe(port: u16, args: &[&str]) -> Result<String, String> {
    let mut cmd = Command::new("redis-cli");
    cmd.args(["-h", "127.0.0.1", "-p"])
        .arg(port.to_string())
        .args(args);
    let (status, stdout, stderr) = run_with_deadline(cmd, Duration::from_secs(1))?;
    if status.success() {
        Ok(stdout.trim().to_string())
    } else {
        Err(format!(
            "exit {status}; stderr: {}; stdout: {}",
            stderr.trim(),
            stdout.trim()
        ))
    }
}

fn has_line(text: &str, line: &str) -> bool {
    text.lines().any(|l| l.trim() == line)
}

#[test]
fn redis_server_starts_restarts_and_keeps_aof_data() {
    let mut server = RedisServer::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
    let port = server.port();
    assert_eq!(server.url(), format!("redis://127.0.0.1:{port}"));
    assert_eq!(server.cli(&["SET", "k", "v"]), "OK");

    server.kill();
    server.kill(); // idempotent
    assert!(
        probe(port, &["PING"]).is_err(),
        "a killed server must not answer"
    );

    server.restart();
    assert_eq!(server.port(), port);
    assert!(has_line(&server.info("persistence"), "aof_enabled:1"));
    assert_eq!(server.cli(&["GET", "k"]), "v");
}

#[test]
fn redis_cluster_forms_with_three_masters() {
    let started = Instant::now();
    let cluster = RedisCluster::start();
    eprintln!("cluster formed in {:?}", started.elapsed());
    assert_eq!(cluster.nodes.len(), 3);
    assert_eq!(cluster.url(), cluster.nodes[0].url());
    assert_eq!(cluster.urls().len(), 3);

    let info = cluster.nodes[0]
        .cli(&["CLUSTER", "INFO"])
        .replace("\r\n", "\n");
    assert!(has_line(&info, "cluster_state:ok"), "{info}");
    assert!(has_line(&info, "cluster_size:3"), "{info}");

    // Several keys, so at least one lives on a node other than the one asked
    // and the redirect path is exercised.
    for i in 0..10 {
        let key = format!("key-{i}");
        let value = format!("value-{i}");
        assert_eq!(cluster.nodes[0].cli(&["-c", "SET", &key, &value]), "OK");
        assert_eq!(cluster.nodes[1].cli(&["-c", "GET", &key]), value);
    }
}

#[test]
fn redis_server_start_has_persistence_off_and_drop_kills_it() {
    let server = RedisServer::start();
    let port = server.port();
    assert_eq!(
        server.cli(&["CONFIG", "GET", "appendonly"]),
        "appendonly\nno"
    );
    assert_eq!(server.cli(&["CONFIG", "GET", "save"]), "save");
    assert!(has_line(&server.info("persistence"), "loading:0"));
    drop(server);
    assert!(
        probe(port, &["PING"]).is_err(),
        "a dropped server must not answer"
    );
}
