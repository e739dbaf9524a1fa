//! Prometheus metrics: one registry per process, written by the lease driver and the plugin
//! runtime, read by `/metrics`. Names and labels are a contract for dashboards: keep them.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

mod process;
pub use process::{ProcessEndLabel, ProcessLabel, ProcessMetrics};

/// A label value, escaped as the Prometheus and OpenMetrics text formats require (`\` as `\\`,
/// `"` as `\"`, a line feed as `\n`) when `/metrics` writes it: prometheus-client 0.24 writes
/// label values as they are, so a value holding a quote or a line break would end its series and
/// forge others. Names are checked where they enter; this holds whatever gets through.
#[derive(Debug, Clone, Hash, PartialEq, Eq)]
pub struct LabelText(pub String);

impl From<&str> for LabelText {
    fn from(text: &str) -> Self {
        LabelText(text.to_string())
    }
}

impl EncodeLabelValue for LabelText {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        use std::fmt::Write;
        let mut rest = self.0.as_str();
        while let Some(at) = rest.find(['\\', '"', '\n']) {
            encoder.write_str(&rest[..at])?;
            encoder.write_str(match rest.as_bytes()[at] {
                b'\\' => "\\\\",
                b'"' => "\\\"",
                _ => "\\n",
            })?;
            rest = &rest[at + 1..];
        }
        encoder.write_str(rest)
    }
}

/// Labels of a per-lease metric.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LeaseLabel {
    /// The lease name.
    pub lease: LabelText,
}

/// Labels of a per-group metric.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct GroupLabel {
    /// The lease group's name.
    pub group: LabelText,
}

/// Labels of a count of leases by role.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RoleLabel {
    /// `leader`, `standby` or `uncertain`.
    pub role: LabelText,
}

/// Labels of a count of failed store calls.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StoreErrorLabel {
    /// The lease loop's operation: `campaign`, `renew`, `release` or `heartbeat`.
    pub op: LabelText,
    /// Why it failed: one of `lease::health::Cause`'s labels (`refused`, `closed`, `reset`,
    /// `timeout`, `read_only`, `restarting`, `connection`, `permission`, `schema`, `protocol`,
    /// `conflict`, `other`).
    pub cause: LabelText,
}

/// Labels of a per-plugin metric.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PluginLabel {
    /// The plugin name.
    pub plugin: LabelText,
}

/// Labels of a per-plugin count by kind (of trap).
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PluginKindLabel {
    /// The plugin name.
    pub plugin: LabelText,
    /// What happened: one of [`TRAP_KINDS`].
    pub kind: LabelText,
}

/// Every kind of trap `plugin_traps` counts; a plugin's traps are the sum over them.
pub const TRAP_KINDS: [&str; 5] = ["timeout", "fuel", "memory", "stack", "trap"];

/// A plugin's totals since the process started, as `/status` shows them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PluginCounts {
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

type FloatGauge = Gauge<f64, AtomicU64>;
type HistogramMaker = fn() -> Histogram;

/// Store round trips: 100 µs to ~3 s.
fn store_latency() -> Histogram {
    Histogram::new(exponential_buckets(0.0001, 2.0, 16))
}

/// Fuel per call: 1,000 units to ~10¹³ (the default budget is 10¹¹).
fn fuel_per_call() -> Histogram {
    Histogram::new(exponential_buckets(1_000.0, 10.0, 11))
}

/// Loss-to-stop and guest calls: 10 µs to ~10 s.
fn fast_latency() -> Histogram {
    Histogram::new(exponential_buckets(0.00001, 2.5, 16))
}

/// Every metric of the process.
#[derive(Debug)]
pub struct Metrics {
    /// The registry `/metrics` encodes.
    registry: Registry,
    /// 1 while this replica holds the lease.
    pub is_leader: Family<LeaseLabel, Gauge>,
    /// The epoch this replica holds (0 when it holds none).
    pub epoch: Family<LeaseLabel, Gauge>,
    /// Role changes.
    pub transitions: Family<LeaseLabel, Counter>,
    /// The leases this replica campaigns for, by its role in each: the figure that stays
    /// readable at thousands of leases.
    pub leases: Family<RoleLabel, Gauge>,
    /// Renewal round trips, one per statement (the batch of every held lease, or one lease
    /// renewed alone): a histogram per lease would cost 18 series per lease, all alike.
    pub renew_seconds: Histogram,
    /// Seconds until the holder's local deadline; 0 when not holding.
    pub expires_in_seconds: Family<LeaseLabel, FloatGauge>,
    /// The lease's ttl in seconds, on every replica that campaigns for it: the yardstick alert
    /// rules and dashboards measure the other lease figures against.
    pub ttl_seconds: Family<LeaseLabel, FloatGauge>,
    /// From the end of a term until every task of it has stopped, over every lease.
    pub loss_to_stop_seconds: Histogram,
    /// Guest calls (init, reconcile, handle-event, check), counted as they enter the guest so that
    /// one that does not return shows; instantiations are not calls.
    pub plugin_calls: Family<PluginLabel, Counter>,
    /// Guest call durations.
    pub plugin_call_seconds: Family<PluginLabel, Histogram, HistogramMaker>,
    /// Calls that trapped, by kind.
    pub plugin_traps: Family<PluginKindLabel, Counter>,
    /// Calls that returned an error.
    pub plugin_errors: Family<PluginLabel, Counter>,
    /// Fuel burnt (engines that meter fuel).
    pub plugin_fuel: Family<PluginLabel, Counter>,
    /// Fuel burnt per call (engines that meter fuel).
    pub plugin_call_fuel: Family<PluginLabel, Histogram, HistogramMaker>,
    /// The largest linear memory a plugin instance grew to.
    pub plugin_memory_bytes: Family<PluginLabel, Gauge>,
    /// Writes refused by the fence.
    pub plugin_refused_writes: Family<PluginLabel, Counter>,
    /// Guest calls the host cut off by force because their term ended (lease lost, released or
    /// shutdown) while they ran: a call's own deadline counts as a `timeout` trap instead.
    pub plugin_forced_stops: Family<PluginLabel, Counter>,
    /// Lines of a plugin's output (log, stdout, stderr) not written to the host's log: over a
    /// call's budget or over the plugin's rate.
    pub plugin_log_dropped: Family<PluginLabel, Counter>,
    /// Stores (instances and their memory) a plugin holds on this replica now.
    pub plugin_stores: Family<PluginLabel, Gauge>,
    /// Shards of a lease group this replica holds.
    pub group_held: Family<GroupLabel, Gauge>,
    /// This replica's fair share of a lease group (0 until it counts as a member).
    pub group_target: Family<GroupLabel, Gauge>,
    /// The members of a lease group counted for the fair shares.
    pub group_members: Family<GroupLabel, Gauge>,
    /// Shards this replica gave away to rebalance a lease group.
    pub group_moves: Family<GroupLabel, Counter>,
    /// Shards of a lease group this replica took from a holder that gave them up.
    pub group_handoffs: Family<GroupLabel, Counter>,
    /// Shards of a lease group this replica took after their holder's membership lapsed.
    pub group_takeovers: Family<GroupLabel, Counter>,
    /// Whether a failing health check keeps this replica out of a lease group (1) or not (0).
    pub group_gated: Family<GroupLabel, Gauge>,
    /// The lease loop's store calls that failed, by operation and cause.
    pub store_errors: Family<StoreErrorLabel, Counter>,
    /// Live members of the group configured with another shard count than the one in force.
    pub group_count_conflicts: Family<GroupLabel, Gauge>,
    /// The OS processes bound to leases.
    pub process: ProcessMetrics,
    /// Watch streams of the lease API open now.
    pub http_watchers: Gauge,
    /// Watch streams refused because as many as this replica serves, or as many as one address
    /// may hold, were open.
    pub http_watchers_refused: Counter,
    /// Watch streams dropped because their client left their events unread.
    pub http_watchers_stalled: Counter,
}

/// What a look at one lease group found, for [`Metrics::record_group`]: the gauges as they stand
/// and the counters' totals since the replica started.
#[derive(Debug, Clone, Copy, Default)]
pub struct GroupFigures {
    /// Shards held here.
    pub held: u32,
    /// This replica's fair share.
    pub target: u32,
    /// Members counted.
    pub members: u32,
    /// Shards given away to rebalance.
    pub moves: u64,
    /// Shards taken by handoff.
    pub handoffs: u64,
    /// Shards taken after their holder lapsed.
    pub takeovers: u64,
    /// Kept out by a failing health check.
    pub gated: bool,
    /// Live members configured with another shard count than the one in force.
    pub count_conflicts: u32,
}

/// One live store of a plugin, counted in `leasehold_plugin_stores` until dropped.
#[derive(Debug)]
pub struct StoreAlive(Gauge);

impl Drop for StoreAlive {
    fn drop(&mut self) {
        self.0.dec();
    }
}

impl Metrics {
    /// A fresh registry with every metric registered.
    pub fn new() -> Arc<Self> {
        let m = Metrics::unregistered();
        let mut registry = Registry::default();
        // `/metrics` lists them in this order.
        m.register_lease(&mut registry);
        m.register_faults(&mut registry);
        m.register_plugin(&mut registry);
        m.register_group(&mut registry);
        m.process.register(&mut registry);
        m.register_http(&mut registry);
        Arc::new(Metrics { registry, ..m })
    }

    /// Every metric, empty, beside a registry that holds none of them yet.
    fn unregistered() -> Metrics {
        Metrics {
            is_leader: Family::default(),
            epoch: Family::default(),
            transitions: Family::default(),
            leases: Family::default(),
            renew_seconds: store_latency(),
            expires_in_seconds: Family::default(),
            ttl_seconds: Family::default(),
            loss_to_stop_seconds: fast_latency(),
            plugin_calls: Family::default(),
            plugin_call_seconds: Family::new_with_constructor(fast_latency),
            plugin_traps: Family::default(),
            plugin_errors: Family::default(),
            plugin_fuel: Family::default(),
            plugin_call_fuel: Family::new_with_constructor(fuel_per_call),
            plugin_memory_bytes: Family::default(),
            plugin_refused_writes: Family::default(),
            plugin_forced_stops: Family::default(),
            plugin_log_dropped: Family::default(),
            plugin_stores: Family::default(),
            group_held: Family::default(),
            group_target: Family::default(),
            group_members: Family::default(),
            group_moves: Family::default(),
            group_handoffs: Family::default(),
            group_takeovers: Family::default(),
            group_gated: Family::default(),
            store_errors: Family::default(),
            group_count_conflicts: Family::default(),
            process: ProcessMetrics::default(),
            http_watchers: Gauge::default(),
            http_watchers_refused: Counter::default(),
            http_watchers_stalled: Counter::default(),
            registry: Registry::default(),
        }
    }

    /// Registers the lease loop's figures, per lease and over every lease: role, epoch, ttl,
    /// expiry, renewals and the time a lost term takes to stop.
    fn register_lease(&self, registry: &mut Registry) {
        registry.register(
            "leasehold_lease_is_leader",
            "1 while this replica holds the lease",
            self.is_leader.clone(),
        );
        registry.register(
            "leasehold_lease_epoch",
            "The epoch this replica holds, 0 when it holds none",
            self.epoch.clone(),
        );
        registry.register(
            "leasehold_lease_transitions",
            "Changes of this replica's role for the lease",
            self.transitions.clone(),
        );
        registry.register(
            "leasehold_leases",
            "The leases this replica campaigns for, by its role in each",
            self.leases.clone(),
        );
        registry.register(
            "leasehold_lease_renew_seconds",
            "Renewal round trips, one per statement (the batch of every held lease, or one renewed alone)",
            self.renew_seconds.clone(),
        );
        registry.register(
            "leasehold_lease_expires_in_seconds",
            "Seconds until the holder's local deadline (the database expiry minus the margin); 0 when not holding",
            self.expires_in_seconds.clone(),
        );
        registry.register(
            "leasehold_lease_ttl_seconds",
            "The lease's ttl in seconds, on every replica that campaigns for it",
            self.ttl_seconds.clone(),
        );
        registry.register(
            "leasehold_lease_loss_to_stop_seconds",
            "From the end of a term until all of its plugin tasks have stopped, over every lease",
            self.loss_to_stop_seconds.clone(),
        );
    }

    /// Registers what keeps this replica out of the lease work: members of a group configured with
    /// another shard count, and the lease loop's store calls that failed.
    fn register_faults(&self, registry: &mut Registry) {
        registry.register(
            "leasehold_group_count_conflicts",
            "Live members of the group configured with another shard count than the one it runs with (its longest-standing member's): they take no part",
            self.group_count_conflicts.clone(),
        );
        registry.register(
            "leasehold_store_errors",
            "The lease loop's store calls that failed, by operation (campaign, renew, release, heartbeat) and cause (refused, closed, reset, timeout, read_only, restarting, connection, permission, schema, protocol, conflict, other)",
            self.store_errors.clone(),
        );
    }

    /// Registers what the lease API's watchers cost: streams open, those refused, and those
    /// dropped for not reading.
    fn register_http(&self, registry: &mut Registry) {
        registry.register(
            "leasehold_http_watchers",
            "Watch streams of the lease API (/v1/leases/NAME/watch) open now",
            self.http_watchers.clone(),
        );
        registry.register(
            "leasehold_http_watchers_refused",
            "Watch streams refused (503) because as many as this replica serves, or as many as one address may hold, were open",
            self.http_watchers_refused.clone(),
        );
        registry.register(
            "leasehold_http_watchers_stalled",
            "Watch streams dropped because their client left their events unsent for several heartbeats (it stopped reading)",
            self.http_watchers_stalled.clone(),
        );
    }

    /// Registers the guest runtime's figures, per plugin: calls, traps, errors, fuel, memory,
    /// refused writes, forced stops, dropped output and live stores.
    fn register_plugin(&self, registry: &mut Registry) {
        registry.register(
            "leasehold_plugin_calls",
            "Guest calls (init, reconcile, handle-event, check)",
            self.plugin_calls.clone(),
        );
        registry.register(
            "leasehold_plugin_call_seconds",
            "Guest call durations",
            self.plugin_call_seconds.clone(),
        );
        registry.register(
            "leasehold_plugin_traps",
            "Calls that trapped, by kind (timeout, fuel, memory, stack, trap)",
            self.plugin_traps.clone(),
        );
        registry.register(
            "leasehold_plugin_errors",
            "Calls that returned an error",
            self.plugin_errors.clone(),
        );
        registry.register(
            "leasehold_plugin_fuel_consumed",
            "Fuel burnt by calls (when the engine meters fuel)",
            self.plugin_fuel.clone(),
        );
        registry.register(
            "leasehold_plugin_call_fuel",
            "Fuel burnt per call (when the engine meters fuel)",
            self.plugin_call_fuel.clone(),
        );
        registry.register(
            "leasehold_plugin_memory_high_water_bytes",
            "The largest linear memory an instance of the plugin grew to",
            self.plugin_memory_bytes.clone(),
        );
        registry.register(
            "leasehold_plugin_refused_writes",
            "Writes refused by the fence (lease-lost)",
            self.plugin_refused_writes.clone(),
        );
        registry.register(
            "leasehold_plugin_forced_stops",
            "Guest calls cut off by force because their term ended while they ran",
            self.plugin_forced_stops.clone(),
        );
        registry.register(
            "leasehold_plugin_log_dropped",
            "Lines of the plugin's output not written to the host's log: over a call's budget or the plugin's rate",
            self.plugin_log_dropped.clone(),
        );
        registry.register(
            "leasehold_plugin_stores",
            "Stores (instances and their memory) the plugin holds on this replica now",
            self.plugin_stores.clone(),
        );
    }

    /// Registers the lease groups' figures, per group: shards held, fair share, members, the shards
    /// that moved, and the health gate.
    fn register_group(&self, registry: &mut Registry) {
        registry.register(
            "leasehold_group_shards_held",
            "Shards of the lease group this replica holds",
            self.group_held.clone(),
        );
        registry.register(
            "leasehold_group_target",
            "This replica's fair share of the lease group, 0 until it counts as a member",
            self.group_target.clone(),
        );
        registry.register(
            "leasehold_group_members",
            "Members of the lease group counted for the fair shares",
            self.group_members.clone(),
        );
        registry.register(
            "leasehold_group_moves",
            "Shards this replica handed over to rebalance the lease group",
            self.group_moves.clone(),
        );
        registry.register(
            "leasehold_group_handoffs",
            "Shards of the lease group this replica took from a holder that handed them over",
            self.group_handoffs.clone(),
        );
        registry.register(
            "leasehold_group_takeovers",
            "Shards of the lease group this replica took after their holder's membership lapsed (a takeover after expiry)",
            self.group_takeovers.clone(),
        );
        registry.register(
            "leasehold_group_gated",
            "1 while a failing health check keeps this replica out of the lease group",
            self.group_gated.clone(),
        );
    }

    /// Counts a failed store call of the lease loop, by operation and cause (a label value of
    /// the lease layer's `Cause`).
    pub fn count_store_error(&self, op: &str, cause: &str) {
        self.store_errors
            .get_or_create(&StoreErrorLabel {
                op: op.into(),
                cause: cause.into(),
            })
            .inc();
    }

    /// Records what a look at lease group `group` found.
    pub fn record_group(&self, group: &str, figures: GroupFigures) {
        let label = GroupLabel {
            group: group.into(),
        };
        let gauges = [
            (&self.group_held, i64::from(figures.held)),
            (&self.group_target, i64::from(figures.target)),
            (&self.group_members, i64::from(figures.members)),
            (&self.group_gated, i64::from(figures.gated)),
            (
                &self.group_count_conflicts,
                i64::from(figures.count_conflicts),
            ),
        ];
        for (family, value) in gauges {
            family.get_or_create(&label).set(value);
        }
        let counters = [
            (&self.group_moves, figures.moves),
            (&self.group_handoffs, figures.handoffs),
            (&self.group_takeovers, figures.takeovers),
        ];
        for (family, total) in counters {
            let counter = family.get_or_create(&label);
            counter.inc_by(total.saturating_sub(counter.get()));
        }
    }

    /// The text exposition of every metric.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }

    /// Counts one live store of `plugin` until the returned guard is dropped: hold it beside
    /// the store, declared before it, so that it counts down once the store is gone.
    ///
    /// A plugin's failure counters start at 0 here, on the replica that runs it: an alert's
    /// `increase()` then sees the first error, trap, refused write or forced stop too.
    pub fn store_alive(&self, plugin: &str) -> StoreAlive {
        let label = Metrics::plugin(plugin);
        for family in [
            &self.plugin_errors,
            &self.plugin_refused_writes,
            &self.plugin_forced_stops,
            &self.plugin_log_dropped,
        ] {
            family.get_or_create(&label).inc_by(0);
        }
        for kind in TRAP_KINDS {
            self.plugin_traps
                .get_or_create(&PluginKindLabel {
                    plugin: plugin.into(),
                    kind: kind.into(),
                })
                .inc_by(0);
        }
        let gauge = self.plugin_stores.get_or_create(&label).clone();
        gauge.inc();
        StoreAlive(gauge)
    }

    /// The counter of `plugin`'s guest calls, to be incremented as each call enters the guest
    /// (not on instantiation); the call is recorded with [`Metrics::record_call`] when it ends.
    pub fn calls_of(&self, plugin: &str) -> Counter {
        self.plugin_calls
            .get_or_create(&Metrics::plugin(plugin))
            .clone()
    }

    /// Records one finished guest call or instantiation of `plugin`: how long it took, the kind of
    /// trap that ended it, whether it returned an error, the fuel it burnt, its instance's memory
    /// high-water mark and the writes the fence refused during it. A call was counted when it
    /// started ([`Metrics::calls_of`]).
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
        let label = Metrics::plugin(plugin);
        self.plugin_call_seconds
            .get_or_create(&label)
            .observe(took.as_secs_f64());
        if let Some(kind) = trap {
            self.plugin_traps
                .get_or_create(&PluginKindLabel {
                    plugin: plugin.into(),
                    kind: kind.into(),
                })
                .inc();
        }
        if error {
            self.plugin_errors.get_or_create(&label).inc();
        }
        if let Some(fuel) = fuel {
            self.plugin_fuel.get_or_create(&label).inc_by(fuel);
            // Precision beyond 2⁵³ units does not matter for a histogram.
            #[allow(clippy::cast_precision_loss)]
            self.plugin_call_fuel
                .get_or_create(&label)
                .observe(fuel as f64);
        }
        let high_water = i64::try_from(memory_high_water).unwrap_or(i64::MAX);
        let gauge = self.plugin_memory_bytes.get_or_create(&label);
        if high_water > gauge.get() {
            gauge.set(high_water);
        }
        if refused_writes > 0 {
            self.plugin_refused_writes
                .get_or_create(&label)
                .inc_by(refused_writes);
        }
    }

    /// `plugin`'s totals, read without adding a series for a plugin (or a kind of trap) that has
    /// none yet.
    pub fn plugin_counts(&self, plugin: &str) -> PluginCounts {
        let label = Metrics::plugin(plugin);
        let count =
            |family: &Family<PluginLabel, Counter>| family.get(&label).map_or(0, |c| c.get());
        let traps = TRAP_KINDS
            .iter()
            .filter_map(|kind| {
                self.plugin_traps.get(&PluginKindLabel {
                    plugin: plugin.into(),
                    kind: (*kind).into(),
                })
            })
            .map(|c| c.get())
            .sum();
        let memory_high_water_bytes = self
            .plugin_memory_bytes
            .get(&label)
            .map_or(0, |g| u64::try_from(g.get()).unwrap_or(0));
        PluginCounts {
            calls: count(&self.plugin_calls),
            traps,
            errors: count(&self.plugin_errors),
            forced_stops: count(&self.plugin_forced_stops),
            refused_writes: count(&self.plugin_refused_writes),
            fuel: count(&self.plugin_fuel),
            memory_high_water_bytes,
        }
    }

    /// The per-lease label.
    pub fn lease(name: &str) -> LeaseLabel {
        LeaseLabel { lease: name.into() }
    }

    /// The per-plugin label.
    pub fn plugin(name: &str) -> PluginLabel {
        PluginLabel {
            plugin: name.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plugin_counts_add_up_what_was_recorded_and_create_no_series() {
        let m = Metrics::new();
        assert_eq!(m.plugin_counts("p"), PluginCounts::default());
        assert!(!m.encode().contains("plugin=\"p\""), "{}", m.encode());
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
        m.plugin_forced_stops
            .get_or_create(&Metrics::plugin("p"))
            .inc();
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

    #[test]
    fn a_label_value_cannot_end_its_series_or_forge_another() {
        let m = Metrics::new();
        m.calls_of("evil\"} 1\nleasehold_lease_is_leader{lease=\"payments\"} 1\n#\\")
            .inc();
        m.is_leader.get_or_create(&Metrics::lease("a\nb")).set(1);
        let text = m.encode();
        assert!(
            text.contains(
                "leasehold_plugin_calls_total{plugin=\"evil\\\"} 1\\nleasehold_lease_is_leader{lease=\\\"payments\\\"} 1\\n#\\\\\"} 1\n"
            ),
            "{text}"
        );
        assert!(
            text.contains("leasehold_lease_is_leader{lease=\"a\\nb\"} 1\n"),
            "{text}"
        );
        assert!(
            !text
                .lines()
                .any(|l| l.starts_with("leasehold_lease_is_leader{lease=\"payments")),
            "{text}"
        );
    }
}
