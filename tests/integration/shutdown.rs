//! SIGTERM: stop taking messages, finish those in flight, leave the rest.

use std::time::{Duration, Instant};

use crate::support::{Env, wait_until};

#[test]
fn sigterm_finishes_in_flight_and_leaves_the_rest() {
    let env = Env::new();
    env.deploy(
        "sleepy",
        "sleepy",
        Some("concurrency = 2\nprefetch = 6\n[config]\nsleep_ms = 1500\n"),
    );
    for i in 0..6 {
        env.send("sleepy", &format!("{i}"), &[]);
    }
    let log_path = env.dir.path().join("run.log");
    let mut host = env.spawn_run(&log_path);
    // All six are leased (prefetch), two are running.
    wait_until(Duration::from_secs(30), "messages in flight", || {
        env.count("sleepy", "in_flight") == 6
    });
    std::thread::sleep(Duration::from_millis(300));
    let stopped = Instant::now();
    unsafe { libc::kill(host.id() as i32, libc::SIGTERM) };
    let status = host.wait().unwrap();
    let log = std::fs::read_to_string(&log_path).unwrap();
    assert!(status.success(), "exit {status}:\n{log}");
    assert!(
        stopped.elapsed() < Duration::from_secs(10),
        "stopped within the grace period"
    );
    let stats = env.stats();
    assert_eq!(
        stats["sleepy"]["done"], 2,
        "the two in flight finished:\n{log}"
    );
    assert_eq!(stats["sleepy"]["in_flight"], 0);
    assert_eq!(
        stats["sleepy"]["ready"], 4,
        "the four prefetched but not started were handed back at once"
    );
    let rest = env.drain("sleepy");
    assert!(
        rest.iter().all(|d| d.attempt == 1),
        "no attempt was spent on the rest"
    );
}
