//! The shape of the source tree, which the compiler does not check: in each
//! crate of the workspace, the modules of every folder (the crate's root
//! included) import each other without a cycle, and every broker backend
//! has the same file for each role. `scripts/structure`
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

/// A module's path, as `Vec<String>` from the crate's root.
type ModPath = Vec<String>;

/// The module a file is: `redis/queue.rs` is `[redis, queue]`,
/// `redis/mod.rs` and `redis.rs` are `[redis]`, `lib.rs` is `[]`.
fn module_path(root: &Path, file: &Path) -> ModPath {
    let rel = file.strip_prefix(root).unwrap().with_extension("");
    let mut parts: ModPath = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if parts.last().is_some_and(|p| p == "mod") || parts == ["lib"] || parts == ["main"] {
        parts.pop();
    }
    parts
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

/// The paths that a path written at the start of `text` names, its groups
/// expanded: `a::{b, c::D}` is `[a, b]` and `[a, c, D]`.
fn use_tree(text: &str) -> Vec<ModPath> {
    let mut segments = ModPath::new();
    let mut rest = text;
    loop {
        let trimmed = rest.trim_start();
        let ident: String = trimmed
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        if !ident.is_empty() {
            segments.push(ident.clone());
            rest = &trimmed[ident.len()..];
            match rest.strip_prefix("::") {
                Some(after) => rest = after,
                None => return vec![segments],
            }
        } else if let Some(group) = trimmed.strip_prefix('{') {
            let mut out = Vec::new();
            for item in top_level_items(group) {
                for tail in use_tree(item) {
                    let mut path = segments.clone();
                    if tail != ["self"] {
                        path.extend(tail);
                    }
                    out.push(path);
                }
            }
            return out;
        } else {
            return vec![segments];
        }
    }
}

/// Every path `code` names through `crate::`, `super::` and `self::`,
/// resolved from the module `at`, from the crate's root.
fn named_paths(code: &str, at: &[String]) -> Vec<ModPath> {
    let mut found = Vec::new();
    let bytes = code.as_bytes();
    let mut i = 0;
    while i < code.len() {
        let starts_word =
            i == 0 || !(bytes[i - 1].is_ascii_alphanumeric() || b"_:".contains(&bytes[i - 1]));
        let rest = &code[i..];
        let base: Option<(ModPath, usize)> = if !starts_word {
            None
        } else if rest.starts_with("crate::") {
            Some((Vec::new(), "crate::".len()))
        } else if rest.starts_with("self::") {
            Some((at.to_vec(), "self::".len()))
        } else if rest.starts_with("super::") {
            let step = "super::".len();
            let ups = (0..)
                .take_while(|n| rest[n * step..].starts_with("super::"))
                .count();
            Some((at[..at.len().saturating_sub(ups)].to_vec(), ups * step))
        } else {
            None
        };
        match base {
            Some((base, len)) => {
                for tail in use_tree(&rest[len..]) {
                    let mut path = base.clone();
                    path.extend(tail);
                    found.push(path);
                }
                i += len;
            }
            None => i += rest.chars().next().map_or(1, char::len_utf8),
        }
    }
    found
}

/// The module graphs of one crate's sources: for each folder module (`[]`
/// for the crate's root), which of its child modules name which. A file
/// that names a path outside its own module adds an edge where the two
/// part: `redis/queue.rs` naming `crate::redis::relay::X` is `queue ->
/// relay` in the folder `[redis]`.
fn module_graphs(root: &Path) -> BTreeMap<ModPath, BTreeMap<String, BTreeSet<String>>> {
    let files: Vec<(PathBuf, ModPath)> = crate::support::files_under(root, "rs")
        .into_iter()
        .map(|f| {
            let at = module_path(root, &f);
            (f, at)
        })
        .collect();
    let mut graphs: BTreeMap<ModPath, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    for (_, at) in &files {
        for k in 0..at.len() {
            graphs
                .entry(at[..k].to_vec())
                .or_default()
                .entry(at[k].clone())
                .or_default();
        }
    }
    for (file, at) in &files {
        let text = std::fs::read_to_string(file).unwrap();
        for named in named_paths(&code(&text), at) {
            let k = at.iter().zip(&named).take_while(|(a, b)| a == b).count();
            if k < at.len() && k < named.len() {
                let siblings = graphs.get_mut(&at[..k]).unwrap();
                if siblings.contains_key(&named[k]) {
                    siblings.get_mut(&at[k]).unwrap().insert(named[k].clone());
                }
            }
        }
    }
    graphs
}

#[test]
fn a_use_group_is_split_at_its_own_commas_only() {
    let at = ["worker".to_string(), "call".to_string()];
    let found = named_paths(
        "use crate::{broker::{Queue, Settlement}, config::Spec, message};\nuse super::{self, keep::K};\nuse super::super::cli;",
        &at,
    );
    let shown: Vec<String> = found.iter().map(|p| p.join("::")).collect();
    assert_eq!(
        shown,
        [
            "broker::Queue",
            "broker::Settlement",
            "config::Spec",
            "message",
            "worker",
            "worker::keep::K",
            "cli"
        ]
    );
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
fn the_modules_in_every_folder_of_each_crate_import_each_other_without_a_cycle() {
    let roots = crate_sources();
    assert!(
        roots.contains(&broker_src()),
        "no broker crate in {roots:?}"
    );
    let host = module_graphs(&src());
    assert!(
        host[&vec![]].len() > 3 && host.len() > 5,
        "the host's graphs were not read: {host:?}"
    );
    let broker = module_graphs(&broker_src());
    assert!(
        broker[&vec![]]["sqlite"].contains("message")
            && broker[&vec!["redis".to_string()]]["queue"].contains("codec"),
        "the broker's graphs were not read: {broker:?}"
    );
    for root in roots {
        for (folder, graph) in module_graphs(&root) {
            let cycles: Vec<String> = graph
                .keys()
                .filter_map(|m| cycle_from(&graph, m))
                .map(|c| c.join(" -> "))
                .collect();
            assert!(
                cycles.is_empty(),
                "import cycles in {}/{}: {cycles:#?}",
                root.display(),
                folder.join("/")
            );
        }
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
