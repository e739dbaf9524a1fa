//! The guest runtime's figures, per plugin: calls, traps, errors, fuel, memory, refused writes,
//! forced stops, dropped output and live stores. `/status` reads a plugin's totals from here
//! too, so the two never disagree.

use std::sync::Arc;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::metrics::{LabelText, PluginLabel, fast_latency};

/// Labels of a per-plugin count by kind (of trap).
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct PluginKindLabel {
    /// The plugin name.
    pub plugin: LabelText,
    /// What happened: one of [`TRAP_KINDS`].
    pub kind: LabelText,
}

/// Every kind of trap `plugin_traps` counts; a plugin's traps are the sum over them.
pub(crate) const TRAP_KINDS: [&str; 5] = ["timeout", "fuel", "memory", "stack", "trap"];

/// A plugin's totals since the process started, as `/status` shows them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct PluginCounts {
    /// Guest calls entered (`plugin_calls`).
    pub calls: u64,
    /// Calls and instantiations that trapped, of any kind (`plugin_traps`).
    pub traps: u64,
    /// Calls that returned an error (`plugin_errors`).
    pub errors: u64,
    /// Calls cut off by force because their term ended (`plugin_forced_stops`).
    pub forced_stops: u64,
    /// Writes refused by the fence (`plugin_refused_writes`).
    pub refused_writes: u64,
    /// Fuel burnt by calls and instantiations (`plugin_fuel`).
    pub fuel: u64,
    /// The largest linear memory an instance grew to, in bytes (`plugin_memory_bytes`).
    pub memory_high_water_bytes: u64,
}

type HistogramMaker = fn() -> Histogram;

/// Fuel per call: 1,000 units to ~10¹³ (the default budget is 10¹¹).
fn fuel_per_call() -> Histogram {
    Histogram::new(exponential_buckets(1_000.0, 10.0, 11))
}

/// Every per-plugin metric.
#[derive(Debug)]
pub struct PluginMetrics {
    /// Guest calls (init, reconcile, handle-event, check), counted as they enter the guest so that
    /// one that does not return shows; instantiations are not calls.
    calls: Family<PluginLabel, Counter>,
    /// Guest call durations.
    call_seconds: Family<PluginLabel, Histogram, HistogramMaker>,
    /// Calls that trapped, by kind.
    traps: Family<PluginKindLabel, Counter>,
    /// Calls that returned an error.
    errors: Family<PluginLabel, Counter>,
    /// Fuel burnt (engines that meter fuel).
    fuel: Family<PluginLabel, Counter>,
    /// Fuel burnt per call (engines that meter fuel).
    call_fuel: Family<PluginLabel, Histogram, HistogramMaker>,
    /// The largest linear memory a plugin instance grew to.
    memory_bytes: Family<PluginLabel, Gauge>,
    /// Writes refused by the fence.
    refused_writes: Family<PluginLabel, Counter>,
    /// Guest calls the host cut off by force because their term ended (lease lost, released or
    /// shutdown) while they ran: a call's own deadline counts as a `timeout` trap instead.
    forced_stops: Family<PluginLabel, Counter>,
    /// Lines of a plugin's output (log, stdout, stderr) not written to the host's log: over a
    /// call's budget or over the plugin's rate. A bound process's count here too, under its name.
    pub(crate) log_dropped: Family<PluginLabel, Counter>,
    /// Stores (instances and their memory) a plugin holds on this replica now.
    stores: Family<PluginLabel, Gauge>,
}

impl Default for PluginMetrics {
    fn default() -> Self {
        PluginMetrics {
            calls: Family::default(),
            call_seconds: Family::new_with_constructor(fast_latency),
            traps: Family::default(),
            errors: Family::default(),
            fuel: Family::default(),
            call_fuel: Family::new_with_constructor(fuel_per_call),
            memory_bytes: Family::default(),
            refused_writes: Family::default(),
            forced_stops: Family::default(),
            log_dropped: Family::default(),
            stores: Family::default(),
        }
    }
}

/// One live store of a plugin, counted in `leasehold_plugin_stores` until dropped.
#[derive(Debug)]
pub struct StoreAlive(Gauge);

impl Drop for StoreAlive {
    fn drop(&mut self) {
        self.0.dec();
    }
}

impl PluginMetrics {
    /// Every per-plugin metric, empty and not yet registered.
    pub fn new() -> Arc<Self> {
        Arc::default()
    }

    /// Registers every family with `registry`, in the order `/metrics` lists them.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "leasehold_plugin_calls",
            "Guest calls (init, reconcile, handle-event, check)",
            self.calls.clone(),
        );
        registry.register(
            "leasehold_plugin_call_seconds",
            "Guest call durations",
            self.call_seconds.clone(),
        );
        registry.register(
            "leasehold_plugin_traps",
            "Calls that trapped, by kind (timeout, fuel, memory, stack, trap)",
            self.traps.clone(),
        );
        registry.register(
            "leasehold_plugin_errors",
            "Calls that returned an error",
            self.errors.clone(),
        );
        registry.register(
            "leasehold_plugin_fuel_consumed",
            "Fuel burnt by calls (when the engine meters fuel)",
            self.fuel.clone(),
        );
        registry.register(
            "leasehold_plugin_call_fuel",
            "Fuel burnt per call (when the engine meters fuel)",
            self.call_fuel.clone(),
        );
        registry.register(
            "leasehold_plugin_memory_high_water_bytes",
            "The largest linear memory an instance of the plugin grew to",
            self.memory_bytes.clone(),
        );
        registry.register(
            "leasehold_plugin_refused_writes",
            "Writes refused by the fence (lease-lost)",
            self.refused_writes.clone(),
        );
        registry.register(
            "leasehold_plugin_forced_stops",
            "Guest calls cut off by force because their term ended while they ran",
            self.forced_stops.clone(),
        );
        registry.register(
            "leasehold_plugin_log_dropped",
            "Lines of the plugin's output not written to the host's log: over a call's budget or the plugin's rate",
            self.log_dropped.clone(),
        );
        registry.register(
            "leasehold_plugin_stores",
            "Stores (instances and their memory) the plugin holds on this replica now",
            self.stores.clone(),
        );
    }

    /// Counts one live store of `plugin` until the returned guard is dropped: hold it beside
    /// the store, declared before it, so that it counts down once the store is gone.
    ///
    /// A plugin's failure counters start at 0 here, on the replica that runs it: an alert's
    /// `increase()` then sees the first error, trap, refused write or forced stop too.
    pub fn store_alive(&self, plugin: &str) -> StoreAlive {
        let label = PluginLabel::of(plugin);
        for family in [
            &self.errors,
            &self.refused_writes,
            &self.forced_stops,
            &self.log_dropped,
        ] {
            family.get_or_create(&label).inc_by(0);
        }
        for kind in TRAP_KINDS {
            self.traps
                .get_or_create(&PluginKindLabel {
                    plugin: plugin.into(),
                    kind: kind.into(),
                })
                .inc_by(0);
        }
        let gauge = self.stores.get_or_create(&label).clone();
        gauge.inc();
        StoreAlive(gauge)
    }

    /// The counter of `plugin`'s guest calls, to be incremented as each call enters the guest
    /// (not on instantiation); the call is recorded with [`PluginMetrics::record_call`] when it
    /// ends.
    pub fn calls_of(&self, plugin: &str) -> Counter {
        self.calls.get_or_create(&PluginLabel::of(plugin)).clone()
    }

    /// Records one finished guest call or instantiation of `plugin`: how long it took, the kind of
    /// trap that ended it, whether it returned an error, the fuel it burnt, its instance's memory
    /// high-water mark and the writes the fence refused during it. A call was counted when it
    /// started ([`PluginMetrics::calls_of`]).
    #[allow(clippy::too_many_arguments)] // one call's report, recorded in one place
    pub fn record_call(
        &self,
        plugin: &str,
        took: Duration,
        trap: Option<&str>,
        error: bool,
        fuel: Option<u64>,
        memory_high_water: usize,
        refused_writes: u64,
    ) {
        let label = PluginLabel::of(plugin);
        self.call_seconds
            .get_or_create(&label)
            .observe(took.as_secs_f64());
        if let Some(kind) = trap {
            self.traps
                .get_or_create(&PluginKindLabel {
                    plugin: plugin.into(),
                    kind: kind.into(),
                })
                .inc();
        }
        if error {
            self.errors.get_or_create(&label).inc();
        }
        if let Some(fuel) = fuel {
            self.fuel.get_or_create(&label).inc_by(fuel);
            // Precision beyond 2⁵³ units does not matter for a histogram.
            #[allow(clippy::cast_precision_loss)]
            self.call_fuel.get_or_create(&label).observe(fuel as f64);
        }
        let high_water = i64::try_from(memory_high_water).unwrap_or(i64::MAX);
        let gauge = self.memory_bytes.get_or_create(&label);
        if high_water > gauge.get() {
            gauge.set(high_water);
        }
        if refused_writes > 0 {
            self.refused_writes
                .get_or_create(&label)
                .inc_by(refused_writes);
        }
    }

    /// Counts a guest call of `plugin` cut off by force because its term ended while it ran.
    pub(crate) fn forced_stop(&self, plugin: &str) {
        self.forced_stops
            .get_or_create(&PluginLabel::of(plugin))
            .inc();
    }

    /// `plugin`'s totals, read without adding a series for a plugin (or a kind of trap) that has
    /// none yet.
    pub(crate) fn plugin_counts(&self, plugin: &str) -> PluginCounts {
        let label = PluginLabel::of(plugin);
        let count =
            |family: &Family<PluginLabel, Counter>| family.get(&label).map_or(0, |c| c.get());
        let traps = TRAP_KINDS
            .iter()
            .filter_map(|kind| {
                self.traps.get(&PluginKindLabel {
                    plugin: plugin.into(),
                    kind: (*kind).into(),
                })
            })
            .map(|c| c.get())
            .sum();
        let memory_high_water_bytes = self
            .memory_bytes
            .get(&label)
            .map_or(0, |g| u64::try_from(g.get()).unwrap_or(0));
        PluginCounts {
            calls: count(&self.calls),
            traps,
            errors: count(&self.errors),
            forced_stops: count(&self.forced_stops),
            refused_writes: count(&self.refused_writes),
            fuel: count(&self.fuel),
            memory_high_water_bytes,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::Exposition;

    fn exposition(m: &PluginMetrics) -> Exposition {
        let mut registry = Registry::default();
        m.register(&mut registry);
        Exposition::new(registry)
    }

    #[test]
    fn plugin_counts_add_up_what_was_recorded_and_create_no_series() {
        let m = PluginMetrics::new();
        assert_eq!(m.plugin_counts("p"), PluginCounts::default());
        let shown = exposition(&m);
        assert!(
            !shown.encode().contains("plugin=\"p\""),
            "{}",
            shown.encode()
        );
        let took = Duration::from_millis(1);
        // An instantiation that trapped: no call, but its trap and fuel count.
        m.record_call("p", took, Some("timeout"), false, Some(10), 0, 0);
        m.calls_of("p").inc();
        m.record_call("p", took, Some("fuel"), false, Some(5), 65_536, 2);
        m.calls_of("p").inc();
        m.record_call("p", took, None, true, None, 131_072, 0);
        // A later, smaller instance leaves the high water where it was.
        m.calls_of("p").inc();
        m.record_call("p", took, None, true, None, 65_536, 0);
        m.forced_stop("p");
        m.calls_of("other").inc();
        assert_eq!(
            m.plugin_counts("p"),
            PluginCounts {
                calls: 3,
                traps: 2,
                errors: 2,
                forced_stops: 1,
                refused_writes: 2,
                fuel: 15,
                memory_high_water_bytes: 131_072,
            }
        );
    }
}
