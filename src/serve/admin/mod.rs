//! The admin endpoint of `sluice run`: Prometheus metrics, health, a JSON
//! API for what the CLI does, and the dashboard, over HTTP (axum).
//!
//! It listens on loopback by default. On any other address it needs a
//! bearer token, and refuses to start without one. The token guards
//! everything but `/healthz`, `/readyz` and the dashboard's page itself
//! (which holds no data: it asks for the token and sends it with each of its
//! API calls).
//!
//! Every route first checks that the request's `Host` names the endpoint,
//! and every request that changes state that it carries the token or
//! `X-Sluice-Request: 1` and no foreign `Origin` (see [`guard`]): so a web
//! page the operator visits can neither read the endpoint by rebinding a
//! name to loopback nor pause queues and replay dead letters by forgery.
//!
//! | Route | What |
//! |---|---|
//! | `GET /` | the dashboard |
//! | `GET /metrics` | OpenMetrics text |
//! | `GET /healthz`, `GET /readyz` | liveness; readiness with reasons |
//! | `GET /api/...` , `POST /api/...` | see [`api`] |

use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::middleware::{Next, from_fn_with_state};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::json;

use crate::broker::Broker;
use crate::error::chain;
use crate::sandbox::loader;
use crate::serve::metrics::Metrics;
use crate::serve::registry::Registry;

mod api;
mod guard;

/// The default address: loopback, the port Prometheus exporters often take.
pub(crate) const DEFAULT_ADDR: &str = "127.0.0.1:9464";
/// The environment variable that gives the token, when `admin_token` does not.
pub(crate) const TOKEN_ENV: &str = "SLUICE_ADMIN_TOKEN";
/// How long `/readyz` waits for the broker.
const BROKER_CHECK: Duration = Duration::from_secs(2);

/// What the endpoint serves from: the host's broker, registry and metrics.
pub(crate) struct Admin {
    broker: Arc<dyn Broker>,
    registry: Arc<Registry>,
    metrics: Arc<Metrics>,
    token: Option<String>,
    /// Host names the endpoint answers to beyond its address, `localhost`
    /// and loopback (`admin_hosts`).
    hosts: Vec<String>,
    /// Set once the host has gone through its handlers directory.
    started: AtomicBool,
}

impl Admin {
    pub(crate) fn new(
        broker: Arc<dyn Broker>,
        registry: Arc<Registry>,
        metrics: Arc<Metrics>,
        token: Option<String>,
        hosts: Vec<String>,
    ) -> Arc<Self> {
        Arc::new(Admin {
            broker,
            registry,
            metrics,
            token,
            hosts,
            started: AtomicBool::new(false),
        })
    }

    /// Say that the first pass over the handlers directory is done.
    pub(crate) fn mark_started(&self) {
        self.started.store(true, Ordering::Relaxed);
    }
}

/// Bind the admin endpoint to `addr`, checking first that an address other
/// than loopback comes with a token.
pub(crate) async fn bind(addr: &str, token: Option<&str>) -> Result<tokio::net::TcpListener> {
    let addrs = resolve(addr)?;
    if token.is_none() && !addrs.iter().all(|a| a.ip().is_loopback()) {
        bail!(
            "the admin endpoint {addr} is not on loopback, so it needs a token: set admin_token in sluice.toml or {TOKEN_ENV}, or bind it to 127.0.0.1"
        );
    }
    tokio::net::TcpListener::bind(&addrs[..])
        .await
        .with_context(|| {
            format!(
                "cannot bind the admin endpoint to {addr}; choose another address with --admin ADDR (or admin in sluice.toml), or turn it off with --admin off"
            )
        })
}

fn resolve(addr: &str) -> Result<Vec<SocketAddr>> {
    let addrs: Vec<SocketAddr> = addr
        .to_socket_addrs()
        .with_context(|| {
            format!("bad admin address {addr:?}: write it as HOST:PORT, like {DEFAULT_ADDR}")
        })?
        .collect();
    if addrs.is_empty() {
        bail!(
            "admin address {addr:?} names no address; write it as HOST:PORT, like {DEFAULT_ADDR}"
        );
    }
    Ok(addrs)
}

/// Serve the endpoint on `listener` until `shutdown` resolves.
pub(crate) async fn serve(
    listener: tokio::net::TcpListener,
    admin: Arc<Admin>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<()> {
    let addr = listener.local_addr()?;
    tracing::info!(%addr, "admin endpoint: http://{addr}/ (metrics at /metrics)");
    let app = router(admin).into_make_service_with_connect_info::<guard::Local>();
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await
        .context("the admin endpoint stopped")
}

/// Every route, behind the Host and forgery checks.
fn router(admin: Arc<Admin>) -> Router {
    let guarded = Router::new()
        .route("/metrics", get(metrics))
        .merge(api::routes())
        .layer(from_fn_with_state(admin.clone(), authorize));
    Router::new()
        .route("/", get(dashboard))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .merge(guarded)
        .fallback(not_found)
        .layer(from_fn_with_state(admin.clone(), guard::check_forgery))
        .layer(from_fn_with_state(admin.clone(), guard::check_host))
        .with_state(admin)
}

/// Let a request through only with the token, when there is one. A wrong
/// token and a missing one get the same answer.
async fn authorize(State(admin): State<Arc<Admin>>, req: Request, next: Next) -> Response {
    let Some(token) = &admin.token else {
        return next.run(req).await;
    };
    let given = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    match given {
        Some(given) if same(given.trim().as_bytes(), token.as_bytes()) => next.run(req).await,
        _ => error(
            StatusCode::UNAUTHORIZED,
            "unauthorized: send the admin token as Authorization: Bearer TOKEN",
        ),
    }
}

/// Compare in time that does not depend on where the bytes differ.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// A JSON error: `{"error": why}`.
pub(crate) fn error(status: StatusCode, why: impl Into<String>) -> Response {
    (status, axum::Json(json!({ "error": why.into() }))).into_response()
}

async fn not_found(method: Method, uri: Uri) -> Response {
    error(
        StatusCode::NOT_FOUND,
        format!(
            "no route {method} {}; the dashboard at / lists what there is",
            uri.path()
        ),
    )
}

async fn dashboard() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        include_str!("dashboard.html"),
    )
        .into_response()
}

async fn metrics(State(admin): State<Arc<Admin>>) -> Response {
    let pool = crate::serve::metrics::PoolCounts {
        in_use: admin.registry.instances_in_use() as i64,
        spare: admin.registry.spare_instances() as i64,
    };
    let text = admin.metrics.encode(&*admin.broker, pool).await;
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        text,
    )
        .into_response()
}

async fn healthz() -> Response {
    axum::Json(json!({ "status": "ok" })).into_response()
}

/// Ready when the broker answers and every handler in the directory has
/// been loaded or refused; otherwise 503 with the reasons.
async fn readyz(State(admin): State<Arc<Admin>>, _: HeaderMap) -> Response {
    let mut reasons = Vec::new();
    if !admin.started.load(Ordering::Relaxed) {
        reasons.push("the handlers directory is still being loaded".to_string());
    }
    match tokio::time::timeout(BROKER_CHECK, admin.broker.paused()).await {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => reasons.push(format!("the broker is unreachable: {}", chain(&e))),
        Err(_) => reasons.push(format!("the broker did not answer within {BROKER_CHECK:?}")),
    }
    for (queue, why) in admin.registry.observers().stalls.all() {
        reasons.push(format!("queue {queue} is stalled, waiting on {why}"));
    }
    match loader::scan(admin.registry.dir()) {
        Ok(names) => {
            let known = admin.registry.names().await;
            for name in names.iter().filter(|n| !known.contains(n)) {
                reasons.push(format!("handler {name} is neither loaded nor refused yet"));
            }
        }
        Err(e) => reasons.push(format!(
            "cannot read the handlers directory: {}",
            crate::error::one_line(&e)
        )),
    }
    if reasons.is_empty() {
        axum::Json(json!({ "ready": true })).into_response()
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            axum::Json(json!({ "ready": false, "reasons": reasons })),
        )
            .into_response()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_compare_whole() {
        assert!(same(b"secret", b"secret"));
        assert!(!same(b"secret", b"secreT"));
        assert!(!same(b"secret", b"secret2"));
        assert!(!same(b"", b"x"));
    }

    #[tokio::test]
    async fn an_address_off_loopback_needs_a_token() {
        let e = bind("0.0.0.0:0", None).await.unwrap_err().to_string();
        assert!(e.contains("0.0.0.0:0") && e.contains(TOKEN_ENV), "{e}");
        bind("0.0.0.0:0", Some("t")).await.unwrap();
        bind("127.0.0.1:0", None).await.unwrap();
        let e = bind("nonsense", None).await.unwrap_err().to_string();
        assert!(e.contains("\"nonsense\"") && e.contains("HOST:PORT"), "{e}");
    }

    #[tokio::test]
    async fn a_taken_address_is_a_clear_error() {
        let taken = bind("127.0.0.1:0", None).await.unwrap();
        let addr = taken.local_addr().unwrap().to_string();
        let e = bind(&addr, None).await.unwrap_err();
        let e = crate::error::one_line(&e);
        assert!(e.contains(&addr) && e.contains("--admin"), "{e}");
    }
}
