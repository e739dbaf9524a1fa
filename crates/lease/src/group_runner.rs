//! The thin async loop of lease groups: heartbeat each group, hand the [`Member`]'s decision to
//! the lease driver, publish what `/status` shows, and wait for the next look. On shutdown it
//! leaves every group before the driver releases any shard.
//!
//! It looks every renewal interval (the member row's heartbeat), every retry interval while the
//! group is still moving, and at once when another replica releases a lease: a member that leaves
//! releases its shards only after leaving, so a look at its release already counts it gone and
//! gives the shard to its next owner, who campaigns straight away.
//!
//! While a health check bound to a group fails ([`Leases::allow_group`]), the runner leaves that
//! group and stops heartbeating it, and has every shard still held here given up in order: the
//! other members count this replica gone and take its shards over by handoff.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use tokio_util::sync::CancellationToken;
use tracing::{Instrument, debug, error, info, info_span, warn};

use super::groups::{Decision, GroupSpec, Member};
use super::handle::Leases;
use super::health::Recorder;
use super::store::within;
use crate::metrics::{GroupFigures, LeaseMetrics};

/// Runs this replica's part in lease groups. Build with [`Runner::new`], run with
/// [`Runner::run`].
pub struct Runner {
    /// This replica's leases (holder id, store, timing, and the driver's requests).
    leases: Arc<Leases>,
    /// One per group.
    members: Vec<Member>,
    /// Cancelled once the groups are left at shutdown; the driver waits for it.
    left: CancellationToken,
    /// Where the groups' gauges and counters go.
    metrics: Arc<LeaseMetrics>,
    /// The groups a failing health check keeps this replica out of.
    closed: watch::Receiver<BTreeSet<String>>,
}

impl Runner {
    /// A runner for `groups`, and the token the driver waits on at shutdown
    /// ([`crate::Driver::leaving_groups_first`]).
    pub fn new(
        leases: Arc<Leases>,
        groups: &[GroupSpec],
        metrics: Arc<LeaseMetrics>,
    ) -> (Runner, CancellationToken) {
        let timing = *leases.timing();
        let me = leases.holder().as_str().to_string();
        let members: Vec<Member> = groups
            .iter()
            .map(|spec| {
                // A newcomer counts once every member has had a heartbeat to see it (one renewal
                // interval), so all of them change their plans within the same look; a shard left
                // free goes to anyone after a poll, the standby's fallback for a lost notice.
                Member::new(
                    spec.clone(),
                    &me,
                    timing.renew_interval,
                    timing.poll_interval,
                )
            })
            .collect();
        let left = CancellationToken::new();
        let statuses = members.iter().map(|m| m.status().clone()).collect();
        leases.publish_groups(statuses);
        let runner = Runner {
            closed: leases.closed_groups(),
            leases,
            members,
            left: left.clone(),
            metrics,
        };
        (runner, left)
    }

    /// Runs until `root` is cancelled, then leaves every group.
    pub async fn run(mut self, root: CancellationToken) {
        let timing = *self.leases.timing();
        while !root.is_cancelled() {
            let mut soonest = None;
            for i in 0..self.members.len() {
                if root.is_cancelled() {
                    break;
                }
                if let Some(expiry) = self.look(i).await {
                    soonest = Some(soonest.map_or(expiry, |s: Duration| s.min(expiry)));
                }
            }
            let mut wait = if self.members.iter().any(Member::unsettled) {
                timing.retry_interval
            } else {
                timing.renew_interval
            };
            if let Some(expiry) = soonest {
                // Just after it: the database's clock and ours differ by a rounding.
                wait = wait.min(expiry + Duration::from_millis(1));
            }
            debug!(wait = ?wait, "next look at the lease groups");
            self.leases
                .publish_groups(self.members.iter().map(|m| m.status().clone()).collect());
            tokio::select! {
                biased;
                _ = root.cancelled() => {}
                _ = self.leases.released_elsewhere() => {}
                _ = self.closed.changed() => {}
                _ = tokio::time::sleep(wait) => {}
            }
        }
        self.leave().await;
    }

    /// Heartbeats group `i` and acts on what it found (or stands aside while the group's health
    /// check fails); returns how soon another member's row expires unless it heartbeats
    /// ([`Member::next_expiry`]).
    async fn look(&mut self, i: usize) -> Option<Duration> {
        let (store, holder) = (self.leases.store().clone(), self.leases.holder().clone());
        let timing = *self.leases.timing();
        let name = self.members[i].spec().name.clone();
        let span = info_span!("group", group = %name, holder = %holder);
        let closed = self.closed.borrow_and_update().contains(&name);
        if closed {
            if !self.members[i].aside() {
                span.in_scope(|| warn!("a health check bound to the group fails: leaving it and handing its shards over"));
                // Without the row the others count this replica gone at once; if the call fails,
                // they do once the row lapses, since no heartbeat renews it now.
                let left = within(
                    timing.store_timeout,
                    "leaving a lease group",
                    store.leave(std::slice::from_ref(&name), holder.as_str()),
                )
                .instrument(span.clone())
                .await;
                if let Err(error) = left {
                    span.in_scope(|| warn!(error = %error, "cannot leave the group: the others count this replica until its row lapses"));
                }
            }
            let leases = &self.leases;
            let member = &mut self.members[i];
            let held: Vec<String> = member
                .leases()
                .iter()
                .filter(|l| leases.leadership(l).is_some_and(|now| now.epoch.is_some()))
                .cloned()
                .collect();
            let decision = member.stand_aside(held.iter().map(String::as_str));
            span.in_scope(|| self.carry_out(i, &decision));
            return None;
        }
        if self.members[i].aside() {
            span.in_scope(|| info!("the group's health check passes again: rejoining the group"));
            self.members[i].rejoin();
        }
        let member = &mut self.members[i];
        let view = within(
            timing.store_timeout,
            "group heartbeat",
            store.heartbeat(&name, holder.as_str(), member.leases(), timing.ttl),
        )
        .instrument(span.clone())
        .await;
        let _entered = span.enter();
        let recorder = Recorder::new(self.leases.health().clone(), self.metrics.clone());
        let view = match recorder.outcome("heartbeat", view) {
            Ok(view) => view,
            Err(error) => {
                // The leases' own renewals decide what this replica holds; the plan waits.
                warn!(error = %error, "group heartbeat failed");
                return None;
            }
        };
        let before = member.status().clone();
        let decision = member.observe(&view);
        let after = member.status();
        if (before.members, before.target, before.member)
            != (after.members, after.target, after.member)
        {
            info!(
                members = after.members,
                target = after.target,
                held = after.held,
                shards = after.shards,
                counted = after.member,
                "group membership changed: new fair share"
            );
        }
        if before.count_conflict != after.count_conflict {
            match &after.count_conflict {
                Some(c) => error!(
                    shards = member.spec().shards,
                    in_force = c.shards,
                    by = %c.member,
                    "this replica is configured with another shard count than the group runs with (its longest-standing member's): taking no part in the group and holding none of its shards until the counts agree; configure the same count everywhere (the new count comes into force once the last replica with the old one has stopped)"
                ),
                None => info!(
                    shards = member.spec().shards,
                    "the group now runs with this replica's shard count: taking part"
                ),
            }
        }
        if before.other_counts != after.other_counts
            && after.other_counts > 0
            && after.count_conflict.is_none()
        {
            warn!(
                members = after.other_counts,
                shards = member.spec().shards,
                "members configured with another shard count take no part in the group (see their logs): configure the same count everywhere"
            );
        }
        let expiry = member.next_expiry(&view);
        self.carry_out(i, &decision);
        expiry
    }

    /// Hands group `i`'s decision to the driver and records the group's figures.
    fn carry_out(&self, i: usize, decision: &Decision) {
        let member = &self.members[i];
        let status = member.status();
        for (lease, yours) in &decision.assign {
            self.leases.assign(lease, *yours);
        }
        for lease in &decision.campaign_now {
            self.leases.campaign_now(lease);
        }
        for lease in &decision.step_down {
            if !status.gated {
                info!(lease = %lease, target = status.target, held = status.held, "handing a shard over to rebalance the group");
            }
            self.leases.step_down(lease);
        }
        for lease in &decision.step_down_again {
            debug!(lease = %lease, "a shard given up a while ago is still held here: asking again");
            self.leases.step_down(lease);
        }
        let figures = GroupFigures {
            held: status.held,
            target: status.target,
            members: status.members,
            moves: status.moves,
            handoffs: status.handoffs,
            takeovers: status.takeovers,
            gated: status.gated,
            count_conflicts: status.other_counts,
        };
        self.metrics.record_group(&member.spec().name, figures);
    }

    /// Leaves every group (a graceful stop), then lets the driver release the shards.
    async fn leave(self) {
        let names: Vec<String> = self.members.iter().map(|m| m.spec().name.clone()).collect();
        let timing = *self.leases.timing();
        let holder = self.leases.holder().clone();
        match within(
            timing.store_timeout,
            "leaving the lease groups",
            self.leases.store().leave(&names, holder.as_str()),
        )
        .await
        {
            Ok(()) => info!(holder = %holder, groups = ?names, "left the lease groups"),
            Err(error) => {
                warn!(holder = %holder, error = %error, "cannot leave the lease groups: the other members count this replica until its member rows expire")
            }
        }
        self.left.cancel();
    }
}
