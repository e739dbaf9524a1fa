//! The registry `/metrics` encodes: filled once by the composition root, from each layer's own
//! family struct in turn, then only read.

use prometheus_client::registry::Registry;

/// Every registered metric, as `/metrics` shows them.
#[derive(Debug, Default)]
pub struct Exposition {
    registry: Registry,
}

impl Exposition {
    /// The exposition of what `registry` holds; nothing can be registered after.
    pub fn new(registry: Registry) -> Self {
        Exposition { registry }
    }

    /// The text exposition of every metric.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}
