//! One simulated replica: the real driver, group runner and term work of `leasehold run`, on a
//! paused single-threaded runtime of its own that the world loop advances. Its clock is its
//! runtime's: true time since it started, times its rate (drift). Frozen, it is simply not
//! advanced, and on resume every timer it missed fires at once, as after a SIGSTOP; crashed, its
//! runtime is dropped with every task on it.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::time::{Duration, SystemTime};

use leasehold_lease::driver::Driver;
use leasehold_lease::group_runner::Runner;
use leasehold_lease::groups::GroupSpec;
use leasehold_lease::handle::Leases;
use leasehold_lease::memory::MemoryStore;
use leasehold_lease::seams::{self, Seams};
use leasehold_lease::store::Place;
use leasehold_lease::timing::Timing;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tokio::runtime::Runtime;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::history::History;
use leasehold_lease::memory::faults::{FaultRates, FaultyStore};

/// Where a replica is in its life.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Life {
    /// Running.
    Up,
    /// Not run until this true time.
    Frozen(Duration),
    /// Shutting down gracefully: run until its driver returns.
    Leaving,
    /// Gone (crashed or left); may be started again.
    Down,
}

/// What a replica is made of, to start it (again).
#[derive(Debug, Clone)]
pub struct Spec {
    /// Its replica id.
    pub name: String,
    /// The single leases it campaigns for.
    pub leases: Vec<String>,
    /// The lease groups it takes part in.
    pub groups: Vec<GroupSpec>,
    /// The timing.
    pub timing: Timing,
    /// Its clock's rate against true time.
    pub rate: f64,
    /// Its place in the line of each of its leases.
    pub place: Place,
}

/// A running (or stopped) replica.
pub struct Replica {
    /// What it is.
    pub spec: Spec,
    /// Where it is in its life.
    pub life: Life,
    rt: Option<Runtime>,
    /// Its runtime's clock when it started, and the true time then.
    start: Option<(tokio::time::Instant, Duration)>,
    /// The lease handle, while it runs.
    pub leases: Option<Arc<Leases>>,
    root: CancellationToken,
    driver: Option<JoinHandle<()>>,
    /// Starts so far.
    pub starts: u32,
    /// Resumed from a freeze since it last ran.
    resumed: bool,
    /// Suspended for this long (its clock stopped too), until it resumes.
    suspended: Option<Duration>,
    /// Until when (true time, in nanoseconds) it is cut off from the store.
    pub cut: Arc<AtomicU64>,
    /// Whether an answer with the database's clock has reached it since it last started.
    pub read_clock: Arc<AtomicBool>,
}

impl std::fmt::Debug for Replica {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Replica")
            .field("name", &self.spec.name)
            .field("life", &self.life)
            .finish()
    }
}

/// The shared parts every replica is started with.
#[derive(Debug, Clone)]
pub struct World {
    /// The store.
    pub store: Arc<MemoryStore>,
    /// The fault rates.
    pub rates: FaultRates,
    /// Whether faults are on.
    pub faulty: Arc<AtomicBool>,
    /// The record.
    pub history: History,
    /// The database clock's rate.
    pub db_rate: f64,
}

impl Replica {
    /// A replica not yet started.
    pub fn new(spec: Spec) -> Replica {
        Replica {
            spec,
            life: Life::Down,
            rt: None,
            start: None,
            leases: None,
            root: CancellationToken::new(),
            driver: None,
            starts: 0,
            resumed: false,
            suspended: None,
            cut: Arc::default(),
            read_clock: Arc::default(),
        }
    }

    /// Starts it (again): a fresh runtime, holder id, driver and work, every draw from `seed`.
    pub fn start(&mut self, world: &World, seed: u64) -> anyhow::Result<()> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()?;
        self.starts += 1;
        self.read_clock = Arc::default();
        let mut rng = SmallRng::seed_from_u64(seed);
        let now = world.history.clock().now();
        let (leases, root, driver) = {
            let _entered = rt.enter();
            let seams = Seams::simulated(
                rng.random(),
                SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000) + now,
            );
            self.start = Some((seams::now(), now));
            let holder = seams.holder_id(&self.spec.name);
            let mut all = self.spec.leases.clone();
            all.extend(self.spec.groups.iter().flat_map(GroupSpec::leases));
            let store = Arc::new(
                FaultyStore::new(
                    world.store.clone(),
                    world.rates,
                    world.faulty.clone(),
                    rng.random(),
                    Arc::new(world.history.clone()),
                    holder.as_str(),
                    world.db_rate,
                    all,
                    self.cut.clone(),
                )
                .telling_clock_reads(self.read_clock.clone()),
            );
            world.history.note(format!(
                "{} starts as {holder} (start {})",
                self.spec.name, self.starts
            ));
            let root = CancellationToken::new();
            let (driver, leases) = Driver::with_shards(
                store,
                holder,
                self.spec.timing,
                self.spec.leases.clone(),
                self.spec.groups.iter().flat_map(GroupSpec::leases),
                root.clone(),
                seams,
            );
            let places = self
                .spec
                .leases
                .iter()
                .cloned()
                .chain(self.spec.groups.iter().flat_map(GroupSpec::leases))
                .map(|name| (name, self.spec.place))
                .collect();
            let mut driver = driver.with_places(places);
            if !self.spec.groups.is_empty() {
                let (runner, left) = Runner::new(leases.clone(), &self.spec.groups, Arc::default());
                driver = driver.leaving_groups_first(left);
                rt.spawn(runner.run(root.clone()));
            }
            let names: Vec<String> = leases.lease_names().map(str::to_string).collect();
            for lease in names {
                rt.spawn(crate::work::follow(
                    leases.clone(),
                    world.store.clone(),
                    lease,
                    self.spec.name.clone(),
                    world.history.clone(),
                    rng.random(),
                ));
            }
            (leases, root, rt.spawn(driver.run()))
        };
        self.rt = Some(rt);
        self.leases = Some(leases);
        self.root = root;
        self.driver = Some(driver);
        self.life = Life::Up;
        Ok(())
    }

    /// Runs it up to true time `now`: its runtime's clock moves to its own reading of that time
    /// (drift included), firing every timer due on the way, in order.
    pub fn advance(&mut self, now: Duration) {
        let (Some(rt), Some((base, started))) = (&self.rt, self.start) else {
            return;
        };
        let local = now.saturating_sub(started).mul_f64(self.spec.rate);
        let target = base + local;
        let resumed = std::mem::take(&mut self.resumed);
        rt.block_on(async move {
            if resumed {
                // A process resumed after a freeze finds its monotonic clock moved on at once:
                // every timer it missed fires, and each task reads the new time, not its timer's.
                let jump = target.saturating_duration_since(tokio::time::Instant::now());
                tokio::time::advance(jump).await;
            }
            tokio::time::sleep_until(target).await;
        });
        if self.life == Life::Leaving && self.driver.as_ref().is_some_and(|d| d.is_finished()) {
            self.stop();
        }
    }

    /// Resumes it after a freeze: its clock jumps by the time it was frozen. After a suspend its
    /// clock instead goes on from where it stopped, behind true time by as much.
    pub fn resume(&mut self) {
        self.life = Life::Up;
        match self.suspended.take() {
            Some(for_) => {
                if let Some((_, started)) = &mut self.start {
                    *started += for_.div_f64(self.spec.rate);
                }
            }
            None => self.resumed = true,
        }
    }

    /// The terms it runs now: lease and epoch.
    pub fn terms(&self) -> Vec<(String, leasehold_lease_core::Epoch)> {
        let Some(leases) = &self.leases else {
            return Vec::new();
        };
        leases
            .lease_names()
            .filter_map(|name| {
                let term = leases.leadership(name)?.term?;
                Some((name.to_string(), term.epoch))
            })
            .collect()
    }

    /// Suspends it until true time `until`, its monotonic clock stopped for `for_`.
    pub fn suspend(&mut self, until: Duration, for_: Duration) {
        self.life = Life::Frozen(until);
        self.suspended = Some(for_);
    }

    /// Crashes it: the runtime and every task on it are dropped where they stand.
    pub fn crash(&mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
        self.leases = None;
        self.driver = None;
        self.start = None;
        self.life = Life::Down;
    }

    /// Begins a graceful shutdown: every lease released in order, then gone.
    pub fn leave(&mut self) {
        self.root.cancel();
        self.life = Life::Leaving;
    }
}
