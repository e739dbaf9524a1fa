//! The line of standbys for a lease (docs/ARCHITECTURE.md §5.8): who is given a lease next, and
//! when a waiter of higher priority may ask its holder to step aside. The rules here are the ones
//! every store applies in its statements (the SQL stores spell them in SQL, the in-memory store
//! calls these functions), so the simulator and the unit tests below judge the same order.
//!
//! - Every standby that campaigns joins the line of the lease with its [`Place`] and keeps its
//!   place alive with each campaign ([`Timing::in_line_every`]); a place not kept for
//!   [`Timing::in_line_for`] has lapsed, and a standby that comes back joins at the end again.
//! - The line's order: higher priority first, then who joined first ([`ahead`]).
//! - A release by the holder, or a campaign that finds the lease free, gives the lease to the
//!   head of the line ([`head`]): a new epoch written for the waiter, with an expiry of the
//!   waiter's own [`Timing::in_line_for`], so that a grant to a waiter that died meanwhile is free
//!   again that soon. The waiter takes it up with one read, and its first renewal extends it.
//! - A waiter whose [`Place::preempt_after`] is set, of higher priority than the holder, that has
//!   waited that long, asks the holder to hand the lease over, as an operator's `leases handoff`
//!   does; at most once per `preempt_after` for a lease ([`may_preempt`]).
//!
//! [`Timing::in_line_every`]: crate::timing::Timing::in_line_every
//! [`Timing::in_line_for`]: crate::timing::Timing::in_line_for

use std::cmp::Ordering;
use std::ops::Add;
use std::time::Duration;

/// Where a standby asks to stand in the line of a lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub struct Place {
    /// Higher goes first. Default 0: every replica alike, in the order they joined.
    pub priority: i64,
    /// After how long in line this waiter may take the lease from a holder of lower priority
    /// (a graceful handoff); `None`: never.
    #[serde(with = "humantime_serde")]
    pub preempt_after: Option<Duration>,
}

/// A waiter as a store keeps it; `T` is the store's time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiter<T> {
    /// The waiter's holder id.
    pub holder: String,
    /// Its priority.
    pub priority: i64,
    /// When it joined the line (a lapsed place joins again).
    pub joined: T,
    /// Until when it counts as alive, unless it campaigns again.
    pub alive_until: T,
}

/// The line's order: higher priority first, then earlier joined; the holder id breaks a tie of
/// both, so that every store and every replica agree on one order (SQL: `ORDER BY priority DESC,
/// joined_at, holder`).
pub fn ahead<T: Ord>(a: &Waiter<T>, b: &Waiter<T>) -> Ordering {
    b.priority
        .cmp(&a.priority)
        .then_with(|| a.joined.cmp(&b.joined))
        .then_with(|| a.holder.cmp(&b.holder))
}

/// The first waiter of `line` alive at `now`, other than `except` (the holder giving the lease
/// up, which may stand in line for another of its terms).
pub fn head<'a, T: Ord + Copy + 'a>(
    line: impl IntoIterator<Item = &'a Waiter<T>>,
    now: T,
    except: &str,
) -> Option<&'a Waiter<T>> {
    line.into_iter()
        .filter(|w| w.alive_until > now && w.holder != except)
        .min_by(|a, b| ahead(a, b))
}

/// What a waiter's campaign may do about a holder of the lease ([`may_preempt`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Preempt<T> {
    /// Ask the holder to hand the lease over now.
    Now,
    /// Not before this time (the waiter has not waited long enough, or the lease moved for a
    /// preemption too recently): campaign again then.
    At(T),
    /// Never, as things stand: no `preempt_after`, or the holder's priority is not lower.
    Never,
}

/// Whether a waiter of `place` that joined the line at `joined` may ask a holder of priority
/// `holder_priority` to step aside at `now`, the lease's last move for a preemption having been
/// asked at `last_preempted`. Once per `preempt_after` at most, so that two replicas whose
/// priorities cross cannot flap the lease between them.
pub fn may_preempt<T>(
    place: &Place,
    joined: T,
    holder_priority: i64,
    last_preempted: Option<T>,
    now: T,
) -> Preempt<T>
where
    T: Ord + Copy + Add<Duration, Output = T>,
{
    let Some(after) = place.preempt_after else {
        return Preempt::Never;
    };
    if place.priority <= holder_priority {
        return Preempt::Never;
    }
    let waited = joined + after;
    let at = last_preempted.map_or(waited, |last| waited.max(last + after));
    if at <= now {
        Preempt::Now
    } else {
        Preempt::At(at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn waiter(holder: &str, priority: i64, joined: u64, alive_until: u64) -> Waiter<u64> {
        Waiter {
            holder: holder.into(),
            priority,
            joined,
            alive_until,
        }
    }

    #[test]
    fn the_head_is_the_live_waiter_of_highest_priority_then_earliest_joined() {
        let line = [
            waiter("a", 1, 10, 100),
            waiter("b", 3, 30, 100),
            waiter("c", 3, 20, 100),
            waiter("d", 2, 5, 100),
        ];
        assert_eq!(head(&line, 50, "").unwrap().holder, "c");
        // c gives the lease up: it is not its own successor.
        assert_eq!(head(&line, 50, "c").unwrap().holder, "b");
    }

    #[test]
    fn a_waiter_whose_place_lapsed_is_passed_over() {
        let line = [waiter("high", 9, 1, 40), waiter("low", 0, 2, 100)];
        assert_eq!(head(&line, 39, "").unwrap().holder, "high");
        assert_eq!(head(&line, 40, "").unwrap().holder, "low");
        assert_eq!(head(&line, 100, ""), None);
    }

    #[test]
    fn equal_priorities_and_join_times_are_ordered_by_holder_id() {
        let line = [waiter("b", 0, 1, 9), waiter("a", 0, 1, 9)];
        assert_eq!(head(&line, 0, "").unwrap().holder, "a");
    }

    fn place(priority: i64, after: u64) -> Place {
        Place {
            priority,
            preempt_after: Some(Duration::from_nanos(after)),
        }
    }

    // A time of whole nanoseconds, to add durations to.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
    struct T(u64);
    impl Add<Duration> for T {
        type Output = T;
        fn add(self, d: Duration) -> T {
            T(self.0 + u64::try_from(d.as_nanos()).unwrap())
        }
    }

    #[test]
    fn a_waiter_of_higher_priority_preempts_once_it_has_waited_preempt_after() {
        let p = place(2, 30);
        assert_eq!(may_preempt(&p, T(10), 1, None, T(39)), Preempt::At(T(40)));
        assert_eq!(may_preempt(&p, T(10), 1, None, T(40)), Preempt::Now);
    }

    #[test]
    fn no_preemption_of_an_equal_or_higher_priority_or_without_preempt_after() {
        assert_eq!(
            may_preempt(&place(2, 30), T(0), 2, None, T(99)),
            Preempt::Never
        );
        let off = Place {
            priority: 9,
            preempt_after: None,
        };
        assert_eq!(may_preempt(&off, T(0), 0, None, T(99)), Preempt::Never);
    }

    #[test]
    fn a_lease_moves_for_a_preemption_at_most_once_per_preempt_after() {
        let p = place(2, 30);
        // Waited long enough, but the lease moved for a preemption at 50.
        assert_eq!(
            may_preempt(&p, T(0), 1, Some(T(50)), T(60)),
            Preempt::At(T(80))
        );
        assert_eq!(may_preempt(&p, T(0), 1, Some(T(50)), T(80)), Preempt::Now);
    }
}
