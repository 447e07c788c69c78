//! What keeps a browser from being turned against the admin endpoint.
//!
//! Two rules, checked before any route runs:
//!
//! - **Host.** A request's `Host` must name the endpoint: the socket's own
//!   local address (so probes and scrapes by IP work, also when bound to
//!   `0.0.0.0`), `localhost`, a loopback address, or a name listed in
//!   `admin_hosts`. Anything else is refused with 421: that is what a DNS
//!   rebinding page sends, with its own name and our address.
//! - **Forgery.** A request that changes state (anything but GET, HEAD and
//!   OPTIONS) must carry the bearer token or `X-Sluice-Request: 1`, which a
//!   page of another site cannot send without a CORS preflight (and the
//!   endpoint answers none); and when it carries an `Origin`, that origin is
//!   the endpoint's own. Otherwise 403.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use axum::extract::connect_info::Connected;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::Response;
use axum::serve::IncomingStream;

use super::{Admin, error};

/// The header the dashboard, and any script of the operator's, sends with
/// each request that changes state.
pub(crate) const REQUEST_HEADER: &str = "x-sluice-request";

/// The local address a connection came in on.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Local(pub SocketAddr);

impl Connected<IncomingStream<'_, tokio::net::TcpListener>> for Local {
    fn connect_info(stream: IncomingStream<'_, tokio::net::TcpListener>) -> Self {
        let fallback = SocketAddr::from(([127, 0, 0, 1], 0));
        Local(stream.io().local_addr().unwrap_or(fallback))
    }
}

/// Refuse a request whose `Host` does not name this endpoint.
pub(crate) async fn check_host(
    State(admin): State<Arc<Admin>>,
    req: Request,
    next: Next,
) -> Response {
    let local = req
        .extensions()
        .get::<ConnectInfo<Local>>()
        .map(|ConnectInfo(Local(addr))| *addr);
    let host = req
        .headers()
        .get(header::HOST)
        .and_then(|v| v.to_str().ok());
    match host {
        Some(host) if allowed_host(host, local, &admin.hosts) => next.run(req).await,
        Some(host) => error(
            StatusCode::MISDIRECTED_REQUEST,
            format!(
                "the Host {host:?} does not name this admin endpoint; use its address, localhost, or add the name to admin_hosts in sluice.toml"
            ),
        ),
        None => error(
            StatusCode::MISDIRECTED_REQUEST,
            "the request has no Host header; send one naming this admin endpoint",
        ),
    }
}

/// Refuse a request that changes state without proof it was not forged.
pub(crate) async fn check_forgery(
    State(admin): State<Arc<Admin>>,
    req: Request,
    next: Next,
) -> Response {
    match forged(req.method(), req.headers(), admin.token.as_deref()) {
        None => next.run(req).await,
        Some(why) => error(StatusCode::FORBIDDEN, why),
    }
}

/// Why a request may have been forged by another site's page, if it may.
fn forged(method: &Method, headers: &HeaderMap, token: Option<&str>) -> Option<String> {
    if matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS) {
        return None;
    }
    let text = |name| headers.get(name).and_then(|v| v.to_str().ok());
    let vouched = text(REQUEST_HEADER).is_some_and(|v| v.trim() == "1")
        || token.is_some_and(|token| {
            text(header::AUTHORIZATION.as_str())
                .and_then(|v| v.strip_prefix("Bearer "))
                .is_some_and(|given| super::same(given.trim().as_bytes(), token.as_bytes()))
        });
    if !vouched {
        return Some(format!(
            "refused {method}: a request that changes state must carry the header X-Sluice-Request: 1 or the admin token, so that another site's page cannot make it"
        ));
    }
    let origin = text(header::ORIGIN.as_str())?;
    let host = text(header::HOST.as_str()).unwrap_or("");
    let own = [format!("http://{host}"), format!("https://{host}")];
    if own.iter().any(|o| o.eq_ignore_ascii_case(origin)) {
        return None;
    }
    Some(format!(
        "refused {method} from the page of another origin, {origin}: only the admin endpoint's own pages, http://{host}, may change state"
    ))
}

/// Whether `host` (a `Host` header: name or address, with or without a
/// port) names this endpoint.
fn allowed_host(host: &str, local: Option<SocketAddr>, listed: &[String]) -> bool {
    let name = strip_port(host.trim()).to_ascii_lowercase();
    let bare = name.trim_start_matches('[').trim_end_matches(']');
    if let Ok(ip) = bare.parse::<IpAddr>() {
        return ip.is_loopback() || local.is_some_and(|l| l.ip() == ip);
    }
    name == "localhost"
        || name.ends_with(".localhost")
        || listed.iter().any(|h| h.eq_ignore_ascii_case(&name))
}

/// `host` without its `:PORT`, keeping an IPv6 literal's brackets.
fn strip_port(host: &str) -> &str {
    if host.starts_with('[') {
        return host.find(']').map_or(host, |end| &host[..=end]);
    }
    match host.rsplit_once(':') {
        Some((name, port)) if !name.contains(':') && port.bytes().all(|b| b.is_ascii_digit()) => {
            name
        }
        _ => host,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_that_name_the_endpoint() {
        let local: SocketAddr = "10.0.0.5:9464".parse().unwrap();
        let listed = vec!["sluice.internal".to_string()];
        for host in [
            "127.0.0.1:9464",
            "127.0.0.1",
            "localhost:9464",
            "LOCALHOST",
            "[::1]:9464",
            "10.0.0.5:9464",
            "sluice.internal:9464",
            "Sluice.Internal",
        ] {
            assert!(allowed_host(host, Some(local), &listed), "{host}");
        }
        for host in [
            "attacker.example:9464",
            "10.0.0.6:9464",
            "sluice.internal.attacker.example",
            "",
            "[::2]:9464",
        ] {
            assert!(!allowed_host(host, Some(local), &listed), "{host}");
        }
    }

    #[test]
    fn only_vouched_same_origin_requests_change_state() {
        let headers = |pairs: &[(&str, &str)]| {
            let mut h = HeaderMap::new();
            for (k, v) in pairs {
                h.insert(
                    axum::http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                    v.parse().unwrap(),
                );
            }
            h
        };
        let host = ("host", "127.0.0.1:9464");
        assert!(forged(&Method::GET, &headers(&[host]), None).is_none());
        assert!(forged(&Method::POST, &headers(&[host]), None).is_some());
        let vouched = ("x-sluice-request", "1");
        assert!(forged(&Method::POST, &headers(&[host, vouched]), None).is_none());
        let own = ("origin", "http://127.0.0.1:9464");
        assert!(forged(&Method::POST, &headers(&[host, vouched, own]), None).is_none());
        let evil = ("origin", "http://evil.example");
        assert!(forged(&Method::POST, &headers(&[host, vouched, evil]), None).is_some());
        let bearer = ("authorization", "Bearer t");
        assert!(forged(&Method::DELETE, &headers(&[host, bearer]), Some("t")).is_none());
        assert!(forged(&Method::DELETE, &headers(&[host, bearer]), Some("u")).is_some());
        assert!(forged(&Method::DELETE, &headers(&[host, bearer]), None).is_some());
    }
}
