//! The seeded fault layer between one replica and the shared memory store: latency before and
//! after a statement, a request lost (never applied), a reply lost after the write applied, a
//! call that hangs until its caller gives up; release notices dropped, delayed, duplicated and
//! forged. With faults off it is the memory store, unchanged (the store conformance suite runs
//! it so). It tells a [`Witness`] (the simulator's history) what the store applied: the epochs
//! won, and until when each term may live by the database's clock, in the witness's true time.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::history::TermRecord;
use crate::memory::MemoryStore;
use crate::store::{
    Bid, CampaignedMany, DbMillis, Epoch, GrantSeen, GroupView, LeaseRecord, LeaseStore,
    MemberRecord, ReleaseNotice, RenewRequest, Renewed, StoreError,
};
use crate::timing::Timing;
use async_trait::async_trait;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// Who is told what the store applied, and keeps the true time: the simulator's history. No
/// replica sees it.
pub trait Witness: Send + Sync + std::fmt::Debug + 'static {
    /// True time since the run began.
    fn now(&self) -> Duration;
    /// A line of the event log.
    fn note(&self, text: String);
    /// The store handed `epoch` of `lease` to `holder`; the term lives until `until` unless renewed.
    fn won(&self, lease: &str, epoch: Epoch, holder: &str, until: Duration);
    /// A renewal of `epoch` of `lease` applied: the term lives until `until`.
    fn renewed(&self, lease: &str, epoch: Epoch, until: Duration);
    /// The store let go of `epoch` of `lease` now (a release).
    fn released(&self, lease: &str, epoch: Epoch);
    /// The store gave `epoch` of `lease` to the waiter `holder` at the head of its line; the
    /// grant lives until `until` unless the waiter renews it. By default, as [`Witness::won`].
    fn granted(&self, lease: &str, epoch: Epoch, holder: &str, until: Duration) {
        self.won(lease, epoch, holder, until);
    }
    /// An answer carrying the database's clock, read when the statement ran at true time
    /// `applied_at`, reached `holder`'s coordinator.
    fn answered(&self, holder: &str, applied_at: Duration) {
        let _ = (holder, applied_at);
    }
}

/// A witness that keeps nothing: for a fault layer with its faults off.
#[derive(Debug, Default)]
pub struct Unwitnessed;

impl Witness for Unwitnessed {
    fn now(&self) -> Duration {
        Duration::ZERO
    }
    fn note(&self, _text: String) {}
    fn won(&self, _lease: &str, _epoch: Epoch, _holder: &str, _until: Duration) {}
    fn renewed(&self, _lease: &str, _epoch: Epoch, _until: Duration) {}
    fn released(&self, _lease: &str, _epoch: Epoch) {}
}

/// How often each fault strikes, drawn once per run so that some runs are calm and some stormy.
#[derive(Debug, Clone, Copy, Default)]
pub struct FaultRates {
    /// A statement's latency, each way, is up to this.
    pub latency: Duration,
    /// Once in a while (this probability) a much longer latency, up to `slow`.
    pub p_slow: f64,
    /// The longest slow latency.
    pub slow: Duration,
    /// A request lost before the store saw it.
    pub p_lose_request: f64,
    /// A reply lost after the write applied.
    pub p_lose_reply: f64,
    /// A call that hangs until its caller gives up.
    pub p_hang: f64,
    /// A release notice dropped.
    pub p_drop_notice: f64,
    /// A release notice delayed (up to `latency` × 10).
    pub p_delay_notice: f64,
    /// A release notice sent twice.
    pub p_duplicate_notice: f64,
    /// A forged notice (a release or a handoff request nobody made), per notice or tick.
    pub p_forge_notice: f64,
}

impl FaultRates {
    /// Rates drawn from `rng` for a run with `timing`: about a third of runs calm, the rest with
    /// each fault at a rate of its own. Slow statements take from half the margin to half again
    /// the store timeout: the range where a deadline counted from the wrong instant shows.
    pub fn draw(rng: &mut SmallRng, timing: &Timing) -> FaultRates {
        if rng.random_bool(0.3) {
            return FaultRates {
                latency: Duration::from_millis(rng.random_range(0..5)),
                ..FaultRates::default()
            };
        }
        let mut p = |max: f64| {
            if rng.random_bool(0.5) {
                rng.random_range(0.0..max)
            } else {
                0.0
            }
        };
        let (p_slow, p_lose_request, p_lose_reply, p_hang) = (p(0.5), p(0.1), p(0.1), p(0.05));
        let (p_drop_notice, p_delay_notice, p_duplicate_notice, p_forge_notice) =
            (p(0.5), p(0.5), p(0.3), p(0.1));
        FaultRates {
            latency: Duration::from_millis(rng.random_range(0..40)),
            p_slow,
            slow: rng.random_range(timing.margin / 2..timing.store_timeout * 3 / 2),
            p_lose_request,
            p_lose_reply,
            p_hang,
            p_drop_notice,
            p_delay_notice,
            p_duplicate_notice,
            p_forge_notice,
        }
    }
}

/// What one call meets.
#[derive(Debug, Clone, Copy)]
struct Fate {
    before: Duration,
    after: Duration,
    lose_request: bool,
    lose_reply: bool,
    hang: bool,
}

/// One replica's view of the shared store, through its faults.
#[derive(Debug)]
pub struct FaultyStore {
    inner: Arc<MemoryStore>,
    rates: FaultRates,
    /// Off once the faults heal (and for the conformance suite).
    on: Arc<AtomicBool>,
    rng: Mutex<SmallRng>,
    history: Arc<dyn Witness>,
    /// The replica, for the log.
    replica: String,
    /// How fast the database's clock runs against true time (its drift), to tell when a term
    /// expires in true time.
    db_rate: f64,
    /// The leases forged notices may name.
    leases: Vec<String>,
    /// Until when (true time, in nanoseconds) this replica is cut off from the store.
    cut: Arc<AtomicU64>,
    /// Set once an answer carrying the database's clock has reached the replica: a step of that
    /// clock before a replica's first reading of it is outside the model (docs/ARCHITECTURE.md
    /// §9.3), so the simulator steps it only after every live replica has read it.
    read_clock: Arc<AtomicBool>,
}

impl FaultyStore {
    /// `replica`'s view of `inner`, with `rates` while `on`; every random draw from `seed`.
    #[allow(clippy::too_many_arguments)] // one replica's wiring, made in one place
    pub fn new(
        inner: Arc<MemoryStore>,
        rates: FaultRates,
        on: Arc<AtomicBool>,
        seed: u64,
        history: Arc<dyn Witness>,
        replica: &str,
        db_rate: f64,
        leases: Vec<String>,
        cut: Arc<AtomicU64>,
    ) -> FaultyStore {
        FaultyStore {
            inner,
            rates,
            on,
            rng: Mutex::new(SmallRng::seed_from_u64(seed)),
            history,
            replica: replica.to_string(),
            db_rate,
            leases,
            cut,
            read_clock: Arc::default(),
        }
    }

    /// Sets `read_clock` once an answer carrying the database's clock reaches the replica.
    pub fn telling_clock_reads(mut self, read_clock: Arc<AtomicBool>) -> Self {
        self.read_clock = read_clock;
        self
    }

    /// The memory store with no faults and no history worth reading: what the conformance
    /// suite runs, to show the layer changes nothing when quiet.
    pub fn quiet(inner: Arc<MemoryStore>) -> FaultyStore {
        FaultyStore::new(
            inner,
            FaultRates::default(),
            Arc::new(AtomicBool::new(false)),
            0,
            Arc::new(Unwitnessed),
            "quiet",
            1.0,
            Vec::new(),
            Arc::default(),
        )
    }

    fn rng(&self) -> std::sync::MutexGuard<'_, SmallRng> {
        self.rng.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn fate(&self) -> Fate {
        let none = Fate {
            before: Duration::ZERO,
            after: Duration::ZERO,
            lose_request: false,
            lose_reply: false,
            hang: false,
        };
        if !self.on.load(Ordering::SeqCst) {
            return none;
        }
        let r = self.rates;
        let mut rng = self.rng();
        let now = self.history.now();
        if now < Duration::from_nanos(self.cut.load(Ordering::SeqCst)) {
            // Cut off: the request never arrives, failing at once or hanging.
            let hang = rng.random_bool(0.5);
            return Fate {
                lose_request: true,
                hang,
                ..none
            };
        }
        let mut latency = || {
            let slow = r.p_slow > 0.0 && rng.random_bool(r.p_slow);
            let max = if slow { r.slow } else { r.latency };
            Duration::from_micros(rng.random_range(0..=u64::try_from(max.as_micros()).unwrap_or(0)))
        };
        let (before, after) = (latency(), latency());
        let mut chance = |p: f64| p > 0.0 && rng.random_bool(p);
        Fate {
            before,
            after,
            lose_request: chance(r.p_lose_request),
            lose_reply: chance(r.p_lose_reply),
            hang: chance(r.p_hang),
        }
    }

    /// Runs one statement through its fate; `applied` sees the answer the store gave, whether or
    /// not the caller does.
    async fn call<T>(
        &self,
        op: &'static str,
        statement: impl Future<Output = Result<T, StoreError>>,
        applied: impl FnOnce(&T),
    ) -> Result<T, StoreError> {
        let fate = self.fate();
        if !fate.before.is_zero() {
            tokio::time::sleep(fate.before).await;
        }
        if fate.hang && !fate.lose_reply {
            // Hangs until the caller gives up (its timeout drops this future).
            self.history
                .note(format!("{}: {op} hangs before the store", self.replica));
            return std::future::pending().await;
        }
        if fate.lose_request {
            self.history
                .note(format!("{}: {op} lost before the store", self.replica));
            return Err(StoreError::Unavailable(format!("{op}: request lost")));
        }
        let result = statement.await;
        if let Ok(answer) = &result {
            applied(answer);
        }
        if !fate.after.is_zero() {
            tokio::time::sleep(fate.after).await;
        }
        if fate.lose_reply {
            self.history
                .note(format!("{}: {op} applied, its reply lost", self.replica));
            if fate.hang {
                return std::future::pending().await;
            }
            return Err(StoreError::Unavailable(format!("{op}: reply lost")));
        }
        result
    }

    /// An answer of the coordinator's reached the replica: with a reading of the database's
    /// clock, its watch of that clock has one more (heartbeats feed no watch).
    fn answered<T>(
        &self,
        result: Result<T, StoreError>,
        db_now: impl Fn(&T) -> Option<DbMillis>,
        applied_at: &AtomicU64,
    ) -> Result<T, StoreError> {
        if result.as_ref().is_ok_and(|answer| db_now(answer).is_some()) {
            self.read_clock.store(true, Ordering::SeqCst);
            let at = Duration::from_nanos(applied_at.load(Ordering::SeqCst));
            self.history.answered(&self.replica, at);
        }
        result
    }

    /// The true time now, in nanoseconds, for an answer's `applied_at`.
    fn stamp(&self, applied_at: &AtomicU64) {
        let now = u64::try_from(self.history.now().as_nanos()).unwrap_or(u64::MAX);
        applied_at.store(now, Ordering::SeqCst);
    }

    /// Until when (true time) a term renewed now for `ttl` lives by the database's clock.
    fn until(&self, ttl: Duration) -> Duration {
        self.history.now() + ttl.div_f64(self.db_rate)
    }
}

#[async_trait]
impl LeaseStore for FaultyStore {
    fn backend(&self) -> &'static str {
        "memory"
    }

    async fn campaign_in_line(
        &self,
        holder: &str,
        bids: &[Bid],
        ttl: Duration,
    ) -> Result<CampaignedMany, StoreError> {
        let until = || self.until(ttl);
        let applied_at = AtomicU64::new(0);
        let result = self
            .call(
                "campaign",
                self.inner.campaign_in_line(holder, bids, ttl),
                |answer: &CampaignedMany| {
                    self.stamp(&applied_at);
                    for (lease, epoch) in &answer.won {
                        self.history.won(lease, *epoch, holder, until());
                    }
                },
            )
            .await;
        self.answered(result, |a| a.db_now, &applied_at)
    }

    async fn read_grant(
        &self,
        name: &str,
        holder: &str,
        epoch: Epoch,
    ) -> Result<GrantSeen, StoreError> {
        let applied_at = AtomicU64::new(0);
        let result = self
            .call(
                "read grant",
                self.inner.read_grant(name, holder, epoch),
                |_| self.stamp(&applied_at),
            )
            .await;
        self.answered(result, |a| a.db_now, &applied_at)
    }

    async fn renew(&self, holder: &str, leases: &[RenewRequest]) -> Result<Renewed, StoreError> {
        let applied_at = AtomicU64::new(0);
        let result = self
            .call(
                "renew",
                self.inner.renew(holder, leases),
                |answer: &Renewed| {
                    self.stamp(&applied_at);
                    for request in leases.iter().filter(|r| answer.landed.contains(&r.name)) {
                        self.history
                            .renewed(&request.name, request.epoch, self.until(request.ttl));
                    }
                },
            )
            .await;
        self.answered(result, |a| a.db_now, &applied_at)
    }

    async fn renew_one(
        &self,
        holder: &str,
        lease: &RenewRequest,
        timeout: Duration,
    ) -> Result<crate::store::RenewedOne, StoreError> {
        let applied_at = AtomicU64::new(0);
        let result = self
            .call(
                "renew",
                self.inner.renew_one(holder, lease, timeout),
                |answer: &crate::store::RenewedOne| {
                    self.stamp(&applied_at);
                    if answer.landed {
                        self.history
                            .renewed(&lease.name, lease.epoch, self.until(lease.ttl));
                    }
                },
            )
            .await;
        self.answered(result, |a| a.db_now, &applied_at)
    }

    async fn release_giving(
        &self,
        holder: &str,
        leases: &[(String, Epoch)],
    ) -> Result<Vec<crate::store::Released>, StoreError> {
        self.call(
            "release",
            self.inner.release_giving(holder, leases),
            |released: &Vec<crate::store::Released>| {
                for (name, epoch) in leases
                    .iter()
                    .filter(|(n, _)| released.iter().any(|r| &r.name == n))
                {
                    self.history.released(name, *epoch);
                }
            },
        )
        .await
    }

    async fn force_release(&self, name: &str) -> Result<Option<(String, Epoch)>, StoreError> {
        self.call("force_release", self.inner.force_release(name), |had| {
            if let Some((_, epoch)) = had {
                self.history.released(name, *epoch);
            }
        })
        .await
    }

    async fn request_handoff(
        &self,
        name: &str,
        to: Option<&str>,
    ) -> Result<Option<LeaseRecord>, StoreError> {
        self.call(
            "request_handoff",
            self.inner.request_handoff(name, to),
            |_| {},
        )
        .await
    }

    async fn get(&self, names: &[String]) -> Result<Vec<LeaseRecord>, StoreError> {
        self.call("get", self.inner.get(names), |_| {}).await
    }

    async fn list(&self, after: Option<&str>, limit: u32) -> Result<Vec<LeaseRecord>, StoreError> {
        self.call("list", self.inner.list(after, limit), |_| {})
            .await
    }

    async fn terms(&self, names: &[String], per_lease: u32) -> Result<Vec<TermRecord>, StoreError> {
        self.call("terms", self.inner.terms(names, per_lease), |_| {})
            .await
    }

    async fn heartbeat(
        &self,
        group: &str,
        member: &str,
        shards: &[String],
        ttl: Duration,
    ) -> Result<GroupView, StoreError> {
        self.call(
            "heartbeat",
            self.inner.heartbeat(group, member, shards, ttl),
            |_| {},
        )
        .await
    }

    async fn leave(&self, groups: &[String], member: &str) -> Result<(), StoreError> {
        self.call("leave", self.inner.leave(groups, member), |_| {})
            .await
    }

    async fn members(&self) -> Result<Vec<MemberRecord>, StoreError> {
        self.call("members", self.inner.members(), |_| {}).await
    }

    async fn line(&self, names: &[String]) -> Result<Vec<crate::store::WaiterRecord>, StoreError> {
        self.inner.line(names).await
    }

    async fn ping(&self) -> Result<(), StoreError> {
        self.call("ping", self.inner.ping(), |_| {}).await
    }

    fn listen_releases(
        &self,
        shutdown: CancellationToken,
    ) -> Option<mpsc::Receiver<ReleaseNotice>> {
        let mut notices = self.inner.listen_releases(shutdown.clone())?;
        let (tx, rx) = mpsc::channel(64);
        let rates = self.rates;
        let on = self.on.clone();
        let seed = self.rng().random();
        let history = self.history.clone();
        let replica = self.replica.clone();
        let leases = self.leases.clone();
        tokio::spawn(async move {
            let mut rng = SmallRng::seed_from_u64(seed);
            loop {
                let notice = tokio::select! {
                    biased;
                    _ = shutdown.cancelled() => return,
                    n = notices.recv() => match n {
                        Some(n) => Some(n),
                        None => return,
                    },
                    // A forger speaks now and then, between real notices.
                    _ = tokio::time::sleep(Duration::from_millis(rng.random_range(50..500))),
                        if on.load(Ordering::SeqCst) && rates.p_forge_notice > 0.0 => None,
                };
                let faulty = on.load(Ordering::SeqCst);
                let chance = |rng: &mut SmallRng, p: f64| faulty && p > 0.0 && rng.random_bool(p);
                let notice = match notice {
                    Some(n) => n,
                    None if chance(&mut rng, rates.p_forge_notice) && !leases.is_empty() => {
                        let lease = leases[rng.random_range(0..leases.len())].clone();
                        let epoch = Epoch::new(rng.random_range(1..20));
                        let forged = match rng.random_range(0..3) {
                            0 => ReleaseNotice::Released(lease),
                            1 => ReleaseNotice::HandoffRequested { lease, epoch },
                            // A grant to this very replica, which only the row can confirm.
                            _ => ReleaseNotice::Granted {
                                lease,
                                holder: replica.clone(),
                                epoch,
                            },
                        };
                        history.note(format!("{replica}: forged notice {forged:?}"));
                        forged
                    }
                    None => continue,
                };
                if chance(&mut rng, rates.p_drop_notice) {
                    history.note(format!("{replica}: notice {notice:?} dropped"));
                    continue;
                }
                if chance(&mut rng, rates.p_delay_notice) {
                    let by = Duration::from_millis(rng.random_range(1..=400));
                    history.note(format!("{replica}: notice {notice:?} delayed {by:?}"));
                    tokio::time::sleep(by).await;
                }
                let twice = chance(&mut rng, rates.p_duplicate_notice);
                for _ in 0..(1 + usize::from(twice)) {
                    if tx.send(notice.clone()).await.is_err() {
                        return;
                    }
                }
            }
        });
        Some(rx)
    }
}
