//! The `[capabilities]` table of a handler sidecar: what a handler is
//! granted beyond WASI with nothing. Nothing is granted by default.

use std::fmt;
use std::net::Ipv6Addr;

use serde::Deserialize;

/// `[capabilities]` in `NAME.toml`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Capabilities {
    /// The handler's own key-value store (`sluice:handler/kv`).
    #[serde(default)]
    pub(crate) kv: bool,
    /// Hosts that outgoing HTTP (`wasi:http/outgoing-handler`) may reach.
    /// Empty: every request is refused.
    #[serde(default)]
    pub(crate) http_allow: HttpAllow,
}

/// The allow-list of outgoing HTTP: `["api.example.com", "127.0.0.1:8080",
/// "*.example.org"]`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(transparent)]
pub(crate) struct HttpAllow(Vec<HostPattern>);

impl HttpAllow {
    #[cfg(test)]
    fn new(patterns: Vec<HostPattern>) -> Self {
        HttpAllow(patterns)
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether a request to `host` on `port` is granted. `host` is as in a
    /// URL's authority: a name, an IPv4 address or a bracketed IPv6 address.
    pub(crate) fn permits(&self, host: &str, port: u16) -> bool {
        let Ok(host) = normalize_host(host) else {
            return false;
        };
        self.0.iter().any(|p| p.matches(&host, port))
    }
}

/// One entry of `http_allow`: a host, or `*.` and a domain for all of its
/// subdomains, with an optional port (without one, any port).
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(try_from = "String")]
pub(crate) struct HostPattern {
    host: HostMatch,
    port: Option<u16>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum HostMatch {
    Exact(String),
    /// `*.example.org`: `a.example.org`, `a.b.example.org`, not `example.org`.
    Subdomains(String),
}

impl HostPattern {
    /// Parse an entry; the error says what to write instead.
    pub(crate) fn parse(text: &str) -> Result<Self, String> {
        let example = "write a host with an optional port, like \"api.example.com\", \"127.0.0.1:8080\" or \"*.example.org\"";
        if text.is_empty() {
            return Err(format!("an entry is empty: {example}"));
        }
        if text.chars().any(char::is_whitespace) {
            return Err(format!("{text:?} contains a space: {example}"));
        }
        if let Some((_, rest)) = text.split_once("://") {
            return Err(not_a_host(text, rest, "is a URL"));
        }
        if text.contains(['/', '?', '#']) {
            return Err(not_a_host(text, text, "has a path"));
        }
        if text.contains('@') {
            return Err(format!(
                "{text:?} has a user name (`@`): write only the host and port, like \"api.example.com:8443\""
            ));
        }
        let (host, port) = split_port(text)?;
        let port = port.map(|p| parse_port(text, p)).transpose()?;
        let host = match host.strip_prefix("*.") {
            Some(domain) => HostMatch::Subdomains(checked_host(text, domain)?),
            None => HostMatch::Exact(checked_host(text, host)?),
        };
        Ok(HostPattern { host, port })
    }

    fn matches(&self, host: &str, port: u16) -> bool {
        let host_ok = match &self.host {
            HostMatch::Exact(h) => h == host,
            HostMatch::Subdomains(domain) => host
                .strip_suffix(domain.as_str())
                .is_some_and(|sub| sub.len() > 1 && sub.ends_with('.')),
        };
        host_ok && self.port.is_none_or(|p| p == port)
    }
}

impl TryFrom<String> for HostPattern {
    type Error = String;

    fn try_from(text: String) -> Result<Self, String> {
        HostPattern::parse(&text).map_err(|e| format!("field `capabilities.http_allow`: {e}"))
    }
}

impl fmt::Display for HostPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.host {
            HostMatch::Exact(h) => write!(f, "{h}")?,
            HostMatch::Subdomains(d) => write!(f, "*.{d}")?,
        }
        match self.port {
            Some(p) => write!(f, ":{p}"),
            None => Ok(()),
        }
    }
}

impl fmt::Debug for HostPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.to_string())
    }
}

/// The error for a URL or a path where a host belongs, suggesting the host.
fn not_a_host(text: &str, after_scheme: &str, what: &str) -> String {
    let host = after_scheme
        .split(['/', '?', '#'])
        .next()
        .unwrap_or_default();
    let host = host.rsplit('@').next().unwrap_or(host);
    if host.is_empty() {
        format!(
            "{text:?} {what}: write only the host and an optional port, like \"api.example.com\""
        )
    } else {
        format!("{text:?} {what}: write only the host and an optional port, {host:?}")
    }
}

/// `host[:port]` or `[v6]:port` into the host and the port text.
fn split_port(text: &str) -> Result<(&str, Option<&str>), String> {
    if text.starts_with('[') {
        let Some(end) = text.find(']') else {
            return Err(format!(
                "{text:?} has no closing `]`: write an IPv6 address like \"[::1]:8080\""
            ));
        };
        let (host, rest) = text.split_at(end + 1);
        return match rest {
            "" => Ok((host, None)),
            _ => match rest.strip_prefix(':') {
                Some(port) => Ok((host, Some(port))),
                None => Err(format!(
                    "{text:?}: after `]` comes `:` and a port, like \"[::1]:8080\""
                )),
            },
        };
    }
    match text.split_once(':') {
        None => Ok((text, None)),
        Some((_, rest)) if rest.contains(':') => Err(format!(
            "{text:?} looks like an IPv6 address: write it in brackets, like \"[::1]\" or \"[::1]:8080\""
        )),
        Some((host, port)) => Ok((host, Some(port))),
    }
}

fn parse_port(text: &str, port: &str) -> Result<u16, String> {
    match port.parse::<u16>() {
        Ok(p) if p > 0 && port.bytes().all(|b| b.is_ascii_digit()) => Ok(p),
        _ => Err(format!(
            "bad port {port:?} in {text:?}: write a port from 1 to 65535, like \"api.example.com:8443\", or leave it out to allow any port"
        )),
    }
}

/// A host as written in an entry, checked and normalized.
fn checked_host(text: &str, host: &str) -> Result<String, String> {
    if host.contains('*') {
        return Err(format!(
            "{text:?}: `*` may only start an entry, as in \"*.example.org\" (all subdomains of example.org)"
        ));
    }
    normalize_host(host).map_err(|why| format!("{text:?}: {why}"))
}

/// Lowercase, without a trailing dot; IPv6 in its canonical bracketed form.
/// The same function normalizes entries and the hosts of requests, so that
/// `API.example.com.` and `api.example.com` are one host.
fn normalize_host(host: &str) -> Result<String, String> {
    if let Some(inner) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        let addr: Ipv6Addr = inner
            .parse()
            .map_err(|_| format!("{inner:?} is not an IPv6 address"))?;
        return Ok(format!("[{addr}]"));
    }
    let host = host.strip_suffix('.').unwrap_or(host).to_ascii_lowercase();
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && !l.starts_with('-')
            && !l.ends_with('-')
            && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
    };
    if host.is_empty() || host.len() > 253 || !host.split('.').all(label_ok) {
        return Err(format!(
            "{host:?} is not a host name: use letters, digits, `-` and dots, like \"api.example.com\""
        ));
    }
    Ok(host)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allow(entries: &[&str]) -> HttpAllow {
        HttpAllow::new(
            entries
                .iter()
                .map(|e| HostPattern::parse(e).unwrap())
                .collect(),
        )
    }

    #[test]
    fn exact_host_any_port_unless_one_is_given() {
        let list = allow(&["api.example.com", "127.0.0.1:8080"]);
        assert!(list.permits("api.example.com", 443));
        assert!(list.permits("api.example.com", 80));
        assert!(
            list.permits("API.Example.COM.", 443),
            "case and a trailing dot"
        );
        assert!(list.permits("127.0.0.1", 8080));
        assert!(!list.permits("127.0.0.1", 8081));
        assert!(!list.permits("localhost", 8080), "names are not resolved");
        assert!(!list.permits("example.com", 443));
        assert!(!list.permits("api.example.com.evil.net", 443));
        assert!(!list.permits("evilapi.example.com", 443));
    }

    #[test]
    fn wildcard_matches_subdomains_only() {
        let list = allow(&["*.example.org:443"]);
        assert!(list.permits("a.example.org", 443));
        assert!(list.permits("a.b.example.org", 443));
        assert!(!list.permits("example.org", 443), "not the domain itself");
        assert!(!list.permits("badexample.org", 443));
        assert!(!list.permits("a.example.org", 80));
    }

    #[test]
    fn ipv6_is_compared_as_an_address() {
        let list = allow(&["[::1]:9000"]);
        assert!(list.permits("[0:0:0:0:0:0:0:1]", 9000));
        assert!(!list.permits("[::2]", 9000));
        assert!(!list.permits("[not an address]", 9000));
    }

    #[test]
    fn nothing_is_granted_by_default() {
        let list = HttpAllow::default();
        assert!(list.is_empty());
        assert!(!list.permits("127.0.0.1", 80));
    }

    #[test]
    fn display_is_the_normalized_entry() {
        let shown: Vec<String> = ["API.example.com", "*.Example.org:8443", "[0::1]"]
            .iter()
            .map(|e| HostPattern::parse(e).unwrap().to_string())
            .collect();
        assert_eq!(shown, ["api.example.com", "*.example.org:8443", "[::1]"]);
    }

    #[test]
    fn bad_entries_say_what_to_write() {
        let err = |text: &str| HostPattern::parse(text).unwrap_err();
        assert!(err("").contains("empty"), "{}", err(""));
        let url = err("https://api.example.com/v1");
        assert!(
            url.contains("is a URL") && url.contains("\"api.example.com\""),
            "{url}"
        );
        let path = err("api.example.com/v1");
        assert!(
            path.contains("has a path") && path.contains("\"api.example.com\""),
            "{path}"
        );
        for port in [
            "api.example.com:99999",
            "api.example.com:0",
            "api.example.com:",
            "h:+80",
        ] {
            let e = err(port);
            assert!(e.contains("bad port") && e.contains("1 to 65535"), "{e}");
        }
        assert!(err("a.*.example.org").contains("may only start"));
        assert!(err("*").contains("may only start"));
        assert!(err("::1").contains("brackets"));
        assert!(err("[::1").contains("closing"));
        assert!(err("[zz]").contains("not an IPv6 address"));
        assert!(err("user@api.example.com").contains("user name"));
        assert!(err("api.exa mple.com").contains("space"));
        assert!(err("under_score.example.com").contains("not a host name"));
        assert!(err("-bad.example.com").contains("not a host name"));
    }

    fn sidecar(text: &str) -> anyhow::Result<crate::config::HandlerSpec> {
        crate::config::HandlerSpec::parse(
            "fetcher",
            std::path::Path::new("handlers/fetcher.toml"),
            text,
        )
    }

    #[test]
    fn sidecar_grants_hosts_in_capabilities() {
        let spec = sidecar(
            "[capabilities]\nhttp_allow = [\"api.example.com\", \"127.0.0.1:8080\", \"*.example.org\"]\n",
        )
        .unwrap();
        let list = &spec.capabilities.http_allow;
        assert!(list.permits("api.example.com", 443));
        assert!(list.permits("127.0.0.1", 8080));
        assert!(list.permits("x.example.org", 80));
        assert!(!list.permits("127.0.0.1", 80));
        assert!(sidecar("").unwrap().capabilities.http_allow.is_empty());
    }

    #[test]
    fn bad_sidecar_entry_names_file_line_and_field() {
        let err = sidecar("queue = \"fetcher\"\n[capabilities]\nhttp_allow = [\"ok.example.com\", \"https://api.example.com/v1\"]\n")
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("handlers/fetcher.toml:3:"), "{err}");
        assert!(err.contains("capabilities.http_allow"), "{err}");
        assert!(
            err.contains("\"api.example.com\""),
            "suggests the host: {err}"
        );
        assert!(!err.contains('\n'), "one line: {err}");
        let unknown = sidecar("[capabilities]\nhttp = [\"a.example.com\"]\n")
            .unwrap_err()
            .to_string();
        assert!(
            unknown.contains("handlers/fetcher.toml:2:") && unknown.contains("http"),
            "{unknown}"
        );
        let not_a_list = sidecar("[capabilities]\nhttp_allow = \"a.example.com\"\n")
            .unwrap_err()
            .to_string();
        assert!(
            not_a_list.contains("handlers/fetcher.toml:2:"),
            "{not_a_list}"
        );
    }
}
