//! What `/status` shows of each plugin, shared between the supervisor and the HTTP handler.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use serde::Serialize;

use crate::runtime::{CallFailure, Called, World};

/// A plugin's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
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
#[derive(Debug, Clone, Serialize)]
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
    /// Calls started (init, reconcile, handle-event and check).
    pub calls: u64,
    /// Calls that trapped (including timeouts and limit breaches).
    pub traps: u64,
    /// Writes (kv, fenced sql) refused with `lease-lost`: work done after this replica lost the
    /// lease, which the fence kept out of the database.
    pub refused_writes: u64,
    /// Fuel burnt by the last call that finished, when the engine meters fuel.
    pub fuel_last_call: Option<u64>,
    /// Fuel burnt by every call so far, when the engine meters fuel.
    pub fuel_total: u64,
}

/// The shared table of plugin statuses.
#[derive(Debug, Clone, Default)]
pub struct StatusBoard(Arc<Mutex<BTreeMap<String, PluginStatus>>>);

impl StatusBoard {
    /// Applies `f` to the plugin's entry, if it exists.
    pub fn update(&self, name: &str, f: impl FnOnce(&mut PluginStatus)) {
        if let Some(entry) = self.lock().get_mut(name) {
            f(entry);
        }
    }

    /// Notes that a call of `name` is starting (so a call that never returns still shows).
    pub fn started(&self, name: &str) {
        self.update(name, |s| s.calls += 1);
    }

    /// Records a finished (or refused) call of `name`, announced by [`StatusBoard::started`].
    pub fn record<T>(&self, name: &str, called: &Called<T>) {
        self.record_inner(name, called, true);
    }

    /// Records an instantiation of `name` (not counted as a call, but its traps and fuel are).
    pub fn record_instantiation<T>(&self, name: &str, called: &Called<T>) {
        self.record_inner(name, called, false);
    }

    fn record_inner<T>(&self, name: &str, called: &Called<T>, counted: bool) {
        let report = &called.report;
        self.update(name, |s| {
            if counted && !report.entered {
                // Refused at the door (the term was over): it never started after all.
                s.calls = s.calls.saturating_sub(1);
            }
            s.refused_writes += report.refused_writes;
            if let Some(fuel) = report.fuel {
                s.fuel_last_call = Some(fuel);
                s.fuel_total = s.fuel_total.saturating_add(fuel);
            }
            if let Err(failure) = &called.result
                && !matches!(failure, CallFailure::Cancelled { .. })
            {
                s.traps += u64::from(failure.is_trap());
                s.last_error = Some(failure.to_string());
            }
        });
    }

    /// Inserts or replaces an entry.
    pub fn put(&self, status: PluginStatus) {
        self.lock().insert(status.name.clone(), status);
    }

    /// Removes an entry.
    pub fn remove(&self, name: &str) {
        self.lock().remove(name);
    }

    /// Every entry, in name order.
    pub fn snapshot(&self) -> Vec<PluginStatus> {
        self.lock().values().cloned().collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, PluginStatus>> {
        // Entries are replaced whole, so a panic elsewhere cannot leave one half-written.
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}
