//! What the in-memory store keeps, as PostgreSQL keeps it in tables: the lease rows with their
//! terms and handoffs, the lines of standbys waiting for them, the lease group members; and the
//! journal of its last commits that a failover goes back in ([`super::MemoryStore::fail_over`]).

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use tokio::time::Instant;

use leasehold_lease_core::queue::{self, Waiter};

use crate::history::{PRUNE_EVERY, RecordedTerm, TERMS_KEPT, TermEnd};
use crate::store::{Epoch, InLine};

/// A lease row.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Row {
    pub(super) holder: String,
    pub(super) epoch: Epoch,
    pub(super) ttl: Duration,
    pub(super) expires_at: Instant,
    /// The lease's recorded terms, oldest first, at most [`crate::history::TERMS_KEPT`].
    pub(super) terms: Vec<MemoryTerm>,
    /// An operator's handoff request: the epoch whose holder is asked, and the replica to hand
    /// over to, if any.
    pub(super) handoff: Option<(Epoch, Option<String>)>,
    /// After a release that a handoff request named a replica for: that replica, and until when
    /// only it may win the lease.
    pub(super) reserved: Option<(String, Instant)>,
    /// The row was given to its holder as the head of the line, which has not renewed it yet.
    pub(super) granted: bool,
    /// The holder's priority in the line it came from (0 for a campaign outside one).
    pub(super) priority: i64,
    /// When a waiter last asked the holder to step aside for its priority.
    pub(super) preempted: Option<Instant>,
}

impl Row {
    /// Whether `holder` holds the row at `epoch` at `now`.
    pub(super) fn held_by(&self, holder: &str, epoch: Epoch, now: Instant) -> bool {
        self.holder == holder && self.epoch == epoch && self.expires_at > now
    }

    /// When a campaign of `holder` can win the row: at its expiry, or at the end of a
    /// reservation for another replica, whichever is later.
    pub(super) fn free_at(&self, holder: &str) -> Instant {
        match &self.reserved {
            Some((replica, until)) if !crate::store::is_reserved_for(replica, holder) => {
                self.expires_at.max(*until)
            }
            _ => self.expires_at,
        }
    }

    /// Closes the open term `epoch` as `end` at `at`.
    pub(super) fn close_term(&mut self, epoch: Epoch, at: Instant, end: TermEnd) {
        for term in self
            .terms
            .iter_mut()
            .filter(|t| t.epoch == epoch && t.ended.is_none())
        {
            term.ended = Some((at, end));
        }
    }
}

/// A standby waiting in a lease's line, with what a grant to it needs.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct WaiterRow {
    /// Its place: priority, when it joined, until when it is alive.
    pub(super) waiter: Waiter<Instant>,
    /// Its place's preemption and the grant's length ([`InLine`]).
    pub(super) line: InLine,
    /// The ttl it campaigns with, which a grant records as the row's.
    pub(super) ttl: Duration,
}

/// What a release did with a lease.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Released {
    /// Expired it now: free for any campaign.
    Freed,
    /// Gave it to the head of its line, at this epoch.
    Granted {
        /// The waiter's holder id.
        holder: String,
        /// The epoch given.
        epoch: Epoch,
        /// How long the grant lasts unless the waiter takes it up.
        lasts: Duration,
    },
}

/// A lease group member's row: when it joined, when it expires, its shard count.
pub(super) type MemberRow = (Instant, Instant, Option<u32>);

/// A term as the in-memory store records it, by its clock.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct MemoryTerm {
    pub(super) epoch: Epoch,
    pub(super) holder: String,
    pub(super) started: Instant,
    pub(super) ended: Option<(Instant, TermEnd)>,
}

impl MemoryTerm {
    pub(super) fn at(&self, now: Instant) -> RecordedTerm {
        let ago = |t: Instant| {
            i64::try_from(now.saturating_duration_since(t).as_millis()).unwrap_or(i64::MAX)
        };
        RecordedTerm {
            epoch: self.epoch,
            holder: self.holder.clone(),
            started_ms_ago: ago(self.started),
            ended_ms_ago: self.ended.map(|(t, _)| ago(t)),
            end: self.ended.map(|(_, end)| end),
        }
    }
}

/// Everything a failover can lose: the rows of every table.
#[derive(Debug, Clone, Default)]
pub(super) struct Tables {
    /// The lease rows by name.
    pub(super) rows: BTreeMap<String, Row>,
    /// Lease group members by (group, member).
    pub(super) members: BTreeMap<(String, String), MemberRow>,
    /// The line of each lease: its waiters by holder id.
    pub(super) lines: BTreeMap<String, BTreeMap<String, WaiterRow>>,
}

impl Tables {
    /// Wins `name` for `holder` at `now`: the row's epoch + 1 (1 for a new row), and at least
    /// `floor`. Closes the term before it and opens one.
    pub(super) fn win(
        &mut self,
        name: &str,
        holder: &str,
        ttl: Duration,
        floor: Epoch,
        now: Instant,
    ) -> Epoch {
        let (epoch, mut terms) = match self.rows.get_mut(name) {
            Some(row) => {
                let (epoch, expired) = (row.epoch, row.expires_at);
                row.close_term(epoch, expired, TermEnd::Expired);
                (epoch.next().max(floor), std::mem::take(&mut row.terms))
            }
            None => (floor.max(Epoch::new(1)), Vec::new()),
        };
        terms.push(MemoryTerm {
            epoch,
            holder: holder.to_string(),
            started: now,
            ended: None,
        });
        if epoch.get() % i64::from(PRUNE_EVERY) == 0 {
            let kept = TERMS_KEPT as usize;
            terms.drain(..terms.len().saturating_sub(kept));
        }
        let row = Row {
            holder: holder.to_string(),
            epoch,
            ttl,
            expires_at: now + ttl,
            terms,
            handoff: None,
            reserved: None,
            granted: false,
            priority: 0,
            preempted: self.rows.get(name).and_then(|r| r.preempted),
        };
        self.rows.insert(name.to_string(), row);
        self.leave_line(name, holder);
        epoch
    }

    /// Joins `holder` to the line of `name` at `now`, or keeps its place alive (a lapsed place
    /// joins at the end again), with its priority as given now.
    pub(super) fn join_line(
        &mut self,
        name: &str,
        holder: &str,
        line: InLine,
        ttl: Duration,
        now: Instant,
    ) {
        let waiters = self.lines.entry(name.to_string()).or_default();
        let joined = match waiters.get(holder) {
            Some(w) if w.waiter.alive_until > now => w.waiter.joined,
            _ => now,
        };
        let row = WaiterRow {
            waiter: Waiter {
                holder: holder.to_string(),
                priority: line.place.priority,
                joined,
                alive_until: now + line.alive_for,
            },
            line,
            ttl,
        };
        waiters.insert(holder.to_string(), row);
        // Lapsed places are swept as PostgreSQL's campaign sweeps them.
        waiters.retain(|_, w| w.waiter.alive_until > now);
    }

    /// Takes `holder` out of the line of `name`.
    pub(super) fn leave_line(&mut self, name: &str, holder: &str) {
        if let Some(waiters) = self.lines.get_mut(name) {
            waiters.remove(holder);
            if waiters.is_empty() {
                self.lines.remove(name);
            }
        }
    }

    /// The first live waiter of `name`'s line at `now` other than `except`; with `reserved`, the
    /// first live waiter that reservation names, if any.
    pub(super) fn head(
        &self,
        name: &str,
        now: Instant,
        except: &str,
        reserved: Option<&str>,
    ) -> Option<WaiterRow> {
        let waiters = self.lines.get(name)?;
        let live = waiters.values().filter(|w| match reserved {
            Some(to) => crate::store::is_reserved_for(to, &w.waiter.holder),
            None => true,
        });
        let head = queue::head(live.map(|w| &w.waiter), now, except)?;
        waiters.get(&head.holder).cloned()
    }

    /// Gives `name` to `waiter` at `now`, as its line's head: the row's epoch + 1 (and at least
    /// `floor`), expiring after the waiter's grant time unless it renews; the term before is
    /// closed (as it ended: a release has closed it already) and the waiter's opened.
    pub(super) fn grant(
        &mut self,
        name: &str,
        waiter: &WaiterRow,
        floor: Epoch,
        now: Instant,
    ) -> Epoch {
        let holder = waiter.waiter.holder.as_str();
        let epoch = self.win(name, holder, waiter.ttl, floor, now);
        if let Some(row) = self.rows.get_mut(name) {
            row.expires_at = now + waiter.line.alive_for;
            row.granted = true;
            row.priority = waiter.waiter.priority;
        }
        epoch
    }

    /// Releases `name` at `at` if `holder` holds it at `epoch` then, as a release does: with
    /// `grant` as the epoch floor, to the head of its line (the replica a handoff request of this
    /// term named, if it waits in line), else expired now; a handoff request that named a
    /// replica not in line reserves the lease for it for one ttl. `grant` is `None` when the
    /// store may not give leases now (a failover not yet seen, or its hold-off): then expired.
    pub(super) fn release(
        &mut self,
        name: &str,
        holder: &str,
        epoch: Epoch,
        at: Instant,
        grant: Option<Epoch>,
    ) -> Option<Released> {
        let row = self.rows.get_mut(name)?;
        if !row.held_by(holder, epoch, at) {
            return None;
        }
        row.expires_at = at;
        row.close_term(epoch, at, TermEnd::Released);
        let named = match row.handoff.take() {
            Some((asked, Some(to))) if asked == epoch => Some(to),
            _ => None,
        };
        row.reserved = named.clone().map(|to| (to, at + row.ttl));
        let Some(floor) = grant else {
            return Some(Released::Freed);
        };
        let head = self.head(name, at, holder, named.as_deref());
        // Nobody in line (or not the named replica, whose reservation then waits for its campaign).
        let Some(head) = head else {
            return Some(Released::Freed);
        };
        let epoch = self.grant(name, &head, floor, at);
        Some(Released::Granted {
            holder: head.waiter.holder,
            epoch,
            lasts: head.line.alive_for,
        })
    }
}

/// How many of its latest commits a failover of the in-memory store can lose at most
/// ([`super::MemoryStore::fail_over`]): it keeps its tables as they were after each of them, and
/// before the oldest. Each kept state is a full copy of the tables, so a store of many leases
/// with long histories costs that many copies.
pub const FAILOVER_CAN_LOSE: usize = 64;

/// The tables after each of the last [`FAILOVER_CAN_LOSE`] commits, and before the oldest of
/// them: oldest first, the newest equal to the live tables.
#[derive(Debug)]
pub(super) struct Journal(VecDeque<Tables>);

impl Journal {
    /// A journal of no commit yet, of tables as `initial`.
    pub(super) fn new(initial: Tables) -> Self {
        Journal(VecDeque::from([initial]))
    }

    /// Records the tables as a commit left them, forgetting the oldest beyond the bound.
    pub(super) fn commit(&mut self, after: &Tables) {
        self.0.push_back(after.clone());
        while self.0.len() > FAILOVER_CAN_LOSE + 1 {
            self.0.pop_front();
        }
    }

    /// Forgets the last `lose` commits (all kept, if it keeps fewer) and returns the tables as
    /// they were before them: the new primary's history goes on from there.
    pub(super) fn lose_last(&mut self, lose: usize) -> Tables {
        let kept = self.0.len().saturating_sub(lose).max(1);
        self.0.truncate(kept);
        self.0.back().cloned().unwrap_or_default()
    }
}
