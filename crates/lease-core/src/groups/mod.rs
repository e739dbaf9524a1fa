//! Lease groups (docs/ARCHITECTURE.md §6): a group `orders` of 12 shards is the leases `orders/0` …
//! `orders/11`, each an ordinary lease, spread over the replicas that take part in the group so
//! that each holds its fair share, and moved by handoff as replicas come and go.
//!
//! The pure parts, in order (each may use only those listed before it; `host/tests/layers.rs`
//! checks it):
//!
//! 1. [`assign`](mod@assign): fair shares and who should hold which shard, pure and the same on
//!    every replica;
//! 2. [`member`]: one replica's part in one group, pure: from a heartbeat's view of the members
//!    and holders to the shards it campaigns for and those it gives away.
//!
//! This module itself holds the words both use ([`GroupSpec`], [`GroupStatus`]). The thin async
//! loop that heartbeats each group and hands the decisions to the lease driver (as
//! [`crate::coordinator::Event::Assign`] and step-downs) is
//! `group_runner` in the `leasehold-lease` crate: it drives that crate's `Leases` handle, which
//! shows these groups, so it comes after both in the lease crate's order.
//!
//! Membership is a row per replica and group that the runner heartbeats every renewal interval
//! and that expires by the database's clock like a lease (the lease store's `heartbeat`).
//! Safety is the leases': a shard changes hands only by the ordered release or by expiry, so no
//! plan, however stale, can make two replicas hold one.

pub mod assign;
pub mod member;

pub use assign::{assign, score, targets};
pub use member::{Decision, Member};

/// The most shards a group may have: each is a lease this replica renews, and the lease engine
/// was measured at 10,000 leases per replica.
pub const MAX_SHARDS: u32 = 10_000;

/// The lease that is shard `shard` of `group`.
pub fn shard_lease(group: &str, shard: u32) -> String {
    format!("{group}/{shard}")
}

/// The shard count a group runs with, and the member whose count it is, from its live members
/// as `(id, time a member, recorded count)`: the count of the longest-standing member that
/// recorded one (the lowest id among equals), so that a count changes only once the last member
/// configured with the old one has left. `None` when no member recorded a count. Each member
/// judges by it ([`Member::observe`]), and `leasehold leases groups` shows it.
pub fn count_in_force<'a, A: Ord>(
    members: impl IntoIterator<Item = (&'a str, A, Option<u32>)>,
) -> Option<(u32, &'a str)> {
    members
        .into_iter()
        .filter_map(|(id, age, count)| Some((id, age, count?)))
        .max_by(|(a, a_age, _), (b, b_age, _)| a_age.cmp(b_age).then_with(|| b.cmp(a)))
        .map(|(id, _, count)| (count, id))
}

/// A configured group: its name and shard count.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct GroupSpec {
    /// The group's name, the prefix of its shards' lease names.
    pub name: String,
    /// How many shards it has.
    pub shards: u32,
}

impl GroupSpec {
    /// The lease names of its shards, in shard order.
    pub fn leases(&self) -> impl Iterator<Item = String> + '_ {
        (0..self.shards).map(|s| shard_lease(&self.name, s))
    }
}

/// What `/status` and the metrics show of one group on this replica.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct GroupStatus {
    /// The group's name.
    pub name: String,
    /// How many shards it has.
    pub shards: u32,
    /// How many of them this replica holds.
    pub held: u32,
    /// The live members counted for the fair shares (a newcomer counts once it has settled).
    pub members: u32,
    /// This replica's fair share; 0 until it counts as a member.
    pub target: u32,
    /// Whether this replica counts as a member yet.
    pub member: bool,
    /// Shards this replica has given away to rebalance the group, since it started.
    pub moves: u64,
    /// Shards this replica took from a holder that gave them up (a handoff), since it started.
    #[serde(default)]
    pub handoffs: u64,
    /// Shards this replica took after their holder's membership lapsed (a takeover after expiry:
    /// the holder died or was cut off), since it started.
    #[serde(default)]
    pub takeovers: u64,
    /// Whether a health check bound to the group keeps this replica out of it: it has left the
    /// group, holds none of its shards and campaigns for none until the check passes again.
    #[serde(default)]
    pub gated: bool,
    /// Set while the group runs with another shard count than this replica's: it then takes
    /// part in nothing until the counts agree.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count_conflict: Option<CountConflict>,
    /// Live members (this replica among them) configured with another shard count than the one
    /// in force: left out of the fair shares. The same on every member.
    #[serde(default)]
    pub other_counts: u32,
}

/// The shard count a group runs with, when it is not this replica's.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CountConflict {
    /// The count in force.
    pub shards: u32,
    /// The longest-standing member, whose count it is.
    pub member: String,
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_shard_lease_is_group_slash_index() {
        assert_eq!(super::shard_lease("orders", 11), "orders/11");
    }
}
