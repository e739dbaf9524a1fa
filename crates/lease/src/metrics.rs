//! The lease layer's Prometheus figures: each lease's role, epoch, ttl and expiry, renewals, the
//! time a lost term takes to stop, the lease groups, and the store calls that failed. The host
//! registers them in its one registry beside its own; names and labels are a contract for
//! dashboards: keep them.

use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// A label value, escaped as the Prometheus and OpenMetrics text formats require (`\` as `\\`,
/// `"` as `\"`, a line feed as `\n`) when `/metrics` writes it: prometheus-client 0.24 writes
/// label values as they are, so a value holding a quote or a line break would end its series and
/// forge others. Names are checked where they enter; this holds whatever gets through.
#[derive(Debug, Clone, Hash, PartialEq, Eq)]
pub struct LabelText(pub String);

impl From<&str> for LabelText {
    fn from(text: &str) -> Self {
        LabelText(text.to_string())
    }
}

impl EncodeLabelValue for LabelText {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        use std::fmt::Write;
        let mut rest = self.0.as_str();
        while let Some(at) = rest.find(['\\', '"', '\n']) {
            encoder.write_str(&rest[..at])?;
            encoder.write_str(match rest.as_bytes()[at] {
                b'\\' => "\\\\",
                b'"' => "\\\"",
                _ => "\\n",
            })?;
            rest = &rest[at + 1..];
        }
        encoder.write_str(rest)
    }
}

/// Labels of a per-lease metric.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LeaseLabel {
    /// The lease name.
    pub lease: LabelText,
}

/// Labels of a count of grants: the lease, and what gave it away.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct GrantLabel {
    /// The lease name.
    pub lease: LabelText,
    /// `release`: this replica's release gave it to the head of its line; `expiry`: this
    /// replica's campaign found it free (its holder's lease ran out, or it was released without
    /// a line) and gave it to the head.
    pub cause: LabelText,
}

/// Labels of a per-group metric.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct GroupLabel {
    /// The lease group's name.
    pub group: LabelText,
}

/// Labels of a count of leases by role.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RoleLabel {
    /// `leader`, `standby` or `uncertain`.
    pub role: LabelText,
}

/// Labels of a count of failed store calls.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StoreErrorLabel {
    /// The lease loop's operation: `campaign`, `renew`, `release` or `heartbeat`.
    pub op: LabelText,
    /// Why it failed: one of `lease::health::Cause`'s labels (`refused`, `closed`, `reset`,
    /// `timeout`, `read_only`, `restarting`, `connection`, `permission`, `schema`, `protocol`,
    /// `conflict`, `other`).
    pub cause: LabelText,
}

/// A gauge of a fractional value.
pub type FloatGauge = Gauge<f64, AtomicU64>;

/// Store round trips: 100 µs to ~3 s.
fn store_latency() -> Histogram {
    Histogram::new(exponential_buckets(0.0001, 2.0, 16))
}

/// Loss-to-stop and guest calls: 10 µs to ~10 s.
pub fn fast_latency() -> Histogram {
    Histogram::new(exponential_buckets(0.00001, 2.5, 16))
}

/// The lease layer's metrics, registered by the host ([`LeaseMetrics::register_lease`],
/// [`LeaseMetrics::register_faults`], [`LeaseMetrics::register_group`]) where `/metrics` lists them.
#[derive(Debug)]
pub struct LeaseMetrics {
    /// 1 while this replica holds the lease.
    pub is_leader: Family<LeaseLabel, Gauge>,
    /// The epoch this replica holds (0 when it holds none).
    pub epoch: Family<LeaseLabel, Gauge>,
    /// Role changes.
    pub transitions: Family<LeaseLabel, Counter>,
    /// The leases this replica campaigns for, by its role in each: the figure that stays
    /// readable at thousands of leases.
    pub leases: Family<RoleLabel, Gauge>,
    /// Renewal round trips, one per statement (the batch of every held lease, or one lease
    /// renewed alone): a histogram per lease would cost 18 series per lease, all alike.
    pub renew_seconds: Histogram,
    /// Seconds until the holder's local deadline; 0 when not holding.
    pub expires_in_seconds: Family<LeaseLabel, FloatGauge>,
    /// The lease's ttl in seconds, on every replica that campaigns for it: the yardstick alert
    /// rules and dashboards measure the other lease figures against.
    pub ttl_seconds: Family<LeaseLabel, FloatGauge>,
    /// From the end of a term until every task of it has stopped, over every lease.
    pub loss_to_stop_seconds: Histogram,
    /// Shards of a lease group this replica holds.
    pub group_held: Family<GroupLabel, Gauge>,
    /// This replica's fair share of a lease group (0 until it counts as a member).
    pub group_target: Family<GroupLabel, Gauge>,
    /// The members of a lease group counted for the fair shares.
    pub group_members: Family<GroupLabel, Gauge>,
    /// Shards this replica gave away to rebalance a lease group.
    pub group_moves: Family<GroupLabel, Counter>,
    /// Shards of a lease group this replica took from a holder that gave them up.
    pub group_handoffs: Family<GroupLabel, Counter>,
    /// Shards of a lease group this replica took after their holder's membership lapsed.
    pub group_takeovers: Family<GroupLabel, Counter>,
    /// Whether a failing health check keeps this replica out of a lease group (1) or not (0).
    pub group_gated: Family<GroupLabel, Gauge>,
    /// The lease loop's store calls that failed, by operation and cause.
    pub store_errors: Family<StoreErrorLabel, Counter>,
    /// Leases this replica gave to the head of their line, by cause.
    pub grants: Family<GrantLabel, Counter>,
    /// Holders of lower priority this replica asked to hand a lease over (preemptions).
    pub preemptions: Family<LeaseLabel, Counter>,
    /// Live members of the group configured with another shard count than the one in force.
    pub group_count_conflicts: Family<GroupLabel, Gauge>,
}

impl Default for LeaseMetrics {
    fn default() -> Self {
        LeaseMetrics {
            is_leader: Family::default(),
            epoch: Family::default(),
            transitions: Family::default(),
            leases: Family::default(),
            renew_seconds: store_latency(),
            expires_in_seconds: Family::default(),
            ttl_seconds: Family::default(),
            loss_to_stop_seconds: fast_latency(),
            group_held: Family::default(),
            group_target: Family::default(),
            group_members: Family::default(),
            group_moves: Family::default(),
            group_handoffs: Family::default(),
            group_takeovers: Family::default(),
            group_gated: Family::default(),
            store_errors: Family::default(),
            grants: Family::default(),
            preemptions: Family::default(),
            group_count_conflicts: Family::default(),
        }
    }
}

/// What a look at one lease group found, for [`LeaseMetrics::record_group`]: the gauges as they stand
/// and the counters' totals since the replica started.
#[derive(Debug, Clone, Copy, Default)]
pub struct GroupFigures {
    /// Shards held here.
    pub held: u32,
    /// This replica's fair share.
    pub target: u32,
    /// Members counted.
    pub members: u32,
    /// Shards given away to rebalance.
    pub moves: u64,
    /// Shards taken by handoff.
    pub handoffs: u64,
    /// Shards taken after their holder lapsed.
    pub takeovers: u64,
    /// Kept out by a failing health check.
    pub gated: bool,
    /// Live members configured with another shard count than the one in force.
    pub count_conflicts: u32,
}

impl LeaseMetrics {
    /// Registers the lease loop's figures, per lease and over every lease: role, epoch, ttl,
    /// expiry, renewals and the time a lost term takes to stop.
    pub fn register_lease(&self, registry: &mut Registry) {
        registry.register(
            "leasehold_lease_is_leader",
            "1 while this replica holds the lease",
            self.is_leader.clone(),
        );
        registry.register(
            "leasehold_lease_epoch",
            "The epoch this replica holds, 0 when it holds none",
            self.epoch.clone(),
        );
        registry.register(
            "leasehold_lease_transitions",
            "Changes of this replica's role for the lease",
            self.transitions.clone(),
        );
        registry.register(
            "leasehold_leases",
            "The leases this replica campaigns for, by its role in each",
            self.leases.clone(),
        );
        registry.register(
            "leasehold_lease_renew_seconds",
            "Renewal round trips, one per statement (the batch of every held lease, or one renewed alone)",
            self.renew_seconds.clone(),
        );
        registry.register(
            "leasehold_lease_expires_in_seconds",
            "Seconds until the holder's local deadline (the database expiry minus the margin); 0 when not holding",
            self.expires_in_seconds.clone(),
        );
        registry.register(
            "leasehold_lease_ttl_seconds",
            "The lease's ttl in seconds, on every replica that campaigns for it",
            self.ttl_seconds.clone(),
        );
        registry.register(
            "leasehold_lease_loss_to_stop_seconds",
            "From the end of a term until all of its plugin tasks have stopped, over every lease",
            self.loss_to_stop_seconds.clone(),
        );
        registry.register(
            "leasehold_lease_grants",
            "Leases this replica gave to the head of their line, by cause: release (its own release) or expiry (its campaign found the lease free)",
            self.grants.clone(),
        );
        registry.register(
            "leasehold_lease_preemptions",
            "Holders of lower priority this replica asked to hand the lease over, having waited preempt_after in line",
            self.preemptions.clone(),
        );
    }

    /// Counts the leases a campaign gave to the head of their line (`gave`), and the holders it
    /// asked to step aside (`asked`).
    pub fn count_campaign(&self, gave: &[String], asked: &[String]) {
        for lease in gave {
            self.count_grant(lease, "expiry");
        }
        for lease in asked {
            self.preemptions
                .get_or_create(&LeaseLabel {
                    lease: lease.as_str().into(),
                })
                .inc();
        }
    }

    /// Counts a lease given to the head of its line, for `cause`.
    pub fn count_grant(&self, lease: &str, cause: &str) {
        self.grants
            .get_or_create(&GrantLabel {
                lease: lease.into(),
                cause: cause.into(),
            })
            .inc();
    }

    /// Registers what keeps this replica out of the lease work: members of a group configured with
    /// another shard count, and the lease loop's store calls that failed.
    pub fn register_faults(&self, registry: &mut Registry) {
        registry.register(
            "leasehold_group_count_conflicts",
            "Live members of the group configured with another shard count than the one it runs with (its longest-standing member's): they take no part",
            self.group_count_conflicts.clone(),
        );
        registry.register(
            "leasehold_store_errors",
            "The lease loop's store calls that failed, by operation (campaign, renew, release, heartbeat) and cause (refused, closed, reset, timeout, read_only, restarting, connection, permission, schema, protocol, conflict, other)",
            self.store_errors.clone(),
        );
    }

    /// Registers the lease groups' figures, per group: shards held, fair share, members, the shards
    /// that moved, and the health gate.
    pub fn register_group(&self, registry: &mut Registry) {
        registry.register(
            "leasehold_group_shards_held",
            "Shards of the lease group this replica holds",
            self.group_held.clone(),
        );
        registry.register(
            "leasehold_group_target",
            "This replica's fair share of the lease group, 0 until it counts as a member",
            self.group_target.clone(),
        );
        registry.register(
            "leasehold_group_members",
            "Members of the lease group counted for the fair shares",
            self.group_members.clone(),
        );
        registry.register(
            "leasehold_group_moves",
            "Shards this replica handed over to rebalance the lease group",
            self.group_moves.clone(),
        );
        registry.register(
            "leasehold_group_handoffs",
            "Shards of the lease group this replica took from a holder that handed them over",
            self.group_handoffs.clone(),
        );
        registry.register(
            "leasehold_group_takeovers",
            "Shards of the lease group this replica took after their holder's membership lapsed (a takeover after expiry)",
            self.group_takeovers.clone(),
        );
        registry.register(
            "leasehold_group_gated",
            "1 while a failing health check keeps this replica out of the lease group",
            self.group_gated.clone(),
        );
    }

    /// Counts a failed store call of the lease loop, by operation and cause (a label value of
    /// the lease layer's `Cause`).
    pub fn count_store_error(&self, op: &str, cause: &str) {
        self.store_errors
            .get_or_create(&StoreErrorLabel {
                op: op.into(),
                cause: cause.into(),
            })
            .inc();
    }

    /// Records what a look at lease group `group` found.
    pub fn record_group(&self, group: &str, figures: GroupFigures) {
        let label = GroupLabel {
            group: group.into(),
        };
        let gauges = [
            (&self.group_held, i64::from(figures.held)),
            (&self.group_target, i64::from(figures.target)),
            (&self.group_members, i64::from(figures.members)),
            (&self.group_gated, i64::from(figures.gated)),
            (
                &self.group_count_conflicts,
                i64::from(figures.count_conflicts),
            ),
        ];
        for (family, value) in gauges {
            family.get_or_create(&label).set(value);
        }
        let counters = [
            (&self.group_moves, figures.moves),
            (&self.group_handoffs, figures.handoffs),
            (&self.group_takeovers, figures.takeovers),
        ];
        for (family, total) in counters {
            let counter = family.get_or_create(&label);
            counter.inc_by(total.saturating_sub(counter.get()));
        }
    }

    /// The per-lease label.
    pub fn lease(name: &str) -> LeaseLabel {
        LeaseLabel { lease: name.into() }
    }
}
