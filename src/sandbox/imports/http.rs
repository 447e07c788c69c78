//! `wasi:http`: linked for every handler, because components import it
//! whether they use it or not (every JavaScript component does). An outgoing
//! request is sent only when its host is in the handler's `[capabilities]
//! http_allow`; any other gets `HTTP-request-denied`, an error the guest
//! sees, never a trap in the host.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use http::uri::Scheme;
use wasmtime_wasi_http::{
    Error, RequestOptions, WasiBody, WasiHttpCtxView, WasiHttpHooks, WasiHttpView,
};

use wasmtime::component::ResourceTable;
use wasmtime_wasi_http::WasiHttpCtx;

use super::capture::{Capture, Fixture, Network};
use super::{HandlerContext, HostState};

/// How much longer than the call a request's own timeouts may run. The
/// call's timeout must fire first, so that a stalled request ends the
/// attempt as a timeout rather than as an error the guest might turn into
/// `reject`.
const REQUEST_GRACE: Duration = Duration::from_secs(1);

/// Sends the requests one handler is granted and refuses the rest.
pub(crate) struct Hooks {
    handler: Arc<HandlerContext>,
    /// When the current call must have finished (copied from the store).
    deadline: Instant,
}

impl Hooks {
    pub(crate) fn new(handler: Arc<HandlerContext>) -> Self {
        Hooks {
            handler,
            deadline: Instant::now(),
        }
    }
}

type Response = wasmtime_wasi_http::Result<(
    http::Response<WasiBody>,
    Box<dyn Future<Output = Result<(), Error>> + Send>,
)>;

impl WasiHttpHooks for Hooks {
    fn send_request(
        &mut self,
        request: http::Request<WasiBody>,
        options: Option<RequestOptions>,
        fut: Box<dyn Future<Output = Result<(), Error>> + Send>,
    ) -> Box<dyn Future<Output = Response> + Send> {
        let handler = self.handler.name.as_str();
        let granted = destination(request.uri())
            .is_some_and(|(host, port)| self.handler.capabilities.http_allow.permits(host, port));
        if !granted {
            if let Some(capture) = &self.handler.capture {
                let why = "refused: its host is not in [capabilities] http_allow";
                capture.request(request.method().as_str(), &request.uri().to_string(), why);
            }
            let host = request.uri().authority().map_or("", |a| a.as_str());
            tracing::info!(
                target: "sluice::guest",
                handler,
                host,
                "outgoing HTTP request refused: the host is not in [capabilities] http_allow of the handler's sidecar"
            );
            return Box::new(async { Err(Error::HttpRequestDenied) });
        }
        tracing::debug!(target: "sluice::guest", handler, method = %request.method(), uri = %request.uri(), "outgoing HTTP request");
        if let Some(capture) = self.handler.capture.clone()
            && let Some(answered) = captured(&capture, &request)
        {
            return answered;
        }
        let options = bounded(options, self.deadline);
        // wasmtime-wasi-http's own sending code (hyper over tokio, rustls
        // with the webpki roots for https).
        wasmtime_wasi_http::default_hooks().send_request(request, Some(options), fut)
    }
}

/// A granted request under a capture (`sluice invoke`): recorded, then
/// refused (`--no-network`), answered from its fixture, or (`None`) sent.
fn captured(
    capture: &Capture,
    request: &http::Request<WasiBody>,
) -> Option<Box<dyn Future<Output = Response> + Send>> {
    let (method, url) = (request.method().as_str(), request.uri().to_string());
    let refused = |why: &str| -> Option<Box<dyn Future<Output = Response> + Send>> {
        capture.request(method, &url, why);
        Some(Box::new(async { Err(Error::HttpRequestDenied) }))
    };
    match &capture.network {
        Network::Live => {
            capture.request(method, &url, "sent");
            None
        }
        Network::Off => refused("refused: --no-network"),
        Network::Fixtures(_) => match capture.fixture(method, &url) {
            Some(f) => {
                capture.request(method, &url, "fixture");
                Some(Box::new(std::future::ready(fixture_response(f))))
            }
            None => refused("refused: no fixture for this method and URL"),
        },
    }
}

/// The response a fixture records, with a body that is all there at once.
fn fixture_response(f: &Fixture) -> Response {
    use http_body_util::{BodyExt, Full};
    let mut response = http::Response::builder().status(f.status);
    for (name, value) in &f.headers {
        response = response.header(name, value);
    }
    let body = Full::new(bytes::Bytes::from(f.body.clone()))
        .map_err(|never| match never {})
        .boxed_unsync();
    let response = response.body(body).map_err(|e| {
        Error::InternalError(Some(format!("fixture for {} {}: {e}", f.method, f.url)))
    })?;
    let done: Box<dyn Future<Output = Result<(), Error>> + Send> = Box::new(async { Ok(()) });
    Ok((response, done))
}

/// The host and port a request connects to, as the sending code sees them:
/// the URI's authority, with 443 for https and 80 for http when it names no
/// port. `None` for no authority, or one with a user name, which the
/// allow-list never grants.
fn destination(uri: &http::Uri) -> Option<(&str, u16)> {
    let authority = uri.authority()?;
    if authority.as_str().contains('@') {
        return None;
    }
    let default_port = if uri.scheme() == Some(&Scheme::HTTPS) {
        443
    } else {
        80
    };
    Some((
        authority.host(),
        authority.port_u16().unwrap_or(default_port),
    ))
}

/// The guest's request timeouts, cut to what is left of the call (plus
/// [`REQUEST_GRACE`]), so that no request outlives the call that made it,
/// even one the guest never waits for.
fn bounded(options: Option<RequestOptions>, deadline: Instant) -> RequestOptions {
    let left = deadline.saturating_duration_since(Instant::now()) + REQUEST_GRACE;
    let cap = |t: Option<Duration>| Some(t.map_or(left, |t| t.min(left)));
    let o = options.unwrap_or_default();
    RequestOptions {
        connect_timeout: cap(o.connect_timeout),
        first_byte_timeout: cap(o.first_byte_timeout),
        between_bytes_timeout: cap(o.between_bytes_timeout),
    }
}

/// Resources a store may hold at once without an HTTP grant (WASI's own
/// streams and pollables), and with one (requests, responses, fields).
const TABLE_ENTRIES: usize = 256;
const TABLE_ENTRIES_WITH_HTTP: usize = 1024;
/// The largest set of HTTP header fields one `fields` resource may hold,
/// without an HTTP grant (nothing is ever sent) and with one.
const FIELDS_SIZE: usize = 4 << 10;
const FIELDS_SIZE_WITH_HTTP: usize = 64 << 10;

/// The resource table and wasi:http context of a new store of `handler`,
/// capped so that a guest cannot make the host hold more than a few MiB of
/// resources: much less without an HTTP grant, whose requests are all
/// refused anyway.
pub(super) fn limited(handler: &HandlerContext) -> (ResourceTable, WasiHttpCtx) {
    let granted = !handler.capabilities.http_allow.is_empty();
    let (entries, fields) = if granted {
        (TABLE_ENTRIES_WITH_HTTP, FIELDS_SIZE_WITH_HTTP)
    } else {
        (TABLE_ENTRIES, FIELDS_SIZE)
    };
    let mut table = ResourceTable::new();
    table.set_max_capacity(entries);
    let mut http = WasiHttpCtx::new();
    http.set_field_size_limit(fields);
    (table, http)
}

impl WasiHttpView for HostState {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        // Every wasi:http call passes through here, so the hooks always see
        // the deadline of the call in progress.
        self.http_hooks.deadline = self.deadline.at();
        WasiHttpCtxView {
            hooks: &mut self.http_hooks,
            table: &mut self.table,
            ctx: &mut self.http,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn destination_defaults_the_port_by_scheme() {
        let uri = |s: &str| s.parse::<http::Uri>().unwrap();
        assert_eq!(
            destination(&uri("https://api.example.com/v1")),
            Some(("api.example.com", 443))
        );
        assert_eq!(
            destination(&uri("http://api.example.com/v1")),
            Some(("api.example.com", 80))
        );
        assert_eq!(
            destination(&uri("http://127.0.0.1:8080/")),
            Some(("127.0.0.1", 8080))
        );
        assert_eq!(destination(&uri("http://[::1]:9/")), Some(("[::1]", 9)));
        assert_eq!(destination(&uri("http://user@api.example.com/")), None);
        assert_eq!(destination(&uri("/relative")), None);
    }

    #[test]
    fn request_timeouts_are_cut_to_the_call() {
        let deadline = Instant::now() + Duration::from_secs(2);
        let o = bounded(None, deadline);
        let most = Duration::from_secs(2) + REQUEST_GRACE;
        for t in [
            o.connect_timeout,
            o.first_byte_timeout,
            o.between_bytes_timeout,
        ] {
            assert!(t.is_some_and(|t| t <= most && t > REQUEST_GRACE), "{t:?}");
        }
        let short = RequestOptions {
            connect_timeout: Some(Duration::from_millis(10)),
            ..Default::default()
        };
        let o = bounded(Some(short), deadline);
        assert_eq!(o.connect_timeout, Some(Duration::from_millis(10)));
        let past = bounded(None, Instant::now() - Duration::from_secs(1));
        assert_eq!(past.first_byte_timeout, Some(REQUEST_GRACE));
    }
}
