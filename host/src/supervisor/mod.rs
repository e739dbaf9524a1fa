//! The supervisor (DESIGN §2.3): plugins bound to the lifecycle of their lease. On each term it
//! instantiates every reconciler bound to the lease, calls `init`, then `reconcile` on the
//! schedule, one call at a time. When the term ends — lease lost, released, or `safe_until`
//! reached — the running call is interrupted and the store dropped; the term's tracker makes the
//! release wait for that.
//!
//! - [`status`]: what `/status` shows of each plugin;
//! - `workers`: one task per plugin file, in step with the plugin set.

pub mod status;
mod workers;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{Instrument, info, info_span, warn};

use crate::lease::{LeaseEngine, Term};
use crate::plugin::{PluginEntry, PluginSet};
use crate::runtime::bindings::types::ReconcileContext;
use crate::runtime::host::LeaseView;
use crate::runtime::{CallFailure, Prepared, Runtime};
use futures::future::BoxFuture;
use status::{PluginState, PluginStatus, StatusBoard};
use workers::Workers;

/// Consecutive failures before a plugin is quarantined until its next term or a new file.
pub const QUARANTINE_AFTER: u32 = 5;
/// First retry delay after a failure; doubles per consecutive failure.
pub const BACKOFF_BASE: Duration = Duration::from_millis(500);
/// The longest retry delay.
pub const BACKOFF_MAX: Duration = Duration::from_secs(30);

/// The delay before retrying after `failures` consecutive failures.
pub fn backoff(failures: u32) -> Duration {
    let factor = 1u32 << failures.saturating_sub(1).min(16);
    BACKOFF_BASE.saturating_mul(factor).min(BACKOFF_MAX)
}

/// Runs the plugins of every lease of this replica.
#[derive(Debug, Clone)]
pub struct Supervisor {
    /// The WebAssembly runtime.
    runtime: Arc<Runtime>,
    /// The lease engine, for leadership and holder id.
    leases: Arc<LeaseEngine>,
    /// The current plugin set, replaced whole when the directory changes.
    plugins: watch::Receiver<Arc<PluginSet>>,
    /// What `/status` shows.
    board: StatusBoard,
}

impl Supervisor {
    /// A supervisor over `plugins`.
    pub fn new(
        runtime: Arc<Runtime>,
        leases: Arc<LeaseEngine>,
        plugins: watch::Receiver<Arc<PluginSet>>,
    ) -> Self {
        let board = StatusBoard::default();
        let sup = Supervisor {
            runtime,
            leases,
            plugins,
            board,
        };
        sup.publish_set(&sup.plugins.borrow().clone());
        sup
    }

    /// The plugin status board.
    pub fn board(&self) -> &StatusBoard {
        &self.board
    }

    /// Follows every lease until `shutdown`.
    pub async fn run(self, shutdown: CancellationToken) {
        let tasks = TaskTracker::new();
        for name in self.leases.lease_names() {
            let (sup, lease, stop) = (self.clone(), name.to_string(), shutdown.clone());
            tasks.spawn(async move { sup.follow_lease(&lease, stop).await });
            let (sup, lease, stop) = (self.clone(), name.to_string(), shutdown.clone());
            tasks.spawn(async move { sup.follow_health_checks(&lease, stop).await });
        }
        // Each lease's loops publish the board on every change of the plugin set.
        tasks.close();
        tasks.wait().await;
    }

    /// Adds new plugins to the board and drops removed ones; running ones keep their state.
    fn publish_set(&self, set: &PluginSet) {
        let known: std::collections::BTreeMap<String, PluginStatus> = self
            .board
            .snapshot()
            .into_iter()
            .map(|s| (s.name.clone(), s))
            .collect();
        for name in known.keys().filter(|name| !set.contains_key(*name)) {
            self.board.remove(name);
        }
        for entry in set.values() {
            let (world, state, last_error) = match &entry.loaded {
                Ok(l) => (Some(l.prepared.world()), PluginState::Idle, None),
                Err(e) => (None, PluginState::Invalid, Some(e.clone())),
            };
            let lease = entry.manifest.lease.clone();
            let status = match known.get(&entry.name) {
                // A plugin that still loads keeps its live state and counters; what it is bound
                // to comes from the (possibly replaced) file.
                Some(old) if old.state != PluginState::Invalid && state != PluginState::Invalid => {
                    PluginStatus {
                        lease,
                        world,
                        ..old.clone()
                    }
                }
                old => PluginStatus {
                    name: entry.name.clone(),
                    lease,
                    world,
                    state,
                    last_error,
                    calls: old.map_or(0, |o| o.calls),
                    traps: old.map_or(0, |o| o.traps),
                },
            };
            self.board.put(status);
        }
    }

    async fn follow_lease(&self, lease: &str, shutdown: CancellationToken) {
        let Some(mut leadership) = self.leases.subscribe(lease) else {
            return;
        };
        loop {
            let term = leadership.borrow_and_update().term.clone();
            if let Some(term) = term.filter(|t| !t.is_cancelled()) {
                self.run_term(lease, term, &shutdown).await;
            }
            tokio::select! {
                _ = shutdown.cancelled() => return,
                changed = leadership.changed() => if changed.is_err() { return },
            }
        }
    }

    /// Keeps one task per reconciler of `lease` running under `term`, following plugin changes.
    async fn run_term(&self, lease: &str, term: Term, shutdown: &CancellationToken) {
        // Whoever ends the term, bump the epoch at once so a spinning guest yields now rather
        // than at the next tick, and its call is dropped.
        let engine = self.runtime.engine().clone();
        let ended = term.cancelled();
        tokio::spawn(async move {
            ended.await;
            engine.increment_epoch();
        });
        let acquired_at = SystemTime::now();
        let mut plugins = self.plugins.clone();
        let mut workers = Workers::default();
        let retire_parent = term.child_token();
        loop {
            let set = plugins.borrow_and_update().clone();
            // The board first, so no task can report on a plugin the board does not list yet.
            self.publish_set(&set);
            let wanted = |e: &PluginEntry| {
                e.manifest.lease == lease
                    && matches!(e.loaded, Ok(ref l) if matches!(l.prepared, Prepared::Reconciler(_)))
            };
            let start = |entry: Arc<PluginEntry>, retire: CancellationToken| {
                let view = LeaseView {
                    name: lease.to_string(),
                    holder: self.leases.holder().to_string(),
                    term: Some(term.clone()),
                    acquired_at: Some(acquired_at),
                };
                let span =
                    info_span!("plugin", plugin = %entry.name, lease = %lease, epoch = term.epoch);
                let task = reconcile_loop(
                    self.runtime.clone(),
                    entry,
                    term.clone(),
                    retire,
                    view,
                    self.board.clone(),
                );
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
    /// Keeps one task per health check of `lease` running, whatever the role, following plugin
    /// changes; a retired check reopens the campaign gate it may have closed.
    async fn follow_health_checks(&self, lease: &str, shutdown: CancellationToken) {
        let mut plugins = self.plugins.clone();
        let mut workers = Workers::default();
        let tasks = TaskTracker::new();
        loop {
            let set = plugins.borrow_and_update().clone();
            // The board first, so no task can report on a plugin the board does not list yet.
            self.publish_set(&set);
            let wanted = |e: &PluginEntry| {
                e.manifest.lease == lease
                    && matches!(e.loaded, Ok(ref l) if matches!(l.prepared, Prepared::HealthCheck(_)))
            };
            let start = |entry: Arc<PluginEntry>, retire: CancellationToken| {
                let span = info_span!("health", plugin = %entry.name, lease = %lease);
                let task = health_loop(self.clone(), entry, lease.to_string(), retire);
                Box::pin(task.instrument(span)) as BoxFuture<'static, ()>
            };
            workers.sync(&set, wanted, &shutdown, start, |task| tasks.spawn(task));
            tokio::select! {
                _ = shutdown.cancelled() => break,
                changed = plugins.changed() => if changed.is_err() { break },
            }
        }
        tasks.close();
        tasks.wait().await;
    }
}

/// One health check of `lease`: `check(active)` while this replica holds the lease, stepping down
/// after `failure_threshold` consecutive failures; `check(standby)` otherwise, keeping the replica
/// from campaigning while it fails. A fresh store per role.
async fn health_loop(
    sup: Supervisor,
    entry: Arc<PluginEntry>,
    lease: String,
    retire: CancellationToken,
) {
    use crate::runtime::bindings::types::Role as CheckRole;
    let Ok(loaded) = &entry.loaded else { return };
    let Prepared::HealthCheck(pre) = &loaded.prepared else {
        return;
    };
    let Some(mut leadership) = sup.leases.subscribe(&lease) else {
        return;
    };
    let name: Arc<str> = Arc::from(entry.name.as_str());
    let config: Vec<(String, String)> = entry.manifest.config.clone().into_iter().collect();
    let threshold = entry.manifest.failure_threshold;
    let mut gated = false;
    let mut failures = 0u32;
    'role: loop {
        let term = leadership
            .borrow_and_update()
            .term
            .clone()
            .filter(|t| !t.is_cancelled());
        let role = if term.is_some() {
            CheckRole::Active
        } else {
            CheckRole::Standby
        };
        let view = LeaseView {
            name: lease.clone(),
            holder: sup.leases.holder().to_string(),
            acquired_at: term.as_ref().map(|_| SystemTime::now()),
            term,
        };
        let mut store = sup
            .runtime
            .new_store(name.clone(), view, &entry.manifest.limits);
        let instance = pre.instantiate_async(&mut store.store).await;
        let init = match &instance {
            Ok(instance) => {
                store
                    .call(async |s| instance.call_init(s, &config).await)
                    .await
            }
            Err(e) => Err(CallFailure::Trap(format!("instantiation failed: {e:#}"))),
        };
        sup.board.update(&name, |s| s.calls += 1);
        loop {
            let result = match (&instance, &init) {
                (Ok(instance), Ok(())) => {
                    store
                        .call(async |s| instance.call_check(s, role).await)
                        .await
                }
                (_, Err(failure)) => Err(failure.clone()),
                (Err(_), Ok(())) => Err(CallFailure::Trap("not instantiated".into())),
            };
            sup.board.update(&name, |s| s.calls += 1);
            let poisoned = match &result {
                Ok(()) => {
                    failures = 0;
                    sup.board.update(&name, |s| s.state = PluginState::Running);
                    if gated {
                        info!("standby health check passes again: campaigning allowed");
                        sup.leases.allow_campaigns(&lease, true);
                        gated = false;
                    }
                    false
                }
                Err(failure) => {
                    failures += 1;
                    warn!(role = ?role, failures, kind = failure.kind(), "health check failed: {failure}");
                    sup.board.update(&name, |s| {
                        s.last_error = Some(failure.to_string());
                        s.traps += u64::from(failure.poisons_store());
                        s.state = PluginState::Backoff;
                    });
                    match role {
                        CheckRole::Active if failures >= threshold => {
                            warn!(
                                failures,
                                "health check failed {failures} times in a row: stepping down"
                            );
                            sup.leases.step_down(&lease);
                            failures = 0;
                        }
                        CheckRole::Standby if !gated => {
                            warn!("standby health check fails: not campaigning until it passes");
                            sup.leases.allow_campaigns(&lease, false);
                            gated = true;
                        }
                        _ => {}
                    }
                    failure.poisons_store() || init.is_err()
                }
            };
            tokio::select! {
                _ = retire.cancelled() => break 'role,
                changed = leadership.changed() => {
                    if changed.is_err() { break 'role }
                    continue 'role;
                }
                _ = tokio::time::sleep(entry.manifest.interval) => {}
            }
            if poisoned {
                continue 'role;
            }
        }
    }
    if gated {
        sup.leases.allow_campaigns(&lease, true);
    }
}

/// Runs `call` unless the term ends first; `None` means the term ended (the call was dropped).
async fn guarded<T>(term: &Term, call: impl Future<Output = T>) -> Option<T> {
    tokio::select! {
        biased;
        _ = term.cancelled() => {
            info!("call interrupted: the term ended; dropping the instance");
            None
        }
        result = call => Some(result),
    }
}

/// One reconciler for one term: instantiate, `init`, then `reconcile` on its schedule, with
/// backoff after failures and quarantine after [`QUARANTINE_AFTER`] in a row.
async fn reconcile_loop(
    runtime: Arc<Runtime>,
    entry: Arc<PluginEntry>,
    term: Term,
    retire: CancellationToken,
    view: LeaseView,
    board: StatusBoard,
) {
    let Ok(loaded) = &entry.loaded else { return };
    let Prepared::Reconciler(pre) = &loaded.prepared else {
        return;
    };
    let name: Arc<str> = Arc::from(entry.name.as_str());
    let config: Vec<(String, String)> = entry.manifest.config.clone().into_iter().collect();
    let mut failures = 0u32;
    let mut tick = 0u64;
    let fail = |failures: &mut u32, failure: &CallFailure| {
        *failures += 1;
        let trapped = failure.poisons_store();
        warn!(
            kind = failure.kind(),
            failures = *failures,
            "plugin call failed: {failure}"
        );
        board.update(&name, |s| {
            s.last_error = Some(failure.to_string());
            s.traps += u64::from(trapped);
            s.state = if *failures >= QUARANTINE_AFTER {
                PluginState::Quarantined
            } else {
                PluginState::Backoff
            };
        });
    };
    'instance: loop {
        // A fresh store per instance: after any trap the old one is poisoned and dropped.
        let mut store = runtime.new_store(name.clone(), view.clone(), &entry.manifest.limits);
        let instance = match guarded(&term, pre.instantiate_async(&mut store.store)).await {
            None => return,
            Some(Ok(instance)) => instance,
            Some(Err(e)) => {
                fail(
                    &mut failures,
                    &CallFailure::Trap(format!("instantiation failed: {e:#}")),
                );
                if !pause(&term, &retire, &board, &name, failures).await {
                    return;
                }
                continue 'instance;
            }
        };
        board.update(&name, |s| s.calls += 1);
        let init = guarded(
            &term,
            store.call(async |s| instance.call_init(s, &config).await),
        )
        .await;
        match init {
            None => return,
            Some(Ok(())) => {
                info!("plugin initialised");
                board.update(&name, |s| s.state = PluginState::Running);
            }
            Some(Err(failure)) => {
                fail(&mut failures, &failure);
                if !pause(&term, &retire, &board, &name, failures).await {
                    return;
                }
                continue 'instance;
            }
        }
        loop {
            let ctx = ReconcileContext {
                lease: view.name.clone(),
                epoch: u64::try_from(term.epoch).unwrap_or_default(),
                tick,
            };
            tick += 1;
            board.update(&name, |s| s.calls += 1);
            let delay = match guarded(
                &term,
                store.call(async |s| instance.call_reconcile(s, &ctx).await),
            )
            .await
            {
                None => return,
                Some(Ok(outcome)) => {
                    if failures > 0 {
                        board.update(&name, |s| s.state = PluginState::Running);
                    }
                    failures = 0;
                    outcome
                        .requeue_after_ms
                        .map_or(entry.manifest.interval, Duration::from_millis)
                }
                Some(Err(failure)) => {
                    fail(&mut failures, &failure);
                    if failure.poisons_store() {
                        if !pause(&term, &retire, &board, &name, failures).await {
                            return;
                        }
                        continue 'instance;
                    }
                    if failures >= QUARANTINE_AFTER {
                        quarantine(&term, &retire).await;
                        return;
                    }
                    backoff(failures)
                }
            };
            tokio::select! {
                _ = term.cancelled() => return,
                _ = retire.cancelled() => return,
                _ = tokio::time::sleep(delay) => {}
            }
        }
    }
}

/// Waits out the backoff; false when the plugin should stop (term over, retired, quarantined).
async fn pause(
    term: &Term,
    retire: &CancellationToken,
    board: &StatusBoard,
    name: &str,
    failures: u32,
) -> bool {
    if failures >= QUARANTINE_AFTER {
        warn!(
            failures,
            "plugin quarantined until the next term or a new file"
        );
        board.update(name, |s| s.state = PluginState::Quarantined);
        quarantine(term, retire).await;
        return false;
    }
    tokio::select! {
        _ = term.cancelled() => false,
        _ = retire.cancelled() => false,
        _ = tokio::time::sleep(backoff(failures)) => true,
    }
}

async fn quarantine(term: &Term, retire: &CancellationToken) {
    tokio::select! {
        _ = term.cancelled() => {}
        _ = retire.cancelled() => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_the_cap() {
        assert_eq!(backoff(1), Duration::from_millis(500));
        assert_eq!(backoff(2), Duration::from_secs(1));
        assert_eq!(backoff(4), Duration::from_secs(4));
        assert_eq!(backoff(40), BACKOFF_MAX);
    }
}
