//! What the driver records in the metrics: every lease shown from the start, each change of role
//! or epoch as the driver publishes it, how long renewals take and how long a term's plugins
//! take to stop.

use std::time::Duration;

use crate::epoch::Epoch;
use crate::leadership::Role;
use crate::metrics::{LeaseMetrics, RoleLabel};

/// Shows every lease of `names` from the start (a standby as not leading, epoch 0), not only
/// once its role first changes, all of them counted as standbys.
pub(super) fn show_from_start<'a>(
    metrics: &LeaseMetrics,
    names: impl ExactSizeIterator<Item = &'a String>,
    ttl: Duration,
) {
    let count = i64::try_from(names.len()).unwrap_or(i64::MAX);
    for name in names {
        let label = LeaseMetrics::lease(name);
        metrics
            .ttl_seconds
            .get_or_create(&label)
            .set(ttl.as_secs_f64());
        metrics.is_leader.get_or_create(&label).set(0);
        metrics.epoch.get_or_create(&label).set(0);
        metrics.transitions.get_or_create(&label).inc_by(0);
    }
    for role in [Role::Leader, Role::Standby, Role::Uncertain] {
        metrics.leases.get_or_create(&role_label(role)).set(0);
    }
    metrics
        .leases
        .get_or_create(&role_label(Role::Standby))
        .set(count);
}

/// Records that `lease` went from role `was` and epoch `was_epoch` to `role` and `epoch`; the
/// metrics move only with the role or the epoch.
pub(super) fn leadership_moved(
    metrics: &LeaseMetrics,
    lease: &str,
    (was, was_epoch): (Role, Option<Epoch>),
    (role, epoch): (Role, Option<Epoch>),
) {
    if was == role && was_epoch == epoch {
        return;
    }
    let label = LeaseMetrics::lease(lease);
    if was != role {
        metrics.transitions.get_or_create(&label).inc();
        metrics.leases.get_or_create(&role_label(was)).dec();
        metrics.leases.get_or_create(&role_label(role)).inc();
    }
    metrics
        .is_leader
        .get_or_create(&label)
        .set(i64::from(role == Role::Leader));
    metrics
        .epoch
        .get_or_create(&label)
        .set(epoch.map_or(0, Epoch::get));
}

/// Records how long a renewal took to return.
pub(super) fn renewal_took(metrics: &LeaseMetrics, took: Duration) {
    metrics.renew_seconds.observe(took.as_secs_f64());
}

/// Records how long a term's plugins took to stop once it ended.
pub(super) fn stopped_after(metrics: &LeaseMetrics, took: Duration) {
    metrics.loss_to_stop_seconds.observe(took.as_secs_f64());
}

/// The `leasehold_leases` label of `role`.
fn role_label(role: Role) -> RoleLabel {
    let role = match role {
        Role::Leader => "leader",
        Role::Standby => "standby",
        Role::Uncertain => "uncertain",
    };
    RoleLabel { role: role.into() }
}
