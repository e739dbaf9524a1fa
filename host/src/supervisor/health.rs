//! One health check of a lease, following this replica's role for it.

use std::sync::Arc;
use std::time::SystemTime;

use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::Supervisor;
use super::policy::{Failures, Next, Policy};
use super::status::PluginState;
use crate::plugin::PluginEntry;
use crate::runtime::host::LeaseView;
use crate::runtime::{CallFailure, CheckRole};

/// One health check of `lease`: `check(active)` while this replica holds the lease, stepping down
/// after `failure_threshold` consecutive failures; `check(standby)` otherwise, keeping the replica
/// from campaigning while it fails. A fresh store per role, and after any trap.
pub(super) async fn health_loop(
    sup: Supervisor,
    entry: Arc<PluginEntry>,
    lease: String,
    retire: CancellationToken,
) {
    let Ok(loaded) = &entry.loaded else { return };
    let Some(mut leadership) = sup.leases.subscribe(&lease) else {
        return;
    };
    let name: Arc<str> = Arc::from(entry.name.as_str());
    let config: Vec<(String, String)> = entry.manifest.config.clone().into_iter().collect();
    let threshold = entry.manifest.failure_threshold;
    let policy = Policy::health_check(entry.manifest.interval);
    let mut failures = Failures::new(policy);
    let mut gated = false;
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
            shard: sup.shard_of(&entry, &lease),
        };
        let _alive = sup.runtime.metrics().store_alive(&name);
        let mut store = sup
            .runtime
            .new_store(name.clone(), view, &entry.manifest.limits, None);
        let called = store.instantiate(&loaded.prepared, &retire).await;
        sup.board.record(&name, &called);
        let (instance, mut outcome) = match called.result {
            Ok(instance) => (Some(instance), Ok(())),
            Err(failure) => (None, Err(failure)),
        };
        if let Some(instance) = &instance {
            let called = store.init(instance, &config).await;
            sup.board.record(&name, &called);
            outcome = called.result;
        }
        // An instance that failed to start or to initialise is replaced after the wait.
        let ready = instance.as_ref().filter(|_| outcome.is_ok());
        loop {
            if let Some(instance) = ready {
                let called = store.check(instance, role).await;
                sup.board.record(&name, &called);
                outcome = called.result;
            }
            let next = failures.after(outcome.as_ref().map(|_| ()));
            match &outcome {
                Ok(()) => {
                    sup.board.update(&name, |s| s.state = PluginState::Running);
                    if gated {
                        info!("standby health check passes again: campaigning allowed");
                        sup.leases.allow_campaigns(&lease, true);
                        gated = false;
                    }
                }
                Err(CallFailure::Cancelled { .. }) => {}
                Err(failure) => {
                    warn!(role = ?role, failures = failures.count(), kind = failure.kind(), "health check failed: {failure}");
                    sup.board.update(&name, |s| s.state = PluginState::Backoff);
                    match role {
                        CheckRole::Active if failures.count() >= threshold => {
                            warn!(
                                failures = failures.count(),
                                "health check failed {} times in a row: stepping down",
                                failures.count()
                            );
                            sup.leases.step_down(&lease);
                            failures = Failures::new(policy);
                        }
                        CheckRole::Standby if !gated => {
                            warn!("standby health check fails: not campaigning until it passes");
                            sup.leases.allow_campaigns(&lease, false);
                            gated = true;
                        }
                        _ => {}
                    }
                }
            }
            let (wait, fresh) = match next {
                Next::Retry { after, fresh } => (after, fresh),
                Next::AwaitTerm { fresh } => (entry.manifest.interval, fresh),
                Next::Stop => (entry.manifest.interval, true),
                Next::Proceed | Next::Quarantine => (entry.manifest.interval, false),
            };
            let fresh = fresh || ready.is_none();
            tokio::select! {
                _ = retire.cancelled() => break 'role,
                changed = leadership.changed() => {
                    if changed.is_err() { break 'role }
                    continue 'role;
                }
                _ = tokio::time::sleep(wait) => {}
            }
            if fresh {
                continue 'role;
            }
        }
    }
    if gated {
        sup.leases.allow_campaigns(&lease, true);
    }
}
