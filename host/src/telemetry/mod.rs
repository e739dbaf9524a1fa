//! OpenTelemetry trace export over OTLP (HTTP/protobuf), off unless an endpoint is set: with
//! none, no layer, no thread, nothing. When on, it reports:
//!
//! - a span per leadership term, and a "lease acquired" span as it starts ([`terms`]), with ids
//!   every replica derives alike ([`ids`]) so a term links to the one before it across a
//!   handoff or takeover;
//! - the `tracing` spans of the host and the lease layer, through `tracing-opentelemetry`: plugin
//!   calls, health checks, process and service runs under their term ([`within_term`]), store
//!   calls; but not the renewals, whose path stays as it is ([`layer`]);
//! - a `/v1` request's span under the caller's W3C `traceparent` ([`request_parent`]).
//!
//! Finished spans go through a bounded queue to an export thread of their own ([`queue`]): the
//! host never waits on the collector, and what it cannot take is dropped and counted in
//! `/metrics` ([`register`]). A graceful stop exports what is queued, within a bound ([`flush`]).
//!
//! Order (each module may use only those listed before it):
//!
//! 1. [`ids`]: a term's trace and span ids;
//! 2. [`queue`]: the bounded queue and the export thread;
//! 3. [`terms`]: the term spans, from the leases' watches.

mod ids;
mod queue;
mod terms;

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use opentelemetry::trace::{TraceContextExt, TracerProvider as _};
use opentelemetry::{Context, KeyValue};
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::resource::{EnvResourceDetector, TelemetryResourceDetector};
use opentelemetry_sdk::trace::SdkTracerProvider;
use prometheus_client::registry::Registry;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Subscriber;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::Layer;
use tracing_subscriber::registry::LookupSpan;

use crate::lease::{Epoch, Leases};

/// The standard variable that turns export on: the collector's base URL (`/v1/traces` is added).
pub(crate) const ENDPOINT_VARIABLE: &str = "OTEL_EXPORTER_OTLP_ENDPOINT";

/// The trace signal's own endpoint variable: a full URL, used as it is.
pub(crate) const TRACES_ENDPOINT_VARIABLE: &str = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT";

/// The service name when neither `OTEL_SERVICE_NAME`, `service.name` in
/// `OTEL_RESOURCE_ATTRIBUTES`, nor the file names one: what sent the spans, where the SDK would say
/// `unknown_service`. It is also the namespace of the terms' ids, which all replicas of a
/// deployment must share, so it is the same for all of them.
pub(crate) const DEFAULT_SERVICE_NAME: &str = "leasehold";

/// How long one export request may take before its spans count as lost. Shorter than the SDK's
/// 10 s: the queue keeps filling meanwhile, and a graceful stop's flush waits for one request.
pub(crate) const EXPORT_TIMEOUT: Duration = Duration::from_secs(3);

/// How long a graceful stop waits for what is queued to be exported, at most: well inside the
/// default shutdown grace, and short enough that a collector gone does not hold the exit.
pub(crate) const FLUSH_TIMEOUT: Duration = Duration::from_secs(3);

/// The file's `[telemetry]` table, as the composition root hands it over; the standard
/// variables win over each key. Serialised as the effective configuration shows it.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Settings {
    /// The collector's base URL, as `OTEL_EXPORTER_OTLP_ENDPOINT` gives it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// The service name, as `OTEL_SERVICE_NAME` gives it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub service_name: Option<String>,
    /// Resource attributes, as `OTEL_RESOURCE_ATTRIBUTES` gives them.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub resource_attributes: BTreeMap<String, String>,
}

/// Why export could not start.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    /// The exporter refused its settings (an endpoint that is not a URL, say).
    #[error("cannot set up OTLP trace export: {0}")]
    Exporter(#[from] opentelemetry_otlp::ExporterBuildError),
    /// The endpoint is `https://`, which the exporter's client does not speak.
    #[error(
        "the OTLP endpoint {0} is https, which leasehold's exporter does not speak: point it at a local collector or agent over http://"
    )]
    Https(String),
    /// The export thread could not be started.
    #[error("cannot start the OTLP export thread: {0}")]
    Thread(#[source] std::io::Error),
}

/// Trace export, once started.
#[derive(Debug)]
pub(crate) struct Telemetry {
    /// The namespace of the terms' ids: the service name.
    namespace: String,
    /// Where finished spans go.
    queue: queue::Queue,
    /// The tracer provider of the `tracing` layer.
    provider: SdkTracerProvider,
}

/// The one export of this process: the `tracing` layer and the lease watches feed the same.
static ACTIVE: OnceLock<Telemetry> = OnceLock::new();

impl Settings {
    /// The endpoint to send to, when export is on: the trace variable, the general one, or the
    /// file's (in that order); `None` when none is set or `OTEL_SDK_DISABLED` is `true`.
    pub fn endpoint(&self, env: impl Fn(&str) -> Option<String>) -> Option<String> {
        let set = |name: &str| env(name).filter(|v| !v.trim().is_empty());
        if set("OTEL_SDK_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true")) {
            return None;
        }
        if let Some(url) = set(TRACES_ENDPOINT_VARIABLE) {
            return Some(url);
        }
        set(ENDPOINT_VARIABLE)
            .or_else(|| self.endpoint.clone())
            .map(|base| format!("{}/v1/traces", base.trim_end_matches('/')))
    }

    /// Whether the file sets nothing (the effective configuration then leaves the table out).
    pub fn is_empty(&self) -> bool {
        self == &Self::default()
    }

    /// Where spans would go and under which service name, as `start` would set it up, for
    /// `leasehold config check`; an endpoint `start` would refuse is the same error here.
    pub fn describe(&self, env: impl Fn(&str) -> Option<String>) -> Result<String, TelemetryError> {
        let Some(endpoint) = self.endpoint(&env) else {
            return Ok("off (no OTLP endpoint is set, or OTEL_SDK_DISABLED is true)".to_string());
        };
        refuse_https(&endpoint)?;
        let service = resource(self, &env)
            .get(&opentelemetry::Key::new("service.name"))
            .map(|v| v.to_string())
            .unwrap_or_else(|| DEFAULT_SERVICE_NAME.to_string());
        Ok(format!(
            "spans go to {endpoint} over OTLP/HTTP as service {service:?}"
        ))
    }
}

/// Refused at start rather than failing every export in silence.
fn refuse_https(endpoint: &str) -> Result<(), TelemetryError> {
    match endpoint.trim().to_ascii_lowercase().starts_with("https:") {
        true => Err(TelemetryError::Https(endpoint.to_string())),
        false => Ok(()),
    }
}

/// Starts export when an endpoint is set (see [`Settings::endpoint`]); says whether it did.
/// Called once, before the log's subscriber is installed, so that [`layer`] finds it.
pub fn start(
    settings: &Settings,
    env: impl Fn(&str) -> Option<String>,
) -> Result<bool, TelemetryError> {
    let Some(endpoint) = settings.endpoint(&env) else {
        return Ok(false);
    };
    if ACTIVE.get().is_some() {
        return Ok(true);
    }
    refuse_https(&endpoint)?;
    let resource = resource(settings, &env);
    let namespace = resource
        .get(&opentelemetry::Key::new("service.name"))
        .map(|v| v.to_string())
        .unwrap_or_else(|| DEFAULT_SERVICE_NAME.to_string());
    let mut exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
        .with_endpoint(endpoint)
        .with_timeout(EXPORT_TIMEOUT)
        .with_headers(Default::default())
        .build()?;
    opentelemetry_sdk::trace::SpanExporter::set_resource(&mut exporter, &resource);
    let queue = queue::Queue::start(exporter, EXPORT_TIMEOUT).map_err(TelemetryError::Thread)?;
    let provider = SdkTracerProvider::builder()
        .with_span_processor(queue.clone())
        .with_resource(resource)
        .build();
    let _ = ACTIVE.set(Telemetry {
        namespace,
        queue,
        provider,
    });
    Ok(true)
}

/// The resource: the file's attributes, then `OTEL_RESOURCE_ATTRIBUTES` over them, then the
/// service name (`OTEL_SERVICE_NAME`, else one of those, else the file's, else
/// [`DEFAULT_SERVICE_NAME`]).
fn resource(settings: &Settings, env: &impl Fn(&str) -> Option<String>) -> Resource {
    let base = Resource::builder_empty()
        .with_attributes(
            settings
                .resource_attributes
                .iter()
                .map(|(k, v)| KeyValue::new(k.clone(), v.clone())),
        )
        .with_detectors(&[
            Box::new(TelemetryResourceDetector),
            Box::new(EnvResourceDetector::new()),
        ])
        .build();
    let named = base
        .get(&opentelemetry::Key::new("service.name"))
        .map(|v| v.to_string());
    let service = env("OTEL_SERVICE_NAME")
        .filter(|v| !v.trim().is_empty())
        .or(named)
        .or_else(|| settings.service_name.clone())
        .unwrap_or_else(|| DEFAULT_SERVICE_NAME.to_string());
    Resource::builder_empty()
        .with_attributes(
            base.iter()
                .map(|(k, v)| KeyValue::new(k.clone(), v.clone())),
        )
        .with_service_name(service)
        .build()
}

/// The `tracing` layer that turns spans into OpenTelemetry spans, when export is on. Only the
/// host's own spans at info and above, and never a renewal's: a host of 1,000 leases renews all
/// of them every ttl/3, and nothing of export may cost that path anything.
pub fn layer<S>() -> Option<impl Layer<S> + Send + Sync>
where
    S: Subscriber + for<'a> LookupSpan<'a> + Send + Sync,
{
    let telemetry = ACTIVE.get()?;
    let tracer = telemetry.provider.tracer("leasehold");
    // Decided once per callsite (the filter reads metadata alone); the level hint keeps the
    // subscriber's maximum level where the log's filter has it, so the debug and trace
    // callsites of the dependencies stay off.
    let filter = tracing_subscriber::filter::filter_fn(|meta| {
        meta.target().starts_with("leasehold")
            && *meta.level() <= tracing::Level::INFO
            && !(meta.is_span() && meta.name() == "renew")
    })
    .with_max_level_hint(tracing::Level::INFO);
    Some(
        tracing_opentelemetry::layer()
            .with_tracer(tracer)
            .with_threads(false)
            .with_tracked_inactivity(false)
            .with_filter(filter),
    )
}

/// Whether export is on.
pub fn enabled() -> bool {
    ACTIVE.get().is_some()
}

/// Makes `span` (not yet entered) a child of the span of the term of `lease` at `epoch`.
pub fn within_term(span: &tracing::Span, lease: &str, epoch: Epoch) {
    if let Some(telemetry) = ACTIVE.get() {
        let term = ids::term_context(&telemetry.namespace, lease, epoch.get());
        let _ = span.set_parent(Context::new().with_remote_span_context(term));
    }
}

/// Makes `span` (not yet entered) a child of the W3C `traceparent` of a request's `headers`, when
/// export is on and it carries one.
pub fn request_parent(span: &tracing::Span, headers: &axum::http::HeaderMap) {
    if ACTIVE.get().is_none() || !headers.contains_key("traceparent") {
        return;
    }
    use opentelemetry::propagation::TextMapPropagator;
    let parent =
        TraceContextPropagator::new().extract(&opentelemetry_http::HeaderExtractor(headers));
    if parent.span().span_context().is_valid() {
        let _ = span.set_parent(parent);
    }
}

/// Registers the export's metrics with `registry`, when export is on.
pub fn register(registry: &mut Registry) {
    if let Some(telemetry) = ACTIVE.get() {
        telemetry.queue.metrics().register(registry);
    }
}

/// Reports every term of `leases` until `root` is cancelled, under `tasks`, when export is on.
pub fn follow_terms(leases: &Arc<Leases>, root: &CancellationToken, tasks: &TaskTracker) {
    if let Some(telemetry) = ACTIVE.get() {
        let sink = terms::Sink {
            namespace: &telemetry.namespace,
            queue: &telemetry.queue,
        };
        terms::follow(sink, leases, root, tasks);
    }
}

/// Exports what is queued, waiting [`FLUSH_TIMEOUT`] at most; says how it went, when on.
pub fn flush() -> Option<Result<(), String>> {
    let telemetry = ACTIVE.get()?;
    Some(
        telemetry
            .queue
            .flush_within(FLUSH_TIMEOUT)
            .map_err(|e| e.to_string()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(vars: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |name| {
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn export_is_off_unless_an_endpoint_is_set_and_the_variables_win_over_the_file() {
        let none = Settings::default();
        assert_eq!(none.endpoint(env(&[])), None);
        let file = Settings {
            endpoint: Some("http://file:4318/".into()),
            ..Settings::default()
        };
        assert_eq!(
            file.endpoint(env(&[])).as_deref(),
            Some("http://file:4318/v1/traces")
        );
        assert_eq!(
            file.endpoint(env(&[(ENDPOINT_VARIABLE, "http://var:4318")]))
                .as_deref(),
            Some("http://var:4318/v1/traces")
        );
        assert_eq!(
            file.endpoint(env(&[
                (ENDPOINT_VARIABLE, "http://var:4318"),
                (TRACES_ENDPOINT_VARIABLE, "http://traces/x")
            ]))
            .as_deref(),
            Some("http://traces/x")
        );
        assert_eq!(
            file.endpoint(env(&[("OTEL_SDK_DISABLED", "true")])),
            None,
            "the standard switch turns it off whatever is set"
        );
    }

    #[test]
    fn an_https_endpoint_is_refused_at_start_naming_it() {
        let e = start(
            &Settings::default(),
            env(&[(ENDPOINT_VARIABLE, "https://c:4318")]),
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("https://c:4318/v1/traces") && e.contains("http://"),
            "{e}"
        );
    }

    #[test]
    fn the_service_name_is_the_variable_then_the_attributes_then_the_file_then_leasehold() {
        let name = |settings: &Settings, vars| {
            resource(settings, &env(vars))
                .get(&opentelemetry::Key::new("service.name"))
                .map(|v| v.to_string())
        };
        let file = Settings {
            service_name: Some("from-file".into()),
            ..Settings::default()
        };
        assert_eq!(
            name(&Settings::default(), &[]).as_deref(),
            Some("leasehold")
        );
        assert_eq!(name(&file, &[]).as_deref(), Some("from-file"));
        assert_eq!(
            name(&file, &[("OTEL_SERVICE_NAME", "from-var")]).as_deref(),
            Some("from-var")
        );
    }
}
