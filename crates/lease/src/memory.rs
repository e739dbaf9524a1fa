//! An in-memory [`LeaseStore`] for unit tests: the same protocol with `tokio::time` as the
//! "database clock" (so paused-time tests work), release notifications within the process, and
//! injectable outages, clock steps and row locks.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::{broadcast, mpsc};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::history::{PRUNE_EVERY, RecordedTerm, TERMS_KEPT, TermEnd, TermRecord};
use super::store::{
    CampaignedMany, DbMillis, Epoch, GroupMember, GroupView, LeaseRecord, LeaseStore,
    ReleaseNotice, RenewRequest, Renewed, RenewedOne, StoreError,
};

#[derive(Debug, Clone)]
struct Row {
    holder: String,
    epoch: Epoch,
    ttl: Duration,
    expires_at: Instant,
    /// The lease's recorded terms, oldest first, at most [`TERMS_KEPT`].
    terms: Vec<MemoryTerm>,
    /// An operator's handoff request: the epoch whose holder is asked, and the replica to hand
    /// over to, if any.
    handoff: Option<(Epoch, Option<String>)>,
    /// After a release that a handoff request named a replica for: that replica, and until when
    /// only it may win the lease.
    reserved: Option<(String, Instant)>,
}

/// A lease group member's row: when it joined, when it expires, its shard count.
type MemberRow = (Instant, Instant, Option<u32>);

/// A term as the in-memory store records it, by its clock.
#[derive(Debug, Clone)]
struct MemoryTerm {
    epoch: Epoch,
    holder: String,
    started: Instant,
    ended: Option<(Instant, TermEnd)>,
}

impl MemoryTerm {
    fn at(&self, now: Instant) -> RecordedTerm {
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

/// Closes `row`'s open term `epoch` as `end` at `at`.
fn close_term(row: &mut Row, epoch: Epoch, at: Instant, end: TermEnd) {
    for term in row
        .terms
        .iter_mut()
        .filter(|t| t.epoch == epoch && t.ended.is_none())
    {
        term.ended = Some((at, end));
    }
}

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

/// The in-memory store. Share it between drivers with an `Arc` to simulate several replicas.
#[derive(Debug)]
pub struct MemoryStore {
    /// The clock expiry is judged by, before steps.
    clock: StoreClock,
    /// The lease rows by name.
    rows: Mutex<BTreeMap<String, Row>>,
    /// How calls answer ([`Health`]).
    health: AtomicU8,
    /// Release notifications (and handoff requests) to listeners.
    releases: broadcast::Sender<ReleaseNotice>,
    /// Where the store's clock counts from, for [`crate::DbMillis`] readings.
    origin: Instant,
    /// How far the store's clock has been stepped ahead of `tokio::time`.
    stepped: Mutex<Duration>,
    /// Lease group members by (group, member): when each joined, when it expires, its shard count.
    members: Mutex<BTreeMap<(String, String), MemberRow>>,
    /// Calls made, answered or not ([`MemoryStore::calls`]).
    calls: AtomicU64,
    /// Rows another session holds locked, until when ([`MemoryStore::lock_row`]).
    locked: Mutex<BTreeMap<String, Instant>>,
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
            rows: Mutex::new(BTreeMap::new()),
            health: AtomicU8::new(Health::Up as u8),
            releases: broadcast::channel(1024).0,
            origin,
            stepped: Mutex::new(Duration::ZERO),
            members: Mutex::new(BTreeMap::new()),
            calls: AtomicU64::new(0),
            locked: Mutex::new(BTreeMap::new()),
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

    /// Has another session hold `name`'s row locked for `duration` from now, as a transaction
    /// left open would on PostgreSQL: meanwhile a batched renewal reports the lease busy, and a
    /// lone renewal waits for the lock. Other calls do not wait for it here.
    pub fn lock_row(&self, name: &str, duration: Duration) {
        let until = self.now() + duration;
        let mut locked = self.locked.lock().unwrap_or_else(|p| p.into_inner());
        locked.insert(name.to_string(), until);
    }

    /// Until when `name`'s row is locked, if it is now.
    fn locked_until(&self, name: &str) -> Option<Instant> {
        let now = self.now();
        let locked = self.locked.lock().unwrap_or_else(|p| p.into_inner());
        locked.get(name).copied().filter(|&until| until > now)
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

    /// The rows, locked, and the store's clock read under the lock, as a database reads it when
    /// the statement runs: read before, a call that waited for another would judge expiry (and
    /// report waits) by a time already past.
    fn rows(&self) -> (std::sync::MutexGuard<'_, BTreeMap<String, Row>>, Instant) {
        // A panic while holding the lock cannot leave a row half-written: every update is one assignment.
        let rows = self
            .rows
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        (rows, self.now())
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
        self.gate("campaign").await?;
        super::store::ttl_ms(ttl)?;
        let (mut rows, now) = self.rows();
        let mut out = CampaignedMany {
            db_now: self.db_now(now),
            ..CampaignedMany::default()
        };
        for name in names {
            let (epoch, mut terms) = match rows.get_mut(name) {
                Some(row) if row.expires_at > now => {
                    out.lost.push((name.clone(), Some(row.expires_at - now)));
                    continue;
                }
                // Reserved for another replica by a handoff: free for it alone until then.
                Some(Row {
                    reserved: Some((replica, until)),
                    ..
                }) if *until > now && !super::store::is_reserved_for(replica, holder) => {
                    out.lost.push((name.clone(), Some(*until - now)));
                    continue;
                }
                Some(row) => {
                    let (epoch, expired) = (row.epoch, row.expires_at);
                    close_term(row, epoch, expired, TermEnd::Expired);
                    (epoch + 1, std::mem::take(&mut row.terms))
                }
                None => (1, Vec::new()),
            };
            terms.push(MemoryTerm {
                epoch,
                holder: holder.to_string(),
                started: now,
                ended: None,
            });
            if epoch % i64::from(PRUNE_EVERY) == 0 {
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
            rows.insert(name.clone(), row);
            out.won.push((name.clone(), epoch));
        }
        Ok(out)
    }

    async fn renew(&self, holder: &str, leases: &[RenewRequest]) -> Result<Renewed, StoreError> {
        self.gate("renew").await?;
        let (mut rows, now) = self.rows();
        let mut landed = Vec::new();
        let mut busy = Vec::new();
        let mut handoffs = Vec::new();
        for req in leases {
            if self.locked_until(&req.name).is_some() {
                busy.push(req.name.clone());
                continue;
            }
            let unscoped = crate::buggify::planted(crate::buggify::Planted::RenewalUnscoped);
            if let Some(row) = rows.get_mut(&req.name)
                && (unscoped || row.holder == holder && row.epoch == req.epoch)
                && row.expires_at > now
            {
                row.expires_at = now + req.ttl;
                row.ttl = req.ttl;
                landed.push(req.name.clone());
                if row.handoff.as_ref().is_some_and(|(e, _)| *e == row.epoch) {
                    handoffs.push(req.name.clone());
                }
            }
        }
        Ok(Renewed {
            landed,
            busy,
            db_now: self.db_now(now),
            handoffs,
        })
    }

    async fn renew_one(
        &self,
        holder: &str,
        lease: &RenewRequest,
        timeout: Duration,
    ) -> Result<RenewedOne, StoreError> {
        // Waits for the row lock no longer than `timeout`, as PostgreSQL's `lock_timeout` does.
        // Waited in durations: the lock's end is on the store's clock, the sleep on the caller's.
        let mut waited = Duration::ZERO;
        while let Some(until) = self.locked_until(&lease.name) {
            let left = until.saturating_duration_since(self.now());
            if waited + left > timeout {
                tokio::time::sleep(timeout.saturating_sub(waited)).await;
                return Err(StoreError::Timeout {
                    op: "renew",
                    after: timeout,
                });
            }
            tokio::time::sleep(left).await;
            waited += left;
        }
        let renewed = self.renew(holder, std::slice::from_ref(lease)).await?;
        Ok(RenewedOne {
            landed: renewed.landed.contains(&lease.name),
            db_now: renewed.db_now,
            handoff: renewed.handoffs.contains(&lease.name),
        })
    }

    async fn release(&self, name: &str, holder: &str, epoch: Epoch) -> Result<bool, StoreError> {
        self.gate("release").await?;
        let (mut rows, now) = self.rows();
        let released = match rows.get_mut(name) {
            Some(row) if row.holder == holder && row.epoch == epoch && row.expires_at > now => {
                row.expires_at = now;
                close_term(row, epoch, now, TermEnd::Released);
                // A handoff to a named replica reserves the lease for it for one ttl.
                row.reserved = match row.handoff.take() {
                    Some((asked, Some(to))) if asked == epoch => Some((to, now + row.ttl)),
                    _ => None,
                };
                true
            }
            _ => false,
        };
        if released {
            let _ = self
                .releases
                .send(ReleaseNotice::Released(name.to_string()));
        }
        Ok(released)
    }

    async fn force_release(&self, name: &str) -> Result<Option<(String, Epoch)>, StoreError> {
        self.gate("force release").await?;
        let (mut rows, now) = self.rows();
        let released = match rows.get_mut(name) {
            Some(row) if row.expires_at > now => {
                row.expires_at = now;
                let epoch = row.epoch;
                close_term(row, epoch, now, TermEnd::Forced);
                row.handoff = None;
                row.reserved = None;
                Some((row.holder.clone(), epoch))
            }
            _ => None,
        };
        if released.is_some() {
            let _ = self
                .releases
                .send(ReleaseNotice::Released(name.to_string()));
        }
        Ok(released)
    }

    async fn request_handoff(
        &self,
        name: &str,
        to: Option<&str>,
    ) -> Result<Option<LeaseRecord>, StoreError> {
        self.gate("request handoff").await?;
        let (mut rows, now) = self.rows();
        let asked = match rows.get_mut(name) {
            Some(row) if row.expires_at > now => {
                row.handoff = Some((row.epoch, to.map(str::to_string)));
                Some(Self::record(name, row, now))
            }
            _ => None,
        };
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
        let (rows, now) = self.rows();
        Ok(names
            .iter()
            .filter_map(|n| rows.get(n).map(|row| Self::record(n, row, now)))
            .collect())
    }

    async fn list(&self, after: Option<&str>, limit: u32) -> Result<Vec<LeaseRecord>, StoreError> {
        self.gate("list").await?;
        let (rows, now) = self.rows();
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
        let (rows, now) = self.rows();
        let mut names: Vec<&String> = names.iter().collect();
        names.sort();
        names.dedup();
        Ok(names
            .into_iter()
            .filter_map(|name| rows.get(name).map(|row| (name, row)))
            .flat_map(|(name, row)| {
                // The row's own term has ended once the row has expired, closed or not yet
                // (a release closes it; a silence leaves it to the next campaign).
                let mut terms = row.clone();
                if row.expires_at <= now {
                    close_term(&mut terms, row.epoch, row.expires_at, TermEnd::Expired);
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
        let (rows, now) = self.rows();
        let mut members = self.members.lock().unwrap_or_else(|p| p.into_inner());
        members.retain(|(g, m), (_, expires, _)| g != group || m == member || *expires > now);
        let key = (group.to_string(), member.to_string());
        let joined = match members.get(&key) {
            Some((joined, expires, _)) if *expires > now => *joined,
            _ => now,
        };
        let count = u32::try_from(super::store::shard_count(shards)?).ok();
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
        Ok(GroupView {
            members: live,
            holders,
            db_now: self.db_now(now),
        })
    }

    async fn members(&self) -> Result<Vec<super::store::MemberRecord>, StoreError> {
        self.gate("members").await?;
        let now = self.now();
        let members = self.members.lock().unwrap_or_else(|p| p.into_inner());
        let ms = |d: Duration| i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
        Ok(members
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
        let mut members = self.members.lock().unwrap_or_else(|p| p.into_inner());
        members.retain(|(g, m), _| m != member || !groups.contains(g));
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
