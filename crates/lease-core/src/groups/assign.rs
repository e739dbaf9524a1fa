//! Fair shares of a lease group, and who should hold which shard.
//!
//! - [`score`]: a member's rendezvous score for a shard, the same on every replica and version;
//! - [`targets`]: each member's fair share, ⌈shards / members⌉ for some and ⌊…⌋ for the rest,
//!   the ceilings given to the members that hold the most already, so as few shards as possible
//!   move;
//! - [`assign`]: who should hold each shard: members keep what their target allows, and the
//!   surplus and the free shards go to the members short of their share, best score first.
//!
//! Nothing here reads a clock or the database: every replica that sees the same members and
//! holders computes the same assignment, and it only ever moves a member's surplus, so shards
//! that are where they should be stay put.

use std::collections::BTreeMap;

use sha2::{Digest, Sha256};

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

/// Who should hold each shard of `group` (`shards` of them), given the live `members` and who
/// holds each held shard now (`holders`: shard → holder). Every replica that sees the same members
/// and holders computes the same answer, so each one can act on its own part of it: give away
/// what it holds and is not its own, campaign for what is.
///
/// - Each member keeps as many of its shards as its target ([`targets`]) allows; a surplus gives
///   up the shards that the members short of their share score highest (so the newcomer gets the
///   shards it would own on its own).
/// - Shards held by someone who is not a member (gone, or not yet counted) are as good as free:
///   their holder runs until its lease expires, and the new owner campaigns meanwhile, winning it
///   at the expiry.
/// - The free shards and the surplus go to the members short of their share, pair by pair, the
///   highest score first.
///
/// Shards from `shards` up (left over from a larger group) are not part of it. Every shard gets
/// an owner while there is a member; none without members.
pub fn assign(
    group: &str,
    shards: u32,
    members: &[String],
    holders: &BTreeMap<u32, String>,
) -> Vec<Option<String>> {
    let mut owners: Vec<Option<String>> = vec![None; shards as usize];
    let mut mine: BTreeMap<&str, Vec<u32>> =
        members.iter().map(|m| (m.as_str(), Vec::new())).collect();
    for (shard, holder) in holders.range(..shards) {
        if let Some(held) = mine.get_mut(holder.as_str()) {
            held.push(*shard);
        }
    }
    let held = |m: &str| mine.get(m).map_or(0, |h| h.len() as u32);
    let targets = targets(shards, members, held);
    let short: Vec<&str> = targets
        .iter()
        .filter(|(m, t)| held(m) < **t)
        .map(|(m, _)| m.as_str())
        .collect();
    // How much a shard is wanted elsewhere: the best score of a member short of its share.
    let pull = |shard: u32| {
        short
            .iter()
            .map(|m| score(group, shard, m))
            .max()
            .unwrap_or(0)
    };
    let mut needs: BTreeMap<&str, u32> = BTreeMap::new();
    for (member, target) in &targets {
        let mut held = mine.get(member.as_str()).cloned().unwrap_or_default();
        let surplus = held.len().saturating_sub(*target as usize);
        // The surplus first, as the sort puts it: cached keys, as each is a hash per short member
        // and a group may have thousands of shards.
        held.sort_by_cached_key(|s| (std::cmp::Reverse(pull(*s)), *s));
        for shard in held.into_iter().skip(surplus) {
            owners[shard as usize] = Some(member.clone());
        }
        let kept = (mine.get(member.as_str()).map_or(0, Vec::len) - surplus) as u32;
        if *target > kept {
            needs.insert(member.as_str(), target - kept);
        }
    }
    let pool: Vec<u32> = (0..shards)
        .filter(|s| owners[*s as usize].is_none())
        .collect();
    let mut pairs: Vec<(u64, u32, &str)> = pool
        .iter()
        .flat_map(|s| needs.keys().map(move |m| (score(group, *s, m), *s, *m)))
        .collect();
    pairs.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)).then(a.2.cmp(b.2)));
    for (_, shard, member) in pairs {
        let need = needs.get_mut(member).filter(|n| **n > 0);
        if let Some(need) = need
            && owners[shard as usize].is_none()
        {
            *need -= 1;
            owners[shard as usize] = Some(member.to_string());
        }
    }
    owners
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("replica-{i}")).collect()
    }

    /// Every replica acts on the assignment in turn: shards held by the wrong member released,
    /// then free shards taken by their owner. Returns how many shards were taken, until nothing
    /// changes.
    fn settle(
        group: &str,
        shards: u32,
        members: &[String],
        holders: &mut BTreeMap<u32, String>,
    ) -> u32 {
        let mut moved = 0;
        for _round in 0..20 {
            let mut changed = false;
            let owners = assign(group, shards, members, holders);
            for (s, owner) in owners.iter().enumerate() {
                let s = s as u32;
                if holders.get(&s).is_some_and(|h| Some(h) != owner.as_ref())
                    && members.contains(&holders[&s])
                {
                    holders.remove(&s);
                    changed = true;
                }
            }
            let owners = assign(group, shards, members, holders);
            for (s, owner) in owners.iter().enumerate() {
                let s = s as u32;
                if let Some(owner) = owner
                    && !holders.contains_key(&s)
                {
                    holders.insert(s, owner.clone());
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
        // Settled: the assignment is what is held.
        let owners = assign("orders", 12, &four, &holders);
        for s in 0..12u32 {
            assert_eq!(owners[s as usize].as_ref(), holders.get(&s));
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
        let owners = assign("orders", 12, &four, &holders);
        for me in &three {
            let given: Vec<u32> = holders
                .iter()
                .filter(|(s, h)| *h == me && owners[**s as usize].as_deref() != Some(me))
                .map(|(s, _)| *s)
                .collect();
            let best = holders
                .iter()
                .filter(|(_, h)| *h == me)
                .map(|(s, _)| *s)
                .max_by_key(|s| (score("orders", *s, "newcomer"), std::cmp::Reverse(*s)))
                .unwrap();
            assert_eq!(given, [best], "{me}");
            assert_eq!(owners[best as usize].as_deref(), Some("newcomer"));
        }
    }

    #[test]
    fn shards_left_over_from_a_larger_group_count_for_no_one_s_share() {
        let two = names(2);
        let mut holders = BTreeMap::new();
        // replica-0 still holds shards 4 and 5 of a group that had 6.
        holders.insert(4, "replica-0".to_string());
        holders.insert(5, "replica-0".to_string());
        let owners = assign("orders", 4, &two, &holders);
        assert_eq!(owners.len(), 4);
        let of = |m: &str| owners.iter().filter(|o| o.as_deref() == Some(m)).count();
        assert_eq!((of("replica-0"), of("replica-1")), (2, 2));
    }

    #[test]
    fn a_shard_held_by_a_member_that_is_gone_goes_to_a_member_at_once() {
        let two = names(2);
        let mut holders = BTreeMap::new();
        holders.insert(0, "gone".to_string());
        holders.insert(1, "replica-1".to_string());
        let owners = assign("orders", 2, &two, &holders);
        assert_eq!(
            owners,
            [Some("replica-0".to_string()), Some("replica-1".to_string())]
        );
    }

    #[test]
    fn no_members_no_owners_and_every_shard_owned_otherwise() {
        assert_eq!(
            assign("orders", 3, &[], &BTreeMap::new()),
            [None, None, None]
        );
        for members in 1..6 {
            for shards in 0..30 {
                let owners = assign("orders", shards, &names(members), &BTreeMap::new());
                assert!(
                    owners.iter().all(Option::is_some),
                    "{shards} over {members}"
                );
            }
        }
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
}
