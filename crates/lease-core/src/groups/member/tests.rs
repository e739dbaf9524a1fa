//! [`Member`] as pure steps: views in, decisions out.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::time::Duration;

use super::*;
use crate::record::GroupMember;

const SETTLE: Duration = Duration::from_secs(1);
const ORPHANED: Duration = Duration::from_secs(3);

fn spec() -> GroupSpec {
    GroupSpec {
        name: "orders".into(),
        shards: 12,
    }
}

fn member(me: &str) -> Member {
    Member::new(spec(), me, SETTLE, ORPHANED)
}

/// A view at `now_ms` of `members` (id, member for ms) and `holders` (shard → holder).
fn view(now_ms: i64, members: &[(&str, u64)], holders: &BTreeMap<u32, String>) -> GroupView {
    GroupView {
        members: members
            .iter()
            .map(|(id, ms)| GroupMember {
                id: id.to_string(),
                member_for: Duration::from_millis(*ms),
                expires_in: Duration::from_secs(2),
                shards: Some(12),
            })
            .collect(),
        holders: holders
            .iter()
            .map(|(s, h)| (format!("orders/{s}"), h.clone()))
            .collect(),
        db_now: Some(now_ms),
    }
}

fn shard(lease: &str) -> u32 {
    lease.trim_start_matches("orders/").parse().unwrap()
}

fn given(d: &Decision) -> Vec<u32> {
    d.assign
        .iter()
        .filter(|(_, y)| *y)
        .map(|(l, _)| shard(l))
        .collect()
}

/// Three settled members start together: each is given four shards, and once each holds its
/// four the views change nothing.
fn three_settled() -> (Vec<Member>, BTreeMap<u32, String>) {
    let ids = ["a", "b", "c"];
    let mut members: Vec<Member> = ids.iter().map(|id| member(id)).collect();
    let settled: Vec<(&str, u64)> = ids.iter().map(|id| (*id, 5_000)).collect();
    let mut holders = BTreeMap::new();
    for m in &mut members {
        let d = m.observe(&view(10_000, &settled, &holders));
        assert_eq!(given(&d).len(), 4, "{}: {d:?}", m.me);
        assert!(d.step_down.is_empty());
    }
    for m in &members {
        for (s, yours) in m.yours.iter().enumerate() {
            if *yours {
                assert!(
                    holders.insert(s as u32, m.me.clone()).is_none(),
                    "shard {s} given twice"
                );
            }
        }
    }
    for m in &mut members {
        let d = m.observe(&view(10_100, &settled, &holders));
        assert!(d.is_empty(), "{}: {d:?}", m.me);
        assert_eq!((m.status().held, m.status().target), (4, 4));
        assert!(!m.unsettled());
    }
    (members, holders)
}

#[test]
fn three_members_of_a_group_of_twelve_are_given_four_shards_each_and_then_nothing_moves() {
    three_settled();
}

#[test]
fn a_newcomer_campaigns_for_nothing_and_moves_nothing_until_it_has_settled() {
    let (mut members, holders) = three_settled();
    let mut d = member("d");
    let young = [("a", 9_000), ("b", 9_000), ("c", 9_000), ("d", 500)];
    assert!(d.observe(&view(20_000, &young, &holders)).is_empty());
    assert!(!d.status().member && d.unsettled());
    for m in &mut members {
        assert!(
            m.observe(&view(20_000, &young, &holders)).is_empty(),
            "{}",
            m.me
        );
    }
}

#[test]
fn a_member_that_comes_and_goes_within_the_settling_time_moves_no_shard() {
    let (mut members, holders) = three_settled();
    let flapping = [("a", 9_000), ("b", 9_000), ("c", 9_000), ("d", 900)];
    let gone = [("a", 9_100), ("b", 9_100), ("c", 9_100)];
    for m in &mut members {
        assert!(m.observe(&view(20_000, &flapping, &holders)).is_empty());
        assert!(m.observe(&view(20_100, &gone, &holders)).is_empty());
        assert_eq!(m.status().moves, 0);
    }
}

#[test]
fn once_a_fourth_member_settles_each_gives_it_one_shard_by_handoff() {
    let (mut members, mut holders) = three_settled();
    let mut d = member("d");
    let four = [("a", 9_000), ("b", 9_000), ("c", 9_000), ("d", 1_000)];
    // The newcomer is given its three before they are released, so it campaigns the moment
    // each is: the holders' release notifications wake it.
    let newcomer = d.observe(&view(20_000, &four, &holders));
    let mut wanted = given(&newcomer);
    assert_eq!(wanted.len(), 3, "{newcomer:?}");
    assert!(wanted.iter().all(|s| holders.contains_key(s)));
    let mut released = Vec::new();
    for m in &mut members {
        let decision = m.observe(&view(20_000, &four, &holders));
        assert_eq!(decision.step_down.len(), 1, "{}: {decision:?}", m.me);
        assert!(decision.assign.iter().all(|(_, y)| !y), "{decision:?}");
        assert_eq!(m.status().target, 3);
        // Seen again before the release landed: not stepped down twice.
        assert!(
            m.observe(&view(20_010, &four, &holders))
                .step_down
                .is_empty()
        );
        released.push(shard(&decision.step_down[0]));
        assert_eq!(m.status().moves, 1);
    }
    released.sort();
    wanted.sort();
    assert_eq!(
        released, wanted,
        "the surplus is exactly what the newcomer was given"
    );
    for s in &released {
        holders.insert(*s, "d".to_string());
    }
    for m in members.iter_mut().chain([&mut d]) {
        let decision = m.observe(&view(20_500, &four, &holders));
        assert!(decision.is_empty(), "{}: {decision:?}", m.me);
        assert_eq!((m.status().held, m.status().target), (3, 3), "{}", m.me);
    }
    assert_eq!((d.status().handoffs, d.status().takeovers), (3, 0));
}

#[test]
fn a_member_that_is_gone_counts_no_more_and_the_rest_are_given_its_shards_while_it_still_holds_them()
 {
    let (mut members, holders) = three_settled();
    let c = members.pop().unwrap();
    let two = [("a", 9_000), ("b", 9_000)];
    let mut total = 0;
    for m in &mut members {
        let d = m.observe(&view(20_000, &two, &holders));
        let got = given(&d);
        assert!(got.iter().all(|s| holders[s] == c.me), "{d:?}");
        assert!(d.step_down.is_empty());
        assert_eq!(m.status().target, 6);
        total += got.len();
    }
    assert_eq!(total, 4, "c's four, two each");
}

#[test]
fn a_free_shard_its_owner_does_not_take_is_campaigned_for_by_every_member_after_a_while() {
    let (mut members, mut holders) = three_settled();
    let settled = [("a", 9_000), ("b", 9_000), ("c", 9_000)];
    // One of c's shards is released, and c never takes it back.
    let lost = *holders.iter().find(|(_, h)| *h == "c").unwrap().0;
    holders.remove(&lost);
    let (a, rest) = members.split_at_mut(1);
    let (a, b) = (&mut a[0], &mut rest[0]);
    assert!(a.observe(&view(20_000, &settled, &holders)).is_empty());
    assert!(b.observe(&view(20_000, &settled, &holders)).is_empty());
    assert!(a.unsettled(), "a shard is free");
    let later = view(20_000 + ORPHANED.as_millis() as i64, &settled, &holders);
    assert_eq!(given(&a.observe(&later)), [lost]);
    assert_eq!(given(&b.observe(&later)), [lost]);
}

#[test]
fn a_shard_of_ours_seen_free_is_campaigned_for_now() {
    let (mut members, mut holders) = three_settled();
    let settled = [("a", 9_000), ("b", 9_000), ("c", 9_000)];
    let mine = *holders.iter().find(|(_, h)| *h == "a").unwrap().0;
    holders.remove(&mine);
    let d = members[0].observe(&view(20_000, &settled, &holders));
    assert_eq!(d.campaign_now, [format!("orders/{mine}")]);
}

/// c's four shards after c has gone at `at_ms` (the last views saw its row expire at 12_100):
/// how many the other two count as handoffs and as takeovers.
fn arrivals_after_c_goes_at(at_ms: i64) -> (u64, u64) {
    let (mut members, mut holders) = three_settled();
    members.pop();
    let two = [("a", 9_000), ("b", 9_000)];
    for m in &mut members {
        let d = m.observe(&view(at_ms, &two, &holders));
        for s in given(&d) {
            holders.insert(s, m.me.clone());
        }
    }
    for m in &mut members {
        m.observe(&view(at_ms + 100, &two, &holders));
    }
    members.iter().fold((0, 0), |(h, t), m| {
        (h + m.status().handoffs, t + m.status().takeovers)
    })
}

#[test]
fn shards_taken_from_a_member_that_left_are_handoffs() {
    assert_eq!(arrivals_after_c_goes_at(11_000), (4, 0));
}

#[test]
fn shards_taken_from_a_member_whose_row_lapsed_are_takeovers_after_expiry() {
    assert_eq!(arrivals_after_c_goes_at(12_100), (0, 4));
}

#[test]
fn a_member_standing_aside_wants_no_shard_gives_up_its_own_and_settles_anew_when_back() {
    let (mut members, mut holders) = three_settled();
    let a = &mut members[0];
    let mine: Vec<String> = holders
        .iter()
        .filter(|(_, h)| *h == "a")
        .map(|(s, _)| format!("orders/{s}"))
        .collect();
    let d = a.stand_aside(mine.iter().map(String::as_str));
    assert_eq!(d.assign.len(), 4, "{d:?}");
    assert!(d.assign.iter().all(|(_, yours)| !yours), "{d:?}");
    assert_eq!(d.step_down, mine);
    assert!(a.aside() && !a.status().member && a.status().target == 0);
    // Looked at again while still aside: nothing left to withdraw, nothing held.
    assert!(a.stand_aside([]).is_empty());
    for (s, h) in holders.iter_mut() {
        if h == "a" {
            *h = if s % 2 == 0 { "b" } else { "c" }.to_string();
        }
    }
    a.rejoin();
    assert!(!a.aside());
    let back = [("a", 100), ("b", 9_000), ("c", 9_000)];
    assert!(a.observe(&view(21_000, &back, &holders)).is_empty());
    assert!(!a.status().member, "a newcomer again until it settles");
    let settled = [("a", 1_100), ("b", 10_000), ("c", 10_000)];
    assert_eq!(
        given(&a.observe(&view(22_000, &settled, &holders))).len(),
        4
    );
}

#[test]
fn a_shard_still_held_a_settling_time_after_its_step_down_is_asked_for_again_but_counted_once() {
    let (mut members, holders) = three_settled();
    let four = [("a", 9_000), ("b", 9_000), ("c", 9_000), ("d", 1_000)];
    let a = &mut members[0];
    let first = a.observe(&view(20_000, &four, &holders));
    assert_eq!(first.step_down.len(), 1, "{first:?}");
    // The driver was campaigning for it when the step-down came, and kept it.
    assert!(
        a.observe(&view(20_500, &four, &holders))
            .step_down
            .is_empty()
    );
    let again = a.observe(&view(21_000, &four, &holders));
    assert!(again.step_down.is_empty(), "{again:?}");
    assert_eq!(again.step_down_again, first.step_down);
    assert_eq!(a.status().moves, 1);
}

/// `me` in the group configured with six shards instead of `member`'s twelve.
fn with_six_shards(me: &str) -> Member {
    let spec = GroupSpec {
        name: "orders".into(),
        shards: 6,
    };
    Member::new(spec, me, SETTLE, ORPHANED)
}

/// `view`, with each member's shard count given.
fn view_with_counts(
    now_ms: i64,
    members: &[(&str, u64, Option<u32>)],
    holders: &BTreeMap<u32, String>,
) -> GroupView {
    let mut v = view(
        now_ms,
        &members
            .iter()
            .map(|(id, ms, _)| (*id, *ms))
            .collect::<Vec<_>>(),
        holders,
    );
    for (m, (_, _, count)) in v.members.iter_mut().zip(members) {
        m.shards = *count;
    }
    v
}

#[test]
fn a_newcomer_with_another_shard_count_takes_no_part_and_the_others_leave_it_out() {
    let mut six = with_six_shards("b");
    let mut twelve = member("a");
    let members = [("a", 60_000, Some(12)), ("b", 5_000, Some(6))];
    let v = view_with_counts(100_000, &members, &BTreeMap::new());

    let refused = six.observe(&v);
    assert!(
        given(&refused).is_empty() && refused.campaign_now.is_empty(),
        "{refused:?}"
    );
    assert_eq!(
        six.status().count_conflict,
        Some(CountConflict {
            shards: 12,
            member: "a".into()
        })
    );
    assert_eq!((six.status().member, six.status().other_counts), (false, 1));

    // The member with the count in force counts only itself: all twelve are its.
    let planned = twelve.observe(&v);
    assert_eq!(given(&planned), (0..12).collect::<Vec<_>>());
    assert_eq!(twelve.status().count_conflict, None);
    assert_eq!(
        (twelve.status().members, twelve.status().other_counts),
        (1, 1)
    );
}

#[test]
fn a_member_refusing_another_count_gives_up_the_shards_it_holds() {
    let mut six = with_six_shards("b");
    let holders: BTreeMap<u32, String> = [(0, "b".to_string()), (1, "a".to_string())].into();
    let members = [("a", 60_000, Some(12)), ("b", 5_000, Some(6))];
    let d = six.observe(&view_with_counts(100_000, &members, &holders));
    assert_eq!(d.step_down, ["orders/0"]);
    // Still held a settling time later: asked again.
    let d = six.observe(&view_with_counts(101_500, &members, &holders));
    assert_eq!(d.step_down_again, ["orders/0"]);
}

#[test]
fn the_new_count_comes_into_force_when_the_last_member_with_the_old_one_leaves() {
    let mut six = with_six_shards("b");
    let both = [("a", 60_000, Some(12)), ("b", 5_000, Some(6))];
    six.observe(&view_with_counts(100_000, &both, &BTreeMap::new()));
    assert!(six.status().count_conflict.is_some());
    // A row of a version that recorded no count agrees with any.
    let alone = [("b", 6_000, Some(6)), ("old", 90_000, None)];
    let d = six.observe(&view_with_counts(101_000, &alone, &BTreeMap::new()));
    assert_eq!(six.status().count_conflict, None);
    assert_eq!(six.status().other_counts, 0);
    assert_eq!(six.status().members, 2);
    assert!(!d.assign.is_empty());
}
