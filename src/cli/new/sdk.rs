//! The handler SDK a new project is built on: a copy of the repository's
//! `sdk/LANG/`, written into the project's `sdk/` as it is (no names are
//! filled in), where the project's build finds it. Only what a build
//! needs: the SDK's own tests and check scripts stay in the repository
//! (a unit test below holds each list to its directory).

use super::Lang;

/// (path under the project's `sdk/`, text).
pub(super) type SdkFile = (&'static str, &'static str);

/// The SDK files of `lang`.
pub(super) fn files(lang: Lang) -> &'static [SdkFile] {
    match lang {
        Lang::Rust => RUST,
        Lang::Python => PYTHON,
        Lang::Js => JS,
        Lang::C => C,
    }
}

macro_rules! sdk_files {
    ($lang:literal: $($path:literal),* $(,)?) => {
        &[$(($path, include_str!(concat!("../../../sdk/", $lang, "/", $path)))),*]
    };
}

const RUST: &[SdkFile] = sdk_files!("rust":
    "Cargo.toml",
    "README.md",
    "wit/handler.wit",
    "src/lib.rs",
    "src/config.rs",
    "src/export.rs",
    "src/host.rs",
    "src/kv.rs",
    "src/lease.rs",
    "src/log.rs",
    "src/message.rs",
    "src/outcome.rs",
    "src/publish.rs",
    "src/testing.rs",
    "examples/hello.rs",
    "examples/hello_batch.rs",
);

const PYTHON: &[SdkFile] = sdk_files!("python":
    "pyproject.toml",
    "README.md",
    "src/sluice/__init__.py",
    "src/sluice/_errors.py",
    "src/sluice/_handler.py",
    "src/sluice/_message.py",
    "src/sluice/_outcome.py",
    "src/sluice/_publish.py",
    "src/sluice/_time.py",
    "src/sluice/config.py",
    "src/sluice/kv.py",
    "src/sluice/lease.py",
    "src/sluice/log.py",
    "src/sluice/py.typed",
    "src/wit_world-stubs/__init__.pyi",
    "src/wit_world-stubs/imports/__init__.pyi",
    "src/wit_world-stubs/imports/config.pyi",
    "src/wit_world-stubs/imports/kv.pyi",
    "src/wit_world-stubs/imports/lease.pyi",
    "src/wit_world-stubs/imports/log.pyi",
    "src/wit_world-stubs/imports/publish.pyi",
    "src/wit_world-stubs/imports/types.pyi",
    "src/componentize_py_types-stubs/__init__.pyi",
);

const JS: &[SdkFile] = sdk_files!("js":
    "README.md",
    "package.json",
    "index.d.ts",
    "wit.d.ts",
    "src/duration.js",
    "src/handler.js",
    "src/host.js",
    "src/index.js",
    "src/message.js",
    "src/outcome.js",
    "src/show.js",
);

const C: &[SdkFile] = sdk_files!("c": "sluice.h", "README.md");

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::path::Path;

    use super::*;

    /// Whether a file of the SDK is one a project's build needs: not its
    /// tests, its check script or the tools they install.
    fn needed_by_a_build(path: &str) -> bool {
        let first = path.split('/').next().unwrap_or("");
        !matches!(
            first,
            "test"
                | "tests"
                | "check"
                | "node_modules"
                | "target"
                | "__pycache__"
                | ".venv"
                | ".gitignore"
        ) && !path.ends_with("package-lock.json")
            && !path.ends_with("Cargo.lock")
            && !path.starts_with("requirements-")
            && !path.starts_with("tsconfig")
            && !path.contains("__pycache__")
    }

    fn under(dir: &Path, root: &Path, out: &mut BTreeSet<String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let rel = path
                .strip_prefix(root)
                .unwrap()
                .to_str()
                .unwrap()
                .to_string();
            if !needed_by_a_build(&rel) {
                continue;
            }
            if path.is_dir() {
                under(&path, root, out);
            } else {
                out.insert(rel);
            }
        }
    }

    /// Every file of each SDK that a build needs is copied, and nothing else.
    #[test]
    fn a_project_gets_the_whole_sdk() {
        for (lang, name) in [
            (Lang::Rust, "rust"),
            (Lang::Python, "python"),
            (Lang::Js, "js"),
            (Lang::C, "c"),
        ] {
            let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("sdk").join(name);
            let mut want = BTreeSet::new();
            under(&root, &root, &mut want);
            let got: BTreeSet<String> = files(lang).iter().map(|(p, _)| p.to_string()).collect();
            assert_eq!(got, want, "sdk/{name}");
        }
    }
}
