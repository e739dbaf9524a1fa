//! One health check of a lease, following this replica's role for it; or of a lease group,
//! following whether this replica counts as one of its members.

use std::sync::Arc;
use std::time::SystemTime;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::Supervisor;
use super::policy::{Failures, Next, Policy, Step};
use super::status::PluginState;
use crate::lease::groups::GroupStatus;
use crate::lease::{Leadership, Term};
use crate::plugin::PluginEntry;
use crate::runtime::host::LeaseView;
use crate::runtime::{CallFailure, CheckRole};

/// What a health check is bound to.
pub(super) enum Subject {
    /// One lease: active while this replica holds it.
    Lease {
        /// The lease's name.
        name: String,
        /// Its leadership here.
        leadership: watch::Receiver<Leadership>,
    },
    /// A lease group: active while this replica counts as one of its members. A failing check
    /// keeps the replica out of the whole group.
    Group {
        /// The group's name.
        name: String,
        /// The groups' state here.
        groups: watch::Receiver<Vec<GroupStatus>>,
    },
}

impl Subject {
    /// `lease`'s subject, if this replica campaigns for it.
    pub(super) fn lease(sup: &Supervisor, lease: &str) -> Option<Subject> {
        let leadership = sup.leases.subscribe(lease)?;
        Some(Subject::Lease {
            name: lease.to_string(),
            leadership,
        })
    }

    /// `group`'s subject.
    pub(super) fn group(sup: &Supervisor, group: &str) -> Subject {
        Subject::Group {
            name: group.to_string(),
            groups: sup.leases.subscribe_groups(),
        }
    }

    /// The lease or group name.
    fn name(&self) -> &str {
        match self {
            Subject::Lease { name, .. } | Subject::Group { name, .. } => name,
        }
    }

    /// The role to check in now, and the lease's term while it is held.
    fn role(&mut self) -> (CheckRole, Option<Term>) {
        match self {
            Subject::Lease { leadership, .. } => {
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
                (role, term)
            }
            Subject::Group { name, groups } => {
                (group_role(&groups.borrow_and_update(), name), None)
            }
        }
    }

    /// Resolves when the role may have changed (any change of the lease's leadership; a change of
    /// the group's role from `role`); `false` once there is nothing more to follow.
    async fn changed(&mut self, role: CheckRole) -> bool {
        match self {
            Subject::Lease { leadership, .. } => leadership.changed().await.is_ok(),
            Subject::Group { name, groups } => groups
                .wait_for(|g| group_role(g, name) != role)
                .await
                .is_ok(),
        }
    }

    /// Gives up what an active check guards after too many failures in a row.
    fn step_down(&self, sup: &Supervisor) {
        match self {
            Subject::Lease { name, .. } => sup.leases.step_down(name),
            Subject::Group { name, .. } => sup.leases.allow_group(name, false),
        }
    }

    /// Lets this replica campaign for the lease (take part in the group), or not.
    fn allow(&self, sup: &Supervisor, open: bool) {
        match self {
            Subject::Lease { name, .. } => sup.leases.allow_campaigns(name, open),
            Subject::Group { name, .. } => sup.leases.allow_group(name, open),
        }
    }
}

/// A group's check is active while this replica counts as a member.
fn group_role(groups: &[GroupStatus], group: &str) -> CheckRole {
    if groups.iter().any(|g| g.name == group && g.member) {
        CheckRole::Active
    } else {
        CheckRole::Standby
    }
}

/// One health check of `subject`: `check(active)` while this replica holds the lease (counts as a
/// member of the group), stepping down (leaving the group) after `failure_threshold` consecutive
/// failures; `check(standby)` otherwise, keeping the replica from campaigning (from joining the
/// group) while it fails. A fresh store per role, and after any trap. A group's check sees the
/// group's name as its lease's and no shard.
pub(super) async fn health_loop(
    sup: Supervisor,
    entry: Arc<PluginEntry>,
    mut subject: Subject,
    retire: CancellationToken,
) {
    let Ok(loaded) = &entry.loaded else { return };
    let name: Arc<str> = Arc::from(entry.name.as_str());
    let config: Vec<(String, String)> = entry.manifest.config.clone().into_iter().collect();
    let threshold = entry.manifest.failure_threshold;
    let policy = Policy::health_check(entry.manifest.interval);
    let mut failures = Failures::new(policy);
    let mut gated = false;
    'role: loop {
        let (role, term) = subject.role();
        let view = LeaseView {
            name: subject.name().to_string(),
            holder: sup.leases.holder().to_string(),
            acquired_at: term.as_ref().map(|_| SystemTime::now()),
            term,
            shard: sup.shard_of(&entry, subject.name()),
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
            // One outcome per round: it is a success only when `check` itself returned.
            let next = failures.after(Step::Call, outcome.as_ref().map(|_| ()));
            match &outcome {
                Ok(()) => {
                    sup.board.update(&name, |s| s.state = PluginState::Running);
                    if gated {
                        info!("standby health check passes again: campaigning allowed");
                        subject.allow(&sup, true);
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
                            subject.step_down(&sup);
                            // A group stays closed until a check passes (the lease's own gate
                            // is the standby check's).
                            gated = matches!(subject, Subject::Group { .. });
                            failures = Failures::new(policy);
                        }
                        CheckRole::Standby if !gated => {
                            warn!("standby health check fails: not campaigning until it passes");
                            subject.allow(&sup, false);
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
                more = subject.changed(role) => {
                    if !more { break 'role }
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
        subject.allow(&sup, true);
    }
}
