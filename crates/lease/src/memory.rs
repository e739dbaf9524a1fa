//! An in-memory [`LeaseStore`] for unit tests and simulations: the same protocol with
//! `tokio::time` as the "database clock" (so paused-time tests work), release notifications
//! within the process, and injectable faults: outages, clock steps, a failover that loses the
//! last commits ([`MemoryStore::fail_over`]) and rows locked by another transaction
//! ([`MemoryStore::lock_row`]), each as the PostgreSQL store meets it. The same calls in the
//! same order give the same answers.

pub mod faults;
mod incarnation;
mod locks;
mod tables;
#[cfg(test)]
mod tests;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::{Notify, broadcast, mpsc};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::history::{TermEnd, TermRecord};
use super::store::{
    Bid, CampaignedMany, DbMillis, Epoch, GrantSeen, GroupMember, GroupView, LeaseRecord,
    LeaseStore, ReleaseNotice, RenewRequest, Renewed, RenewedOne, StoreError,
};
use incarnation::Incarnation;
use leasehold_lease_core::queue::{Preempt, may_preempt};
use locks::{LOCKER_PID, RowLocks};
pub use tables::FAILOVER_CAN_LOSE;
use tables::{Journal, Released, Row, Tables};

/// How the store answers, for fault injection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Health {
    /// Every call works.
    Up = 0,
    /// Every call fails at once.
    Failing = 1,
    /// Every call hangs until its caller gives up.
    Hanging = 2,
}

/// The clock a memory store judges expiry by: the calling runtime's unless one is handed in (a
/// simulator's world clock, which no replica's own clock reads).
#[derive(Clone)]
pub struct StoreClock(Arc<dyn Fn() -> Instant + Send + Sync>);

impl StoreClock {
    /// A clock that reads `now`.
    pub fn new(now: impl Fn() -> Instant + Send + Sync + 'static) -> StoreClock {
        StoreClock(Arc::new(now))
    }
}

impl std::fmt::Debug for StoreClock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StoreClock")
    }
}

/// What the store's one lock guards: its tables, and what PostgreSQL keeps beside them.
#[derive(Debug)]
struct State {
    /// The tables as the last commit left them.
    tables: Tables,
    /// The tables after each of the last commits, for a failover to go back to.
    journal: Journal,
    /// The store's incarnation and the one campaigns recorded.
    incarnation: Incarnation,
    /// Rows other transactions keep locked.
    locks: RowLocks,
}

impl State {
    /// Records the tables as a call that wrote them left them: a commit a failover can lose.
    fn commit(&mut self) {
        self.journal.commit(&self.tables);
    }
}

/// The in-memory store. Share it between drivers with an `Arc` to simulate several replicas.
#[derive(Debug)]
pub struct MemoryStore {
    /// The clock expiry is judged by, before steps.
    clock: StoreClock,
    /// The tables and what goes with them.
    state: Mutex<State>,
    /// How calls answer ([`Health`]).
    health: AtomicU8,
    /// Release notifications (and handoff requests) to listeners.
    releases: broadcast::Sender<ReleaseNotice>,
    /// Where the store's clock counts from, for [`crate::DbMillis`] readings.
    origin: Instant,
    /// How far the store's clock has been stepped ahead of `tokio::time`.
    stepped: Mutex<Duration>,
    /// Calls made, answered or not ([`MemoryStore::calls`]).
    calls: AtomicU64,
    /// Wakes the calls waiting for a row lock when their wait may be over early: a failover, a
    /// step of the store's clock.
    woken: Notify,
    /// What the PostgreSQL store is opened with as its call timeout: its sessions wait for a row
    /// lock 9/10 of it at most ([`crate::server_budget`]).
    call_timeout: Duration,
    /// Told of every grant as it is written ([`MemoryStore::witness_grants`]).
    grant_witness: Option<GrantWitness>,
}

/// What [`MemoryStore::witness_grants`] calls: the lease, its new epoch, the waiter it was given
/// to, and how long the grant lasts by the store's clock.
#[derive(Clone)]
pub struct GrantWitness(Arc<GrantFn>);

/// The function a [`GrantWitness`] calls.
type GrantFn = dyn Fn(&str, Epoch, &str, Duration) + Send + Sync;

impl GrantWitness {
    /// A witness that calls `f`.
    pub fn new(f: impl Fn(&str, Epoch, &str, Duration) + Send + Sync + 'static) -> GrantWitness {
        GrantWitness(Arc::new(f))
    }
}

impl std::fmt::Debug for GrantWitness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("GrantWitness")
    }
}

impl Default for MemoryStore {
    fn default() -> Self {
        MemoryStore::with_clock(StoreClock::new(crate::seams::now))
    }
}

impl MemoryStore {
    /// An empty store whose clock is `clock`.
    pub fn with_clock(clock: StoreClock) -> Self {
        let origin = (clock.0)();
        MemoryStore {
            clock,
            state: Mutex::new(State {
                tables: Tables::default(),
                journal: Journal::new(Tables::default()),
                incarnation: Incarnation::default(),
                locks: RowLocks::default(),
            }),
            health: AtomicU8::new(Health::Up as u8),
            releases: broadcast::channel(1024).0,
            origin,
            stepped: Mutex::new(Duration::ZERO),
            calls: AtomicU64::new(0),
            woken: Notify::new(),
            call_timeout: crate::timing::Timing::default().store_timeout,
            grant_witness: None,
        }
    }

    /// Calls `witness` for every grant this store writes, as it writes it (under the store's
    /// lock): a simulator's history records the epoch handed to a waiter, which no caller's
    /// answer reports (the release or the campaign that wrote it was another replica's).
    pub fn witness_grants(mut self, witness: GrantWitness) -> Self {
        self.grant_witness = Some(witness);
        self
    }

    /// Tells the grant witness, if any, of a grant of `name` at `epoch` to `holder` for `lasts`.
    fn witness_grant(&self, name: &str, epoch: Epoch, holder: &str, lasts: Duration) {
        if let Some(witness) = &self.grant_witness {
            (witness.0)(name, epoch, holder, lasts);
        }
    }

    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// The store as if opened with `call_timeout` (the timing's `store_timeout`; by default the
    /// default timing's): a release, a forced release or a handoff request waits for a locked
    /// row 9/10 of it at most, as the PostgreSQL store's sessions do.
    pub fn with_call_timeout(mut self, call_timeout: Duration) -> Self {
        self.call_timeout = call_timeout;
        self
    }

    /// Makes every later call succeed, fail or hang.
    pub fn set_health(&self, health: Health) {
        self.health.store(health as u8, Ordering::SeqCst);
    }

    /// How many calls the store has been made so far, answered or not: for tests that bound how
    /// often something reads it.
    pub fn calls(&self) -> u64 {
        self.calls.load(Ordering::SeqCst)
    }

    /// Steps the store's clock forward by `by`, as `date -s` or an NTP step would on a database
    /// server: every lease expires `by` sooner than its holder reckons.
    pub fn step_clock(&self, by: Duration) {
        *self.stepped.lock().unwrap_or_else(|p| p.into_inner()) += by;
        self.woken.notify_waiters();
    }

    /// Fails over to a standby that missed the last `lose_last` commits (every call that wrote
    /// something is one; at most [`FAILOVER_CAN_LOSE`]: a larger number loses all the store
    /// keeps), as a promotion from asynchronous replication does: the tables go back to how they
    /// were before them, the store changes incarnation (docs/ARCHITECTURE.md §9.2), every row
    /// lock ends and a call waiting for one fails, and release listeners are told to campaign
    /// for everything ([`ReleaseNotice::Resubscribed`]), as after a lost `LISTEN` connection.
    pub fn fail_over(&self, lose_last: usize) {
        let (mut state, _) = self.state();
        state.tables = state.journal.lose_last(lose_last);
        state.incarnation.fail_over();
        state.locks.clear();
        drop(state);
        self.woken.notify_waiters();
        let _ = self.releases.send(ReleaseNotice::Resubscribed);
    }

    /// Makes another transaction keep the row of lease `name` locked for `for_` by the store's
    /// clock, with a lock every write of the row conflicts with (a fenced write's `FOR SHARE`, an
    /// operator's `FOR UPDATE`): campaigns skip the row while it is free and name it
    /// ([`CampaignedMany::locked`]), batched renewals report it busy ([`Renewed::busy`]), and a
    /// renewal of it alone, a release, a forced release or a handoff request waits for it, at
    /// most the session's lock timeout. Locking a locked row again keeps it locked until the
    /// later end. A lease without a row has nothing to lock, and stays unlocked.
    pub fn lock_row(&self, name: &str, for_: Duration) {
        let (mut state, now) = self.state();
        if state.tables.rows.contains_key(name) {
            state.locks.lock(name, now + for_);
        }
    }

    /// The store's clock: its [`StoreClock`] plus the steps.
    fn now(&self) -> Instant {
        (self.clock.0)() + *self.stepped.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A reading of the store's clock.
    fn db_now(&self, now: Instant) -> Option<DbMillis> {
        i64::try_from((now - self.origin).as_millis()).ok()
    }

    async fn gate(&self, op: &'static str) -> Result<(), StoreError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        match self.health.load(Ordering::SeqCst) {
            0 => Ok(()),
            1 => Err(StoreError::Unavailable(format!("{op}: injected outage"))),
            _ => std::future::pending().await,
        }
    }

    /// The state, locked, and the store's clock read under the lock, as a database reads it when
    /// the statement runs: read before, a call that waited for another would judge expiry (and
    /// report waits) by a time already past.
    fn state(&self) -> (std::sync::MutexGuard<'_, State>, Instant) {
        // Poisoning is ignored: a call cut short by a panic (a test's) leaves what it wrote so
        // far, as a crash between two statements would, and the store goes on from there.
        let state = self
            .state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        (state, self.now())
    }

    fn record(name: &str, row: &Row, now: Instant) -> LeaseRecord {
        let left = if row.expires_at > now {
            i64::try_from((row.expires_at - now).as_millis()).unwrap_or(i64::MAX)
        } else {
            -i64::try_from((now - row.expires_at).as_millis()).unwrap_or(i64::MAX)
        };
        LeaseRecord {
            name: name.to_string(),
            holder: row.holder.clone(),
            epoch: row.epoch,
            ttl_ms: i64::try_from(row.ttl.as_millis()).unwrap_or(i64::MAX),
            expires_in_ms: left,
        }
    }

    /// What a waiter of `place` may do about the holder of `name` at `now`; when it may ask now,
    /// asks (the row's handoff request, as an operator's `leases handoff`, and the time of this
    /// preemption, which keeps the next one a `preempt_after` away).
    fn preempt(
        &self,
        tables: &mut Tables,
        name: &str,
        holder: &str,
        place: leasehold_lease_core::queue::Place,
        now: Instant,
    ) -> Preempt<Instant> {
        let joined = tables
            .lines
            .get(name)
            .and_then(|line| line.get(holder))
            .map(|w| w.waiter.joined);
        let (Some(joined), Some(row)) = (joined, tables.rows.get_mut(name)) else {
            return Preempt::Never;
        };
        // A request of this term already (an operator's, maybe naming a replica): not replaced.
        let asked = row.handoff.as_ref().is_some_and(|(e, _)| *e == row.epoch);
        if row.expires_at <= now || row.holder == holder || asked {
            return Preempt::Never;
        }
        let preempt = may_preempt(&place, joined, row.priority, row.preempted, now);
        if preempt == Preempt::Now {
            row.handoff = Some((row.epoch, None));
            row.preempted = Some(now);
        }
        preempt
    }

    /// Tells release listeners of each lease of `names`.
    fn notify_released(&self, names: &[String]) {
        for name in names {
            let _ = self.releases.send(ReleaseNotice::Released(name.clone()));
        }
    }
}

#[async_trait]
impl LeaseStore for MemoryStore {
    fn backend(&self) -> &'static str {
        "memory"
    }

    async fn campaign_in_line(
        &self,
        holder: &str,
        bids: &[Bid],
        ttl: Duration,
    ) -> Result<CampaignedMany, StoreError> {
        // As the PostgreSQL store: no statement for no lease, so no incarnation seen by it either.
        if bids.is_empty() {
            return Ok(CampaignedMany::default());
        }
        self.gate("campaign").await?;
        super::store::ttl_ms(ttl)?;
        let (mut state, now) = self.state();
        let mut out = CampaignedMany {
            db_now: self.db_now(now),
            ..CampaignedMany::default()
        };
        let State {
            tables,
            incarnation,
            locks,
            ..
        } = &mut *state;
        let max_epoch = tables
            .rows
            .values()
            .map(|r| r.epoch)
            .max()
            .unwrap_or_default();
        let seen_first = incarnation.see(max_epoch, now)?;
        let mut wrote = seen_first;
        let mut asked = BTreeSet::new();
        let mut notices = Vec::new();
        for bid in bids.iter().filter(|b| asked.insert(b.name.as_str())) {
            let name = &bid.name;
            // This holder's already (given to it and not taken up, or won by a campaign whose
            // answer it missed): reported, and out of the line.
            if let Some(row) = tables.rows.get(name)
                && row.holder == holder
                && row.expires_at > now
            {
                out.granted
                    .push((name.clone(), row.epoch, row.expires_at - now));
                tables.leave_line(name, holder);
                wrote = true;
                continue;
            }
            if let Some(line) = bid.line {
                tables.join_line(name, holder, line, ttl, now);
                wrote = true;
            }
            let row = tables.rows.get(name);
            // The hold-off of a failover, then the holder's expiry or a reservation for another
            // replica: the wait is whichever ends later.
            let hold = row.map_or(ttl, |r| r.ttl.max(ttl));
            let held_off = incarnation.held_off(seen_first, hold, now);
            out.held_off_for = out.held_off_for.max(held_off);
            let until_free = row
                .map(|r| r.free_at(holder))
                .filter(|at| *at > now)
                .map(|at| at - now);
            if until_free.is_some() || held_off.is_some() {
                let mut wait = until_free.max(held_off);
                if held_off.is_none()
                    && let Some(line) = bid.line
                {
                    let preempt = self.preempt(tables, name, holder, line.place, now);
                    match preempt {
                        Preempt::Now => {
                            wrote = true;
                            out.asked.push(name.clone());
                            if let Some(row) = tables.rows.get(name) {
                                notices.push(ReleaseNotice::HandoffRequested {
                                    lease: name.clone(),
                                    epoch: row.epoch,
                                });
                            }
                        }
                        Preempt::At(at) => wait = wait.map(|w| w.min(at - now)),
                        Preempt::Never => {}
                    }
                }
                out.lost.push((name.clone(), wait));
                continue;
            }
            // Free, but another transaction keeps its row locked: left out, not waited for.
            if locks.holds(name, now) {
                out.locked.push((name.clone(), vec![LOCKER_PID]));
                out.lost.push((name.clone(), None));
                continue;
            }
            // Free: this holder's if a handoff reserved it for it, or if nobody alive stands
            // before it in line; else the head's.
            let reserved_here = row
                .and_then(|r| r.reserved.as_ref())
                .is_some_and(|(to, until)| {
                    *until > now && crate::store::is_reserved_for(to, holder)
                });
            let head = match reserved_here {
                true => None,
                false => tables.head(name, now, "", None),
            };
            match head {
                Some(head) if head.waiter.holder != holder => {
                    let epoch = tables.grant(name, &head, incarnation.floor(), now);
                    self.witness_grant(name, epoch, &head.waiter.holder, head.line.alive_for);
                    notices.push(ReleaseNotice::Granted {
                        lease: name.clone(),
                        holder: head.waiter.holder.clone(),
                        epoch,
                    });
                    out.lost.push((name.clone(), Some(head.line.alive_for)));
                    out.gave.push(name.clone());
                }
                _ => {
                    let epoch = tables.win(name, holder, ttl, incarnation.floor(), now);
                    if let (Some(line), Some(row)) = (bid.line, tables.rows.get_mut(name)) {
                        row.priority = line.place.priority;
                    }
                    out.won.push((name.clone(), epoch));
                }
            }
            wrote = true;
        }
        if wrote {
            state.commit();
        }
        drop(state);
        for notice in notices {
            let _ = self.releases.send(notice);
        }
        Ok(out)
    }

    async fn read_grant(
        &self,
        name: &str,
        holder: &str,
        epoch: Epoch,
    ) -> Result<GrantSeen, StoreError> {
        self.gate("read grant").await?;
        let (state, now) = self.state();
        let left = state
            .tables
            .rows
            .get(name)
            .filter(|row| row.held_by(holder, epoch, now))
            .map(|row| row.expires_at - now);
        Ok(GrantSeen {
            left,
            db_now: self.db_now(now),
        })
    }

    async fn renew(&self, holder: &str, leases: &[RenewRequest]) -> Result<Renewed, StoreError> {
        self.gate("renew").await?;
        let (mut state, now) = self.state();
        let State { tables, locks, .. } = &mut *state;
        let mut renewed = Renewed {
            db_now: self.db_now(now),
            ..Renewed::default()
        };
        for req in leases {
            let Some(row) = tables.rows.get_mut(&req.name) else {
                continue;
            };
            // A planted bug of the simulator: a renewal that lands whoever holds the row.
            let unscoped = crate::buggify::planted(crate::buggify::Planted::RenewalUnscoped)
                && row.expires_at > now;
            if !unscoped && !row.held_by(holder, req.epoch, now) {
                continue;
            }
            // Still ours, but another transaction keeps it locked: for a renewal of its own.
            if locks.holds(&req.name, now) {
                renewed.busy.push(req.name.clone());
                continue;
            }
            row.expires_at = now + req.ttl;
            row.ttl = req.ttl;
            row.granted = false;
            renewed.landed.push(req.name.clone());
            if row.handoff.as_ref().is_some_and(|(e, _)| *e == row.epoch) {
                renewed.handoffs.push(req.name.clone());
            }
        }
        if !renewed.landed.is_empty() {
            state.commit();
        }
        Ok(renewed)
    }

    async fn renew_one(
        &self,
        holder: &str,
        lease: &RenewRequest,
        timeout: Duration,
    ) -> Result<RenewedOne, StoreError> {
        self.gate("renew").await?;
        super::store::ttl_ms(lease.ttl)?;
        let name = lease.name.as_str();
        let targets = |tables: &Tables, now| match tables.rows.get(name) {
            Some(row) if row.held_by(holder, lease.epoch, now) => vec![name.to_string()],
            _ => Vec::new(),
        };
        let write = |state: &mut State, targets: &[String], judged: &locks::Judged| {
            let at = judged.at(name);
            let mut renewed = RenewedOne {
                landed: false,
                db_now: self.db_now(judged.now()),
                handoff: false,
            };
            if let Some(row) = state.tables.rows.get_mut(name)
                && !targets.is_empty()
                && row.held_by(holder, lease.epoch, at)
            {
                row.expires_at = at + lease.ttl;
                row.ttl = lease.ttl;
                row.granted = false;
                renewed.landed = true;
                renewed.handoff = row.handoff.as_ref().is_some_and(|(e, _)| *e == row.epoch);
                state.commit();
            }
            renewed
        };
        // It waits for the row's lock, as PostgreSQL's does, 9/10 of its caller's timeout at most.
        let budget = crate::server_budget(timeout);
        self.write_rows("renew", budget, targets, write).await
    }

    async fn release_giving(
        &self,
        holder: &str,
        leases: &[(String, Epoch)],
    ) -> Result<Vec<super::store::Released>, StoreError> {
        self.release_rows("release", holder, leases).await
    }

    async fn force_release(&self, name: &str) -> Result<Option<(String, Epoch)>, StoreError> {
        self.gate("force release").await?;
        let targets = |tables: &Tables, now| match tables.rows.get(name) {
            Some(row) if row.expires_at > now => vec![name.to_string()],
            _ => Vec::new(),
        };
        let write = |state: &mut State, targets: &[String], judged: &locks::Judged| {
            let at = judged.at(name);
            let row = state.tables.rows.get_mut(name)?;
            if targets.is_empty() || row.expires_at <= at {
                return None;
            }
            row.expires_at = at;
            let epoch = row.epoch;
            row.close_term(epoch, at, TermEnd::Forced);
            // A forced release ends any handoff under way: nobody is reserved the lease.
            row.handoff = None;
            row.reserved = None;
            let released = (row.holder.clone(), epoch);
            state.commit();
            Some(released)
        };
        let budget = crate::server_budget(self.call_timeout);
        let released = self
            .write_rows("force release", budget, targets, write)
            .await?;
        if released.is_some() {
            self.notify_released(&[name.to_string()]);
        }
        Ok(released)
    }

    async fn request_handoff(
        &self,
        name: &str,
        to: Option<&str>,
    ) -> Result<Option<LeaseRecord>, StoreError> {
        self.gate("request handoff").await?;
        let targets = |tables: &Tables, now| match tables.rows.get(name) {
            Some(row) if row.expires_at > now => vec![name.to_string()],
            _ => Vec::new(),
        };
        let write = |state: &mut State, targets: &[String], judged: &locks::Judged| {
            let row = state.tables.rows.get_mut(name)?;
            if targets.is_empty() || row.expires_at <= judged.at(name) {
                return None;
            }
            row.handoff = Some((row.epoch, to.map(str::to_string)));
            // Its time left as of the statement's start, PostgreSQL's `now()`.
            let record = Self::record(name, row, judged.started());
            state.commit();
            Some(record)
        };
        let budget = crate::server_budget(self.call_timeout);
        let asked = self
            .write_rows("request handoff", budget, targets, write)
            .await?;
        if let Some(record) = &asked {
            let _ = self.releases.send(ReleaseNotice::HandoffRequested {
                lease: name.to_string(),
                epoch: record.epoch,
            });
        }
        Ok(asked)
    }

    async fn get(&self, names: &[String]) -> Result<Vec<LeaseRecord>, StoreError> {
        self.gate("get").await?;
        let (state, now) = self.state();
        Ok(names
            .iter()
            .filter_map(|n| {
                state
                    .tables
                    .rows
                    .get(n)
                    .map(|row| Self::record(n, row, now))
            })
            .collect())
    }

    async fn list(&self, after: Option<&str>, limit: u32) -> Result<Vec<LeaseRecord>, StoreError> {
        self.gate("list").await?;
        let (state, now) = self.state();
        let rows = &state.tables.rows;
        let range = match after {
            Some(a) => {
                rows.range::<str, _>((std::ops::Bound::Excluded(a), std::ops::Bound::Unbounded))
            }
            None => rows.range::<str, _>(..),
        };
        Ok(range
            .take(limit as usize)
            .map(|(n, row)| Self::record(n, row, now))
            .collect())
    }

    async fn terms(&self, names: &[String], per_lease: u32) -> Result<Vec<TermRecord>, StoreError> {
        self.gate("terms").await?;
        let (state, now) = self.state();
        let mut names: Vec<&String> = names.iter().collect();
        names.sort();
        names.dedup();
        Ok(names
            .into_iter()
            .filter_map(|name| state.tables.rows.get(name).map(|row| (name, row)))
            .flat_map(|(name, row)| {
                // The row's own term has ended once the row has expired, closed or not yet
                // (a release closes it; a silence leaves it to the next campaign).
                let mut terms = row.clone();
                if row.expires_at <= now {
                    terms.close_term(row.epoch, row.expires_at, TermEnd::Expired);
                }
                terms
                    .terms
                    .into_iter()
                    .rev()
                    .take(per_lease as usize)
                    .map(move |t| TermRecord {
                        lease: name.clone(),
                        term: t.at(now),
                    })
            })
            .collect())
    }

    async fn heartbeat(
        &self,
        group: &str,
        member: &str,
        shards: &[String],
        ttl: Duration,
    ) -> Result<GroupView, StoreError> {
        self.gate("heartbeat").await?;
        super::store::ttl_ms(ttl)?;
        let count = u32::try_from(super::store::shard_count(shards)?).ok();
        let (mut state, now) = self.state();
        let Tables { rows, members, .. } = &mut state.tables;
        members.retain(|(g, m), (_, expires, _)| g != group || m == member || *expires > now);
        let key = (group.to_string(), member.to_string());
        let joined = match members.get(&key) {
            Some((joined, expires, _)) if *expires > now => *joined,
            _ => now,
        };
        members.insert(key, (joined, now + ttl, count));
        let live = members
            .iter()
            .filter(|((g, _), (_, expires, _))| g == group && *expires > now)
            .map(|((_, m), (joined, expires, count))| GroupMember {
                id: m.clone(),
                member_for: now - *joined,
                expires_in: *expires - now,
                shards: *count,
            })
            .collect();
        let mut holders: Vec<(String, String)> = shards
            .iter()
            .filter_map(|s| {
                rows.get(s)
                    .filter(|r| r.expires_at > now)
                    .map(|r| (s.clone(), r.holder.clone()))
            })
            .collect();
        holders.sort();
        state.commit();
        Ok(GroupView {
            members: live,
            holders,
            db_now: self.db_now(now),
        })
    }

    async fn members(&self) -> Result<Vec<super::store::MemberRecord>, StoreError> {
        self.gate("members").await?;
        let (state, now) = self.state();
        let ms = |d: Duration| i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
        Ok(state
            .tables
            .members
            .iter()
            .filter(|(_, (_, expires, _))| *expires > now)
            .map(
                |((group, member), (joined, expires, shards))| super::store::MemberRecord {
                    group: group.clone(),
                    member: member.clone(),
                    member_for_ms: ms(now - *joined),
                    expires_in_ms: ms(*expires - now),
                    shards: *shards,
                },
            )
            .collect())
    }

    async fn leave(&self, groups: &[String], member: &str) -> Result<(), StoreError> {
        self.gate("leave").await?;
        let (mut state, _) = self.state();
        let members = &mut state.tables.members;
        let before = members.len();
        members.retain(|(g, m), _| m != member || !groups.contains(g));
        if members.len() != before {
            state.commit();
        }
        Ok(())
    }

    async fn line(&self, names: &[String]) -> Result<Vec<super::store::WaiterRecord>, StoreError> {
        self.gate("line").await?;
        let (state, now) = self.state();
        let ms = |d: Duration| i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
        let mut out = Vec::new();
        let mut names: Vec<&String> = names.iter().collect();
        names.sort();
        names.dedup();
        for name in names {
            let Some(waiters) = state.tables.lines.get(name) else {
                continue;
            };
            let holder = state
                .tables
                .rows
                .get(name)
                .filter(|r| r.expires_at > now)
                .map(|r| r.holder.as_str());
            let mut live: Vec<&tables::WaiterRow> = waiters
                .values()
                .filter(|w| w.waiter.alive_until > now && Some(w.waiter.holder.as_str()) != holder)
                .collect();
            live.sort_by(|a, b| leasehold_lease_core::queue::ahead(&a.waiter, &b.waiter));
            out.extend(live.into_iter().map(|w| super::store::WaiterRecord {
                lease: name.clone(),
                holder: w.waiter.holder.clone(),
                priority: w.waiter.priority,
                waited_ms: ms(now.saturating_duration_since(w.waiter.joined)),
                alive_for_ms: ms(w.waiter.alive_until.saturating_duration_since(now)),
            }));
        }
        Ok(out)
    }

    async fn ping(&self) -> Result<(), StoreError> {
        self.gate("ping").await
    }

    fn listen_releases(
        &self,
        shutdown: CancellationToken,
    ) -> Option<mpsc::Receiver<ReleaseNotice>> {
        let mut sub = self.releases.subscribe();
        let (tx, rx) = mpsc::channel(64);
        tokio::spawn(async move {
            loop {
                let notice = tokio::select! {
                    biased;
                    _ = shutdown.cancelled() => return,
                    r = sub.recv() => match r {
                        Ok(notice) => notice,
                        Err(broadcast::error::RecvError::Lagged(_)) => ReleaseNotice::Resubscribed,
                        Err(broadcast::error::RecvError::Closed) => return,
                    },
                };
                if tx.send(notice).await.is_err() {
                    return;
                }
            }
        });
        Some(rx)
    }
}

impl MemoryStore {
    /// Releases each of `leases` that `holder` holds at its epoch, in one statement: waits for
    /// the locks on those rows (the session's lock timeout at most) and notifies each release.
    async fn release_rows(
        &self,
        op: &'static str,
        holder: &str,
        leases: &[(String, Epoch)],
    ) -> Result<Vec<super::store::Released>, StoreError> {
        self.gate(op).await?;
        let targets = |tables: &Tables, now| {
            leases
                .iter()
                .filter(|(name, epoch)| {
                    tables
                        .rows
                        .get(name)
                        .is_some_and(|row| row.held_by(holder, *epoch, now))
                })
                .map(|(name, _)| name.clone())
                .collect::<BTreeSet<_>>()
                .into_iter()
                .collect()
        };
        let write = |state: &mut State, targets: &[String], judged: &locks::Judged| {
            let mut released = Vec::new();
            for (name, epoch) in leases.iter().filter(|(name, _)| targets.contains(name)) {
                let at = judged.at(name);
                let hold = state
                    .tables
                    .rows
                    .get(name)
                    .map(|r| r.ttl)
                    .unwrap_or_default();
                let floor = state
                    .incarnation
                    .settled(hold, at)
                    .then(|| state.incarnation.floor());
                if let Some(done) = state.tables.release(name, holder, *epoch, at, floor) {
                    if let Released::Granted {
                        holder,
                        epoch,
                        lasts,
                    } = &done
                    {
                        self.witness_grant(name, *epoch, holder, *lasts);
                    }
                    released.push((name.clone(), done));
                }
            }
            if !released.is_empty() {
                state.commit();
            }
            released
        };
        let budget = crate::server_budget(self.call_timeout);
        let released = self.write_rows(op, budget, targets, write).await?;
        for (name, done) in &released {
            let notice = match done {
                Released::Freed => ReleaseNotice::Released(name.clone()),
                Released::Granted { holder, epoch, .. } => ReleaseNotice::Granted {
                    lease: name.clone(),
                    holder: holder.clone(),
                    epoch: *epoch,
                },
            };
            let _ = self.releases.send(notice);
        }
        Ok(released
            .into_iter()
            .map(|(name, done)| super::store::Released {
                name,
                given_to: match done {
                    Released::Granted { holder, .. } => Some(holder),
                    Released::Freed => None,
                },
            })
            .collect())
    }
}
