//! What the lease API's watchers cost (streams open, those refused, and those dropped for not
//! reading), and what the endpoint reads and writes of the other layers' metrics.

use std::sync::Arc;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::metrics::{Exposition, LeaseMetrics};

/// The HTTP thread's figures.
#[derive(Debug, Default)]
pub struct HttpMetrics {
    /// Watch streams of the lease API open now.
    pub(crate) watchers: Gauge,
    /// Watch streams refused because as many as this replica serves, or as many as one address
    /// may hold, were open.
    pub(crate) watchers_refused: Counter,
    /// Watch streams dropped because their client left their events unread.
    pub(crate) watchers_stalled: Counter,
}

impl HttpMetrics {
    /// Every HTTP metric, empty and not yet registered.
    pub fn new() -> Arc<Self> {
        Arc::default()
    }

    /// Registers every metric with `registry`, in the order `/metrics` lists them.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "leasehold_http_watchers",
            "Watch streams of the lease API (/v1/leases/NAME/watch) open now",
            self.watchers.clone(),
        );
        registry.register(
            "leasehold_http_watchers_refused",
            "Watch streams refused (503) because as many as this replica serves, or as many as one address may hold, were open",
            self.watchers_refused.clone(),
        );
        registry.register(
            "leasehold_http_watchers_stalled",
            "Watch streams dropped because their client left their events unsent for several heartbeats (it stopped reading)",
            self.watchers_stalled.clone(),
        );
    }
}

/// The metrics the endpoint touches: it encodes them all, sets the leases' time left at each
/// scrape and counts its own watchers.
#[derive(Debug, Clone, Default)]
pub struct EndpointMetrics {
    /// Every registered metric, as `/metrics` encodes them.
    pub exposition: Arc<Exposition>,
    /// The lease layer's, whose time left is a moving value computed at scrape time.
    pub lease: Arc<LeaseMetrics>,
    /// The endpoint's own.
    pub http: Arc<HttpMetrics>,
}
