//! The bounded queue between the host and the OTLP exporter. Finished spans are handed over
//! with a `try_send` into a channel of fixed size, and an export thread of its own batches them
//! into opentelemetry-otlp's exporter. Nothing the host does ever waits on the collector: when the
//! queue is full (a collector slow to answer, or gone) a span is dropped and counted, where the
//! SDK's batch processor would drop it silently.

use std::sync::Arc;
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::time::{Duration, Instant};

use opentelemetry::Context;
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::trace::{Span, SpanData, SpanExporter, SpanProcessor};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::registry::Registry;

/// How many finished spans wait for the exporter at most. A host's own spans come in a few a
/// second (terms, plugin calls, process starts, store calls other than renewals): 2,048 is
/// minutes of them, or the burst of 1,000 leases changing hands at once, for ~1 MiB.
pub(crate) const CAPACITY: usize = 2_048;

/// The most spans one export request carries: the OpenTelemetry SDK's own default.
const MAX_BATCH: usize = 512;

/// How long a span waits for others before it is sent: a term's acquisition shows at the
/// collector within about a second, at the cost of one request a second at most.
pub(crate) const BATCH_DELAY: Duration = Duration::from_secs(1);

/// What a finished span costs if it cannot be exported, counted for `/metrics`.
#[derive(Debug, Default)]
pub(crate) struct QueueMetrics {
    /// Spans dropped because the queue was full: the exporter was behind.
    pub(crate) dropped: Counter,
    /// Spans lost because their export failed (the collector refused, timed out or is down).
    pub(crate) failed: Counter,
    /// Spans the collector accepted.
    pub(crate) exported: Counter,
}

impl QueueMetrics {
    /// Registers every metric with `registry`, in the order `/metrics` lists them.
    pub(crate) fn register(&self, registry: &mut Registry) {
        registry.register(
            "leasehold_trace_spans_dropped",
            "Finished spans dropped because the export queue was full (the OTLP collector was slow or gone)",
            self.dropped.clone(),
        );
        registry.register(
            "leasehold_trace_spans_export_failed",
            "Spans lost because their OTLP export failed (refused, timed out or nothing listening)",
            self.failed.clone(),
        );
        registry.register(
            "leasehold_trace_spans_exported",
            "Spans the OTLP collector accepted",
            self.exported.clone(),
        );
    }
}

/// What the export thread is handed.
enum Item {
    /// A finished span.
    Span(Box<SpanData>),
    /// Export what is queued, then answer.
    Flush(SyncSender<()>),
    /// Export what is queued, shut the exporter down, answer and end.
    Shutdown(SyncSender<()>),
}

/// The [`SpanProcessor`] the tracer provider runs, and the host's own way in for the spans it
/// builds itself (a term's, [`super::terms`]).
#[derive(Debug, Clone)]
pub(crate) struct Queue {
    tx: SyncSender<Item>,
    metrics: Arc<QueueMetrics>,
}

impl std::fmt::Debug for Item {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Item::Span(_) => "span",
            Item::Flush(_) => "flush",
            Item::Shutdown(_) => "shutdown",
        })
    }
}

impl Queue {
    /// Starts the export thread around `exporter`, whose requests each give up after `timeout`.
    pub(crate) fn start<E>(exporter: E, timeout: Duration) -> std::io::Result<Queue>
    where
        E: SpanExporter + 'static,
    {
        let (tx, rx) = std::sync::mpsc::sync_channel(CAPACITY);
        let metrics = Arc::new(QueueMetrics::default());
        let counted = metrics.clone();
        // The exporter's HTTP client is hyper's, which needs a Tokio runtime: one of its own on
        // this thread, so that a collector slow to answer never holds a worker of the host's.
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        std::thread::Builder::new()
            .name("leasehold-otlp".into())
            .spawn(move || runtime.block_on(export_loop(exporter, rx, timeout, counted)))?;
        Ok(Queue { tx, metrics })
    }

    /// The queue's figures.
    pub(crate) fn metrics(&self) -> &Arc<QueueMetrics> {
        &self.metrics
    }

    /// Queues `span`, or drops and counts it when the queue is full.
    pub(crate) fn push(&self, span: SpanData) {
        if self.tx.try_send(Item::Span(Box::new(span))).is_err() {
            self.metrics.dropped.inc();
        }
    }

    /// Asks the thread to export what is queued (or, with `shutdown`, to end as well) and waits
    /// until it says so or `timeout` passes.
    fn ask(&self, shutdown: bool, timeout: Duration) -> OTelSdkResult {
        let deadline = Instant::now() + timeout;
        let (done, answer) = std::sync::mpsc::sync_channel(1);
        let mut item = match shutdown {
            true => Item::Shutdown(done),
            false => Item::Flush(done),
        };
        // The queue may be full: the request waits for a place, never past the deadline.
        loop {
            match self.tx.try_send(item) {
                Ok(()) => break,
                Err(TrySendError::Full(back)) if Instant::now() < deadline => {
                    item = back;
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(TrySendError::Full(_)) => return Err(OTelSdkError::Timeout(timeout)),
                Err(TrySendError::Disconnected(_)) => return Err(OTelSdkError::AlreadyShutdown),
            }
        }
        let left = deadline.saturating_duration_since(Instant::now());
        answer
            .recv_timeout(left)
            .map_err(|_| OTelSdkError::Timeout(timeout))
    }

    /// Exports what is queued, waiting `timeout` at most.
    pub(crate) fn flush_within(&self, timeout: Duration) -> OTelSdkResult {
        self.ask(false, timeout)
    }
}

impl SpanProcessor for Queue {
    fn on_start(&self, _span: &mut Span, _cx: &Context) {}

    fn on_end(&self, span: SpanData) {
        self.push(span);
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.ask(false, Duration::from_secs(5))
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.ask(true, timeout)
    }
}

/// The export thread: a batch goes out when it is full or its first span has waited
/// [`BATCH_DELAY`], and on a flush.
async fn export_loop<E: SpanExporter>(
    exporter: E,
    rx: Receiver<Item>,
    timeout: Duration,
    metrics: Arc<QueueMetrics>,
) {
    let mut batch: Vec<SpanData> = Vec::with_capacity(MAX_BATCH);
    let mut due: Option<Instant> = None;
    loop {
        let item = match due {
            Some(at) => rx.recv_timeout(at.saturating_duration_since(Instant::now())),
            None => rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
        };
        match item {
            Ok(Item::Span(span)) => {
                batch.push(*span);
                due.get_or_insert_with(|| Instant::now() + BATCH_DELAY);
                if batch.len() >= MAX_BATCH {
                    send(&exporter, &mut batch, timeout, &metrics).await;
                    due = None;
                }
            }
            Ok(Item::Flush(done)) => {
                send(&exporter, &mut batch, timeout, &metrics).await;
                due = None;
                let _ = done.send(());
            }
            Ok(Item::Shutdown(done)) => {
                send(&exporter, &mut batch, timeout, &metrics).await;
                let _ = exporter.shutdown();
                let _ = done.send(());
                return;
            }
            Err(RecvTimeoutError::Timeout) => {
                send(&exporter, &mut batch, timeout, &metrics).await;
                due = None;
            }
            Err(RecvTimeoutError::Disconnected) => {
                send(&exporter, &mut batch, timeout, &metrics).await;
                return;
            }
        }
    }
}

/// Exports `batch` (emptying it), giving up after `timeout`; counts what was lost.
async fn send<E: SpanExporter>(
    exporter: &E,
    batch: &mut Vec<SpanData>,
    timeout: Duration,
    metrics: &QueueMetrics,
) {
    if batch.is_empty() {
        return;
    }
    let spans = std::mem::take(batch);
    let n = spans.len() as u64;
    // The exporter's client has the same timeout; this one also bounds its retries.
    match tokio::time::timeout(timeout, exporter.export(spans)).await {
        Ok(Ok(())) => {
            metrics.exported.inc_by(n);
        }
        _ => {
            metrics.failed.inc_by(n);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// An exporter that keeps what it is sent.
    #[derive(Debug, Clone, Default)]
    struct Kept(Arc<Mutex<usize>>);

    impl SpanExporter for Kept {
        async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
            *self.0.lock().unwrap() += batch.len();
            Ok(())
        }
    }

    #[test]
    fn spans_are_exported_on_a_flush_and_a_full_queue_drops_and_counts_instead_of_waiting() {
        let exporter = Kept::default();
        let queue = Queue::start(exporter.clone(), Duration::from_secs(1)).unwrap();
        let span = || SpanData {
            span_context: opentelemetry::trace::SpanContext::empty_context(),
            parent_span_id: opentelemetry::trace::SpanId::INVALID,
            parent_span_is_remote: false,
            span_kind: opentelemetry::trace::SpanKind::Internal,
            name: "test".into(),
            start_time: std::time::SystemTime::now(),
            end_time: std::time::SystemTime::now(),
            attributes: Vec::new(),
            dropped_attributes_count: 0,
            events: Default::default(),
            links: Default::default(),
            status: opentelemetry::trace::Status::Unset,
            instrumentation_scope: Default::default(),
        };
        queue.push(span());
        queue.flush_within(Duration::from_secs(5)).unwrap();
        assert_eq!(*exporter.0.lock().unwrap(), 1);
        assert_eq!(queue.metrics().exported.get(), 1);
        // Far more than the queue holds, pushed at once: none of the pushes waits.
        let started = Instant::now();
        for _ in 0..CAPACITY * 4 {
            queue.push(span());
        }
        assert!(started.elapsed() < Duration::from_secs(1));
        queue.flush_within(Duration::from_secs(5)).unwrap();
        let m = queue.metrics();
        assert_eq!(
            m.exported.get() + m.dropped.get(),
            1 + CAPACITY as u64 * 4,
            "every span is either exported or counted as dropped"
        );
    }
}
