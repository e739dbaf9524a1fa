//! One health check of a lease, following this replica's role for it; or of a lease group,
//! following whether this replica counts as one of its members. Each role is a [`Work`] for the
//! one [`drive`] loop, started through the one [`Plugin::start`].

use std::time::SystemTime;

use tokio::sync::watch;
use tokio::time::Instant;
use tracing::{Instrument, Span, info, info_span, warn};

use super::instance::{Live, Plugin};
use super::view::Replica;
use crate::lease::groups::GroupStatus;
use crate::lease::{GateSource, Leadership, Term};
use crate::manifest::Binding;
use crate::plugin::PluginEntry;
use crate::runtime::host::LeaseView;
use crate::runtime::{CheckRole, World};
use crate::supervisor::failure::Failure;
use crate::supervisor::policy::{Failures, Policy, Step};
use crate::supervisor::work::{Work, drive};

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
    pub(super) fn lease(replica: &Replica, lease: &str) -> Option<Subject> {
        let leadership = replica.leases.subscribe(lease)?;
        Some(Subject::Lease {
            name: lease.to_string(),
            leadership,
        })
    }

    /// `group`'s subject.
    pub(super) fn group(replica: &Replica, group: &str) -> Subject {
        Subject::Group {
            name: group.to_string(),
            groups: replica.leases.subscribe_groups(),
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
    fn step_down(&self, replica: &Replica) {
        match self {
            Subject::Lease { name, .. } => replica.leases.step_down(name),
            Subject::Group { name, .. } => replica.leases.allow_group(name, false),
        }
    }

    /// Whether its check keeps the gate shut from its start until it first passes: a lease's
    /// does, so that a standby not yet known to be healthy does not take it; a group's does not,
    /// since keeping the replica out of the group gives up its shards.
    pub(super) fn shut_from_start(&self) -> bool {
        matches!(self, Subject::Lease { .. })
    }

    /// Lets this replica campaign for the lease (take part in the group), or not, as far as
    /// health check `plugin` is concerned.
    pub(super) fn allow(&self, replica: &Replica, plugin: &str, open: bool) {
        match self {
            Subject::Lease { name, .. } => {
                let source = GateSource::HealthCheck(plugin.to_string());
                replica.leases.allow_campaigns(name, source, open)
            }
            Subject::Group { name, .. } => replica.leases.allow_group(name, open),
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
/// group) while it fails, and a lease's from its start until it first passes. A fresh store per
/// role, and after any trap. A group's check sees the group's name as its lease's and no shard.
///
/// Each role runs in a span of its own, `health{plugin, lease, epoch}` (`epoch` while active;
/// `group` in place of `lease` for a group's check), which every line of the check and of its
/// guest carries.
pub(super) async fn health_loop(replica: Replica, plugin: Plugin, subject: Subject) {
    let policy = Policy::health_check(plugin.entry.manifest.interval);
    let mut failures = Failures::new(policy);
    let (board, name) = (plugin.board.clone(), plugin.name.clone());
    let mut check = Check {
        threshold: plugin.entry.manifest.failure_threshold,
        view: replica.view(&plugin.entry, subject.name(), None),
        replica,
        plugin,
        subject,
        policy,
        role: CheckRole::Standby,
        gated: false,
        due: None,
        gone: false,
    };
    if check.subject.shut_from_start() {
        // Shut when the check was started too, but a predecessor's last pass may have opened it
        // since.
        check.allow(false);
        check.gated = true;
    }
    while !check.gone && !check.plugin.retire.is_cancelled() {
        let span = check.enter_role();
        drive(&mut check, &mut failures, &board, &name)
            .instrument(span)
            .await;
    }
    if check.gated && !check.replaced() {
        check.allow(true);
    }
}

/// A health check in one role.
struct Check {
    /// For the leases' gates.
    replica: Replica,
    /// The plugin file.
    plugin: Plugin,
    /// What it checks.
    subject: Subject,
    /// Failures in a row of an active check before it steps down.
    threshold: u32,
    /// The check's failure policy, to start counting afresh after a step-down.
    policy: Policy,
    /// The role it checks in.
    role: CheckRole,
    /// The lease as the guest sees it in this role.
    view: LeaseView,
    /// Whether this check closed the campaign gate (or keeps the group closed).
    gated: bool,
    /// When the next check is due; `None` at once.
    due: Option<Instant>,
    /// Whether the subject has nothing more to follow.
    gone: bool,
}

impl Check {
    /// Opens or shuts the subject's gate on this check's behalf.
    fn allow(&self, open: bool) {
        self.subject.allow(&self.replica, &self.plugin.name, open);
    }

    /// Whether a newer file of this plugin, still a health check of this lease, takes its gate
    /// over: that one keeps it shut from its start, so opening it here would let a campaign slip
    /// in between.
    fn replaced(&self) -> bool {
        let Subject::Lease { name, .. } = &self.subject else {
            return false;
        };
        let target = Target::Lease(name.clone());
        let set = self.replica.plugins.borrow();
        set.get(&*self.plugin.name)
            .is_some_and(|e| e.digest != self.plugin.entry.digest && target.checked_by(e))
    }

    /// Takes the role this replica has now, and returns the span the role runs in.
    fn enter_role(&mut self) -> Span {
        let (role, term) = self.subject.role();
        let epoch = term.as_ref().map(|t| t.epoch.get());
        let within = term.as_ref().map(|t| (t.lease.clone(), t.epoch));
        self.role = role;
        self.due = None;
        let at = term.map(|t| (t, SystemTime::now()));
        self.view = self
            .replica
            .view(&self.plugin.entry, self.subject.name(), at);
        let plugin = &*self.plugin.name;
        match &self.subject {
            Subject::Lease { name, .. } => {
                let span = info_span!("health", plugin = %plugin, lease = %name, epoch);
                // A check while this replica holds the lease belongs to the term's trace.
                if let Some((lease, epoch)) = &within {
                    crate::telemetry::within_term(&span, lease, *epoch);
                }
                span
            }
            Subject::Group { name, .. } => info_span!("health", plugin = %plugin, group = %name),
        }
    }
}

impl Work for Check {
    type Running = Live;

    async fn start(&mut self) -> Result<Live, Failure> {
        // Health checks are granted nothing.
        self.plugin
            .start(self.view.clone(), None)
            .await
            .map_err(Failure::from)
    }

    async fn next(&mut self, live: &mut Live) -> Option<Result<(), Failure>> {
        if let Some(due) = self.due {
            tokio::select! {
                _ = self.over() => return None,
                _ = tokio::time::sleep_until(due) => {}
            }
        }
        let called = live.store.check(&live.instance, self.role).await;
        self.plugin.board.record(&self.plugin.name, &called);
        // After a failure the policy's backoff, which is the interval, is the wait.
        self.due = called
            .result
            .is_ok()
            .then(|| Instant::now() + self.plugin.entry.manifest.interval);
        Some(called.result.map_err(Failure::from))
    }

    fn judged(&mut self, step: Step, outcome: Result<(), &Failure>, failures: &mut Failures) {
        let failure = match outcome {
            Ok(()) => {
                if step == Step::Call && self.gated {
                    info!("health check passes: campaigning allowed");
                    self.allow(true);
                    self.gated = false;
                }
                return;
            }
            Err(Failure::Cancelled { .. }) => return,
            Err(failure) => failure,
        };
        warn!(role = ?self.role, failures = failures.count(), kind = failure.kind(), "health check failed: {failure}");
        match self.role {
            CheckRole::Active if failures.count() >= self.threshold => {
                warn!(
                    failures = failures.count(),
                    "health check failed {} times in a row: stepping down",
                    failures.count()
                );
                self.subject.step_down(&self.replica);
                // A group stays closed until a check passes; a lease's gate stays as it was (shut
                // still if no check has passed since this one started), for the standby check.
                if matches!(self.subject, Subject::Group { .. }) {
                    self.gated = true;
                }
                *failures = Failures::new(self.policy);
            }
            CheckRole::Standby if !self.gated => {
                warn!("standby health check fails: not campaigning until it passes");
                self.allow(false);
                self.gated = true;
            }
            _ => {}
        }
    }

    async fn over(&mut self) {
        tokio::select! {
            _ = self.plugin.retire.cancelled() => {}
            more = self.subject.changed(self.role) => self.gone = !more,
        }
    }

    /// A check is not bound to a term: it tries again after its interval.
    async fn resumed(&mut self) -> bool {
        let interval = self.plugin.entry.manifest.interval;
        tokio::select! {
            _ = self.over() => false,
            _ = tokio::time::sleep(interval) => true,
        }
    }
}

/// What a set of health checks is bound to.
pub(super) enum Target {
    /// A lease.
    Lease(String),
    /// A lease group.
    Group(String),
}

impl Target {
    /// Whether `entry` is a health check bound to this target, and loaded.
    pub(super) fn checked_by(&self, entry: &PluginEntry) -> bool {
        let bound = match (self, &entry.manifest.binding) {
            (Target::Lease(lease), Binding::Lease(name)) => name.as_str() == lease,
            (Target::Group(group), Binding::Group(name)) => name == group,
            _ => false,
        };
        bound && matches!(entry.loaded, Ok(ref l) if l.prepared.world() == World::HealthCheck)
    }
}
