//! The label every per-plugin series carries: the rate of bound work's output counts under it
//! too, below the runtime that owns the plugins' other figures.

use prometheus_client::encoding::EncodeLabelSet;

use super::LabelText;

/// Labels of a per-plugin metric.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PluginLabel {
    /// The plugin name (or a bound process's, for its dropped output).
    pub plugin: LabelText,
}

impl PluginLabel {
    /// The label of `name`.
    pub fn of(name: &str) -> Self {
        PluginLabel {
            plugin: name.into(),
        }
    }
}
