//! The one way a plugin's guest code is brought up, whatever its world: a fresh store, the
//! component instantiated in it, `init(config)` called, each outcome recorded on the board.
//! Reconcilers and health checks both start here; what they call next is their [`Work`]'s.
//!
//! [`Work`]: crate::supervisor::work::Work

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::capability::PluginCapabilities;
use crate::plugin::PluginEntry;
use crate::runtime::host::LeaseView;
use crate::runtime::metrics::StoreAlive;
use crate::runtime::{CallFailure, Instance, PluginStore, Prepared, Runtime};
use crate::supervisor::StatusBoard;

/// One plugin file as its tasks start it, one instance after another.
pub(super) struct Plugin {
    /// The plugin's name, as its stores, metrics and card know it.
    pub name: Arc<str>,
    /// The file.
    pub entry: Arc<PluginEntry>,
    /// The pre-linked component of the file.
    prepared: Prepared,
    /// The manifest's `config`, handed to every `init`.
    config: Vec<(String, String)>,
    /// Where stores come from.
    runtime: Arc<Runtime>,
    /// Where each start and call is shown.
    pub board: StatusBoard,
    /// Cancelled when the file is replaced or removed: an instantiation under way is dropped.
    pub retire: CancellationToken,
}

/// A started instance in its own store. Dropping it is the forced stop: the store, the instance
/// and their memory go, and a call still running in it has already been dropped with it.
pub(super) struct Live {
    /// The store: the only door into the instance.
    pub store: PluginStore,
    /// The instance.
    pub instance: Instance,
    /// Counts the store in `leasehold_plugin_stores` until it is dropped (declared last, so
    /// dropped last).
    _alive: StoreAlive,
}

impl Plugin {
    /// `entry`'s plugin, or `None` for a file that did not load (it never runs).
    pub(super) fn new(
        runtime: Arc<Runtime>,
        entry: Arc<PluginEntry>,
        board: StatusBoard,
        retire: CancellationToken,
    ) -> Option<Plugin> {
        let prepared = entry.loaded.as_ref().ok()?.prepared.clone();
        Some(Plugin {
            name: Arc::from(entry.name.as_str()),
            config: entry.manifest.config.clone().into_iter().collect(),
            prepared,
            entry,
            runtime,
            board,
            retire,
        })
    }

    /// A fresh store seeing the lease as `view` and granted `capabilities`, the component
    /// instantiated in it and initialised. A store is never reused after a failed start: a trap
    /// or a dropped call may have left it half-way.
    pub(super) async fn start(
        &self,
        view: LeaseView,
        capabilities: Option<PluginCapabilities>,
    ) -> Result<Live, CallFailure> {
        // Counted from before the store exists until it is dropped.
        let alive = self.runtime.metrics().store_alive(&self.name);
        let mut store = self.runtime.new_store(
            self.name.clone(),
            view,
            &self.entry.manifest.limits,
            capabilities,
        );
        let called = store.instantiate(&self.prepared, &self.retire).await;
        self.board.record(&self.name, &called);
        let instance = called.result?;
        let called = store.init(&instance, &self.config).await;
        self.board.record(&self.name, &called);
        called.result?;
        Ok(Live {
            store,
            instance,
            _alive: alive,
        })
    }
}
