//! An OTLP/HTTP receiver for the trace export's tests: a real server on a free loopback port that
//! takes `POST /v1/traces` as the OpenTelemetry collector does (protobuf, decoded with the
//! OpenTelemetry proto crate) and keeps every span for the test to read; and the two collectors
//! that must cost a host nothing, one that accepts connections and never answers ([`black_hole`])
//! and one where nothing listens ([`down`]).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::IntoResponse;
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use prost::Message;
use tokio::net::TcpListener;

/// One span as the receiver got it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Received {
    /// The span's name.
    pub name: String,
    /// The `service.name` of the resource it came with.
    pub service: String,
    /// Its trace id, as hex.
    pub trace_id: String,
    /// Its span id, as hex.
    pub span_id: String,
    /// Its parent's span id, as hex; empty for a root span.
    pub parent_span_id: String,
    /// Its attributes, each value as text.
    pub attributes: BTreeMap<String, String>,
    /// The (trace id, span id) of each span it links to, as hex.
    pub links: Vec<(String, String)>,
    /// When it started and ended, in nanoseconds since the epoch.
    pub times: (u64, u64),
}

impl Received {
    /// The attribute `key`, as text.
    pub fn attribute(&self, key: &str) -> Option<&str> {
        self.attributes.get(key).map(String::as_str)
    }
}

/// A running receiver; it stops when dropped.
#[derive(Debug)]
pub struct Receiver {
    addr: SocketAddr,
    spans: Arc<Mutex<Vec<Received>>>,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl Receiver {
    /// Starts a receiver on a free port of 127.0.0.1.
    pub async fn start() -> anyhow::Result<Receiver> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let spans = Arc::new(Mutex::new(Vec::new()));
        let app = axum::Router::new()
            .route("/v1/traces", axum::routing::post(traces))
            .with_state(spans.clone());
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(Receiver {
            addr,
            spans,
            server,
        })
    }

    /// The base URL a host is given as `OTEL_EXPORTER_OTLP_ENDPOINT`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every span received so far.
    pub fn spans(&self) -> Vec<Received> {
        self.spans.lock().unwrap().clone()
    }

    /// The spans named `name` whose attribute `key` is `value`.
    pub fn find(&self, name: &str, key: &str, value: &str) -> Vec<Received> {
        self.spans()
            .into_iter()
            .filter(|s| s.name == name && s.attribute(key) == Some(value))
            .collect()
    }
}

/// `POST /v1/traces`: decodes the request, keeps its spans, answers as a collector does.
async fn traces(
    State(spans): State<Arc<Mutex<Vec<Received>>>>,
    headers: HeaderMap,
    body: Bytes,
) -> axum::response::Response {
    // The host sends plain protobuf; a compressed body would be a change to notice here.
    if headers
        .get(header::CONTENT_ENCODING)
        .is_some_and(|e| e != "identity")
    {
        return (StatusCode::UNSUPPORTED_MEDIA_TYPE, "compressed body").into_response();
    }
    let request = match ExportTraceServiceRequest::decode(body) {
        Ok(request) => request,
        Err(e) => return (StatusCode::BAD_REQUEST, e.to_string()).into_response(),
    };
    let mut kept = spans.lock().unwrap();
    for resource_spans in request.resource_spans {
        let service = resource_spans
            .resource
            .as_ref()
            .and_then(|r| r.attributes.iter().find(|kv| kv.key == "service.name"))
            .map(|kv| text(kv.value.as_ref()))
            .unwrap_or_default();
        for scope in resource_spans.scope_spans {
            for span in scope.spans {
                kept.push(Received {
                    name: span.name,
                    service: service.clone(),
                    trace_id: hex(&span.trace_id),
                    span_id: hex(&span.span_id),
                    parent_span_id: hex(&span.parent_span_id),
                    attributes: attributes(&span.attributes),
                    links: span
                        .links
                        .iter()
                        .map(|l| (hex(&l.trace_id), hex(&l.span_id)))
                        .collect(),
                    times: (span.start_time_unix_nano, span.end_time_unix_nano),
                });
            }
        }
    }
    (
        [(header::CONTENT_TYPE, "application/x-protobuf")],
        ExportTraceServiceResponse::default().encode_to_vec(),
    )
        .into_response()
}

fn attributes(kvs: &[KeyValue]) -> BTreeMap<String, String> {
    kvs.iter()
        .map(|kv| (kv.key.clone(), text(kv.value.as_ref())))
        .collect()
}

fn text(value: Option<&AnyValue>) -> String {
    match value.and_then(|v| v.value.as_ref()) {
        Some(any_value::Value::StringValue(s)) => s.clone(),
        Some(any_value::Value::IntValue(i)) => i.to_string(),
        Some(any_value::Value::BoolValue(b)) => b.to_string(),
        Some(any_value::Value::DoubleValue(d)) => d.to_string(),
        Some(other) => format!("{other:?}"),
        None => String::new(),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A collector that accepts every connection and never answers, nor reads: requests to it hang
/// until the sender gives up. Stops when dropped.
#[derive(Debug)]
pub struct BlackHole {
    addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for BlackHole {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl BlackHole {
    /// The base URL a host is given as `OTEL_EXPORTER_OTLP_ENDPOINT`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }
}

/// Starts a [`BlackHole`] on a free port of 127.0.0.1.
pub async fn black_hole() -> anyhow::Result<BlackHole> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let task = tokio::spawn(async move {
        let mut held = Vec::new();
        // Bounded: a sender that opens connection after connection cannot grow this forever.
        while let Ok((socket, _)) = listener.accept().await {
            if held.len() < 1_024 {
                held.push(socket);
            }
        }
    });
    Ok(BlackHole { addr, task })
}

/// The base URL of a collector that is down: a free loopback port nothing listens on.
pub fn down() -> anyhow::Result<String> {
    Ok(format!("http://127.0.0.1:{}", crate::pg::free_port()?))
}

/// How long a test waits for spans that should come within the export's batch delay (~1 s).
pub const ARRIVAL: Duration = Duration::from_secs(10);

/// A `leasehold_trace_spans_{name}_total` counter (`exported`, `dropped`, `export_failed`) of
/// a host's `/metrics` text, if it has one.
pub fn span_counter(metrics: &str, name: &str) -> Option<f64> {
    let line = format!("leasehold_trace_spans_{name}_total ");
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(&line)?.trim().parse::<f64>().ok())
}
