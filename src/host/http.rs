//! `wasi:http`: linked so that components which import its types (every
//! JavaScript component does) instantiate. Outgoing requests are refused:
//! a handler sees `HTTP-request-denied`, an error it can handle, never a
//! trap in the host.

use std::future::Future;

use wasmtime_wasi_http::{
    Error, RequestOptions, WasiBody, WasiHttpCtxView, WasiHttpHooks, WasiHttpView,
};

use super::HostState;

/// Refuses every outgoing request.
#[derive(Default)]
pub struct DenyAll;

type Response = wasmtime_wasi_http::Result<(
    http::Response<WasiBody>,
    Box<dyn Future<Output = Result<(), Error>> + Send>,
)>;

impl WasiHttpHooks for DenyAll {
    fn send_request(
        &mut self,
        request: http::Request<WasiBody>,
        _options: Option<RequestOptions>,
        _fut: Box<dyn Future<Output = Result<(), Error>> + Send>,
    ) -> Box<dyn Future<Output = Response> + Send> {
        tracing::debug!(target: "sluice::guest", uri = %request.uri(), "outgoing HTTP request denied");
        Box::new(async { Err(Error::HttpRequestDenied) })
    }
}

impl WasiHttpView for HostState {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        WasiHttpCtxView {
            hooks: &mut self.http_hooks,
            table: &mut self.table,
            ctx: &mut self.http,
        }
    }
}
