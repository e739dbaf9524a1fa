//! What `/status` shows of each plugin, shared between the supervisor and the HTTP handler. The
//! board keeps a [`PluginCard`] per plugin (what the supervisor knows: state, lease, world, last
//! error, the last call's cost); the counts come from the [`PluginMetrics`] the runtime records every
//! call in, so that `/status` and `/metrics` cannot disagree.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;

use super::process::ProcessStatus;
use crate::runtime::{CallFailure, Called, PluginMetrics, World};

/// A plugin's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PluginState {
    /// Loaded; its lease is held elsewhere (or not at all) so it is not running here.
    Idle,
    /// Instantiated under a term on this replica.
    Running,
    /// Waiting to retry after a failure.
    Backoff,
    /// Stopped after too many consecutive failures, until the next term or a new file.
    Quarantined,
    /// The file or its manifest did not load.
    Invalid,
}

/// One plugin in `/status`.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct PluginStatus {
    /// The plugin name (its file name without `.wasm`).
    pub name: String,
    /// The lease it is bound to.
    pub lease: String,
    /// Its world, when it loaded.
    pub world: Option<World>,
    /// Its state.
    pub state: PluginState,
    /// The last failure, if any.
    pub last_error: Option<String>,
    /// What is wrong with how the plugin is set up here, though it loaded: a lease or group this
    /// replica does not campaign for (a misspelt `lease` would otherwise just stay `idle`).
    #[serde(default)]
    pub warning: Option<String>,
    /// Calls entered (init, reconcile, handle-event and check; not instantiations), counted as
    /// they start so that one that never returns still shows: `leasehold_plugin_calls`.
    pub calls: u64,
    /// Calls and instantiations that trapped (including timeouts and limit breaches), of every
    /// kind: `leasehold_plugin_traps`.
    pub traps: u64,
    /// Calls that returned an error: `leasehold_plugin_errors`.
    #[serde(default)]
    pub errors: u64,
    /// Calls the host cut off by force because their term ended while they ran:
    /// `leasehold_plugin_forced_stops_total`.
    #[serde(default)]
    pub forced_stops: u64,
    /// Writes (kv, fenced sql) refused with `lease-lost`: work done after this replica lost the
    /// lease, which the fence kept out of the database. `leasehold_plugin_refused_writes`.
    pub refused_writes: u64,
    /// Fuel burnt by the last call that finished, when the engine meters fuel.
    pub fuel_last_call: Option<u64>,
    /// Fuel burnt by every call (and instantiation) so far, when the engine meters fuel:
    /// `leasehold_plugin_fuel_consumed`.
    pub fuel_total: u64,
    /// Wall time in milliseconds of the last call (or instantiation) that entered the guest,
    /// however it ended; `null` before the first.
    #[serde(default)]
    pub last_call_ms: Option<f64>,
    /// The largest linear memory an instance of the plugin grew to on this replica, in bytes:
    /// `leasehold_plugin_memory_high_water_bytes`.
    #[serde(default)]
    pub memory_high_water_bytes: u64,
}

/// What the board keeps of one plugin: what `/status` shows of it but the counts of the metrics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginCard {
    /// The plugin name (its file name without `.wasm`).
    pub name: String,
    /// The lease it is bound to.
    pub lease: String,
    /// Its world, when it loaded.
    pub world: Option<World>,
    /// Its state.
    pub state: PluginState,
    /// The last failure, if any.
    pub last_error: Option<String>,
    /// What is wrong with how the plugin is set up here: see [`PluginStatus::warning`].
    pub warning: Option<String>,
    /// Fuel burnt by the last call that finished, when the engine meters fuel.
    pub fuel_last_call: Option<u64>,
    /// Wall time of the last call (or instantiation) that entered the guest.
    pub last_call: Option<Duration>,
}

/// The shared table of plugin statuses.
#[derive(Debug, Clone)]
pub struct StatusBoard {
    /// One card per plugin, by name.
    cards: Arc<Mutex<BTreeMap<String, PluginCard>>>,
    /// Where the runtime counts each plugin's calls, traps, refused writes and fuel.
    metrics: Arc<PluginMetrics>,
    /// One card per OS process bound to a lease, by process and lease.
    processes: Arc<Mutex<BTreeMap<(String, String), ProcessStatus>>>,
}

impl StatusBoard {
    /// An empty board whose counts are read from `metrics`: the runtime's.
    pub fn new(metrics: Arc<PluginMetrics>) -> Self {
        StatusBoard {
            cards: Arc::default(),
            metrics,
            processes: Arc::default(),
        }
    }

    /// Applies `f` to the plugin's card, if it has one.
    pub fn update(&self, name: &str, f: impl FnOnce(&mut PluginCard)) {
        if let Some(card) = self.lock().get_mut(name) {
            f(card);
        }
    }

    /// Records a finished (or refused) call or instantiation of `name`: its fuel, its wall time
    /// and its failure. The metrics have counted it already.
    pub fn record<T>(&self, name: &str, called: &Called<T>) {
        let report = &called.report;
        self.update(name, |card| {
            if let Some(fuel) = report.fuel {
                card.fuel_last_call = Some(fuel);
            }
            // A call refused at the door ran nothing: its zero would hide the last real one.
            if report.entered {
                card.last_call = Some(report.took);
            }
            if let Err(failure) = &called.result
                && !matches!(failure, CallFailure::Cancelled { .. })
            {
                card.last_error = Some(failure.to_string());
            }
        });
    }

    /// Inserts or replaces a card.
    pub fn put(&self, card: PluginCard) {
        self.lock().insert(card.name.clone(), card);
    }

    /// Puts a card and returns the one it replaced, in one step: of two tasks putting the same
    /// card at once, exactly one sees the old one.
    pub fn replace(&self, card: PluginCard) -> Option<PluginCard> {
        self.lock().insert(card.name.clone(), card)
    }

    /// Removes a card.
    pub fn remove(&self, name: &str) {
        self.lock().remove(name);
    }

    /// Every card, in name order.
    pub fn cards(&self) -> Vec<PluginCard> {
        self.lock().values().cloned().collect()
    }

    /// Every plugin as `/status` shows it, in name order, with its counts as the metrics have them.
    pub fn snapshot(&self) -> Vec<PluginStatus> {
        self.cards()
            .into_iter()
            .map(|card| {
                let counts = self.metrics.plugin_counts(&card.name);
                PluginStatus {
                    name: card.name,
                    lease: card.lease,
                    world: card.world,
                    state: card.state,
                    last_error: card.last_error,
                    warning: card.warning,
                    calls: counts.calls,
                    traps: counts.traps,
                    errors: counts.errors,
                    forced_stops: counts.forced_stops,
                    refused_writes: counts.refused_writes,
                    fuel_last_call: card.fuel_last_call,
                    fuel_total: counts.fuel,
                    last_call_ms: card.last_call.map(|took| took.as_secs_f64() * 1000.0),
                    memory_high_water_bytes: counts.memory_high_water_bytes,
                }
            })
            .collect()
    }

    /// Puts a process's card, unless it has one under that lease already.
    pub fn put_process(&self, status: ProcessStatus) {
        let key = (status.name.clone(), status.lease.clone());
        self.lock_processes().entry(key).or_insert(status);
    }

    /// Applies `f` to the card of process `name` under `lease`, if it has one.
    pub fn update_process(&self, name: &str, lease: &str, f: impl FnOnce(&mut ProcessStatus)) {
        if let Some(status) = self
            .lock_processes()
            .get_mut(&(name.to_string(), lease.to_string()))
        {
            f(status);
        }
    }

    /// Every process as `/status` shows it, by name, then lease.
    pub fn processes(&self) -> Vec<ProcessStatus> {
        self.lock_processes().values().cloned().collect()
    }

    fn lock_processes(
        &self,
    ) -> std::sync::MutexGuard<'_, BTreeMap<(String, String), ProcessStatus>> {
        // As the plugins' cards: each change is whole once the lock is let go.
        self.processes.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, PluginCard>> {
        // Cards are replaced whole, so a panic elsewhere cannot leave one half-written.
        self.cards.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::{CallReport, Cancel};

    fn card(name: &str) -> PluginCard {
        PluginCard {
            name: name.to_string(),
            lease: "leader".to_string(),
            world: Some(World::Reconciler),
            state: PluginState::Running,
            last_error: None,
            warning: None,
            fuel_last_call: None,
            last_call: None,
        }
    }

    fn called(result: Result<(), CallFailure>, report: CallReport) -> Called<()> {
        Called { result, report }
    }

    #[test]
    fn a_snapshot_shows_the_last_call_and_the_counts_the_metrics_have() {
        let metrics = PluginMetrics::new();
        let board = StatusBoard::new(metrics.clone());
        board.put(card("p"));
        let ran = CallReport {
            entered: true,
            took: Duration::from_micros(2_500),
            fuel: Some(40),
            refused_writes: 0,
        };
        metrics.calls_of("p").inc();
        metrics.record_call("p", ran.took, None, true, Some(40), 131_072, 0);
        board.record("p", &called(Err(CallFailure::Returned("no".into())), ran));
        metrics.calls_of("p").inc();
        metrics.record_call("p", ran.took, None, false, None, 65_536, 0);
        metrics.forced_stop("p");
        // Refused at the door: nothing ran, so the last call that did stays the one shown.
        let refused = Err(CallFailure::Cancelled {
            reason: Cancel::TermEnded,
            entered: false,
        });
        board.record("p", &called(refused, CallReport::default()));

        let [status] = &board.snapshot()[..] else {
            panic!("one plugin")
        };
        assert_eq!(status.last_call_ms, Some(2.5));
        assert_eq!(status.fuel_last_call, Some(40));
        assert_eq!(status.last_error.as_deref(), Some("returned an error: no"));
        assert_eq!(
            (status.calls, status.errors, status.forced_stops),
            (2, 1, 1)
        );
        assert_eq!(status.memory_high_water_bytes, 131_072);
        assert_eq!(status.fuel_total, 40);
    }

    #[test]
    fn a_plugin_that_never_ran_shows_no_last_call_and_creates_no_series() {
        let metrics = PluginMetrics::new();
        let board = StatusBoard::new(metrics.clone());
        board.put(card("idle"));
        let status = board.snapshot().remove(0);
        assert_eq!(status.last_call_ms, None);
        assert_eq!(
            (
                status.errors,
                status.forced_stops,
                status.memory_high_water_bytes
            ),
            (0, 0, 0)
        );
        let mut registry = prometheus_client::registry::Registry::default();
        metrics.register(&mut registry);
        let shown = crate::metrics::Exposition::new(registry).encode();
        assert!(!shown.contains("idle"), "{shown}");
    }

    #[test]
    fn a_status_from_before_the_resource_fields_still_reads() {
        let old = r#"{"name":"p","lease":"leader","world":"reconciler","state":"idle",
            "last_error":null,"calls":2,"traps":0,"refused_writes":0,"fuel_last_call":null,
            "fuel_total":0}"#;
        let status: PluginStatus = serde_json::from_str(old).unwrap();
        assert_eq!((status.errors, status.forced_stops), (0, 0));
        assert_eq!(status.last_call_ms, None);
        assert_eq!(status.memory_high_water_bytes, 0);
    }
}
