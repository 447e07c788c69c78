//! The README's first command, `scripts/demo`, end to end: the example
//! handlers deployed, the messages sent and served until idle, and what it
//! prints of them. The build steps are left out (`SLUICE_DEMO_BIN`): the
//! suite has built the host and the guests already.

use std::process::Command;
use std::time::Duration;

use crate::support::{guest, repo_root, run_with_deadline};

#[test]
fn the_demo_serves_its_messages_and_shows_what_the_readme_says() {
    // Fails with what to run when the guests are missing.
    guest("hello");
    guest("orders");
    let scratch = tempfile::tempdir().unwrap();
    let mut demo = Command::new(repo_root().join("scripts/demo"));
    demo.env("SLUICE_DEMO_BIN", env!("CARGO_BIN_EXE_sluice"))
        .env("SLUICE_DEMO_DIR", scratch.path().join("demo"))
        .env("SLUICE_DEMO_ADMIN", "127.0.0.1:0")
        .env("XDG_CACHE_HOME", scratch.path().join("xdg-cache"))
        .env("XDG_CONFIG_HOME", scratch.path().join("xdg-config"))
        .env("NO_COLOR", "1");
    let out = run_with_deadline(demo, Duration::from_secs(120));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "scripts/demo failed ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    // The three valid orders forwarded, counted in the key-value store.
    for count in 1..=3 {
        assert!(
            stdout.contains(&format!("(forwarded: {count})")),
            "no forward counted {count}:\n{stdout}"
        );
    }
    // Fan-out: audit (orders.#) got every announcement, eu_desk
    // (orders.eu.*) only the eu order's.
    assert!(stdout.contains("audit    handled 3 of them"), "{stdout}");
    assert!(stdout.contains("eu_desk  handled 1 of them"), "{stdout}");
    // The stats: three orders done, one retried once, one dead.
    let (_, stats) = stdout
        .split_once("== sluice stats")
        .unwrap_or_else(|| panic!("no stats section:\n{stdout}"));
    let orders: Vec<&str> = stats
        .lines()
        .find(|l| l.starts_with("orders "))
        .unwrap_or_else(|| panic!("no stats row for orders:\n{stdout}"))
        .split_whitespace()
        .collect();
    // QUEUE READY DELAYED IN_FLIGHT DONE DUPLICATES RETRIED DEAD ...
    assert_eq!(
        (orders[1], orders[4], orders[6], orders[7]),
        ("0", "3", "1", "1"),
        "orders' stats row: {orders:?}"
    );
    // The malformed order is the dead letter listed.
    assert!(
        stdout.contains("rejected: malformed order"),
        "no dead letter listed:\n{stdout}"
    );
}
