//! Hot reload: deploying, replacing and removing handlers by touching files
//! in the handlers directory while `sluice run` serves.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use std::process::Child;
use std::time::{Duration, Instant};

use sluice::broker::message::NewMessage;

use crate::support::{Env, guest, lines_with, wait_until};

/// `bytes` with a custom section appended: the same behaviour under a new
/// content hash, padded by `pad` bytes.
fn variant(bytes: &[u8], tag: &str, pad: usize) -> Vec<u8> {
    fn leb(mut n: usize, out: &mut Vec<u8>) {
        loop {
            let byte = (n & 0x7f) as u8;
            n >>= 7;
            if n == 0 {
                out.push(byte);
                return;
            }
            out.push(byte | 0x80);
        }
    }
    let name = format!("sluice-test-{tag}");
    let mut body = Vec::new();
    leb(name.len(), &mut body);
    body.extend_from_slice(name.as_bytes());
    body.extend(std::iter::repeat_n(0u8, pad));
    let mut out = bytes.to_vec();
    out.push(0);
    leb(body.len(), &mut out);
    out.extend(body);
    out
}

fn version_of(bytes: &[u8]) -> String {
    sluice::testkit::loader::content_hash(bytes)
}

/// Deploy the safe way: write aside, then rename into place.
fn rename_deploy(dir: &Path, name: &str, bytes: &[u8]) {
    let tmp = dir.join(format!("{name}.wasm.tmp"));
    std::fs::write(&tmp, bytes).unwrap();
    std::fs::rename(&tmp, dir.join(format!("{name}.wasm"))).unwrap();
}

fn read(log: &Path) -> String {
    std::fs::read_to_string(log).unwrap_or_default()
}

/// Wait until the host's log says `version` serves.
fn wait_serving(log: &Path, version: &str) {
    wait_until(
        Duration::from_secs(30),
        &format!("version {version} serving"),
        || {
            read(log)
                .lines()
                .any(|l| l.contains("handler serving") && l.contains(version))
        },
    );
}

/// Message id -> version that handled it, from the worker's debug lines.
fn handled_by(log: &str) -> BTreeMap<String, String> {
    let field = |line: &str, name: &str| -> Option<String> {
        let rest = line.split(&format!(" {name}=")).nth(1)?;
        Some(
            rest.split_whitespace()
                .next()?
                .trim_matches('"')
                .to_string(),
        )
    };
    log.lines()
        .filter(|l| l.contains(" handled "))
        .filter_map(|l| Some((field(l, "id")?, field(l, "version")?)))
        .collect()
}

fn start(env: &Env, log: &Path) -> Child {
    let handlers = env.handlers.to_str().unwrap().to_string();
    let mut cmd = env.command(&["run", "--handlers", &handlers]);
    cmd.env(
        "SLUICE_LOG",
        "info,sluice::serve::worker=debug,sluice::sandbox::loader=debug",
    )
    .stdout(std::process::Stdio::null())
    .stderr(std::fs::File::create(log).unwrap());
    cmd.spawn().unwrap()
}

/// Deploy the `hello` guest and start a host on it; returns its bytes, the
/// host's log file and the host, once `hello` serves.
fn serve_hello(env: &Env) -> (Vec<u8>, std::path::PathBuf, Child) {
    let hello = std::fs::read(guest("hello")).unwrap();
    rename_deploy(&env.handlers, "hello", &hello);
    let log = env.dir.path().join("run.log");
    let host = start(env, &log);
    wait_serving(&log, &version_of(&hello));
    (hello, log, host)
}

fn stop(mut host: Child) {
    unsafe { libc::kill(host.id() as i32, libc::SIGTERM) };
    assert!(host.wait().unwrap().success());
}

fn replace_twenty_times_while_messages_flow(env: Env) {
    let (hello, log, host) = serve_hello(&env);
    let (rt, broker) = env.broker();
    let mut sent = 0u64;
    let mut last = String::new();
    for i in 0..20 {
        let batch = (0..50)
            .map(|j| NewMessage::new("hello", format!("swap {i} message {j}")))
            .collect();
        rt.block_on(broker.publish(batch)).unwrap();
        sent += 50;
        let v = variant(&hello, &i.to_string(), 0);
        last = version_of(&v);
        rename_deploy(&env.handlers, "hello", &v);
        wait_serving(&log, &last);
    }
    // After the final swap, every message goes to the final version.
    let after: Vec<NewMessage> = (0..200)
        .map(|j| NewMessage::new("hello", format!("after {j}")))
        .collect();
    let after_ids = rt.block_on(broker.publish(after)).unwrap();
    sent += 200;
    wait_until(Duration::from_secs(60), "every message done", || {
        env.count("hello", "done") == sent
    });
    stop(host);
    let text = read(&log);
    let stats = env.stats();
    assert_eq!(stats["hello"]["dead"], 0);
    assert_eq!(
        stats["hello"]["retried"],
        0,
        "no attempt failed:\n{}",
        lines_with(&text, "attempt failed").join("\n")
    );
    let by = handled_by(&text);
    for id in &after_ids {
        assert_eq!(by.get(id), Some(&last), "message {id} after the final swap");
    }
}

fn broken_files_leave_the_old_version_serving(env: Env) {
    let (hello, log, host) = serve_hello(&env);
    let good = version_of(&hello);
    let wrong = std::fs::read(guest("wrong_world")).unwrap();
    let bad: [(&str, Vec<u8>); 3] = [
        ("not a valid component", hello[..hello.len() / 3].to_vec()),
        ("no export `handle`", wrong),
        ("the file is empty", vec![]),
    ];
    for (i, (reason, bytes)) in bad.iter().enumerate() {
        rename_deploy(&env.handlers, "hello", bytes);
        wait_until(Duration::from_secs(30), reason, || {
            lines_with(&read(&log), "handler refused")
                .iter()
                .filter(|l| l.contains(reason))
                .count()
                == 1
        });
        let line = lines_with(&read(&log), reason).join("\n");
        assert!(
            line.contains("hello.wasm") && line.contains(&good),
            "names the file and what still serves: {line}"
        );
        let id = env.send("hello", &format!("still served {i}"), &[]);
        wait_until(
            Duration::from_secs(30),
            "the old version to handle it",
            || handled_by(&read(&log)).contains_key(&id),
        );
        assert_eq!(handled_by(&read(&log))[&id], good);
    }
    // The refusals show in `sluice stats`, with what still serves.
    let text = env.sluice(&["stats"]);
    let row = lines_with(&text, "hello ")
        .into_iter()
        .find(|l| l.contains(&good))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(
        row.contains(" 3  ") && row.contains("the file is empty"),
        "{row}"
    );
    assert!(
        row.contains(" handler@0.2.0 "),
        "names the world it serves: {row}"
    );
    let json: serde_json::Value =
        serde_json::from_str(env.sluice(&["--json", "stats", "--handlers"]).trim()).unwrap();
    assert_eq!(
        (json["handler"].as_str(), json["refusals"].as_u64()),
        (Some("hello"), Some(3))
    );
    assert_eq!(json["version"].as_str(), Some(good.as_str()));
    // A later good file is picked up.
    let fixed = variant(&hello, "fixed", 0);
    rename_deploy(&env.handlers, "hello", &fixed);
    wait_serving(&log, &version_of(&fixed));
    stop(host);
}

fn remove_and_readd(env: Env) {
    let (hello, log, host) = serve_hello(&env);
    std::fs::remove_file(env.handlers.join("hello.wasm")).unwrap();
    wait_until(Duration::from_secs(30), "unloaded", || {
        read(&log).contains("handler unloaded")
    });
    for i in 0..10 {
        env.send("hello", &format!("waiting {i}"), &[]);
    }
    std::thread::sleep(Duration::from_millis(500));
    let stats = env.stats();
    assert_eq!(
        (
            stats["hello"]["ready"].as_u64(),
            stats["hello"]["dead"].as_u64(),
            stats["hello"]["done"].as_u64()
        ),
        (Some(10), Some(0), Some(0))
    );
    rename_deploy(&env.handlers, "hello", &hello);
    wait_until(Duration::from_secs(30), "the waiting messages done", || {
        env.count("hello", "done") == 10
    });
    stop(host);
}

on_every_backend!(env:
    replace_twenty_times_while_messages_flow,
    broken_files_leave_the_old_version_serving,
    remove_and_readd
);

#[test]
fn slow_copy_of_a_large_file_is_loaded_once_complete() {
    let env = Env::new();
    let (hello, log, host) = serve_hello(&env);
    // Several MB, written in pieces over about a second, like a slow `cp`.
    let large = variant(&hello, "large", 6 << 20);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(env.handlers.join("hello.wasm"))
        .unwrap();
    for chunk in large.chunks(256 << 10) {
        file.write_all(chunk).unwrap();
        file.flush().unwrap();
        std::thread::sleep(Duration::from_millis(40));
    }
    drop(file);
    wait_serving(&log, &version_of(&large));
    let text = read(&log);
    assert!(
        lines_with(&text, "handler refused").is_empty(),
        "a half-written file was loaded:\n{text}"
    );
    let id = env.send("hello", "big", &[]);
    wait_until(Duration::from_secs(30), "handled", || {
        handled_by(&read(&log)).contains_key(&id)
    });
    assert_eq!(handled_by(&read(&log))[&id], version_of(&large));
    stop(host);
}

#[test]
fn sidecar_change_applies_without_recompiling() {
    let env = Env::new();
    let (_, log, host) = serve_hello(&env);
    let compiled_before = lines_with(&read(&log), "component ready").len();
    assert_eq!(
        compiled_before, 1,
        "the first load compiled (or read the disk cache) once"
    );
    // Rebind the handler to another queue.
    std::fs::write(
        env.handlers.join("hello.toml.tmp"),
        "queue = \"greetings\"\n",
    )
    .unwrap();
    std::fs::rename(
        env.handlers.join("hello.toml.tmp"),
        env.handlers.join("hello.toml"),
    )
    .unwrap();
    wait_until(Duration::from_secs(30), "rebound", || {
        read(&log)
            .lines()
            .any(|l| l.contains("handler serving") && l.contains("queue=greetings"))
    });
    env.send("greetings", "hi", &[]);
    wait_until(Duration::from_secs(30), "handled on the new queue", || {
        env.count("greetings", "done") == 1
    });
    assert_eq!(
        lines_with(&read(&log), "component ready").len(),
        compiled_before,
        "no recompilation"
    );
    stop(host);
}

/// The compiled cache holds native code: an entry copied over another's
/// (planted, or a mix-up) fails its keyed check and is compiled again, and
/// the handler runs as itself, never as the other component.
#[test]
fn a_cache_entry_copied_from_another_component_is_compiled_again() {
    let env = Env::new();
    env.deploy("hello", "hello", None);
    env.deploy("hostile_trap", "trap", None);
    env.send("hello", "one", &[]);
    env.run_until_idle();
    let entry = |name: &str| {
        let version =
            version_of(&std::fs::read(env.handlers.join(format!("{name}.wasm"))).unwrap());
        std::fs::read_dir(env.cache_dir())
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| {
                p.file_name()
                    .unwrap()
                    .to_string_lossy()
                    .starts_with(&version)
            })
            .unwrap_or_else(|| panic!("no cache entry for {name}"))
    };
    let (hello, trap) = (entry("hello"), entry("trap"));
    std::fs::copy(&trap, &hello).unwrap();

    env.send("hello", "two", &[]);
    let log = env.run_until_idle();
    assert!(
        log.contains("compiled-cache entry deleted and compiled again")
            && log.contains(&hello.display().to_string()),
        "{log}"
    );
    assert_eq!(lines_with(&log, "hello from sluice").len(), 1, "{log}");
    assert_eq!(env.count("hello", "done"), 2, "{log}");
    assert_eq!(env.count("hello", "dead"), 0, "{log}");
    assert_ne!(
        std::fs::read(&hello).unwrap(),
        std::fs::read(&trap).unwrap()
    );
}

#[test]
fn corrupt_cache_entry_is_detected_and_rebuilt() {
    let env = Env::new();
    env.deploy("hello", "hello", None);
    env.send("hello", "one", &[]);
    env.run_until_idle();
    let entries: Vec<_> = std::fs::read_dir(env.cache_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(entries.len(), 1, "{entries:?}");
    let entry = &entries[0];
    let mut data = std::fs::read(entry).unwrap();
    let mid = data.len() / 2;
    data[mid] ^= 0xff;
    std::fs::write(entry, &data).unwrap();

    env.send("hello", "two", &[]);
    let start = Instant::now();
    let log = env.run_until_idle();
    assert!(start.elapsed() < Duration::from_secs(30));
    assert!(
        log.contains("compiled-cache entry deleted and compiled again")
            && log.contains("failed its authentication check"),
        "{log}"
    );
    assert_eq!(env.count("hello", "done"), 2);
    // Rebuilt: the next start reads it back without complaint.
    env.send("hello", "three", &[]);
    let log = env.run_until_idle();
    assert!(!log.contains("compiled again"), "{log}");
    assert_ne!(std::fs::read(entry).unwrap(), data);
    assert_eq!(env.count("hello", "done"), 3);
}
