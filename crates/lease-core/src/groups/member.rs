//! One replica's part in one lease group, pure: [`Member::observe`] takes what a heartbeat saw
//! (the live members and who holds which shard, [`GroupView`]) and returns a [`Decision`]: which
//! shards this replica may campaign for, which it should campaign for now, and which it gives
//! away. The runner carries it out; nothing here reads a clock or the database.
//!
//! - A member counts for the fair shares once it has been one for `settle` without a lapse, by
//!   the database's clock, which every replica reads alike. One that joins and leaves within that
//!   time moves nothing; one that leaves (or lapses) stops counting at once, since its shards are
//!   free or about to be.
//! - Until it counts, a replica campaigns for nothing and gives nothing away.
//! - A shard free for `orphaned_after` is campaigned for by every counted member, whoever the
//!   plan gives it to: its owner may be unable to take it (a failing health check, a stalled
//!   process), and a shard must not stay unheld for that. The next plan moves it if need be.
//! - A replica whose group health check fails stands aside ([`Member::stand_aside`]): it has left
//!   the group (the runner deletes its row), campaigns for none of its shards and gives up those
//!   it holds, so the others' fair shares no longer count it.
//! - The group runs with the shard count of its longest-standing member. A replica configured
//!   with another count takes no part ([`Member::observe`] refuses): it keeps its member row, so
//!   the others see its count and leave it out of their fair shares, campaigns for none of the
//!   shards and gives up those it holds. A rolling change of the count is then ordered: the new
//!   count comes into force when the last member configured with the old one has left.
//! - Each shard this replica takes is counted as a handoff, or as a takeover after expiry when
//!   its last holder's membership lapsed (its row expired rather than being deleted): a holder
//!   that died or was cut off.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use super::{CountConflict, GroupSpec, GroupStatus, assign};
use crate::record::{DbMillis, GroupMember, GroupView};

/// How far before a member's row's expiry (as read from an earlier view) its disappearance still
/// counts as a lapse: the statement reads the clock more than once and rounds each reading.
const LAPSE_ROUNDING_MS: DbMillis = 5;

/// What the coordinator is told after one view.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Decision {
    /// Shards whose assignment to this replica changed: the lease and whether it is ours now.
    pub assign: Vec<(String, bool)>,
    /// Shards that are ours, already known to be, and free: campaign now rather than at the next
    /// poll (a store without release notifications would otherwise wait for it).
    pub campaign_now: Vec<String>,
    /// Shards held here that another member should hold: give them up in order.
    pub step_down: Vec<String>,
    /// Shards given up before and still held a settling time later: asked for again.
    pub step_down_again: Vec<String>,
}

impl Decision {
    /// Whether there is nothing to do.
    pub fn is_empty(&self) -> bool {
        self.assign.is_empty()
            && self.campaign_now.is_empty()
            && self.step_down.is_empty()
            && self.step_down_again.is_empty()
    }
}

/// This replica's state in one group. See the module docs.
#[derive(Debug, Clone)]
pub struct Member {
    /// The group.
    spec: GroupSpec,
    /// This replica's holder id, its member id.
    me: String,
    /// How long a newcomer must have been a member before it counts.
    settle: Duration,
    /// How long a shard may stay free before every member campaigns for it.
    orphaned_after: Duration,
    /// The shards' lease names, by shard.
    leases: Vec<String>,
    /// Shard by lease name.
    index: BTreeMap<String, u32>,
    /// Whether each shard is ours to campaign for, as last told to the coordinator (none at first).
    yours: Vec<bool>,
    /// Since when (by the database's clock) each free shard has been seen free.
    free_since: BTreeMap<u32, DbMillis>,
    /// Shards stepped down from and not yet seen released, and when (by the database's clock) the
    /// step-down was last asked for.
    giving: BTreeMap<u32, DbMillis>,
    /// The last holder seen of each shard, to tell how this replica came to hold it.
    last_holder: Vec<Option<String>>,
    /// The members of the last view, and when each one's row expires unless it heartbeats (by the
    /// database's clock).
    expiries: BTreeMap<String, DbMillis>,
    /// Members gone since, still the last holder of some shard: whether their row lapsed (`true`)
    /// or was deleted by a graceful leave.
    gone: BTreeMap<String, bool>,
    /// What `/status` shows.
    status: GroupStatus,
}

impl Member {
    /// `me` in `spec`, campaigning for nothing until its first view.
    pub fn new(spec: GroupSpec, me: &str, settle: Duration, orphaned_after: Duration) -> Self {
        let leases: Vec<String> = spec.leases().collect();
        let index = leases
            .iter()
            .enumerate()
            .map(|(i, l)| (l.clone(), i as u32))
            .collect();
        let status = GroupStatus {
            name: spec.name.clone(),
            shards: spec.shards,
            ..GroupStatus::default()
        };
        Member {
            yours: vec![false; spec.shards as usize],
            last_holder: vec![None; spec.shards as usize],
            spec,
            me: me.to_string(),
            settle,
            orphaned_after,
            leases,
            index,
            free_since: BTreeMap::new(),
            giving: BTreeMap::new(),
            expiries: BTreeMap::new(),
            gone: BTreeMap::new(),
            status,
        }
    }

    /// The group.
    pub fn spec(&self) -> &GroupSpec {
        &self.spec
    }

    /// The shards' lease names, in shard order.
    pub fn leases(&self) -> &[String] {
        &self.leases
    }

    /// What `/status` shows, as of the last view.
    pub fn status(&self) -> &GroupStatus {
        &self.status
    }

    /// Whether the group is still moving as far as this replica can tell: it is not yet counted,
    /// holds other than its share, is giving shards away, or sees shards free. The runner looks
    /// again sooner then.
    pub fn unsettled(&self) -> bool {
        !self.status.member
            || self.status.held != self.status.target
            || !self.giving.is_empty()
            || !self.free_since.is_empty()
    }

    /// How soon after `view` another member's row expires unless it heartbeats: a look just after
    /// that finds a member that died gone, so its shards' next owners campaign at once (and win
    /// each at its lease's expiry) instead of at the next regular look.
    pub fn next_expiry(&self, view: &GroupView) -> Option<Duration> {
        view.members
            .iter()
            .filter(|m| m.id != self.me)
            .map(|m| m.expires_in)
            .min()
    }

    /// Takes a heartbeat's view of the group and says what to do about it.
    pub fn observe(&mut self, view: &GroupView) -> Decision {
        let shards = self.spec.shards;
        let holders: BTreeMap<u32, String> = view
            .holders
            .iter()
            .filter_map(|(lease, holder)| Some((*self.index.get(lease)?, holder.clone())))
            .collect();
        let now = view.db_now;
        self.note_members(view);
        self.count_arrivals(&holders);
        for shard in 0..shards {
            if holders.contains_key(&shard) {
                self.free_since.remove(&shard);
            } else if let Some(now) = now {
                self.free_since.entry(shard).or_insert(now);
            }
        }
        self.giving
            .retain(|s, _| holders.get(s).is_some_and(|h| *h == self.me));
        let (in_force, by) = shard_count_in_force(view, shards);
        let differ = |m: &GroupMember| m.shards.is_some_and(|n| n != in_force);
        self.status.other_counts = view.members.iter().filter(|m| differ(m)).count() as u32;
        if in_force != shards {
            return self.refuse(in_force, by, &holders, now);
        }
        self.status.count_conflict = None;
        let counted: Vec<String> = view
            .members
            .iter()
            .filter(|m| m.member_for >= self.settle && !differ(m))
            .map(|m| m.id.clone())
            .collect();
        let member = counted.contains(&self.me);
        let owners = if member {
            assign(&self.spec.name, shards, &counted, &holders)
        } else {
            vec![None; shards as usize]
        };
        let orphaned = |shard: u32| {
            let since = self.free_since.get(&shard).copied();
            member
                && matches!((since, now), (Some(since), Some(now))
                    if now.saturating_sub(since) >= self.orphaned_after.as_millis() as i64)
        };
        let mut decision = Decision::default();
        for shard in 0..shards {
            let i = shard as usize;
            let ours = owners[i].as_deref() == Some(self.me.as_str());
            let want = ours || orphaned(shard);
            let holder = holders.get(&shard);
            if want != self.yours[i] {
                self.yours[i] = want;
                decision.assign.push((self.leases[i].clone(), want));
            } else if want && holder.is_none() {
                decision.campaign_now.push(self.leases[i].clone());
            }
            if member && !ours && holder.is_some_and(|h| *h == self.me) {
                // Asked again if still held a settling time later: the driver ignores a step-down
                // that comes while a campaign for the shard is in flight, and one that comes
                // while the release is under way changes nothing.
                let now = now.unwrap_or_default();
                match self.giving.get(&shard) {
                    None => {
                        self.status.moves += 1;
                        self.giving.insert(shard, now);
                        decision.step_down.push(self.leases[i].clone());
                    }
                    Some(asked) if now.saturating_sub(*asked) >= self.settle.as_millis() as i64 => {
                        self.giving.insert(shard, now);
                        decision.step_down_again.push(self.leases[i].clone());
                    }
                    Some(_) => {}
                }
            }
        }
        self.status.held = holders.values().filter(|h| **h == self.me).count() as u32;
        self.status.target = owners
            .iter()
            .filter(|o| o.as_deref() == Some(self.me.as_str()))
            .count() as u32;
        self.status.members = counted.len() as u32;
        self.status.member = member;
        decision
    }

    /// Takes no part while the group runs with another shard count (`in_force`, the count of
    /// member `by`): campaigns for no shard and gives up those it holds, but keeps its row, so
    /// that the others see its count and it keeps its place for when its count comes into force.
    fn refuse(
        &mut self,
        in_force: u32,
        by: String,
        holders: &BTreeMap<u32, String>,
        now: Option<DbMillis>,
    ) -> Decision {
        let mut decision = Decision::default();
        for (i, yours) in self.yours.iter_mut().enumerate() {
            if std::mem::take(yours) {
                decision.assign.push((self.leases[i].clone(), false));
            }
        }
        let now = now.unwrap_or_default();
        for (&shard, holder) in holders {
            if *holder != self.me {
                continue;
            }
            let lease = self.leases[shard as usize].clone();
            match self.giving.get(&shard) {
                None => {
                    self.giving.insert(shard, now);
                    decision.step_down.push(lease);
                }
                Some(asked) if now.saturating_sub(*asked) >= self.settle.as_millis() as i64 => {
                    self.giving.insert(shard, now);
                    decision.step_down_again.push(lease);
                }
                Some(_) => {}
            }
        }
        self.free_since.clear();
        self.status.held = holders.values().filter(|h| **h == self.me).count() as u32;
        self.status.target = 0;
        self.status.members = 0;
        self.status.member = false;
        self.status.count_conflict = Some(CountConflict {
            shards: in_force,
            member: by,
        });
        decision
    }

    /// Whether a health check keeps this replica out of the group.
    pub fn aside(&self) -> bool {
        self.status.gated
    }

    /// Keeps out of the group while its health check fails: campaigns for no shard and gives up
    /// every one in `held_here` (the shards this replica's driver still leads). Called at every
    /// look while the check fails, so a campaign that was in flight when it began is given up too.
    /// The runner has deleted the member row, so the others count this replica gone.
    pub fn stand_aside<'a>(&mut self, held_here: impl IntoIterator<Item = &'a str>) -> Decision {
        let mut decision = Decision::default();
        for (i, yours) in self.yours.iter_mut().enumerate() {
            if std::mem::take(yours) {
                decision.assign.push((self.leases[i].clone(), false));
            }
        }
        decision.step_down = held_here.into_iter().map(str::to_string).collect();
        self.free_since.clear();
        self.giving.clear();
        self.status.held = decision.step_down.len() as u32;
        self.status.target = 0;
        self.status.members = 0;
        self.status.member = false;
        self.status.gated = true;
        decision
    }

    /// Takes part again once the health check passes: the next heartbeat joins anew, and this
    /// replica counts once it has settled, like any newcomer.
    pub fn rejoin(&mut self) {
        self.status.gated = false;
        self.expiries.clear();
    }

    /// Notes which members have gone since the last view and whether their rows lapsed.
    fn note_members(&mut self, view: &GroupView) {
        let present: BTreeMap<String, DbMillis> = view
            .members
            .iter()
            .map(|m| {
                let expires = view
                    .db_now
                    .map_or(DbMillis::MAX, |now| now + m.expires_in.as_millis() as i64);
                (m.id.clone(), expires)
            })
            .collect();
        for (id, expires) in std::mem::take(&mut self.expiries) {
            if !present.contains_key(&id) {
                // Gone before its row's expiry: deleted by a leave. At or after it: lapsed (give
                // or take the rounding of the clock readings to whole milliseconds).
                let lapsed = view
                    .db_now
                    .is_some_and(|now| now >= expires.saturating_sub(LAPSE_ROUNDING_MS));
                self.gone.insert(id, lapsed);
            }
        }
        for id in present.keys() {
            self.gone.remove(id);
        }
        self.expiries = present;
    }

    /// Counts the shards this replica has come to hold since the last view, as handoffs or
    /// takeovers by how their last holder went, and remembers every shard's holder.
    fn count_arrivals(&mut self, holders: &BTreeMap<u32, String>) {
        for (&shard, holder) in holders {
            let last = self.last_holder[shard as usize].replace(holder.clone());
            if *holder != self.me {
                continue;
            }
            match last {
                Some(last) if last != self.me => match self.gone.get(&last) {
                    Some(true) => self.status.takeovers += 1,
                    _ => self.status.handoffs += 1,
                },
                _ => {}
            }
        }
        if !self.gone.is_empty() {
            let referenced: BTreeSet<&str> = self
                .last_holder
                .iter()
                .flatten()
                .map(String::as_str)
                .collect();
            self.gone.retain(|id, _| referenced.contains(id.as_str()));
        }
    }
}

/// [`super::count_in_force`] of `view`'s members: the count in force and whose it is, or
/// `mine` when no member recorded one.
fn shard_count_in_force(view: &GroupView, mine: u32) -> (u32, String) {
    let members = view
        .members
        .iter()
        .map(|m| (m.id.as_str(), m.member_for, m.shards));
    super::count_in_force(members).map_or((mine, String::new()), |(n, id)| (n, id.to_string()))
}

#[cfg(test)]
mod tests;
