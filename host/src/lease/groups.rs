//! Lease groups, the pure part: a group `orders` of 12 shards is the leases `orders/0` …
//! `orders/11`, and every live member of the group should hold its fair share of them.
//!
//! - [`shard_lease`]: the lease name of a shard;
//! - [`score`]: a member's rendezvous score for a shard, the same on every replica and version;
//! - [`targets`]: each member's fair share, ⌈shards / members⌉ for some and ⌊…⌋ for the rest,
//!   the ceilings given to the members that hold the most already, so as few shards as possible
//!   move;
//! - [`plan`]: what one member does about it: the shards it gives away (those the members
//!   short of their share score highest) and the free shards it goes after, best first.
//!
//! Nothing here reads a clock or the database: every replica that sees the same members and
//! holders computes the same targets, and a plan only ever moves a member's surplus, so shards
//! that are where they should be stay put.

use std::collections::BTreeMap;

use sha2::{Digest, Sha256};

/// The lease that is shard `shard` of `group`.
pub fn shard_lease(group: &str, shard: u32) -> String {
    format!("{group}/{shard}")
}

/// `member`'s rendezvous score for `shard` of `group`: a hash of the three, so that each shard
/// ranks the members in its own order. SHA-256 rather than the standard library's hasher, whose
/// output may change between Rust releases: replicas built by different ones must agree.
pub fn score(group: &str, shard: u32, member: &str) -> u64 {
    let mut hash = Sha256::new();
    // Lengths first, so that no two different triples feed the hash the same bytes.
    for part in [group.as_bytes(), member.as_bytes()] {
        hash.update((part.len() as u64).to_be_bytes());
        hash.update(part);
    }
    hash.update(shard.to_be_bytes());
    let digest = hash.finalize();
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    u64::from_be_bytes(first)
}

/// Each member's fair share of `shards`: `shards / members` each, one more for `shards %
/// members` of them. The extra ones go to the members holding the most now (`held`), so that the
/// shards that must move are exactly the surplus above the targets, the fewest any fair split
/// allows; ties go by member id, so every replica picks the same. Duplicate members count once;
/// no members, no targets.
pub fn targets(
    shards: u32,
    members: &[String],
    held: impl Fn(&str) -> u32,
) -> BTreeMap<String, u32> {
    let mut order: Vec<&String> = members.iter().collect();
    order.sort();
    order.dedup();
    let count = order.len() as u32;
    if count == 0 {
        return BTreeMap::new();
    }
    order.sort_by(|a, b| held(b).cmp(&held(a)).then_with(|| a.cmp(b)));
    let (base, extra) = (shards / count, shards % count);
    order
        .into_iter()
        .enumerate()
        .map(|(i, m)| (m.clone(), base + u32::from((i as u32) < extra)))
        .collect()
}

/// What one member should do about its group.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// Its target ([`targets`]).
    pub target: u32,
    /// Shards it holds above its target, to hand over (stop, release, notify): those that the
    /// members short of their share score highest come first.
    pub give_away: Vec<u32>,
    /// How many more shards it should hold.
    pub wanted: u32,
    /// The free shards, the ones it scores highest (relative to the other members short of
    /// their share) first: it campaigns for the first `wanted` of them.
    pub free: Vec<u32>,
}

/// The plan of member `me` in `group` of `shards`, given the live `members` (`me` among them)
/// and who holds each held shard (`holders`: shard → member; a shard held by someone not in
/// `members` counts as held, since its holder may still be running until its lease expires).
/// Shards from `shards` up (left over from a larger group) are not part of it: they count for
/// nobody's share, and releasing them is the caller's business.
pub fn plan(
    group: &str,
    shards: u32,
    members: &[String],
    holders: &BTreeMap<u32, String>,
    me: &str,
) -> Plan {
    let holders: BTreeMap<u32, &str> = holders
        .range(..shards)
        .map(|(s, h)| (*s, h.as_str()))
        .collect();
    let mut counts: BTreeMap<&str, u32> = BTreeMap::new();
    for holder in holders.values() {
        *counts.entry(holder).or_default() += 1;
    }
    let held = |m: &str| counts.get(m).copied().unwrap_or(0);
    let targets = targets(shards, members, held);
    let Some(&target) = targets.get(me) else {
        return Plan::default();
    };
    let short: Vec<&str> = targets
        .iter()
        .filter(|(m, t)| held(m) < **t)
        .map(|(m, _)| m.as_str())
        .collect();
    // How much a shard is wanted elsewhere: the best score of a member short of its share.
    let pull = |shard: u32| {
        short
            .iter()
            .filter(|m| **m != me)
            .map(|m| score(group, shard, m))
            .max()
            .unwrap_or(0)
    };
    let mine: Vec<u32> = holders
        .iter()
        .filter(|(_, h)| **h == me)
        .map(|(s, _)| *s)
        .collect();
    let surplus = (mine.len() as u32).saturating_sub(target) as usize;
    let mut give_away = mine;
    // Cached keys: each is a hash per member short of its share, and a group may have thousands
    // of shards.
    give_away.sort_by_cached_key(|s| (std::cmp::Reverse(pull(*s)), *s));
    give_away.truncate(surplus);
    let wanted = target.saturating_sub(held(me));
    let mut free: Vec<u32> = (0..shards).filter(|s| !holders.contains_key(s)).collect();
    // Best first: where this member's score beats the others' by the most.
    free.sort_by_cached_key(|s| {
        let own = score(group, *s, me);
        (
            std::cmp::Reverse(own > pull(*s)),
            std::cmp::Reverse(own),
            *s,
        )
    });
    Plan {
        target,
        give_away,
        wanted,
        free,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("replica-{i}")).collect()
    }

    /// Every replica applies its plan in turn: surplus released, then free shards taken in the
    /// plan's order (the first campaign for a shard wins). Returns the shards that changed
    /// holder, until nothing does.
    fn settle(
        group: &str,
        shards: u32,
        members: &[String],
        holders: &mut BTreeMap<u32, String>,
    ) -> u32 {
        let mut moved = 0;
        for _round in 0..20 {
            let mut changed = false;
            for me in members {
                let p = plan(group, shards, members, holders, me);
                for s in &p.give_away {
                    holders.remove(s);
                    changed = true;
                }
            }
            for me in members {
                let p = plan(group, shards, members, holders, me);
                for s in p.free.iter().take(p.wanted as usize) {
                    holders.insert(*s, me.clone());
                    moved += 1;
                    changed = true;
                }
            }
            if !changed {
                return moved;
            }
        }
        panic!("no fixed point in 20 rounds: {holders:?}");
    }

    fn counts(holders: &BTreeMap<u32, String>) -> BTreeMap<String, u32> {
        let mut c = BTreeMap::new();
        for h in holders.values() {
            *c.entry(h.clone()).or_default() += 1;
        }
        c
    }

    #[test]
    fn targets_are_fair_shares_that_add_up_to_every_shard() {
        for members in 1..8 {
            for shards in 0..40 {
                let t = targets(shards, &names(members), |_| 0);
                assert_eq!(t.values().sum::<u32>(), shards);
                let (lo, hi) = (t.values().min().unwrap(), t.values().max().unwrap());
                assert!(hi - lo <= 1, "{shards} over {members}: {t:?}");
            }
        }
        assert!(targets(12, &[], |_| 0).is_empty());
        let twice = vec!["a".to_string(), "a".to_string(), "b".to_string()];
        assert_eq!(targets(4, &twice, |_| 0).values().sum::<u32>(), 4);
    }

    #[test]
    fn the_extra_shards_go_to_the_members_that_hold_most_and_ties_by_id() {
        let members = names(3);
        let t = targets(7, &members, |m| if m == "replica-2" { 5 } else { 1 });
        assert_eq!(t["replica-2"], 3);
        let t = targets(7, &members, |_| 0);
        assert_eq!(t["replica-0"], 3);
        assert_eq!((t["replica-1"], t["replica-2"]), (2, 2));
    }

    #[test]
    fn twelve_shards_on_three_settle_at_four_each_then_a_fourth_takes_three_and_only_three_move() {
        let mut holders = BTreeMap::new();
        let three = names(3);
        settle("orders", 12, &three, &mut holders);
        assert_eq!(
            counts(&holders).values().copied().collect::<Vec<_>>(),
            [4, 4, 4]
        );
        let before = holders.clone();
        let four = names(4);
        let moved = settle("orders", 12, &four, &mut holders);
        assert_eq!(
            counts(&holders).values().copied().collect::<Vec<_>>(),
            [3, 3, 3, 3]
        );
        assert_eq!(moved, 3, "the minimum: the newcomer's three");
        let changed = (0..12).filter(|s| before.get(s) != holders.get(s)).count();
        assert_eq!(changed, 3);
        // Settled: every plan is empty.
        for me in &four {
            let p = plan("orders", 12, &four, &holders, me);
            assert!(p.give_away.is_empty() && p.wanted == 0, "{me}: {p:?}");
        }
    }

    #[test]
    fn a_member_that_leaves_frees_its_shards_and_the_rest_take_them_without_other_moves() {
        let four = names(4);
        let mut holders = BTreeMap::new();
        settle("orders", 12, &four, &mut holders);
        let before = holders.clone();
        holders.retain(|_, h| h != "replica-3");
        let three = names(3);
        let moved = settle("orders", 12, &three, &mut holders);
        assert_eq!(moved, 3);
        assert_eq!(
            counts(&holders).values().copied().collect::<Vec<_>>(),
            [4, 4, 4]
        );
        for s in 0..12 {
            if before[&s] != "replica-3" {
                assert_eq!(before[&s], holders[&s], "shard {s} moved for no reason");
            }
        }
    }

    #[test]
    fn a_surplus_goes_first_to_the_shards_the_newcomer_scores_highest() {
        let three = names(3);
        let mut holders = BTreeMap::new();
        settle("orders", 12, &three, &mut holders);
        let mut four = three.clone();
        four.push("newcomer".into());
        for me in &three {
            let p = plan("orders", 12, &four, &holders, me);
            assert_eq!(p.give_away.len(), 1, "{me}: {p:?}");
            let best = holders
                .iter()
                .filter(|(_, h)| *h == me)
                .map(|(s, _)| *s)
                .max_by_key(|s| (score("orders", *s, "newcomer"), std::cmp::Reverse(*s)))
                .unwrap();
            assert_eq!(p.give_away, [best]);
        }
    }

    #[test]
    fn shards_left_over_from_a_larger_group_count_for_no_one_s_share() {
        let two = names(2);
        let mut holders = BTreeMap::new();
        // replica-0 still holds shards 4 and 5 of a group that had 6.
        holders.insert(4, "replica-0".to_string());
        holders.insert(5, "replica-0".to_string());
        let p = plan("orders", 4, &two, &holders, "replica-0");
        assert_eq!((p.target, p.wanted), (2, 2));
        assert!(p.give_away.is_empty(), "{p:?}");
        assert_eq!(p.free.len(), 4);
        assert!(p.free.iter().all(|s| *s < 4), "{p:?}");
    }

    #[test]
    fn a_shard_held_by_a_member_that_is_gone_stays_held_until_it_is_free() {
        let two = names(2);
        let mut holders = BTreeMap::new();
        holders.insert(0, "gone".to_string());
        let p = plan("orders", 2, &two, &holders, "replica-0");
        assert_eq!(p.target, 1);
        assert!(!p.free.contains(&0));
    }

    #[test]
    fn scores_are_stable_across_builds_and_differ_per_shard() {
        // Pinned (computed apart from this code): replicas built by other compilers, or by
        // other versions of leasehold, must rank members the same way.
        assert_eq!(score("orders", 0, "replica-0"), 6_890_055_721_152_689_088);
        assert_ne!(
            score("orders", 0, "replica-0"),
            score("orders", 1, "replica-0")
        );
        assert_ne!(score("ab", 0, "c"), score("a", 0, "bc"));
    }

    #[test]
    fn the_shard_lease_is_group_slash_index() {
        assert_eq!(shard_lease("orders", 11), "orders/11");
    }
}
