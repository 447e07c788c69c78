//! The shape of the source tree, which the compiler does not check: in each
//! crate of the workspace, the top-level modules import each other without a
//! cycle, and every broker backend has the same file for each role. `scripts/structure`
//! prints the same graph, and more, for a person to read.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The host crate's sources.
fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// The broker crate's sources.
fn broker_src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("crates/sluice-broker/src")
}

/// Every crate of the workspace, by the folder of its sources: the root
/// package's `src/` and each `crates/*/src`.
fn crate_sources() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut found = vec![src()];
    for entry in std::fs::read_dir(root.join("crates")).unwrap() {
        let dir = entry.unwrap().path().join("src");
        if dir.is_dir() {
            found.push(dir);
        }
    }
    found.sort();
    found
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Each line's code, without `//` comments and without what follows the
/// file's first `#[cfg(test)]` (tests may use anything).
fn code(text: &str) -> String {
    let before_tests = text.split("#[cfg(test)]").next().unwrap_or_default();
    before_tests
        .lines()
        .map(|l| l.split("//").next().unwrap_or_default())
        .collect::<Vec<_>>()
        .join("\n")
}

/// The top-level modules named through `crate::` in `code`, as
/// `crate::name` or inside `crate::{a, b::c}`.
fn named_modules(code: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let ident = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    for (i, _) in code.match_indices("crate::") {
        let rest = &code[i + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            for item in top_level_items(group) {
                let name = ident(item.trim());
                if !name.is_empty() {
                    found.insert(name);
                }
            }
        } else {
            found.insert(ident(rest));
        }
    }
    found
}

/// The items of a `use` group that `group` starts just inside of (after its
/// `{`), split at its own commas: `a::{B, C}, d` is `a::{B, C}` and `d`.
fn top_level_items(group: &str) -> Vec<&str> {
    let (mut items, mut depth, mut start) = (Vec::new(), 1, 0);
    for (j, ch) in group.char_indices() {
        match ch {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    items.push(&group[start..j]);
                    break;
                }
            }
            ',' if depth == 1 => {
                items.push(&group[start..j]);
                start = j + 1;
            }
            _ => {}
        }
    }
    items
}

#[test]
fn a_use_group_is_split_at_its_own_commas_only() {
    let found = named_modules("use crate::{broker::{Queue, Settlement}, config::Spec, message};");
    let names: Vec<&str> = found.iter().map(String::as_str).collect();
    assert_eq!(names, ["broker", "config", "message"]);
}

/// The module graph of one crate's sources: each top-level module and those
/// it names.
fn module_graph(root: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut files = Vec::new();
    rust_files(root, &mut files);
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in files {
        let rel = file.strip_prefix(root).unwrap();
        let first = rel.components().next().unwrap().as_os_str();
        let module = first.to_str().unwrap().trim_end_matches(".rs").to_string();
        if module == "lib" || module == "main" {
            continue;
        }
        let text = std::fs::read_to_string(&file).unwrap();
        let deps = graph.entry(module.clone()).or_default();
        deps.extend(named_modules(&code(&text)));
        deps.remove(&module);
    }
    let modules: BTreeSet<String> = graph.keys().cloned().collect();
    for deps in graph.values_mut() {
        deps.retain(|d| modules.contains(d));
    }
    graph
}

/// A cycle through `start`, if there is one: the path back to it.
fn cycle_from(graph: &BTreeMap<String, BTreeSet<String>>, start: &str) -> Option<Vec<String>> {
    let mut stack = vec![(start.to_string(), vec![start.to_string()])];
    let mut seen = BTreeSet::new();
    while let Some((at, path)) = stack.pop() {
        for next in &graph[&at] {
            if next == start {
                let mut cycle = path.clone();
                cycle.push(next.clone());
                return Some(cycle);
            }
            if seen.insert(next.clone()) {
                let mut longer = path.clone();
                longer.push(next.clone());
                stack.push((next.clone(), longer));
            }
        }
    }
    None
}

#[test]
fn the_modules_of_each_crate_import_each_other_without_a_cycle() {
    let roots = crate_sources();
    assert!(
        roots.contains(&broker_src()),
        "no broker crate in {roots:?}"
    );
    let host = module_graph(&src());
    assert!(
        host.len() > 15 && host["worker"].contains("runtime"),
        "the host's graph was not read: {host:?}"
    );
    let broker = module_graph(&broker_src());
    assert!(
        broker.len() > 10 && broker["sqlite"].contains("message"),
        "the broker's graph was not read: {broker:?}"
    );
    for root in roots {
        let graph = module_graph(&root);
        let cycles: Vec<String> = graph
            .keys()
            .filter_map(|m| cycle_from(&graph, m))
            .map(|c| c.join(" -> "))
            .collect();
        assert!(
            cycles.is_empty(),
            "import cycles in {}: {cycles:#?}",
            root.display()
        );
    }
}

#[test]
fn the_cycle_check_finds_a_cycle() {
    let mut graph = BTreeMap::new();
    graph.insert("a".to_string(), BTreeSet::from(["b".to_string()]));
    graph.insert("b".to_string(), BTreeSet::from(["a".to_string()]));
    graph.insert("c".to_string(), BTreeSet::from(["a".to_string()]));
    assert_eq!(cycle_from(&graph, "a").unwrap(), ["a", "b", "a"]);
    assert!(cycle_from(&graph, "c").is_none());
    let names = named_modules("use crate::broker::{A, B};\nuse crate::{topic, message::M};");
    assert_eq!(
        names,
        BTreeSet::from(["broker".to_string(), "topic".into(), "message".into()])
    );
}

#[test]
fn every_broker_backend_implements_each_role_in_its_own_file() {
    let roles = [
        ("queue.rs", "Queue"),
        ("dead.rs", "DeadLetters"),
        ("presence.rs", "Presence"),
        ("kv.rs", "KvStore"),
        ("topics.rs", "TopicStore"),
        ("schedules.rs", "Schedules"),
    ];
    let broker = broker_src();
    let mut backends = Vec::new();
    for entry in std::fs::read_dir(&broker).unwrap() {
        let dir = entry.unwrap().path();
        // Every folder is a backend but the testkit (servers and the
        // conformance suite, behind the feature `testkit`).
        if !dir.is_dir() || dir.ends_with("testkit") {
            continue;
        }
        for (file, role) in roles {
            let path = dir.join(file);
            let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
                panic!(
                    "{}: {e}; every backend has one file per role",
                    path.display()
                )
            });
            assert!(
                text.contains(&format!("impl {role} for ")),
                "{} does not implement the {role} role",
                path.display()
            );
        }
        backends.push(dir.file_name().unwrap().to_string_lossy().into_owned());
    }
    for known in ["sqlite", "redis", "postgres"] {
        assert!(
            backends.iter().any(|b| b == known),
            "no {known} in {backends:?}"
        );
    }
}

/// The crates `cargo tree` lists under the broker crate built with
/// `features` alone (normal and build dependencies).
fn broker_tree(features: &str) -> String {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = std::process::Command::new(cargo)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(["tree", "--locked", "--offline", "-p", "sluice-broker"])
        .args(["--no-default-features", "--features", features])
        .args(["-e", "normal,build", "--prefix", "none"])
        .output()
        .expect("cargo tree runs");
    assert!(
        out.status.success(),
        "cargo tree: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn an_application_that_only_publishes_builds_without_the_runtime() {
    for features in ["sqlite", "redis", "postgres"] {
        let tree = broker_tree(features);
        assert!(
            tree.lines().any(|l| l.starts_with("sluice-broker ")),
            "the tree was not read: {tree}"
        );
        for heavy in ["wasmtime", "cranelift", "axum", "sluice "] {
            let found: Vec<&str> = tree.lines().filter(|l| l.starts_with(heavy)).collect();
            assert!(
                found.is_empty(),
                "sluice-broker with {features} depends on {found:?}: the runtime's crates belong to the host crate"
            );
        }
    }
    // The backends are features: the sqlite build has no Redis client.
    let sqlite = broker_tree("sqlite");
    assert!(
        sqlite.lines().any(|l| l.starts_with("rusqlite ")),
        "{sqlite}"
    );
    assert!(!sqlite.lines().any(|l| l.starts_with("redis ")), "{sqlite}");
    assert!(
        !sqlite.lines().any(|l| l.starts_with("tokio-postgres ")),
        "{sqlite}"
    );
}
