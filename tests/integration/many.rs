//! Many handlers on one host: a thousand copies of `hello`, each on a queue
//! of its own, with default settings. None is refused for want of room in
//! the host's pool, and every one handles its message.

use std::time::Duration;

use sluice::broker::message::NewMessage;

use crate::support::{Env, lines_with, wait_until};

const HANDLERS: usize = 1000;

#[test]
fn a_thousand_handlers_serve_with_defaults() {
    let env = Env::new();
    for i in 0..HANDLERS {
        env.deploy("hello", &format!("h{i:04}"), None);
    }
    let log_path = env.dir.path().join("run.log");
    let mut host = env.spawn_run(&log_path);
    let read_log = || std::fs::read_to_string(&log_path).unwrap_or_default();
    wait_until(Duration::from_secs(120), "every handler serving", || {
        lines_with(&read_log(), "handler serving").len() == HANDLERS
    });
    env.publish(
        (0..HANDLERS)
            .map(|i| NewMessage::new(format!("h{i:04}"), format!("message {i}")))
            .collect(),
    );
    wait_until(
        Duration::from_secs(120),
        "every queue's message done",
        || {
            let stats = env.stats();
            (0..HANDLERS).all(|i| {
                stats
                    .get(&format!("h{i:04}"))
                    .is_some_and(|q| q["done"] == 1)
            })
        },
    );
    host.kill().unwrap();
    host.wait().unwrap();
    let log = read_log();
    let refused = lines_with(&log, "handler refused");
    assert!(refused.is_empty(), "handlers refused: {refused:#?}");
}
