//! An in-memory [`LeaseStore`] for unit tests and simulations: the same protocol with
//! `tokio::time` as the "database clock" (so paused-time tests work), release notifications
//! within the process, and injectable faults: outages, clock steps and a failover that loses the
//! last commits ([`MemoryStore::fail_over`]), as the PostgreSQL store meets it. The same calls in
//! the same order give the same answers.

mod incarnation;
mod tables;
#[cfg(test)]
mod tests;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::{broadcast, mpsc};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::history::{TermEnd, TermRecord};
use super::store::{
    CampaignedMany, DbMillis, Epoch, GroupMember, GroupView, LeaseRecord, LeaseStore,
    ReleaseNotice, RenewRequest, Renewed, StoreError,
};
use incarnation::Incarnation;
pub use tables::FAILOVER_CAN_LOSE;
use tables::{Journal, Row, Tables};

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
            }),
            health: AtomicU8::new(Health::Up as u8),
            releases: broadcast::channel(1024).0,
            origin,
            stepped: Mutex::new(Duration::ZERO),
            calls: AtomicU64::new(0),
        }
    }

    /// An empty store.
    pub fn new() -> Self {
        Self::default()
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
    }

    /// Fails over to a standby that missed the last `lose_last` commits (every call that wrote
    /// something is one; at most [`FAILOVER_CAN_LOSE`]: a larger number loses all the store
    /// keeps), as a promotion from asynchronous replication does: the tables go back to how they
    /// were before them, the store changes incarnation (docs/ARCHITECTURE.md §9.2), and release
    /// listeners are told to campaign for everything ([`ReleaseNotice::Resubscribed`]), as after
    /// a lost `LISTEN` connection.
    pub fn fail_over(&self, lose_last: usize) {
        let (mut state, _) = self.state();
        state.tables = state.journal.lose_last(lose_last);
        state.incarnation.fail_over();
        drop(state);
        let _ = self.releases.send(ReleaseNotice::Resubscribed);
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

    async fn campaign_many(
        &self,
        holder: &str,
        names: &[String],
        ttl: Duration,
    ) -> Result<CampaignedMany, StoreError> {
        // As the PostgreSQL store: no statement for no lease, so no incarnation seen by it either.
        if names.is_empty() {
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
            ..
        } = &mut *state;
        let max_epoch = tables.rows.values().map(|r| r.epoch).max().unwrap_or(0);
        let seen_first = incarnation.see(max_epoch, now)?;
        let mut wrote = seen_first;
        let mut asked = BTreeSet::new();
        for name in names.iter().filter(|n| asked.insert(n.as_str())) {
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
                out.lost.push((name.clone(), until_free.max(held_off)));
                continue;
            }
            let epoch = tables.win(name, holder, ttl, incarnation.floor(), now);
            out.won.push((name.clone(), epoch));
            wrote = true;
        }
        if wrote {
            state.commit();
        }
        Ok(out)
    }

    async fn renew(&self, holder: &str, leases: &[RenewRequest]) -> Result<Renewed, StoreError> {
        self.gate("renew").await?;
        let (mut state, now) = self.state();
        let tables = &mut state.tables;
        let mut renewed = Renewed {
            db_now: self.db_now(now),
            ..Renewed::default()
        };
        for req in leases {
            let Some(row) = tables.rows.get_mut(&req.name) else {
                continue;
            };
            if !row.held_by(holder, req.epoch, now) {
                continue;
            }
            row.expires_at = now + req.ttl;
            row.ttl = req.ttl;
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

    async fn release(&self, name: &str, holder: &str, epoch: Epoch) -> Result<bool, StoreError> {
        self.gate("release").await?;
        let (mut state, now) = self.state();
        let released = state.tables.release(name, holder, epoch, now);
        if released {
            state.commit();
        }
        drop(state);
        if released {
            self.notify_released(&[name.to_string()]);
        }
        Ok(released)
    }

    async fn force_release(&self, name: &str) -> Result<Option<(String, Epoch)>, StoreError> {
        self.gate("force release").await?;
        let (mut state, now) = self.state();
        let released = match state.tables.rows.get_mut(name) {
            Some(row) if row.expires_at > now => {
                row.expires_at = now;
                let epoch = row.epoch;
                row.close_term(epoch, now, TermEnd::Forced);
                // A forced release ends any handoff under way: nobody is reserved the lease.
                row.handoff = None;
                row.reserved = None;
                Some((row.holder.clone(), epoch))
            }
            _ => None,
        };
        if released.is_some() {
            state.commit();
        }
        drop(state);
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
        let (mut state, now) = self.state();
        let asked = match state.tables.rows.get_mut(name) {
            Some(row) if row.expires_at > now => {
                row.handoff = Some((row.epoch, to.map(str::to_string)));
                Some(Self::record(name, row, now))
            }
            _ => None,
        };
        if asked.is_some() {
            state.commit();
        }
        drop(state);
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
        let Tables { rows, members } = &mut state.tables;
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
