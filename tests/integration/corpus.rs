//! The inputs kept in `tests/corpus/`, run on every test run: each file or
//! line is what a user or another program might hand sluice, named for what
//! sluice must make of it. The proptest targets beside each parser in `src/`
//! try random inputs for a bounded time; an input that once broke one goes
//! here, so it is tried on every run from then on. (Failures proptest finds
//! are also written to `proptest-regressions/` and replayed first.)

use std::path::{Path, PathBuf};

use sluice::testkit::config::{HandlerSpec, HostConfig};

fn corpus(part: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/corpus")
        .join(part)
}

/// The files of a corpus directory, sorted, and what each says a refusal
/// must contain (its `# expect:` first line), or `None` for an `ok-` file.
fn files(part: &str) -> Vec<(PathBuf, Option<String>)> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(corpus(part))
        .unwrap_or_else(|e| panic!("tests/corpus/{part}: {e}"))
        .map(|e| e.unwrap().path())
        .collect();
    paths.sort();
    assert!(paths.len() >= 5, "tests/corpus/{part} is missing files");
    paths
        .into_iter()
        .map(|path| {
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            let text = std::fs::read_to_string(&path).unwrap();
            let expect = if name.starts_with("ok-") {
                None
            } else {
                assert!(name.starts_with("bad-"), "{name}: name it ok-* or bad-*");
                let first = text.lines().next().unwrap_or_default();
                let want = first
                    .strip_prefix("# expect: ")
                    .unwrap_or_else(|| panic!("{name}: a bad- file starts with `# expect: TEXT`"));
                Some(want.to_string())
            };
            (path, expect)
        })
        .collect()
}

/// Check `result` against what the file's name says: accepted, or refused
/// with one line that names the file and holds the expected text. What is
/// wrong, if anything.
fn judge<T>(path: &Path, expect: Option<&str>, result: anyhow::Result<T>) -> Option<String> {
    let name = path.file_name().unwrap().to_string_lossy();
    match (expect, result) {
        (None, Ok(_)) => None,
        (None, Err(e)) => Some(format!("{name} was refused: {e:#}")),
        (Some(_), Ok(_)) => Some(format!("{name} was accepted")),
        (Some(want), Err(e)) => {
            let text = format!("{e:#}");
            let one_line_naming = text.contains(&*name) && !text.contains('\n');
            (!one_line_naming || !text.contains(want))
                .then(|| format!("{name}: expected one line naming the file with {want:?}: {text}"))
        }
    }
}

/// Every file of a corpus directory judged by `read`; all that are wrong
/// are reported at once.
fn judge_all<T>(part: &str, read: impl Fn(&Path) -> anyhow::Result<T>) {
    let wrong: Vec<String> = files(part)
        .into_iter()
        .filter_map(|(path, expect)| judge(&path, expect.as_deref(), read(&path)))
        .collect();
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn the_corpus_of_sidecars_is_read_as_each_name_says() {
    judge_all("sidecars", |path| HandlerSpec::load("h", path));
}

#[test]
fn the_corpus_of_host_configs_is_read_as_each_name_says() {
    judge_all("hosts", HostConfig::load);
}

#[test]
fn the_corpus_of_names_is_judged_as_each_line_says() {
    let text = std::fs::read_to_string(corpus("names.txt")).unwrap();
    let mut checked = 0;
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let mut parts = line.splitn(3, ' ');
        let (kind, verdict, name) = (
            parts.next().unwrap(),
            parts
                .next()
                .unwrap_or_else(|| panic!("{line:?}: KIND ok|bad NAME")),
            parts.next().unwrap_or_default(),
        );
        let got = match kind {
            "queue" => sluice::broker::message::validate_queue_name(name),
            "topic" => sluice::broker::topic::validate_topic_name(name),
            "route" => sluice::broker::topic::validate_route(name),
            "pattern" => sluice::broker::topic::validate_pattern(name),
            other => panic!("{line:?}: unknown kind {other}"),
        };
        match verdict {
            "ok" => assert!(got.is_ok(), "{kind} {name:?} refused: {}", got.unwrap_err()),
            "bad" => {
                let e = got
                    .err()
                    .unwrap_or_else(|| panic!("{kind} {name:?} accepted"));
                assert!(!e.is_empty(), "{kind} {name:?}: an empty error");
            }
            other => panic!("{line:?}: verdict {other} is not ok or bad"),
        }
        checked += 1;
    }
    assert!(checked >= 30, "only {checked} names in the corpus");
}

#[test]
fn the_corpus_of_stored_headers_decodes_and_encodes_back() {
    use sluice_broker::testkit::codec::{decode_headers, encode_headers};

    let text = std::fs::read_to_string(corpus("stored-headers.txt")).unwrap();
    let corpus: Vec<&str> = text.lines().filter_map(|l| l.strip_prefix("> ")).collect();
    assert!(corpus.len() >= 10);
    for stored in corpus {
        let headers = decode_headers(stored.as_bytes());
        // What was read is written and read back the same.
        let again =
            encode_headers(&headers).map_or_else(Vec::new, |t| decode_headers(t.as_bytes()));
        assert_eq!(again, headers, "{stored:?}");
    }
}
