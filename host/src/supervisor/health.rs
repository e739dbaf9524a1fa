//! One health check of a lease, following this replica's role for it.

use std::sync::Arc;
use std::time::SystemTime;

use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::Supervisor;
use super::status::PluginState;
use crate::plugin::PluginEntry;
use crate::runtime::host::LeaseView;
use crate::runtime::{CallFailure, Prepared};

/// One health check of `lease`: `check(active)` while this replica holds the lease, stepping down
/// after `failure_threshold` consecutive failures; `check(standby)` otherwise, keeping the replica
/// from campaigning while it fails. A fresh store per role.
pub(super) async fn health_loop(
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
            .new_store(name.clone(), view, &entry.manifest.limits, None);
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
