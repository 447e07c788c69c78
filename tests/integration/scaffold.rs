//! `sluice new`: a scaffolded project in each language, for each world,
//! builds as it is, and its component serves messages.

use std::process::Command;

use crate::support::{Env, repo_root};

/// Build a scaffolded project with the toolchains `scripts/build-guests`
/// installed, instead of downloading them again per test. Rust projects
/// share one target directory, so their dependencies build once.
fn build(dir: &std::path::Path) {
    let mut cmd = Command::new(dir.join("build.sh"));
    let out = with_toolchains(&mut cmd)
        .output()
        .expect("running build.sh");
    assert!(
        out.status.success(),
        "{}/build.sh failed (run scripts/build-guests first to install the toolchains):\n{}{}",
        dir.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `cmd` with the toolchains `scripts/build-guests` installed.
fn with_toolchains(cmd: &mut Command) -> &mut Command {
    let root = repo_root();
    let tools = root.join(".tools");
    let path = format!(
        "{}:{}",
        tools.join("cargo/bin").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    cmd.env(
        "COMPONENTIZE_PY",
        tools.join("python-venv/bin/componentize-py"),
    )
    .env(
        "COMPONENTIZE_JS",
        root.join("guests/js/node_modules/.bin/componentize-js"),
    )
    .env("ADAPTER", tools.join("wasi_snapshot_preview1.reactor.wasm"))
    .env("CARGO_TARGET_DIR", root.join("target/scaffold"))
    .env("PATH", path)
}

/// Run the project's own test of its handler, which builds it and asserts
/// on `sluice invoke --json`, as a user runs it: `cargo test`, pytest,
/// `node --test` or `./test.sh`, with the binary under test as `SLUICE`.
/// pytest is the one `sdk/python/check` installs.
fn own_test(env: &Env, lang: &str, dir: &std::path::Path) {
    let mut cmd = match lang {
        "rust" => {
            let mut cmd = Command::new("cargo");
            cmd.arg("test");
            cmd
        }
        "python" => {
            let python = repo_root().join(".tools/sdk-python-venv/bin/python");
            assert!(
                python.is_file(),
                "{} is missing: run sdk/python/check first, which installs pytest there",
                python.display()
            );
            let mut cmd = Command::new(python);
            cmd.args(["-m", "pytest", "-q", "-p", "no:cacheprovider"]);
            cmd
        }
        "js" => {
            let mut cmd = Command::new("node");
            cmd.arg("--test");
            cmd
        }
        _ => Command::new(dir.join("test.sh")),
    };
    let out = with_toolchains(&mut cmd)
        .current_dir(dir)
        .env("SLUICE", env!("CARGO_BIN_EXE_sluice"))
        // Its invokes compile into the environment's cache, not the user's.
        .env("XDG_CACHE_HOME", env.dir.path().join("xdg-cache"))
        .env("XDG_CONFIG_HOME", env.dir.path().join("xdg-config"))
        .output()
        .expect("running the project's test");
    assert!(
        out.status.success(),
        "the {lang} project's own test failed in {}:\n{}{}",
        dir.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Scaffold, build and serve a project in `lang`, of the batch world when
/// `batch`: either handles each message alike.
fn scaffold_build_deploy(lang: &str, batch: bool) {
    let env = Env::new();
    std::fs::write(
        env.dir.path().join("sluice.toml"),
        crate::languages::shared_cache_config(),
    )
    .unwrap();
    // Named apart per world: the Rust projects share a target directory.
    let name = format!("greeter_{lang}{}", if batch { "_batch" } else { "" });
    let project = env.dir.path().join("project");
    let mut args = vec![
        "--json",
        "new",
        &name,
        "--lang",
        lang,
        "--dir",
        project.to_str().unwrap(),
    ];
    if batch {
        args.push("--batch");
    }
    let out = env.sluice(&args);
    let created: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert!(
        created["files"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f == "wit/handler.wit"),
        "{created}"
    );
    assert!(project.join("README.md").is_file() && project.join("build.sh").is_file());
    // The language's SDK, which the project is built on, comes with it.
    let sdk = created["files"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f.as_str().unwrap().starts_with("sdk/"))
        .count();
    assert!(sdk > 0, "{created}");
    build(&project);
    own_test(&env, lang, &project);
    let wasm = project.join(format!("{name}.wasm"));
    let check = env.sluice(&["check", wasm.to_str().unwrap()]);
    let world = match batch {
        true => "sluice:handler/batch-handler@0.2.0",
        false => "sluice:handler/handler@0.2.0",
    };
    assert!(
        check.contains(&format!("ok, implements {world}")),
        "{check}"
    );

    std::fs::copy(&wasm, env.handlers.join(format!("{name}.wasm"))).unwrap();
    let sidecar = std::fs::read_to_string(project.join(format!("{name}.toml"))).unwrap();
    let sidecar = sidecar.replace(
        "# forward_to = \"another-queue\"",
        "forward_to = \"greetings\"",
    );
    std::fs::write(env.handlers.join(format!("{name}.toml")), sidecar).unwrap();
    env.send(&name, "hello", &[]);
    let log = env.run_until_idle();
    let stats = env.stats();
    assert_eq!(stats[&name]["done"], 1, "{lang} (batch: {batch}): {log}");
    assert!(
        log.contains(&format!("{name}: message")),
        "{lang}: the handler logged:\n{log}"
    );
    let forwarded = env.drain("greetings");
    assert_eq!(forwarded.len(), 1, "{lang}: the publish arrived");
    assert_eq!(forwarded[0].payload, b"hello");

    let again = env.sluice_raw(&[
        "new",
        &name,
        "--lang",
        lang,
        "--dir",
        project.to_str().unwrap(),
    ]);
    assert!(
        !again.status.success()
            && String::from_utf8_lossy(&again.stderr).contains("already exists")
    );
}

#[test]
fn new_rust_project_builds_and_serves() {
    scaffold_build_deploy("rust", false);
}

#[test]
fn new_rust_batch_project_builds_and_serves() {
    scaffold_build_deploy("rust", true);
}

#[test]
fn new_python_project_builds_and_serves() {
    scaffold_build_deploy("python", false);
}

#[test]
fn new_python_batch_project_builds_and_serves() {
    scaffold_build_deploy("python", true);
}

#[test]
fn new_js_project_builds_and_serves() {
    scaffold_build_deploy("js", false);
}

#[test]
fn new_js_batch_project_builds_and_serves() {
    scaffold_build_deploy("js", true);
}

#[test]
fn new_c_project_builds_and_serves() {
    scaffold_build_deploy("c", false);
}

#[test]
fn new_c_batch_project_builds_and_serves() {
    scaffold_build_deploy("c", true);
}

#[test]
fn bad_names_are_refused() {
    let env = Env::new();
    let out = env.sluice_raw(&["new", "Bad-Name", "--lang", "rust"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("bad handler name \"Bad-Name\""),
        "{err}"
    );
}
