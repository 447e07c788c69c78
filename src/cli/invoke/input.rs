//! What `sluice invoke` reads from its arguments and files: the message
//! bodies, `NAME=VALUE` pairs and the HTTP fixtures. Anything wrong is a
//! [`BadInput`] that names the argument or file and what to do.

use std::collections::BTreeMap;
use std::io::{IsTerminal, Read};
use std::path::Path;

use anyhow::Result;
use base64::Engine as _;
use serde::Deserialize;

use super::BadInput;
use crate::sandbox::imports::capture::{Fixture, Network};

/// The largest message body, fixture or key-value file read: far above
/// what a broker takes, so that the handler, not the reader, says no.
const MAX_INPUT: u64 = 64 << 20;

/// The bodies of `--payload`s (TEXT, or @FILE for a file's bytes), or of
/// standard input when there are none.
pub(super) fn payloads(given: &[String]) -> Result<Vec<Vec<u8>>> {
    if given.is_empty() {
        return Ok(vec![stdin()?]);
    }
    given
        .iter()
        .map(|p| match p.strip_prefix('@') {
            Some(path) => read(Path::new(path), "--payload @FILE"),
            None => Ok(p.clone().into_bytes()),
        })
        .collect()
}

fn stdin() -> Result<Vec<u8>> {
    let mut input = std::io::stdin();
    if input.is_terminal() {
        return Err(BadInput(
            "no message: give --payload TEXT or --payload @FILE, or pipe the message in on standard input".into(),
        )
        .into());
    }
    let mut body = Vec::new();
    input
        .by_ref()
        .take(MAX_INPUT + 1)
        .read_to_end(&mut body)
        .map_err(|e| BadInput(format!("cannot read the message from standard input: {e}")))?;
    if body.len() as u64 > MAX_INPUT {
        return Err(BadInput("the message on standard input is over 64 MiB".into()).into());
    }
    Ok(body)
}

/// The bytes of the file at `path`, given by `what`.
pub(super) fn read(path: &Path, what: &str) -> Result<Vec<u8>> {
    crate::base::files::read_regular(
        path,
        MAX_INPUT,
        "a file given to sluice invoke is at most 64 MiB",
    )
    .map_err(|e| BadInput(format!("{what}: {}", crate::error::chain(&e))).into())
}

/// `NAME=VALUE` pairs of option `flag`, in order.
pub(super) fn pairs(given: &[String], flag: &str, form: &str) -> Result<Vec<(String, String)>> {
    given
        .iter()
        .map(|pair| match pair.split_once('=') {
            Some((name, value)) if !name.is_empty() => Ok((name.to_string(), value.to_string())),
            _ => Err(BadInput(format!("bad {flag} {pair:?}: give {form}")).into()),
        })
        .collect()
}

/// How the call's HTTP requests are answered.
pub(super) fn network(off: bool, fixtures: Option<&Path>) -> Result<Network> {
    match (off, fixtures) {
        (true, _) => Ok(Network::Off),
        (false, Some(path)) => Ok(Network::Fixtures(fixtures_in(path)?)),
        (false, None) => Ok(Network::Live),
    }
}

/// One recorded response of a fixture file.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFixture {
    #[serde(default = "get")]
    method: String,
    url: String,
    #[serde(default = "ok")]
    status: u16,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    /// The body as text...
    body: Option<String>,
    /// ... or as base64, for bytes that are not text.
    body_base64: Option<String>,
}

fn get() -> String {
    "GET".into()
}

fn ok() -> u16 {
    200
}

/// The fixtures of the JSON file at `path`: a list of
/// `{"method", "url", "status", "headers", "body" | "body_base64"}`.
pub(super) fn fixtures_in(path: &Path) -> Result<Vec<Fixture>> {
    let what = format!("--http-fixture {}", path.display());
    let bytes = read(path, &what)?;
    let raw: Vec<RawFixture> = serde_json::from_slice(&bytes).map_err(|e| {
        BadInput(format!(
            "{what}: {e}: give a JSON list of {{\"method\", \"url\", \"status\", \"headers\", \"body\" or \"body_base64\"}}"
        ))
    })?;
    raw.into_iter()
        .enumerate()
        .map(|(i, f)| {
            fixture(f).map_err(|why| BadInput(format!("{what}: entry {i}: {why}")).into())
        })
        .collect()
}

fn fixture(f: RawFixture) -> Result<Fixture, String> {
    if !(100..=999).contains(&f.status) {
        return Err(format!("status {} is not an HTTP status", f.status));
    }
    if f.url
        .parse::<http::Uri>()
        .map_or(true, |u| u.authority().is_none())
    {
        return Err(format!("url {:?} is not an absolute URL", f.url));
    }
    let method = f.method.to_ascii_uppercase();
    if http::Method::from_bytes(method.as_bytes()).is_err() {
        return Err(format!("method {:?} is not an HTTP method", f.method));
    }
    for (name, value) in &f.headers {
        if http::HeaderName::from_bytes(name.as_bytes()).is_err()
            || http::HeaderValue::from_str(value).is_err()
        {
            return Err(format!(
                "header {name:?}: {value:?} is not a valid HTTP header"
            ));
        }
    }
    let body = match (f.body, f.body_base64) {
        (Some(_), Some(_)) => return Err("give body or body_base64, not both".into()),
        (Some(text), None) => text.into_bytes(),
        (None, Some(b64)) => base64::engine::general_purpose::STANDARD
            .decode(b64.trim())
            .map_err(|e| format!("body_base64 is not base64: {e}"))?,
        (None, None) => Vec::new(),
    };
    Ok(Fixture {
        method,
        url: f.url,
        status: f.status,
        headers: f.headers.into_iter().collect(),
        body,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_need_a_name_and_an_equals_sign() {
        let given = ["a=1".to_string(), "b=x=y".to_string(), "c=".to_string()];
        let got = pairs(&given, "--header", "NAME=VALUE").unwrap();
        assert_eq!(
            got,
            [
                ("a".to_string(), "1".to_string()),
                ("b".to_string(), "x=y".to_string()),
                ("c".to_string(), String::new())
            ]
        );
        for bad in ["novalue", "=v"] {
            let e = pairs(&[bad.to_string()], "--header", "NAME=VALUE").unwrap_err();
            assert!(e.is::<BadInput>(), "{e}");
            assert_eq!(
                e.to_string(),
                format!("bad --header {bad:?}: give NAME=VALUE")
            );
        }
    }

    #[test]
    fn fixtures_are_read_and_checked() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("http.json");
        std::fs::write(
            &path,
            r#"[{"url": "https://api.example.com/r", "headers": {"content-type": "text/plain"}, "body": "hi"},
                {"method": "post", "url": "http://127.0.0.1:9/x", "status": 503, "body_base64": "AAE="}]"#,
        )
        .unwrap();
        let got = fixtures_in(&path).unwrap();
        assert_eq!(got[0].method, "GET");
        assert_eq!(got[0].status, 200);
        assert_eq!(got[0].body, b"hi");
        assert_eq!(got[1].method, "POST");
        assert_eq!(got[1].body, [0, 1]);
        for (text, why) in [
            (
                r#"[{"url": "/relative"}]"#,
                "entry 0: url \"/relative\" is not an absolute URL",
            ),
            (
                r#"[{"url": "http://a/", "status": 42}]"#,
                "entry 0: status 42 is not an HTTP status",
            ),
            (
                r#"[{"url": "http://a/", "body": "x", "body_base64": "eA=="}]"#,
                "give body or body_base64, not both",
            ),
            (
                r#"[{"url": "http://a/", "colour": 1}]"#,
                "unknown field `colour`",
            ),
            (r#"{"url": "http://a/"}"#, "give a JSON list"),
        ] {
            std::fs::write(&path, text).unwrap();
            let e = fixtures_in(&path).unwrap_err();
            assert!(e.is::<BadInput>(), "{e}");
            let e = e.to_string();
            assert!(
                e.starts_with(&format!("--http-fixture {}", path.display())),
                "{e}"
            );
            assert!(e.contains(why), "{text}: {e}");
        }
    }

    #[test]
    fn a_missing_payload_file_is_named() {
        let e = payloads(&["@/no/such/body.json".to_string()]).unwrap_err();
        assert!(e.is::<BadInput>(), "{e}");
        assert!(e.to_string().contains("/no/such/body.json"), "{e}");
    }
}
