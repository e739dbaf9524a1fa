//! The [`Supervisor`] of a replica's plugins: on each term of a lease it keeps one task per
//! reconciler bound to it running, and one task per health check of each lease and group
//! whatever the role, each following the plugin set; the board is published on every change of
//! the set. Its tasks run under the term's tracker, so the release waits for them.

use std::sync::Arc;
use std::time::SystemTime;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{Instrument, info_span};

use crate::capability::Capabilities;
use crate::lease::{Leases, Term};
use crate::manifest::Binding;
use crate::plugin::{PluginEntry, PluginSet};
use crate::runtime::Runtime;
use futures::future::BoxFuture;

use super::health::{Subject, Target, health_loop};
use super::instance::Plugin;
use super::reconcile;
use super::view::Replica;
use super::workers::Workers;
use crate::supervisor::terms::each_term;
use crate::supervisor::{PluginCard, PluginState, StatusBoard};

/// Runs the plugins of every lease of this replica.
#[derive(Debug, Clone)]
pub struct Supervisor {
    /// The WebAssembly runtime.
    runtime: Arc<Runtime>,
    /// The leases of this replica and the current plugin set, as the plugins' tasks read them.
    replica: Replica,
    /// What plugins' grants draw on.
    capabilities: Arc<Capabilities>,
    /// What `/status` shows.
    board: StatusBoard,
}

impl Supervisor {
    /// A supervisor over `plugins`.
    pub fn new(
        runtime: Arc<Runtime>,
        leases: Arc<Leases>,
        capabilities: Arc<Capabilities>,
        plugins: watch::Receiver<Arc<PluginSet>>,
    ) -> Self {
        // The board's counts are the runtime's metrics, where every call is recorded.
        let board = StatusBoard::new(runtime.metrics().clone());
        let sup = Supervisor {
            runtime,
            replica: Replica { leases, plugins },
            capabilities,
            board,
        };
        sup.publish_set(&sup.replica.plugins.borrow().clone());
        sup
    }

    /// The plugin status board.
    pub fn board(&self) -> &StatusBoard {
        &self.board
    }

    /// Follows every lease until `shutdown`. The health checks of the plugin set as it is now
    /// are started before this returns, each check of a lease with its campaign gate shut until
    /// it first passes: a lease driver started after this call does not campaign before them.
    pub fn run(self, shutdown: CancellationToken) -> impl Future<Output = ()> + Send + 'static {
        let tasks = TaskTracker::new();
        for name in self.replica.leases.lease_names() {
            let (sup, lease, stop) = (self.clone(), name.to_string(), shutdown.clone());
            tasks.spawn(sup.follow_lease(lease, stop));
            let target = Target::Lease(name.to_string());
            tasks.spawn(self.follow_health_checks(target, shutdown.clone()));
        }
        for group in self.replica.leases.groups() {
            let target = Target::Group(group.name);
            tasks.spawn(self.follow_health_checks(target, shutdown.clone()));
        }
        // Each lease's loops publish the board on every change of the plugin set.
        tasks.close();
        async move { tasks.wait().await }
    }

    /// Adds new plugins to the board and drops removed ones; running ones keep their state. Their
    /// counts are the metrics', kept across a reload of the file since the plugin's name stays.
    fn publish_set(&self, set: &PluginSet) {
        let known: std::collections::BTreeMap<String, PluginCard> = self
            .board
            .cards()
            .into_iter()
            .map(|s| (s.name.clone(), s))
            .collect();
        for name in known.keys().filter(|name| !set.contains_key(*name)) {
            self.board.remove(name);
        }
        for entry in set.values() {
            let (world, state, last_error) = match &entry.loaded {
                Ok(l) => (Some(l.prepared.world()), PluginState::Idle, None),
                Err(e) => (None, PluginState::Invalid, Some(crate::report::chain(e))),
            };
            let lease = entry.manifest.binding.to_string();
            let warning = entry
                .loaded
                .is_ok()
                .then(|| self.unbound(&entry.manifest.binding))
                .flatten();
            let old = known.get(&entry.name);
            let card = match old {
                // A plugin that still loads keeps its live state; what it is bound to comes from
                // the (possibly replaced) file.
                Some(old) if old.state != PluginState::Invalid && state != PluginState::Invalid => {
                    PluginCard {
                        lease,
                        world,
                        warning,
                        ..old.clone()
                    }
                }
                old => PluginCard {
                    name: entry.name.clone(),
                    lease,
                    world,
                    state,
                    last_error,
                    warning,
                    fuel_last_call: old.and_then(|o| o.fuel_last_call),
                    last_call: old.and_then(|o| o.last_call),
                },
            };
            // Every lease's loop publishes each new set: the warning is logged by whichever
            // replaces a card that did not carry it yet.
            let shown = (card.warning.clone(), card.lease.clone());
            let replaced = self.board.replace(card);
            if let Some(warning) = &shown.0
                && replaced.is_none_or(|o| (o.warning, o.lease) != shown)
            {
                tracing::warn!(plugin = %entry.name, "{warning}");
            }
        }
    }

    /// Why a plugin bound to `binding` can never run on this replica, if it cannot: the lease
    /// or group is not one it campaigns for. Names the ones it does, so that a misspelt `lease`
    /// in a manifest explains itself.
    fn unbound(&self, binding: &Binding) -> Option<String> {
        let groups: Vec<String> = self
            .replica
            .leases
            .groups()
            .into_iter()
            .map(|g| g.name)
            .collect();
        let (what, covered) = match binding {
            Binding::Lease(lease) => (
                format!("lease \"{lease}\""),
                self.replica
                    .leases
                    .lease_names()
                    .any(|l| l == lease.as_str()),
            ),
            Binding::Group(group) => (format!("group \"{group}\""), groups.contains(group)),
        };
        if covered {
            return None;
        }
        let mut leases: Vec<&str> = self
            .replica
            .leases
            .lease_names()
            .filter(|l| !groups.iter().any(|g| l.starts_with(&format!("{g}/"))))
            .collect();
        leases.sort_unstable();
        let list = |names: Vec<String>| {
            if names.is_empty() {
                "none".to_string()
            } else {
                names.join(", ")
            }
        };
        Some(format!(
            "bound to {what}, which this replica does not campaign for (its leases: {}; its groups: {}): it stays idle here",
            list(leases.into_iter().map(str::to_string).collect()),
            list(groups),
        ))
    }

    /// Runs the reconcilers of `lease` on each of its terms here, through the same loop as a
    /// process follows its lease's terms.
    async fn follow_lease(self, lease: String, shutdown: CancellationToken) {
        let Some(leadership) = self.replica.leases.subscribe(&lease) else {
            return;
        };
        let on_term = |term: Term| {
            let (sup, lease, stop) = (self.clone(), lease.clone(), shutdown.clone());
            async move { sup.run_term(&lease, term, &stop).await }
        };
        each_term(leadership, &shutdown, on_term, std::future::pending::<()>).await;
    }

    /// Keeps one task per reconciler of `lease` running under `term`, following plugin changes.
    async fn run_term(&self, lease: &str, term: Term, shutdown: &CancellationToken) {
        let acquired_at = SystemTime::now();
        let mut plugins = self.replica.plugins.clone();
        let mut workers = Workers::default();
        let retire_parent = term.child_token();
        loop {
            let set = plugins.borrow_and_update().clone();
            // The board first, so no task can report on a plugin the board does not list yet.
            self.publish_set(&set);
            let wanted = |e: &PluginEntry| {
                e.manifest.binding.covers(lease)
                    && matches!(e.loaded, Ok(ref l) if l.prepared.world().is_reconciler())
            };
            let start = |entry: Arc<PluginEntry>, retire: CancellationToken| {
                let view = self
                    .replica
                    .view(&entry, lease, Some((term.clone(), acquired_at)));
                let span = info_span!("plugin", plugin = %entry.name, lease = %lease, epoch = term.epoch.get());
                crate::telemetry::within_term(&span, &term.lease, term.epoch);
                let plugin = Plugin::new(self.runtime.clone(), entry, self.board.clone(), retire);
                let (capabilities, term) = (self.capabilities.clone(), term.clone());
                let task = async move {
                    if let Some(plugin) = plugin {
                        reconcile::run(plugin, capabilities, term, view).await;
                    }
                };
                Box::pin(task.instrument(span)) as BoxFuture<'static, ()>
            };
            workers.sync(&set, wanted, &retire_parent, start, |task| term.spawn(task));
            tokio::select! {
                _ = term.cancelled() => return,
                _ = shutdown.cancelled() => return,
                changed = plugins.changed() => if changed.is_err() { return },
            }
        }
    }
}

impl Supervisor {
    /// Keeps one task per health check of `target` running, whatever the role, following plugin
    /// changes; a retired check reopens the campaign gate it may have closed. A check bound to a
    /// group runs once per replica, not per shard: it gates the whole group. The checks of the
    /// current set are started before this returns.
    fn follow_health_checks(
        &self,
        target: Target,
        shutdown: CancellationToken,
    ) -> impl Future<Output = ()> + Send + 'static {
        let mut plugins = self.replica.plugins.clone();
        let mut workers = Workers::default();
        let tasks = TaskTracker::new();
        let set = plugins.borrow_and_update().clone();
        self.sync_health_checks(&target, &set, &mut workers, &shutdown, &tasks);
        let sup = self.clone();
        async move {
            loop {
                tokio::select! {
                    _ = shutdown.cancelled() => break,
                    changed = plugins.changed() => if changed.is_err() { break },
                }
                let set = plugins.borrow_and_update().clone();
                sup.sync_health_checks(&target, &set, &mut workers, &shutdown, &tasks);
            }
            tasks.close();
            tasks.wait().await;
        }
    }

    /// Brings the health checks of `target` in line with `set`, spawning new ones on `tasks`.
    fn sync_health_checks(
        &self,
        target: &Target,
        set: &PluginSet,
        workers: &mut Workers,
        shutdown: &CancellationToken,
        tasks: &TaskTracker,
    ) {
        // The board first, so no task can report on a plugin the board does not list yet.
        self.publish_set(set);
        let start = |entry: Arc<PluginEntry>, retire: CancellationToken| {
            let subject = match target {
                Target::Lease(lease) => Subject::lease(&self.replica, lease),
                Target::Group(group) => Some(Subject::group(&self.replica, group)),
            };
            let plugin = Plugin::new(self.runtime.clone(), entry, self.board.clone(), retire);
            let check = subject.zip(plugin);
            if let Some((subject, plugin)) = &check
                && subject.shut_from_start()
            {
                // Now rather than once the task runs: the host starts its health checks before
                // the lease driver, so that even the first campaign waits for them.
                subject.allow(&self.replica, &plugin.name, false);
            }
            let replica = self.replica.clone();
            // The check's spans are its roles' (see `health_loop`).
            let task = async move {
                if let Some((subject, plugin)) = check {
                    health_loop(replica, plugin, subject).await;
                }
            };
            Box::pin(task) as BoxFuture<'static, ()>
        };
        let wanted = |e: &PluginEntry| target.checked_by(e);
        workers.sync(set, wanted, shutdown, start, |task| tasks.spawn(task));
    }
}

#[cfg(test)]
mod tests;
