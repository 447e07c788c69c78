//! `sluice new NAME --lang rust|python|js|c [--batch] [--dir D]`: scaffold a
//! handler project that builds as it is, for the `handler` world or, with
//! `--batch`, the `batch-handler` world, on the language's SDK (copied
//! into the project's `sdk/`); Python and JavaScript projects come with a
//! test, in the language's own runner, that builds the handler and calls it
//! through `sluice invoke`.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, bail};
use clap::{Args, ValueEnum};

use super::Context;

mod sdk;

/// The languages `sluice new` scaffolds.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub(crate) enum Lang {
    Rust,
    Python,
    Js,
    C,
}

/// The arguments of `sluice new`.
#[derive(Debug, Args)]
pub(crate) struct NewArgs {
    /// The handler's name: it serves the queue of that name.
    pub(crate) name: String,
    #[arg(long, value_enum)]
    pub(crate) lang: Lang,
    /// A batch handler: `handle-batch` takes up to `batch_size` messages a call.
    #[arg(long)]
    pub(crate) batch: bool,
    /// Where to write the project (default: ./NAME). Must not exist yet, or be empty.
    #[arg(long)]
    pub(crate) dir: Option<PathBuf>,
}

/// The WIT package every project carries.
const WIT: &str = include_str!("../../../wit/handler.wit");

/// (path in the project, template text, executable).
type File = (&'static str, &'static str, bool);

/// The handler's source: the one file that differs between the worlds.
fn source(lang: Lang, batch: bool) -> File {
    match (lang, batch) {
        (Lang::Rust, false) => (
            "src/lib.rs",
            include_str!("../../../templates/rust/src/lib.rs"),
            false,
        ),
        (Lang::Rust, true) => (
            "src/lib.rs",
            include_str!("../../../templates/rust/src/lib_batch.rs"),
            false,
        ),
        (Lang::Python, false) => (
            "app.py",
            include_str!("../../../templates/python/app.py"),
            false,
        ),
        (Lang::Python, true) => (
            "app.py",
            include_str!("../../../templates/python/app_batch.py"),
            false,
        ),
        (Lang::Js, false) => (
            "app.js",
            include_str!("../../../templates/js/app.js"),
            false,
        ),
        (Lang::Js, true) => (
            "app.js",
            include_str!("../../../templates/js/app_batch.js"),
            false,
        ),
        (Lang::C, false) => (
            "handler_impl.c",
            include_str!("../../../templates/c/handler_impl.c"),
            false,
        ),
        (Lang::C, true) => (
            "handler_impl.c",
            include_str!("../../../templates/c/handler_impl_batch.c"),
            false,
        ),
    }
}

/// The project's test of its built handler (through `sluice invoke`),
/// which differs between the worlds as the source does; `None` for a
/// language whose test is among its `files`, or that has none.
fn test(lang: Lang, batch: bool) -> Option<File> {
    match (lang, batch) {
        (Lang::Python, false) => Some((
            "tests/test_{{name}}.py",
            include_str!("../../../templates/python/test_app.py"),
            false,
        )),
        (Lang::Python, true) => Some((
            "tests/test_{{name}}.py",
            include_str!("../../../templates/python/test_app_batch.py"),
            false,
        )),
        (Lang::Js, false) => Some((
            "test/{{name}}.test.mjs",
            include_str!("../../../templates/js/test_app.mjs"),
            false,
        )),
        (Lang::Js, true) => Some((
            "test/{{name}}.test.mjs",
            include_str!("../../../templates/js/test_app_batch.mjs"),
            false,
        )),
        (Lang::Rust | Lang::C, _) => None,
    }
}

/// The rest of the project, the same for both worlds (`{{world}}` in
/// them names it).
fn files(lang: Lang) -> &'static [File] {
    match lang {
        Lang::Rust => RUST_FILES,
        Lang::Python => PYTHON_FILES,
        Lang::Js => JS_FILES,
        Lang::C => C_FILES,
    }
}

/// The Rust project's files besides its source.
const RUST_FILES: &[File] = &[
    (
        "Cargo.toml",
        include_str!("../../../templates/rust/Cargo.toml"),
        false,
    ),
    (
        "build.rs",
        include_str!("../../../templates/rust/build.rs"),
        false,
    ),
    (
        "build.sh",
        include_str!("../../../templates/rust/build.sh"),
        true,
    ),
    (
        "README.md",
        include_str!("../../../templates/rust/README.md"),
        false,
    ),
    (
        "tests/invoke.rs",
        include_str!("../../../templates/rust/tests/invoke.rs"),
        false,
    ),
    (
        "{{name}}.toml",
        include_str!("../../../templates/rust/sidecar.toml"),
        false,
    ),
];

/// The Python project's files besides its source.
const PYTHON_FILES: &[File] = &[
    (
        "build.sh",
        include_str!("../../../templates/python/build.sh"),
        true,
    ),
    (
        "README.md",
        include_str!("../../../templates/python/README.md"),
        false,
    ),
    (
        "{{name}}.toml",
        include_str!("../../../templates/python/sidecar.toml"),
        false,
    ),
];

/// The JavaScript project's files besides its source.
const JS_FILES: &[File] = &[
    (
        "package.json",
        include_str!("../../../templates/js/package.json"),
        false,
    ),
    (
        "build.sh",
        include_str!("../../../templates/js/build.sh"),
        true,
    ),
    (
        // The same patch the repository's JS guests are built with.
        "patch-componentize.mjs",
        include_str!("../../../guests/js/patch-componentize.mjs"),
        false,
    ),
    (
        "README.md",
        include_str!("../../../templates/js/README.md"),
        false,
    ),
    (
        "{{name}}.toml",
        include_str!("../../../templates/js/sidecar.toml"),
        false,
    ),
];

/// The C project's files besides its source.
const C_FILES: &[File] = &[
    (
        "build.sh",
        include_str!("../../../templates/c/build.sh"),
        true,
    ),
    (
        "test.sh",
        include_str!("../../../templates/c/test.sh"),
        true,
    ),
    (
        "README.md",
        include_str!("../../../templates/c/README.md"),
        false,
    ),
    (
        "{{name}}.toml",
        include_str!("../../../templates/c/sidecar.toml"),
        false,
    ),
];

/// Handler names become crate, module, file and queue names: keep them plain.
fn validate_name(name: &str) -> Result<()> {
    let mut chars = name.chars();
    let ok = name.len() <= 64
        && chars.next().is_some_and(|c| c.is_ascii_lowercase())
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if !ok {
        bail!("bad handler name {name:?}: use a lowercase letter, then up to 63 of a-z 0-9 _");
    }
    Ok(())
}

pub(crate) fn new(ctx: &Context, args: NewArgs) -> Result<()> {
    validate_name(&args.name)?;
    let dir = args
        .dir
        .clone()
        .unwrap_or_else(|| PathBuf::from(&args.name));
    if dir.exists()
        && std::fs::read_dir(&dir)
            .map(|mut d| d.next().is_some())
            .unwrap_or(true)
    {
        bail!(
            "{} already exists and is not empty; choose another --dir",
            dir.display()
        );
    }
    let world = if args.batch {
        "batch-handler"
    } else {
        "handler"
    };
    let mut written = Vec::new();
    let source = source(args.lang, args.batch);
    let test = test(args.lang, args.batch);
    let per_world = std::iter::once(&source).chain(&test);
    for (path, text, executable) in per_world.chain(files(args.lang)) {
        let path = path.replace("{{name}}", &args.name);
        let text = text
            .replace("{{name}}", &args.name)
            .replace("{{world}}", world);
        write(&dir.join(&path), &text, *executable)?;
        written.push(path);
    }
    write(&dir.join("wit/handler.wit"), WIT, false)?;
    written.push("wit/handler.wit".into());
    for (path, text) in sdk::files(args.lang) {
        let path = format!("sdk/{path}");
        write(&dir.join(&path), text, false)?;
        written.push(path);
    }
    if ctx.json {
        return super::print_json(&serde_json::json!({ "dir": dir, "files": written }));
    }
    outln!(
        "created {} ({:?} handler {}, world {world}):",
        dir.display(),
        args.lang,
        args.name
    );
    for f in &written {
        outln!("  {f}");
    }
    outln!(
        "build it with {}/build.sh; it writes {}.wasm",
        dir.display(),
        args.name
    );
    Ok(())
}

fn write(path: &Path, text: &str, executable: bool) -> Result<()> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("cannot create {}", parent.display()))?;
    }
    std::fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))?;
    if executable {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))
            .with_context(|| format!("cannot make {} executable", path.display()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert!(validate_name("orders_v2").is_ok());
        assert!(validate_name("Orders").is_err());
        assert!(validate_name("2fast").is_err());
        assert!(
            validate_name("a-b")
                .unwrap_err()
                .to_string()
                .contains("a-b")
        );
    }
}
