//! Lease rows locked by another transaction ([`MemoryStore::lock_row`]), and how a statement that
//! writes rows waits for such locks, as PostgreSQL's do (docs/ARCHITECTURE.md §5.3).
//!
//! PostgreSQL's `UPDATE` finds its rows by the clock of when it reaches them, and computes what it
//! writes then; a row another transaction keeps locked (`FOR SHARE`, `FOR UPDATE`) it waits for, at
//! most the session's `lock_timeout`, and then writes what it computed, or gives up with the whole
//! statement. Only a row that another writer changed meanwhile is checked again, by the clock of
//! then. Campaigns and batched renewals never wait: they skip a locked row (`SKIP LOCKED`).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use tokio::time::Instant;

use super::tables::{Row, Tables};
use super::{MemoryStore, State};
use crate::store::StoreError;

/// The server process a lock is reported held by (`CampaignedMany::locked`): there is none.
pub(super) const LOCKER_PID: i32 = 0;

/// Until when, by the store's clock, another transaction keeps each locked row locked.
#[derive(Debug, Default)]
pub(super) struct RowLocks(BTreeMap<String, Instant>);

impl RowLocks {
    /// Locks `name` until `until`, or longer if it already is.
    pub(super) fn lock(&mut self, name: &str, until: Instant) {
        let end = self.0.entry(name.to_string()).or_insert(until);
        *end = (*end).max(until);
    }

    /// How much longer `name` stays locked after `now`; `None` when it is not locked.
    pub(super) fn left(&self, name: &str, now: Instant) -> Option<Duration> {
        self.0
            .get(name)
            .filter(|until| **until > now)
            .map(|until| *until - now)
    }

    /// Whether `name` is locked at `now`.
    pub(super) fn holds(&self, name: &str, now: Instant) -> bool {
        self.left(name, now).is_some()
    }

    /// Ends every lock: the transactions that held them are gone.
    pub(super) fn clear(&mut self) {
        self.0.clear();
    }
}

/// When a statement that waited for row locks judges each row it writes.
#[derive(Debug)]
pub(super) struct Judged {
    /// When it reached the rows.
    started: Instant,
    /// Now, when it writes them.
    now: Instant,
    /// The rows another writer changed while it waited.
    changed: BTreeSet<String>,
}

impl Judged {
    /// The time row `name` is judged and written by: when the statement reached it, unless
    /// another writer changed it while the statement waited, then now.
    pub(super) fn at(&self, name: &str) -> Instant {
        if self.changed.contains(name) {
            self.now
        } else {
            self.started
        }
    }

    /// When the statement started.
    pub(super) fn started(&self) -> Instant {
        self.started
    }

    /// The store's clock as the statement ends, for its `db_now`.
    pub(super) fn now(&self) -> Instant {
        self.now
    }
}

impl MemoryStore {
    /// Runs a statement `op` that writes the rows `targets` picks (by the store's clock when it
    /// starts), waiting first for any of them that another transaction keeps locked, at most
    /// `budget` (the session's `lock_timeout`) of the runtime's clock; `write` then writes them
    /// under the tables' lock. Gives up when the budget runs out (PostgreSQL's lock timeout) or
    /// the store fails over meanwhile (the session's connection is gone), writing nothing: in
    /// either case, with every row, as the whole statement does.
    pub(super) async fn write_rows<T>(
        &self,
        op: &'static str,
        budget: Duration,
        targets: impl FnOnce(&Tables, Instant) -> Vec<String>,
        write: impl FnOnce(&mut State, &[String], &Judged) -> T,
    ) -> Result<T, StoreError> {
        let deadline = crate::seams::now() + budget;
        // The guards live in blocks that end before each await: a future holding one could not
        // move between threads.
        let (targets, started, incarnation, found) = {
            let (mut state, started) = self.state();
            let targets = targets(&state.tables, started);
            if !targets.iter().any(|t| state.locks.holds(t, started)) {
                let judged = Judged {
                    started,
                    now: started,
                    changed: BTreeSet::new(),
                };
                return Ok(write(&mut state, &targets, &judged));
            }
            let found: Vec<Option<Row>> = targets
                .iter()
                .map(|t| state.tables.rows.get(t).cloned())
                .collect();
            (targets, started, state.incarnation.current(), found)
        };
        loop {
            // Armed before the look, so that a failover or a clock step after it still wakes us.
            let woken = self.woken.notified();
            tokio::pin!(woken);
            woken.as_mut().enable();
            let left = {
                let (mut state, now) = self.state();
                if state.incarnation.current() != incarnation {
                    return Err(StoreError::Unavailable(format!(
                        "{op}: connection reset by a failover of the store"
                    )));
                }
                let left = targets
                    .iter()
                    .filter_map(|t| state.locks.left(t, now))
                    .max();
                let Some(left) = left else {
                    let changed = targets
                        .iter()
                        .zip(&found)
                        .filter(|(t, row)| state.tables.rows.get(*t) != row.as_ref())
                        .map(|(t, _)| t.clone())
                        .collect();
                    let judged = Judged {
                        started,
                        now,
                        changed,
                    };
                    return Ok(write(&mut state, &targets, &judged));
                };
                left
            };
            let before = crate::seams::now();
            if before >= deadline {
                return Err(StoreError::Timeout { op, after: budget });
            }
            // The lock's end is by the store's clock, the wait by the runtime's: look again then,
            // or at once when a failover or a step of the store's clock may have ended the wait.
            tokio::select! {
                biased;
                () = &mut woken => {}
                () = tokio::time::sleep(left.min(deadline - before)) => {}
            }
        }
    }
}
