//! Prometheus metrics: what every layer's figures share. Each layer owns its family struct and
//! registers it itself (`LeaseMetrics` in the lease crate, `runtime::PluginMetrics`,
//! `supervisor::ProcessMetrics`, `http::HttpMetrics`); the composition root registers them in
//! turn into one [`Exposition`], which `/metrics` encodes. Names and labels are a contract for
//! dashboards: keep them.
//!
//! Order (each module may use only those listed before it; `host/tests/layers.rs` checks):
//!
//! 1. [`labels`]: the per-plugin label, which the output rate counts under too;
//! 2. [`exposition`]: the registry `/metrics` encodes.

mod exposition;
mod labels;

pub use self::exposition::Exposition;
pub use self::labels::PluginLabel;
pub use leasehold_lease::metrics::{FloatGauge, LabelText, LeaseMetrics, fast_latency};
