//! Spans: one per attempt, a child of the context its message carries
//! ([`sluice_broker::trace`]), and OTLP export when an endpoint is
//! configured. The host puts the attempt's own `traceparent` on the delivery
//! the handler sees, and on every message the handler publishes, so that a
//! chain of handlers is one trace. Without an exporter the ids are still made
//! and carried (nothing is recorded); with one ([`Exporter`]), each attempt's
//! span is sent with the OpenTelemetry SDK over OTLP/HTTP.

use std::sync::Arc;
use std::time::SystemTime;

use anyhow::{Context as _, Result};
use opentelemetry::trace::{
    Span as _, SpanContext, SpanId, SpanKind, Status, TraceContextExt, TraceFlags, TraceId,
    TraceState, Tracer as _, TracerProvider as _,
};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};

pub(crate) use sluice_broker::trace::{TRACEPARENT, TRACESTATE, TraceParent};
use sluice_broker::trace::{header, is, set_header};

use crate::message::NewMessage;

/// The standard variable naming an OTLP collector's base URL.
pub(crate) const OTLP_ENDPOINT_ENV: &str = "OTEL_EXPORTER_OTLP_ENDPOINT";

/// One attempt's span: begun before the call, ended with its outcome.
pub struct Attempt {
    /// The attempt's own context: its trace, its span id.
    pub(crate) context: TraceParent,
    /// The `tracestate` it carries on.
    state: Option<String>,
    /// The recording span, when spans are exported.
    span: Option<opentelemetry_sdk::trace::Span>,
}

impl Attempt {
    /// Begin the attempt on a delivery with `headers`: a child of the
    /// context they carry (or the root of a new trace), recorded when
    /// `exporter` is given. The delivery's `traceparent` is replaced by the
    /// attempt's, so the handler sees its own span as the current one.
    pub fn begin(
        headers: &mut Vec<(String, String)>,
        exporter: Option<&Exporter>,
        fields: AttemptFields<'_>,
    ) -> Attempt {
        let parent = TraceParent::from_headers(headers);
        let state = header(headers, TRACESTATE).map(str::to_string);
        let (context, span) = match exporter {
            Some(exporter) => {
                let span = exporter.start(parent, state.as_deref(), &fields);
                let sc = span.span_context();
                let context = TraceParent {
                    trace_id: sc.trace_id().to_bytes(),
                    span_id: sc.span_id().to_bytes(),
                    flags: sc.trace_flags().to_u8(),
                };
                (context, Some(span))
            }
            None => {
                let context = match parent {
                    Some(p) => p.child(),
                    None => TraceParent::new_root(),
                };
                (context, None)
            }
        };
        set_header(headers, TRACEPARENT, context.header());
        Attempt {
            context,
            state,
            span,
        }
    }

    /// Put the attempt's context on messages it publishes: they are its
    /// children, whatever the handler wrote.
    pub fn stamp(&self, messages: &mut [NewMessage]) {
        if messages.is_empty() {
            return;
        }
        let parent = self.context.header();
        for m in messages {
            set_header(&mut m.headers, TRACEPARENT, parent.clone());
            match &self.state {
                Some(state) => set_header(&mut m.headers, TRACESTATE, state.clone()),
                None => m.headers.retain(|(k, _)| !is(k, TRACESTATE)),
            }
        }
    }

    /// End the span with how the attempt ended: `outcome` is `done`,
    /// `retry`, `reject`, `deferred` or a failure's kind; `error` is why it
    /// failed.
    pub fn end(self, outcome: &str, error: Option<&str>) {
        let Some(mut span) = self.span else {
            return;
        };
        span.set_attribute(KeyValue::new("sluice.outcome", outcome.to_string()));
        if let Some(e) = error {
            span.set_status(Status::error(e.to_string()));
        }
        span.end();
    }
}

/// What an attempt's span records besides its ids.
pub struct AttemptFields<'a> {
    /// The queue the message was leased from.
    pub queue: &'a str,
    /// The handler called.
    pub handler: &'a str,
    /// The handler version's content hash.
    pub version: &'a str,
    /// The attempt number, from 1.
    pub attempt: u32,
    /// The message id.
    pub message_id: &'a str,
}

/// Sends attempt spans to an OTLP/HTTP collector, in batches, from a
/// thread of its own.
pub struct Exporter {
    provider: SdkTracerProvider,
    tracer: SdkTracer,
    endpoint: String,
}

impl Exporter {
    /// An exporter to the collector at `base` (e.g. `http://127.0.0.1:4318`):
    /// spans go to `{base}/v1/traces`, as OTLP JSON.
    pub fn new(base: &str) -> Result<Arc<Exporter>> {
        use opentelemetry_otlp::{Protocol, WithExportConfig as _};
        let endpoint = traces_url(base)?;
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(Protocol::HttpJson)
            .with_endpoint(endpoint.clone())
            .build()
            .with_context(|| format!("cannot set up the OTLP exporter to {endpoint}"))?;
        let resource = opentelemetry_sdk::Resource::builder()
            .with_service_name("sluice")
            .build();
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(resource)
            .build();
        let tracer = provider.tracer("sluice");
        Ok(Arc::new(Exporter {
            provider,
            tracer,
            endpoint,
        }))
    }

    /// Where spans go.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    fn start(
        &self,
        parent: Option<TraceParent>,
        state: Option<&str>,
        f: &AttemptFields<'_>,
    ) -> opentelemetry_sdk::trace::Span {
        let cx = match parent {
            Some(p) => Context::new().with_remote_span_context(SpanContext::new(
                TraceId::from_bytes(p.trace_id),
                SpanId::from_bytes(p.span_id),
                TraceFlags::new(p.flags),
                true,
                state
                    .and_then(|s| s.parse::<TraceState>().ok())
                    .unwrap_or_default(),
            )),
            None => Context::new(),
        };
        self.tracer
            .span_builder(format!("handle {}", f.queue))
            .with_kind(SpanKind::Consumer)
            .with_start_time(SystemTime::now())
            .with_attributes([
                KeyValue::new("messaging.system", "sluice"),
                KeyValue::new("messaging.destination.name", f.queue.to_string()),
                KeyValue::new("messaging.message.id", f.message_id.to_string()),
                KeyValue::new("sluice.handler", f.handler.to_string()),
                KeyValue::new("sluice.version", f.version.to_string()),
                KeyValue::new("sluice.attempt", i64::from(f.attempt)),
            ])
            .start_with_context(&self.tracer, &cx)
    }

    /// Send what is still buffered and stop. Blocks: call it off the async
    /// threads.
    pub fn shutdown(&self) {
        if let Err(e) = self.provider.shutdown() {
            tracing::warn!(endpoint = %self.endpoint, "could not send the last spans: {e}");
        }
    }
}

/// The OTLP traces URL of a collector's base URL.
fn traces_url(base: &str) -> Result<String> {
    let base = base.trim().trim_end_matches('/');
    anyhow::ensure!(
        base.starts_with("http://"),
        "otlp_endpoint {base:?}: give the collector's OTLP/HTTP base URL, like http://127.0.0.1:4318 \
         (https is not built in: run a local collector that forwards over TLS)"
    );
    Ok(if base.ends_with("/v1/traces") {
        base.to_string()
    } else {
        format!("{base}/v1/traces")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXAMPLE: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn an_attempt_is_a_child_of_its_delivery_and_the_parent_of_its_publishes() {
        let fields = AttemptFields {
            queue: "q",
            handler: "h",
            version: "v",
            attempt: 1,
            message_id: "m",
        };
        let mut headers = vec![
            ("traceparent".to_string(), EXAMPLE.to_string()),
            ("tracestate".to_string(), "vendor=1".to_string()),
        ];
        let attempt = Attempt::begin(&mut headers, None, fields);
        let parent = TraceParent::parse(EXAMPLE).unwrap();
        assert_eq!(attempt.context.trace_id, parent.trace_id);
        assert_ne!(attempt.context.span_id, parent.span_id);
        // The handler sees the attempt's own context.
        assert_eq!(
            TraceParent::from_headers(&headers),
            Some(attempt.context),
            "{headers:?}"
        );

        let mut out = NewMessage::new("next", "x");
        out.headers = vec![
            ("traceparent".into(), EXAMPLE.into()),
            ("tracestate".into(), "forged=1".into()),
        ];
        let mut publishes = vec![out];
        attempt.stamp(&mut publishes);
        let h = &publishes[0].headers;
        assert_eq!(TraceParent::from_headers(h), Some(attempt.context));
        assert_eq!(header(h, TRACESTATE), Some("vendor=1"));
        assert_eq!(h.len(), 2, "{h:?}");
    }

    #[test]
    fn an_attempt_without_a_context_starts_a_trace() {
        let fields = AttemptFields {
            queue: "q",
            handler: "h",
            version: "v",
            attempt: 2,
            message_id: "m",
        };
        let mut headers = Vec::new();
        let a = Attempt::begin(&mut headers, None, fields);
        assert_eq!(TraceParent::from_headers(&headers), Some(a.context));
        assert_ne!(a.context.trace_id, [0; 16]);
    }

    #[test]
    fn the_collector_url_gets_the_traces_path_once() {
        assert_eq!(
            traces_url("http://c:4318").unwrap(),
            "http://c:4318/v1/traces"
        );
        assert_eq!(
            traces_url("http://c:4318/v1/traces").unwrap(),
            "http://c:4318/v1/traces"
        );
        let e = traces_url("grpc://c:4317").unwrap_err().to_string();
        assert!(e.contains("otlp_endpoint") && e.contains("http://"), "{e}");
    }
}
