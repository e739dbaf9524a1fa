//! What the in-memory store keeps, as PostgreSQL keeps it in tables: the lease rows with their
//! terms and handoffs, the lease group members; and the journal of its last commits that a
//! failover goes back in ([`super::MemoryStore::fail_over`]).

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use tokio::time::Instant;

use crate::history::{PRUNE_EVERY, RecordedTerm, TERMS_KEPT, TermEnd};
use crate::store::Epoch;

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
        };
        self.rows.insert(name.to_string(), row);
        epoch
    }

    /// Expires `name`'s row at `at` if `holder` holds it at `epoch` then, as a release does: a
    /// handoff request of this term that named a replica reserves the lease for it for one ttl.
    pub(super) fn release(&mut self, name: &str, holder: &str, epoch: Epoch, at: Instant) -> bool {
        match self.rows.get_mut(name) {
            Some(row) if row.held_by(holder, epoch, at) => {
                row.expires_at = at;
                row.close_term(epoch, at, TermEnd::Released);
                row.reserved = match row.handoff.take() {
                    Some((asked, Some(to))) if asked == epoch => Some((to, at + row.ttl)),
                    _ => None,
                };
                true
            }
            _ => false,
        }
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
