//! A run's scenario, drawn from its seed before it starts: the timing, the replicas and their
//! clocks, the leases and groups, the fault rates, and what happens when (freezes, crashes,
//! graceful leaves, handoffs asked for, database clock steps), all before the faults heal.

use std::time::Duration;

use leasehold_lease::groups::GroupSpec;
use leasehold_lease::store::Place;
use leasehold_lease::timing::Timing;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use leasehold_lease::memory::faults::FaultRates;

/// Something the world does to a replica or the store at a true time.
#[derive(Debug, Clone, PartialEq)]
pub enum Happening {
    /// The replica is not run for this long (SIGSTOP, a VM pause), then resumes.
    Freeze {
        /// Which.
        replica: usize,
        /// For how long.
        for_: Duration,
    },
    /// The replica's machine is suspended: it is not run, and its monotonic clock stops too,
    /// while the database's runs on (outside the model, docs/ARCHITECTURE.md §9.3: the clock
    /// watch must end its terms at the next answer it gets).
    Suspend {
        /// Which.
        replica: usize,
        /// For how long.
        for_: Duration,
    },
    /// The replica's process dies where it stands; it starts again this much later.
    Crash {
        /// Which.
        replica: usize,
        /// When it starts again.
        restart_after: Duration,
    },
    /// The replica shuts down gracefully; it starts again this much later.
    Leave {
        /// Which.
        replica: usize,
        /// When it starts again.
        rejoin_after: Duration,
    },
    /// A new replica joins.
    Join,
    /// An operator asks the holder of the lease to hand it over, to the replica named if any.
    Handoff {
        /// The lease.
        lease: String,
        /// The replica asked for.
        to: Option<usize>,
    },
    /// The replica is cut off from the store (a partition) for this long.
    Cut {
        /// Which.
        replica: usize,
        /// For how long.
        for_: Duration,
    },
    /// The store fails over to a standby that missed its last commits.
    Failover {
        /// How many commits it lost.
        lose_last: usize,
    },
    /// Another transaction keeps a lease's row locked (a fenced write, an operator's session).
    LockRow {
        /// The lease.
        lease: String,
        /// For how long.
        for_: Duration,
    },
    /// A health check of the replica fails for a while: its gate for the lease is shut, then
    /// opened again.
    Gate {
        /// Which replica.
        replica: usize,
        /// The lease.
        lease: String,
        /// For how long.
        for_: Duration,
    },
    /// The database's clock steps forward.
    ClockStep {
        /// By how much.
        by: Duration,
    },
}

/// A run's whole scenario.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The lease timing every replica runs with.
    pub timing: Timing,
    /// Replicas at the start.
    pub replicas: usize,
    /// Each replica's clock rate against true time, replicas that join later included.
    pub rates: Vec<f64>,
    /// The database clock's rate.
    pub db_rate: f64,
    /// The single leases.
    pub leases: Vec<String>,
    /// The lease groups.
    pub groups: Vec<GroupSpec>,
    /// The faults' rates.
    pub faults: FaultRates,
    /// What happens, in true time order.
    pub happenings: Vec<(Duration, Happening)>,
    /// When the faults heal: faults off, frozen replicas resumed, and every replica down started.
    pub heal_at: Duration,
    /// How long after healing every lease must have a live holder again.
    pub settle_bound: Duration,
    /// How long the run goes on after healing.
    pub tail: Duration,
    /// How often each fault point of the production code fires (`buggify`); 0 in half the runs.
    pub buggify: f64,
    /// Each replica's place in the lines of its leases (priority, preemption), joiners
    /// included: all alike in half the runs.
    pub places: Vec<Place>,
    /// Whether a replica started again draws a new priority (a rolling upgrade's, a moved
    /// node's).
    pub churn: bool,
}

/// The most replicas a run has at once, joiners included.
pub const MAX_REPLICAS: usize = 5;

/// Clock rates differ from true time by at most this, for replicas and the database alike:
/// within the 1% of the ttl the margin always covers (`Timing::MIN_MARGIN_TTL_DIVISOR`),
/// together.
pub const MAX_DRIFT: f64 = 0.005;

impl Plan {
    /// The scenario of `seed`.
    pub fn draw(seed: u64) -> Plan {
        let mut rng = SmallRng::seed_from_u64(seed);
        let ttl = Duration::from_millis([500, 1_000, 2_000, 3_000][rng.random_range(0..4)]);
        let timing = Timing::from_ttl(ttl);
        let replicas = rng.random_range(2..=MAX_REPLICAS - 1);
        let drift = |rng: &mut SmallRng| 1.0 + rng.random_range(-MAX_DRIFT..=MAX_DRIFT);
        let rates = (0..MAX_REPLICAS).map(|_| drift(&mut rng)).collect();
        let db_rate = drift(&mut rng);
        let leases: Vec<String> = ["a", "b"][..rng.random_range(1..=2)]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let groups = match rng.random_bool(0.5) {
            true => vec![GroupSpec {
                name: "g".into(),
                shards: rng.random_range(2..=6),
            }],
            false => Vec::new(),
        };
        let faults = FaultRates::draw(&mut rng, &timing);
        let buggify = match rng.random_bool(0.5) {
            true => rng.random_range(0.002..0.03),
            false => 0.0,
        };
        let heal_at = ttl * rng.random_range(6..=12);
        let mut happenings = Vec::new();
        let mut joined = replicas;
        for _ in 0..rng.random_range(0..=10) {
            let at = heal_at.mul_f64(rng.random_range(0.05..0.95));
            let replica = rng.random_range(0..joined);
            let span =
                |rng: &mut SmallRng, max: u32| ttl.mul_f64(rng.random_range(0.05..f64::from(max)));
            let names: Vec<String> = leases
                .iter()
                .cloned()
                .chain(groups.iter().flat_map(GroupSpec::leases))
                .collect();
            let happening = match rng.random_range(0..12) {
                // Partitions twice as often: a slow answer followed by silence is where a
                // deadline counted from the wrong instant shows.
                11 => Happening::Cut {
                    replica,
                    for_: span(&mut rng, 3),
                },
                10 => Happening::Suspend {
                    replica,
                    for_: span(&mut rng, 3),
                },
                9 => Happening::Gate {
                    replica,
                    lease: names[rng.random_range(0..names.len())].clone(),
                    for_: span(&mut rng, 4),
                },
                7 => Happening::Failover {
                    lose_last: rng.random_range(0..=6),
                },
                8 => Happening::LockRow {
                    lease: names[rng.random_range(0..names.len())].clone(),
                    for_: span(&mut rng, 2),
                },
                6 => Happening::Cut {
                    replica,
                    for_: span(&mut rng, 3),
                },
                0 => Happening::Freeze {
                    replica,
                    for_: span(&mut rng, 3),
                },
                1 => Happening::Crash {
                    replica,
                    restart_after: span(&mut rng, 2),
                },
                2 => Happening::Leave {
                    replica,
                    rejoin_after: span(&mut rng, 2),
                },
                3 if joined < MAX_REPLICAS => {
                    joined += 1;
                    Happening::Join
                }
                4 => Happening::Handoff {
                    lease: names[rng.random_range(0..names.len())].clone(),
                    to: rng.random_bool(0.5).then(|| rng.random_range(0..joined)),
                },
                _ => Happening::ClockStep {
                    by: timing.margin + span(&mut rng, 3),
                },
            };
            happenings.push((at, happening));
        }
        happenings.sort_by_key(|(at, _)| *at);
        // Drawn last, so that the draws above give the scenarios they gave before lines existed.
        let preempt_after = rng
            .random_bool(0.25)
            .then(|| ttl.mul_f64(rng.random_range(0.5..4.0)));
        let ranked = rng.random_bool(0.5);
        let places = (0..MAX_REPLICAS)
            .map(|_| Place {
                priority: if ranked { rng.random_range(0..3) } else { 0 },
                preempt_after,
            })
            .collect();
        let churn = ranked && rng.random_bool(0.5);
        // An expiry, a hold-off after a clock step or a failover, and a poll for a lost notice.
        let settle_bound = ttl * 3 + timing.poll_interval.mul_f64(0.2) + timing.store_timeout;
        Plan {
            timing,
            replicas,
            rates,
            db_rate,
            leases,
            groups,
            faults,
            happenings,
            heal_at,
            settle_bound,
            tail: settle_bound + ttl,
            buggify,
            places,
            churn,
        }
    }
}
