//! The {{name}} component as sluice runs it: `cargo test` builds it for
//! wasm32-wasip2 and calls it with `sluice invoke --json`, asserting on the
//! report. The unit tests in src/lib.rs run the same code natively, against
//! the SDK's fake host; these run the component in the host's sandbox.
//!
//! They need the `sluice` binary: the path in the environment variable
//! `SLUICE`, or else `sluice` on `PATH`; and the target
//! (`rustup target add wasm32-wasip2`).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use serde_json::{Value, json};

/// The world this project implements, as `sluice new` wrote it.
const WORLD: &str = "{{world}}";

#[test]
fn a_message_is_done_and_logged() {
    let report = invoke(&["--payload", "hello", "--id", "m-1"]).json();
    assert_eq!(report["status"], 0, "{report}");
    assert_eq!(report["world"], format!("sluice:handler/{WORLD}@0.2.0"));
    assert_eq!(report["outcomes"], json!([{"outcome": "done"}]), "{report}");
    assert!(
        logged(&report, "{{name}}: message m-1 attempt 1"),
        "the handler's log line is missing: {report}"
    );
    // `forward_to` is not set in {{name}}.toml: nothing is published.
    assert_eq!(report["publishes"], json!([]), "{report}");
}

#[test]
fn forwards_to_the_configured_queue() {
    let report = invoke(&["--payload", "hello", "--set", "forward_to=greetings"]).json();
    assert_eq!(report["status"], 0, "{report}");
    let publishes = report["publishes"].as_array().unwrap();
    assert_eq!(publishes.len(), 1, "{report}");
    assert_eq!(publishes[0]["queue"], "greetings");
    assert_eq!(publishes[0]["payload"], "hello");
    assert_eq!(report["publishes_committed"], true, "{report}");
}

#[test]
fn a_payload_that_is_not_utf8_is_rejected() {
    let file = Path::new(env!("CARGO_TARGET_TMPDIR")).join("{{name}}-not-utf8.bin");
    std::fs::write(&file, [0xff, 0xfe]).unwrap();
    let report = invoke(&["--payload", &format!("@{}", file.display())]).json();
    assert_eq!(report["status"], 11, "{report}");
    assert_eq!(
        report["outcomes"],
        json!([{"outcome": "reject", "reason": "payload is not UTF-8"}]),
        "{report}"
    );
}

#[test]
fn two_messages() {
    let invoked = invoke(&["--payload", "one", "--payload", "two"]);
    if WORLD == "batch-handler" {
        // One call of handle-batch, one outcome per message, in order.
        let report = invoked.json();
        assert_eq!(report["status"], 0, "{report}");
        assert_eq!(
            report["outcomes"],
            json!([{"outcome": "done"}, {"outcome": "done"}]),
            "{report}"
        );
        assert!(logged(&report, "{{name}}: 2 messages"), "{report}");
    } else {
        // The world `handler` takes one message a call: nothing is called.
        assert_eq!(invoked.status, Some(2), "{}", invoked.stderr);
        assert!(
            invoked.stderr.contains("one --payload"),
            "{}",
            invoked.stderr
        );
    }
}

/// Whether the report has an info line of the handler's log reading `text`.
fn logged(report: &Value, text: &str) -> bool {
    report["logs"]
        .as_array()
        .unwrap()
        .iter()
        .any(|line| line["level"] == "info" && line["stream"] == "log" && line["message"] == text)
}

/// What one `sluice invoke` did.
struct Invoked {
    status: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Invoked {
    /// The `--json` report; its `status` is the exit status.
    fn json(&self) -> Value {
        let report: Value = serde_json::from_str(&self.stdout).unwrap_or_else(|e| {
            panic!(
                "sluice invoke printed no JSON report ({e}); exit status {:?}, stderr:\n{}",
                self.status, self.stderr
            )
        });
        assert_eq!(report["status"].as_i64(), self.status.map(i64::from));
        report
    }
}

/// Runs `sluice --json invoke` on the component with its sidecar and `args`.
fn invoke(args: &[&str]) -> Invoked {
    let sluice = sluice();
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = Command::new(&sluice)
        .args(["--json", "invoke"])
        .arg(component())
        .arg("--sidecar")
        .arg(manifest.join("{{name}}.toml"))
        .args(args)
        .current_dir(manifest)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", sluice.display()));
    Invoked {
        status: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// The `sluice` binary: `$SLUICE`, or `sluice` on `PATH`.
fn sluice() -> PathBuf {
    static SLUICE: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let found = SLUICE.get_or_init(|| {
        let (path, from) = match std::env::var_os("SLUICE") {
            Some(path) => (PathBuf::from(path), "the environment variable SLUICE"),
            None => (PathBuf::from("sluice"), "PATH"),
        };
        match Command::new(&path).arg("--version").output() {
            Ok(out) if out.status.success() => Ok(path),
            Ok(out) => Err(format!(
                "{} --version (from {from}) failed:\n{}",
                path.display(),
                String::from_utf8_lossy(&out.stderr)
            )),
            Err(e) => Err(format!(
                "cannot run {} (from {from}): {e}. These tests call the sluice binary: \
                 install it (`cargo install --locked --path .` in the sluice repository) \
                 and put it on PATH, or set SLUICE to its path",
                path.display()
            )),
        }
    });
    found.clone().unwrap_or_else(|e| panic!("{e}"))
}

/// The component, built once per `cargo test` with a target directory of
/// its own: the one `cargo test` uses stays locked while the tests run.
fn component() -> PathBuf {
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let built = BUILT.get_or_init(|| {
        let target_dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("wasm");
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let out = Command::new(cargo)
            .args(["build", "--release", "--target", "wasm32-wasip2"])
            .env("CARGO_TARGET_DIR", &target_dir)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .output()
            .map_err(|e| format!("cannot run cargo: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "cargo build --release --target wasm32-wasip2 failed (is the target \
                 installed? `rustup target add wasm32-wasip2`):\n{}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        Ok(target_dir.join("wasm32-wasip2/release/{{name}}.wasm"))
    });
    built.clone().unwrap_or_else(|e| panic!("{e}"))
}
