//! The book in `docs/` and the README, checked without a network:
//!
//! - every relative link of `README.md` and of the book's pages points at a
//!   file that exists and, with a `#fragment`, at a heading of that file
//!   (by mdBook's rule for heading ids); a book page links only inside the
//!   book, and every page is in `SUMMARY.md`;
//! - the README stays a front page of at most 200 lines;
//! - the configuration reference names exactly the fields the config parser
//!   accepts, each with its default, and its examples parse.
//!
//! `scripts/test` builds the book with mdBook too; `scripts/book` builds it
//! for reading.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::path::{Component, Path, PathBuf};

use sluice::testkit::config::{HandlerSpec, HostConfig, parse_toml};

/// The README is a front page, not a manual.
const README_MAX_LINES: usize = 200;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn book_src() -> PathBuf {
    root().join("docs/src")
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// `path` relative to the repository, for messages.
fn shown(path: &Path) -> String {
    path.strip_prefix(root())
        .unwrap_or(path)
        .display()
        .to_string()
}

/// The book's pages: every `.md` file under `docs/src`, sorted.
fn book_pages() -> Vec<PathBuf> {
    let pages = crate::support::files_under(&book_src(), "md");
    assert!(pages.len() > 5, "docs/src holds too few pages: {pages:?}");
    pages
}

/// The Markdown outside fenced code blocks, with inline code spans blanked
/// (so `[a](b)` written as code is not a link), one entry per line.
fn prose_lines(text: &str) -> Vec<String> {
    let mut kept = Vec::new();
    let mut fenced = false;
    for line in text.lines() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("```") || trimmed.starts_with("~~~") {
            fenced = !fenced;
            kept.push(String::new());
        } else if fenced {
            kept.push(String::new());
        } else {
            kept.push(line.to_string());
        }
    }
    let joined = blank_code_spans(&kept.join("\n"));
    joined.split('\n').map(str::to_string).collect()
}

/// `text` with the content of every code span replaced by spaces (line
/// breaks kept). A span opens with a run of backticks and closes with a run
/// of the same length.
fn blank_code_spans(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < chars.len() {
        if chars[i] != '`' {
            out.push(chars[i]);
            i += 1;
            continue;
        }
        let run = chars[i..].iter().take_while(|&&c| c == '`').count();
        let close = (i + run..chars.len()).find(|&j| {
            chars[j..].iter().take_while(|&&c| c == '`').count() == run
                && (j == 0 || chars[j - 1] != '`')
        });
        let Some(close) = close else {
            out.extend(&chars[i..i + run]);
            i += run;
            continue;
        };
        for &c in &chars[i..close + run] {
            out.push(if c == '\n' { '\n' } else { ' ' });
        }
        i = close + run;
    }
    out
}

/// The targets of the inline links and images of `text` (`[t](target)`,
/// `![alt](target)`), with the 1-based line of each.
fn links(text: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    for (n, line) in prose_lines(text).iter().enumerate() {
        let mut rest = line.as_str();
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let end = after.find([')', ' ']).unwrap_or(after.len());
            found.push((n + 1, after[..end].to_string()));
            rest = &after[end..];
        }
    }
    found
}

/// The id mdBook gives a heading with this text (mdbook-html's
/// `id_from_content`): lowercase; letters, digits, `_` and `-` kept; each
/// whitespace character a `-`; everything else dropped.
fn heading_id(text: &str) -> String {
    text.trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            c if c.is_alphanumeric() || c == '_' || c == '-' => Some(c),
            c if c.is_whitespace() => Some('-'),
            _ => None,
        })
        .collect()
}

/// A heading's text as rendered: code spans keep their content, a link its
/// text, emphasis loses its stars.
fn heading_text(raw: &str) -> String {
    let mut text = raw
        .trim()
        .trim_end_matches('#')
        .trim()
        .replace(['`', '*'], "");
    while let (Some(open), Some(mid)) = (text.find('['), text.find("](")) {
        let Some(close) = text[mid..].find(')').map(|c| mid + c) else {
            break;
        };
        if open > mid {
            break;
        }
        text = format!(
            "{}{}{}",
            &text[..open],
            &text[open + 1..mid],
            &text[close + 1..]
        );
    }
    text
}

/// The ATX headings of `text` outside code: (level, text as rendered).
fn headings(text: &str) -> Vec<(usize, String)> {
    let mut fenced = false;
    let mut found = Vec::new();
    for line in text.lines() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("```") || trimmed.starts_with("~~~") {
            fenced = !fenced;
            continue;
        }
        let level = line.chars().take_while(|&c| c == '#').count();
        if fenced || !(1..=6).contains(&level) || !line[level..].starts_with(' ') {
            continue;
        }
        found.push((level, heading_text(&line[level..])));
    }
    found
}

/// The anchors a page has: its headings' ids, made unique as mdBook does
/// (`id`, `id-1`, `id-2`, ...).
fn anchors(text: &str) -> HashSet<String> {
    let mut used = HashSet::new();
    for (_, heading) in headings(text) {
        let id = heading_id(&heading);
        let unique = (0..)
            .map(|n| {
                if n == 0 {
                    id.clone()
                } else {
                    format!("{id}-{n}")
                }
            })
            .find(|candidate| !used.contains(candidate))
            .unwrap();
        used.insert(unique);
    }
    used
}

/// `path` with `.` and `..` resolved, without touching the file system.
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// What is wrong with the relative links of `file`, one line each. A book
/// page (`inside` set) must not link out of `docs/src`: mdBook renders only
/// the book, so such a link is broken on the rendered page.
fn broken_links(file: &Path, inside: Option<&Path>) -> Vec<String> {
    let text = read(file);
    let mut wrong = Vec::new();
    for (line, target) in links(&text) {
        if target.contains("://") || target.starts_with("mailto:") {
            continue;
        }
        let at = format!("{}:{line}: link `{target}`", shown(file));
        let (path, fragment) = target.split_once('#').unwrap_or((&target, ""));
        let dest = if path.is_empty() {
            file.to_path_buf()
        } else {
            normalize(&file.parent().unwrap().join(path))
        };
        if let Some(book) = inside
            && !dest.starts_with(book)
        {
            wrong.push(format!(
                "{at} leaves the book (docs/src); name the file in backticks instead"
            ));
        } else if !dest.exists() {
            wrong.push(format!("{at}: {} does not exist", shown(&dest)));
        } else if !fragment.is_empty()
            && dest.extension().is_some_and(|e| e == "md")
            && !anchors(&read(&dest)).contains(fragment)
        {
            wrong.push(format!(
                "{at}: {} has no heading whose id is `{fragment}`",
                shown(&dest)
            ));
        }
    }
    wrong
}

#[test]
fn every_relative_link_of_the_readme_and_the_book_leads_somewhere() {
    let book = book_src();
    let mut wrong = broken_links(&root().join("README.md"), None);
    for page in book_pages() {
        wrong.extend(broken_links(&page, Some(&book)));
    }
    assert!(wrong.is_empty(), "broken links:\n{}", wrong.join("\n"));
}

#[test]
fn every_page_of_the_book_is_in_its_summary() {
    let summary = book_src().join("SUMMARY.md");
    let listed: BTreeSet<PathBuf> = links(&read(&summary))
        .into_iter()
        .map(|(_, target)| normalize(&book_src().join(target)))
        .collect();
    let unlisted: Vec<String> = book_pages()
        .into_iter()
        .filter(|page| *page != summary && !listed.contains(page))
        .map(|page| shown(&page))
        .collect();
    assert!(
        unlisted.is_empty(),
        "pages mdBook would not render: add them to docs/src/SUMMARY.md: {unlisted:?}"
    );
}

#[test]
fn the_readme_is_a_front_page_of_at_most_200_lines() {
    let lines = read(&root().join("README.md")).lines().count();
    assert!(
        lines <= README_MAX_LINES,
        "README.md has {lines} lines, over {README_MAX_LINES}: move the detail into the book (docs/src) and link to it"
    );
}

/// A key no config table has: the parser's refusal of it lists the keys the
/// table accepts.
const PROBE: &str = "sluice_book_probe";

/// The fields a table accepts, from the parser's refusal of `PROBE` in
/// `doc`; `None` when `doc` does not make the parser list them (the place
/// is not a table of fields).
fn accepted(parse: &dyn Fn(&str) -> Result<(), String>, doc: &str) -> Option<BTreeSet<String>> {
    let error = parse(doc).err()?;
    let unknown = format!("unknown field `{PROBE}`");
    let at = error.find(&unknown)?;
    let rest = &error[at + unknown.len()..];
    // "..., expected one of `a`, `b`", "expected `a` or `b`", or "there are no fields".
    Some(
        rest.split('`')
            .skip(1)
            .step_by(2)
            .map(str::to_string)
            .collect(),
    )
}

/// The TOML headers that put a key at `path`: `[[a]]` for each array of
/// tables on the way (the last element is the one a later header extends),
/// then the table itself.
fn header(path: &[(String, bool)]) -> String {
    let mut doc = String::new();
    for i in 0..path.len() {
        let name: Vec<&str> = path[..=i].iter().map(|(n, _)| n.as_str()).collect();
        let (is_array, last) = (path[i].1, i + 1 == path.len());
        if is_array {
            doc += &format!("[[{}]]\n", name.join("."));
        } else if last {
            doc += &format!("[{}]\n", name.join("."));
        }
    }
    doc
}

/// Every field the parser accepts, as `table.field` (or `field` at the top
/// level). A field that is a table of fields, or an array of such tables,
/// is replaced by its own fields; any other field (a value, a list, a table
/// of free keys such as `[config]`) is one field.
fn parser_fields(parse: &dyn Fn(&str) -> Result<(), String>) -> BTreeSet<String> {
    fn walk(
        parse: &dyn Fn(&str) -> Result<(), String>,
        path: Vec<(String, bool)>,
        fields: BTreeSet<String>,
        out: &mut BTreeSet<String>,
    ) {
        for field in fields {
            let mut inner = None;
            for is_array in [false, true] {
                let mut sub = path.clone();
                sub.push((field.clone(), is_array));
                if let Some(found) = accepted(parse, &format!("{}{PROBE} = 1\n", header(&sub))) {
                    inner = Some((sub, found));
                    break;
                }
            }
            match inner {
                Some((sub, found)) => walk(parse, sub, found, out),
                None => {
                    let mut name: Vec<String> = path.iter().map(|(n, _)| n.clone()).collect();
                    name.push(field);
                    out.insert(name.join("."));
                }
            }
        }
    }
    let top = accepted(parse, &format!("{PROBE} = 1\n"))
        .expect("the parser refuses unknown top-level fields, listing the accepted ones");
    let mut out = BTreeSet::new();
    walk(parse, Vec::new(), top, &mut out);
    out
}

/// The fields a reference page documents: each level-3 heading is one
/// field's name in backticks. What is wrong with the page's shape, too.
fn documented_fields(page: &Path) -> (BTreeMap<String, String>, Vec<String>) {
    let text = read(page);
    let mut fields = BTreeMap::new();
    let mut wrong = Vec::new();
    let mut current: Option<String> = None;
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        }
        let level = line.chars().take_while(|&c| c == '#').count();
        if !fenced && (1..=3).contains(&level) && line[level..].starts_with(' ') {
            current = None;
            if level == 3 {
                let name = line[4..].trim();
                match name.strip_prefix('`').and_then(|n| n.strip_suffix('`')) {
                    Some(n) if !n.contains('`') => current = Some(n.to_string()),
                    _ => wrong.push(format!(
                        "{}: the heading {line:?} is not one field in backticks, like ### `limits.timeout`",
                        shown(page)
                    )),
                }
                if let Some(name) = &current {
                    fields.insert(name.clone(), String::new());
                }
            }
        } else if let Some(name) = &current {
            let body = fields.get_mut(name).unwrap();
            body.push_str(line);
            body.push('\n');
        }
    }
    (fields, wrong)
}

/// What differs between the fields the parser accepts and those `page`
/// documents, one line each, naming the file to edit.
fn drift(what: &str, parse: &dyn Fn(&str) -> Result<(), String>, page: &Path) -> Vec<String> {
    let accepted = parser_fields(parse);
    let (documented, mut wrong) = documented_fields(page);
    let page = shown(page);
    for field in accepted.iter().filter(|f| !documented.contains_key(*f)) {
        wrong.push(format!(
            "the {what} parser accepts `{field}`, which {page} does not document: add a heading ### `{field}` there, with what it does, its default and its bounds"
        ));
    }
    for field in documented.keys().filter(|f| !accepted.contains(*f)) {
        wrong.push(format!(
            "{page} documents `{field}`, which the {what} parser refuses: remove it from {page}, or fix its name"
        ));
    }
    for (field, body) in &documented {
        if !body.lines().any(|l| l.starts_with("- Default:")) {
            wrong.push(format!("{page}: `{field}` has no `- Default:` line"));
        }
    }
    wrong
}

fn parse_host(text: &str) -> Result<(), String> {
    let config: HostConfig =
        parse_toml(Path::new("sluice.toml"), text).map_err(|e| format!("{e:#}"))?;
    config.validate().map_err(|e| format!("{e:#}"))
}

fn parse_sidecar(text: &str) -> Result<(), String> {
    HandlerSpec::parse("probe", Path::new("probe.toml"), text)
        .map(|_| ())
        .map_err(|e| format!("{e:#}"))
}

#[test]
fn the_configuration_reference_names_exactly_the_fields_the_parser_accepts() {
    let mut wrong = drift(
        "sluice.toml",
        &parse_host,
        &book_src().join("config-host.md"),
    );
    wrong.extend(drift(
        "sidecar",
        &parse_sidecar,
        &book_src().join("config-sidecar.md"),
    ));
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// The first ```toml block of a page.
fn first_toml_block(page: &Path) -> String {
    let text = read(page);
    let start = text
        .find("```toml\n")
        .unwrap_or_else(|| panic!("{}: no ```toml example", shown(page)));
    let body = &text[start + "```toml\n".len()..];
    body[..body.find("```").unwrap()].to_string()
}

#[test]
fn the_configuration_reference_examples_parse() {
    let host = book_src().join("config-host.md");
    if let Err(e) = parse_host(&first_toml_block(&host)) {
        panic!("the example of {} is refused: {e}", shown(&host));
    }
    let sidecar = book_src().join("config-sidecar.md");
    if let Err(e) = parse_sidecar(&first_toml_block(&sidecar)) {
        panic!("the example of {} is refused: {e}", shown(&sidecar));
    }
}

#[test]
fn heading_ids_follow_mdbook() {
    // The cases of mdbook-html's own test of `id_from_content`, and ours.
    assert_eq!(
        heading_id("`--passes`: add more rustdoc passes"),
        "--passes-add-more-rustdoc-passes"
    );
    assert_eq!(heading_id("_-_12345"), "_-_12345");
    assert_eq!(
        heading_id(&heading_text("`limits.timeout`")),
        "limitstimeout"
    );
    assert_eq!(
        heading_id(&heading_text("Start a project: `sluice new`")),
        "start-a-project-sluice-new"
    );
    assert_eq!(
        heading_id(&heading_text("Upgrading from 0.1.0")),
        "upgrading-from-010"
    );
    assert_eq!(heading_id(&heading_text("`[[subscribe]]`")), "subscribe");
    let twice = anchors("# A\n## A\n### A\n");
    assert!(
        ["a", "a-1", "a-2"].iter().all(|a| twice.contains(*a)),
        "{twice:?}"
    );
}
