//! The thin async loop of lease groups: heartbeat each group, hand the [`Member`]'s decision to
//! the lease driver, publish what `/status` shows, and wait for the next look. On shutdown it
//! leaves every group before the driver releases any shard.
//!
//! It looks every renewal interval (the member row's heartbeat), every retry interval while the
//! group is still moving, and at once when another replica releases a lease: a member that leaves
//! releases its shards only after leaving, so a look at its release already counts it gone and
//! gives the shard to its next owner, who campaigns straight away.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::{Instrument, info, info_span, warn};

use super::{GroupSpec, Member};
use crate::lease::driver::Leases;
use crate::lease::store::within;
use crate::metrics::Metrics;

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
    metrics: Arc<Metrics>,
}

impl Runner {
    /// A runner for `groups`, and the token the driver waits on at shutdown
    /// ([`crate::lease::Driver::leaving_groups_first`]).
    pub fn new(
        leases: Arc<Leases>,
        groups: &[GroupSpec],
        metrics: Arc<Metrics>,
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
            self.leases
                .publish_groups(self.members.iter().map(|m| m.status().clone()).collect());
            tokio::select! {
                _ = root.cancelled() => {}
                _ = self.leases.released_elsewhere() => {}
                _ = tokio::time::sleep(wait) => {}
            }
        }
        self.leave().await;
    }

    /// Heartbeats group `i` and acts on what it found; returns how soon another member's row
    /// expires unless it heartbeats ([`Member::next_expiry`]).
    async fn look(&mut self, i: usize) -> Option<Duration> {
        let (store, holder) = (self.leases.store().clone(), self.leases.holder().clone());
        let timing = *self.leases.timing();
        let member = &mut self.members[i];
        let name = member.spec().name.clone();
        let span = info_span!("group", group = %name, holder = %holder);
        let view = within(
            timing.store_timeout,
            "group heartbeat",
            store.heartbeat(&name, holder.as_str(), member.leases(), timing.ttl),
        )
        .instrument(span.clone())
        .await;
        let _entered = span.enter();
        let view = match view {
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
        for (lease, yours) in &decision.assign {
            self.leases.assign(lease, *yours);
        }
        for lease in &decision.campaign_now {
            self.leases.campaign_now(lease);
        }
        for lease in &decision.step_down {
            info!(lease = %lease, target = after.target, held = after.held, "handing a shard over to rebalance the group");
            self.leases.step_down(lease);
        }
        self.metrics
            .record_group(&name, after.held, after.target, after.members, after.moves);
        member.next_expiry(&view)
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
