//! What `/status` shows of each plugin, shared between the supervisor and the HTTP handler. The
//! board keeps a [`PluginCard`] per plugin (what the supervisor knows: state, lease, world, last
//! error); the counts come from the [`Metrics`] the runtime records every call in, so that
//! `/status` and `/metrics` cannot disagree.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use serde::Serialize;

use crate::metrics::Metrics;
use crate::runtime::{CallFailure, Called, World};

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
    /// Calls entered (init, reconcile, handle-event and check; not instantiations), counted as
    /// they start so that one that never returns still shows: `leasehold_plugin_calls`.
    pub calls: u64,
    /// Calls and instantiations that trapped (including timeouts and limit breaches), of every
    /// kind: `leasehold_plugin_traps`.
    pub traps: u64,
    /// Writes (kv, fenced sql) refused with `lease-lost`: work done after this replica lost the
    /// lease, which the fence kept out of the database. `leasehold_plugin_refused_writes`.
    pub refused_writes: u64,
    /// Fuel burnt by the last call that finished, when the engine meters fuel.
    pub fuel_last_call: Option<u64>,
    /// Fuel burnt by every call (and instantiation) so far, when the engine meters fuel:
    /// `leasehold_plugin_fuel_consumed`.
    pub fuel_total: u64,
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
    /// Fuel burnt by the last call that finished, when the engine meters fuel.
    pub fuel_last_call: Option<u64>,
}

/// The shared table of plugin statuses.
#[derive(Debug, Clone)]
pub struct StatusBoard {
    /// One card per plugin, by name.
    cards: Arc<Mutex<BTreeMap<String, PluginCard>>>,
    /// Where the runtime counts each plugin's calls, traps, refused writes and fuel.
    metrics: Arc<Metrics>,
}

impl StatusBoard {
    /// An empty board whose counts are read from `metrics`: the runtime's.
    pub fn new(metrics: Arc<Metrics>) -> Self {
        StatusBoard {
            cards: Arc::default(),
            metrics,
        }
    }

    /// Applies `f` to the plugin's card, if it has one.
    pub fn update(&self, name: &str, f: impl FnOnce(&mut PluginCard)) {
        if let Some(card) = self.lock().get_mut(name) {
            f(card);
        }
    }

    /// Records a finished (or refused) call or instantiation of `name`: its fuel and its failure.
    /// The metrics have counted it already.
    pub fn record<T>(&self, name: &str, called: &Called<T>) {
        let report = &called.report;
        self.update(name, |card| {
            if let Some(fuel) = report.fuel {
                card.fuel_last_call = Some(fuel);
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
                    calls: counts.calls,
                    traps: counts.traps,
                    refused_writes: counts.refused_writes,
                    fuel_last_call: card.fuel_last_call,
                    fuel_total: counts.fuel,
                }
            })
            .collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, PluginCard>> {
        // Cards are replaced whole, so a panic elsewhere cannot leave one half-written.
        self.cards.lock().unwrap_or_else(|p| p.into_inner())
    }
}
