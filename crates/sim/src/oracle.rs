//! The oracle: what every run must show. Most promises are read from the history once the run is
//! over ([`judge`]); the deadline, gate and fence rules are judged by the history as the run goes
//! on; liveness ([`all_held`]) is watched by the world loop, and fair shares ([`fair_shares`])
//! are read from the store and the replicas as the run ends.

use std::collections::BTreeMap;
use std::time::Duration;

use futures::FutureExt;
use leasehold_lease::groups::GroupSpec;
use leasehold_lease::memory::MemoryStore;
use leasehold_lease::role::Role;
use leasehold_lease::store::LeaseStore;

use leasehold_lease_core::Epoch;

use crate::history::{At, History, ms, replica_of};
use crate::replica::{Life, Replica};

/// Judges the history, recording what it finds broken; `reservation` is how long a handoff's
/// release keeps the lease for the replica asked for, in true time (a ttl on the database's
/// clock), and `watch_tolerance` how far the database's clock may run ahead before the clock
/// watch must see it (the margin and a store timeout for each of the two calls compared).
pub fn judge(history: &History, reservation: Duration, watch_tolerance: Duration) {
    one_holder_per_epoch_and_epochs_only_go_up(history);
    terms_of_a_lease_never_overlap(history);
    a_handoff_goes_where_it_was_asked(history, reservation);
    a_suspended_clock_is_seen_at_the_first_answer_after_it(history, watch_tolerance * 2);
}

/// A machine suspended well beyond what the clock watch tolerates (its margin, and the width of
/// its measuring window: the two calls' durations, up to a store timeout each; twice that) has
/// its terms ended by the first answer the database gave after the suspend, plus the drain of
/// work under way: its local deadline no longer protects, so the clock watch must
/// (docs/ARCHITECTURE.md §9.3).
fn a_suspended_clock_is_seen_at_the_first_answer_after_it(history: &History, beyond: Duration) {
    let (suspends, stops) = {
        let record = history.lock();
        (record.suspends.clone(), record.stops.clone())
    };
    for suspend in suspends.iter().filter(|s| s.for_ > beyond) {
        let Some(answer) = suspend.answer else {
            continue;
        };
        for (lease, epoch) in &suspend.terms {
            let stopped = stops.get(&(lease.clone(), *epoch)).copied();
            if stopped.is_none_or(|at| at > answer + Duration::from_millis(45)) {
                history.violation(
                    "a suspended clock is seen at the next answer",
                    format!(
                        "{} was suspended {:.3} ms at {:.3} ms; the first answer after reached it at {:.3} ms, but its term of {lease} at epoch {epoch} went on until {}",
                        suspend.replica,
                        ms(suspend.for_),
                        ms(suspend.since),
                        ms(answer),
                        stopped.map_or("the end".to_string(), |t| format!("{:.3} ms", ms(t)))
                    ),
                );
            }
        }
    }
}

/// After a handoff asked for a replica, the holder's release keeps the lease for it: whoever
/// wins the lease within the reservation is that replica.
fn a_handoff_goes_where_it_was_asked(history: &History, reservation: Duration) {
    let (handoffs, releases, wins, store_events) = {
        let record = history.lock();
        (
            record.handoffs.clone(),
            record.releases.clone(),
            record.wins.clone(),
            record.store_events.clone(),
        )
    };
    // A release answers the last request for its term made before it: a failover that loses the
    // release can leave the term held, and a later request for it is no request that release
    // answered.
    for &(ref lease, epoch, released) in &releases {
        let Some((to, asked)) = handoffs
            .iter()
            .filter(|(l, e, _, at)| l == lease && *e == epoch && *at <= released)
            .max_by_key(|(_, _, _, at)| *at)
            .map(|(_, _, to, at)| (to.as_deref(), *at))
        else {
            continue;
        };
        let Some(to) = to else {
            continue;
        };
        let lease = lease.as_str();
        let next = wins
            .iter()
            .find(|w| w.lease == lease && w.epoch > epoch && w.at.t >= released);
        if let Some(win) = next
            && win.at.t < released + reservation
            && replica_of(&win.holder) != to
            // A failover can lose the request itself, and a step of the database's clock ends the
            // reservation early: from the request on, either excuses the winner.
            && !store_events.iter().any(|&t| asked <= t && t <= win.at.t)
        {
            history.violation(
                "a handoff goes where it was asked",
                format!(
                    "{lease} was handed over to {to} (released at epoch {epoch} at {:.3} ms), but {} won it at {:.3} ms, within the reservation",
                    ms(released),
                    win.holder,
                    ms(win.at.t)
                ),
            );
        }
    }
}

/// Each epoch of a lease is handed out once, and each one handed out is greater than every one
/// before it.
fn one_holder_per_epoch_and_epochs_only_go_up(history: &History) {
    let wins = history.lock().wins.clone();
    let mut last: BTreeMap<&str, Epoch> = BTreeMap::new();
    for win in &wins {
        if let Some(&before) = last.get(win.lease.as_str())
            && win.epoch <= before
        {
            history.violation(
                "epochs only go up",
                format!(
                    "{} won {} at epoch {} at {:.3} ms, after epoch {before} was handed out",
                    win.holder,
                    win.lease,
                    win.epoch,
                    ms(win.at.t)
                ),
            );
        }
        last.insert(&win.lease, win.epoch);
    }
}

/// The work of two terms of one lease never overlaps: every effect of an epoch comes before
/// every effect of a later one, in true time (and, within one instant, in execution order).
fn terms_of_a_lease_never_overlap(history: &History) {
    let effects = history.lock().effects.clone();
    // lease -> epoch -> (first, last, replica)
    let mut spans: BTreeMap<&str, BTreeMap<Epoch, (At, At, &str)>> = BTreeMap::new();
    for e in &effects {
        let span = spans
            .entry(&e.lease)
            .or_default()
            .entry(e.epoch)
            .or_insert((e.at, e.at, &e.replica));
        span.0 = span.0.min(e.at);
        span.1 = span.1.max(e.at);
    }
    for (lease, epochs) in &spans {
        let mut latest: Option<(Epoch, At, &str)> = None;
        for (&epoch, &(first, last, replica)) in epochs {
            if let Some((before, before_last, before_replica)) = latest
                && before_last >= first
            {
                history.violation(
                    "terms never overlap",
                    format!(
                        "{lease}: {before_replica}'s work at epoch {before} went on until {:.3} ms, after {replica}'s work at epoch {epoch} began at {:.3} ms",
                        ms(before_last.t),
                        ms(first.t)
                    ),
                );
            }
            if latest.is_none_or(|(_, l, _)| last > l) {
                latest = Some((epoch, last, replica));
            }
        }
    }
}

/// How many times each shard of a group may change hands once membership has settled: taken
/// by whoever campaigns first when it is free (after an expiry, a clock step's quiet), handed to
/// the member the plan gives it to, and once more for a member counted a look later. More is
/// flapping.
pub const MOVES_PER_SHARD: usize = 3;

/// Once membership has settled (every replica up since the faults healed), each member of a
/// lease group holds its fair share: the shard count over the members, rounded down or up; and
/// it got there in at most [`MOVES_PER_SHARD`] moves per shard after the faults healed.
pub fn fair_shares(
    store: &MemoryStore,
    replicas: &[Replica],
    groups: &[GroupSpec],
    settled_from: Duration,
    history: &History,
) {
    let members: Vec<&Replica> = replicas.iter().filter(|r| r.life == Life::Up).collect();
    if members.is_empty() || members.len() != replicas.len() {
        return;
    }
    for group in groups {
        let shards: Vec<String> = group.leases().collect();
        let Some(Ok(rows)) = store.get(&shards).now_or_never() else {
            continue;
        };
        let held: Vec<usize> = members
            .iter()
            .map(|m| {
                let holder = m.leases.as_ref().map(|l| l.holder().as_str().to_string());
                rows.iter()
                    .filter(|row| row.is_held() && Some(&row.holder) == holder.as_ref())
                    .count()
            })
            .collect();
        let n = u32::try_from(members.len()).unwrap_or(u32::MAX);
        let (low, high) = (group.shards / n, group.shards.div_ceil(n));
        let fair = held.iter().all(|&h| {
            let h = u32::try_from(h).unwrap_or(u32::MAX);
            low <= h && h <= high
        });
        let moves = history
            .lock()
            .wins
            .iter()
            .filter(|w| w.at.t >= settled_from && shards.contains(&w.lease))
            .count();
        history.note(format!(
            "group {}: {} shards over {} members, held {held:?}, {moves} moves since membership settled",
            group.name, group.shards, n
        ));
        if !fair {
            history.violation(
                "fair shares once membership settles",
                format!(
                    "group {}: members hold {held:?} of {} shards, not {low} or {high} each",
                    group.name, group.shards
                ),
            );
        } else if moves > MOVES_PER_SHARD * group.shards as usize {
            history.violation(
                "fair shares once membership settles",
                format!(
                    "group {}: {moves} shards changed hands after membership settled, more than {MOVES_PER_SHARD} per shard of its {}",
                    group.name, group.shards
                ),
            );
        }
    }
}

/// Whether every lease in `names` is held, by the store's account, by a live replica that
/// leads it.
pub fn all_held(store: &MemoryStore, replicas: &[Replica], names: &[String]) -> bool {
    let Some(Ok(rows)) = store.get(names).now_or_never() else {
        return false;
    };
    names.iter().all(|name| {
        rows.iter()
            .find(|r| &r.name == name && r.is_held())
            .is_some_and(|row| {
                replicas.iter().any(|r| {
                    r.life == Life::Up
                        && r.leases.as_ref().is_some_and(|l| {
                            l.holder().as_str() == row.holder
                                && l.leadership(name).is_some_and(|s| {
                                    s.role == Role::Leader && s.epoch == Some(row.epoch)
                                })
                        })
                })
            })
    })
}
