//! Makes an outgoing GET, through `wasi:http/outgoing-handler`, to the URL
//! in the message payload (`http://HOST[:PORT]/PATH` or `https://...`).
//! Logs the status and the body, returns `done` on a 2xx status and
//! `reject("GET URL failed: ERROR")` with the error it saw when the request
//! is refused or fails (or `reject("GET URL: status N")` on another status),
//! so tests can read the host's answer from the dead letter.
use std::io::Read;

use sluice_sdk::{Message, Reject, info, warn};
use wasip2::http::outgoing_handler;
use wasip2::http::types::{Fields, Method, OutgoingRequest, Scheme};

/// Most of the body that is read and logged.
const MAX_BODY: u64 = 64 * 1024;

fn handle(message: &Message) -> sluice_sdk::Result {
    // Not UTF-8: rejected with `payload is not UTF-8`.
    let url = message.text()?.trim();
    match get(url) {
        Ok((status, body)) => {
            let text = String::from_utf8_lossy(&body);
            info!("GET {url}: status {status}, {} bytes: {text}", body.len());
            if (200..300).contains(&status) {
                Ok(())
            } else {
                Err(Reject::new(format!("GET {url}: status {status}")))
            }
        }
        Err(e) => {
            warn!("GET {url} failed: {e}");
            Err(Reject::new(format!("GET {url} failed: {e}")))
        }
    }
}

/// Send the request and read the response: status and body.
fn get(url: &str) -> Result<(u16, Vec<u8>), String> {
    let (scheme, authority, path) = split_url(url)?;
    let request = OutgoingRequest::new(Fields::new());
    request
        .set_method(&Method::Get)
        .and_then(|()| request.set_scheme(Some(&scheme)))
        .and_then(|()| request.set_authority(Some(authority)))
        .and_then(|()| request.set_path_with_query(Some(path)))
        .map_err(|()| format!("the host refused the parts of {url:?}"))?;
    // A refusal may come here or, with wasmtime's host, when the response
    // is ready: both are an `error-code` the handler can handle.
    let pending = outgoing_handler::handle(request, None).map_err(|e| format!("{e:?}"))?;
    pending.subscribe().block();
    let response = match pending.get() {
        Some(Ok(Ok(response))) => response,
        Some(Ok(Err(code))) => return Err(format!("{code:?}")),
        Some(Err(())) => return Err("the response was already taken".to_string()),
        None => return Err("no response after waiting for it".to_string()),
    };
    let status = response.status();
    // Declared in this order, so they are dropped stream first: a stream
    // must go before the body it belongs to.
    let body = response
        .consume()
        .map_err(|()| "the body was already taken".to_string())?;
    let mut stream = body
        .stream()
        .map_err(|()| "the body stream was already taken".to_string())?;
    let mut bytes = Vec::new();
    (&mut stream)
        .take(MAX_BODY)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("reading the body: {e}"))?;
    Ok((status, bytes))
}

/// `scheme://authority/path?query` into its parts; the path defaults to `/`.
fn split_url(url: &str) -> Result<(Scheme, &str, &str), String> {
    let (scheme, rest) = url
        .split_once("://")
        .ok_or_else(|| format!("{url:?} is not a URL like http://host/path"))?;
    let scheme = match scheme {
        "http" => Scheme::Http,
        "https" => Scheme::Https,
        other => Scheme::Other(other.to_string()),
    };
    let (authority, path) = match rest.find('/') {
        Some(i) => rest.split_at(i),
        None => (rest, "/"),
    };
    if authority.is_empty() {
        return Err(format!("{url:?} has no host"));
    }
    Ok((scheme, authority, path))
}

sluice_sdk::handler!(handle);
