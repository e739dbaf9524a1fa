//! One seeded run: the world loop. It draws the scenario, starts the replicas, and then, step by
//! step, moves true time on by a seeded amount, does what is due (a freeze, a crash, a step of
//! the database clock…) and runs every live replica up to the new time, in a seeded order. After
//! the faults heal it watches for every lease to have a live holder again; then the oracle reads
//! the history.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use leasehold_lease::buggify::{self, Planted};
use leasehold_lease::coordinator::GateSource;
use leasehold_lease::groups::GroupSpec;
use leasehold_lease::handoff;
use leasehold_lease::memory::{GrantWitness, MemoryStore, StoreClock};
use leasehold_lease::name::LeaseName;
use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

use crate::history::{History, TrueClock, Violation, ms};
use crate::oracle;
use crate::plan::{Happening, Plan};
use crate::replica::{Life, Replica, Spec, World};

/// What a run found.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The seed.
    pub seed: u64,
    /// Every broken promise.
    pub violations: Vec<Violation>,
    /// The SHA-256 of the event log.
    pub hash: String,
    /// The event log.
    pub log: Vec<String>,
}

/// Runs `seed`, with `planted` planted if any; with `echo`, prints the event log as it is
/// written.
pub fn run(seed: u64, planted: Option<Planted>, echo: bool) -> anyhow::Result<Outcome> {
    let plan = Plan::draw(seed);
    buggify::install(seed ^ 0xb0661f7, plan.buggify, planted);
    let outcome = world_loop(seed, &plan, echo);
    buggify::uninstall();
    outcome
}

/// The world loop of one run.
fn world_loop(seed: u64, plan: &Plan, echo: bool) -> anyhow::Result<Outcome> {
    let clock = TrueClock::default();
    let history = History::new(clock.clone(), echo);
    history.note(format!("seed {seed}: {plan:?}"));
    let db_rate = plan.db_rate;
    let db_clock = {
        // Only differences between readings matter: any fixed point serves as the origin.
        let base = tokio::time::Instant::from_std(std::time::Instant::now());
        let clock = clock.clone();
        StoreClock::new(move || base + clock.now().mul_f64(db_rate))
    };
    // The history hears of every grant as the store writes it: no caller's answer reports a
    // grant to another replica.
    let witness = {
        let (history, clock) = (history.clone(), clock.clone());
        GrantWitness::new(move |lease, epoch, holder, lasts| {
            let until = clock.now() + lasts.div_f64(db_rate);
            history.granted(lease, epoch, holder, until);
        })
    };
    let store = Arc::new(
        MemoryStore::with_clock(db_clock)
            .with_call_timeout(plan.timing.store_timeout)
            .witness_grants(witness),
    );
    let faulty = Arc::new(AtomicBool::new(true));
    let world = World {
        store: store.clone(),
        rates: plan.faults,
        faulty: faulty.clone(),
        history: history.clone(),
        db_rate,
    };
    let mut rng = SmallRng::seed_from_u64(seed ^ 0x5eed);
    let operator = Operator::new()?;
    // Shut health gates, to open again: (when, replica, lease).
    let mut gates: Vec<(Duration, usize, String)> = Vec::new();
    let gate_slack = plan.timing.store_timeout + Duration::from_millis(40);
    history.lock().gate_slack = gate_slack;
    history.lock().grant_slack = gate_slack + plan.timing.in_line_for();
    let spec = |i: usize| Spec {
        name: format!("r{i}"),
        leases: plan.leases.clone(),
        groups: plan.groups.clone(),
        timing: plan.timing,
        rate: plan.rates[i],
        place: plan.places[i],
    };
    let mut replicas: Vec<Replica> = (0..plan.replicas).map(|i| Replica::new(spec(i))).collect();
    for r in &mut replicas {
        r.start(&world, rng.random())?;
    }
    let ttl = plan.timing.ttl;
    let mut happenings = plan.happenings.clone();
    // Restarts due, by replica: (true time, what).
    let mut starts: BTreeMap<usize, Duration> = BTreeMap::new();
    let mut last_step: Option<Duration> = None;
    let end = plan.heal_at + plan.tail;
    let mut healed = false;
    let mut settled: Option<Duration> = None;
    let names: Vec<String> = plan
        .leases
        .iter()
        .cloned()
        .chain(plan.groups.iter().flat_map(GroupSpec::leases))
        .collect();
    let mut now = Duration::ZERO;
    // When membership last changed: the last start of a replica, or the faults healing.
    let mut settled_from = plan.heal_at;
    while now < end {
        now += Duration::from_micros(rng.random_range(500..=20_000));
        clock.set(now);
        if !healed && now >= plan.heal_at {
            healed = true;
            faulty.store(false, Ordering::SeqCst);
            history.note("faults heal");
            for (i, r) in replicas.iter_mut().enumerate() {
                match r.life {
                    Life::Frozen(_) => {
                        r.resume();
                        resumed_gates(&history, &r.spec.name, now);
                    }
                    Life::Down => {
                        starts.entry(i).or_insert(now);
                    }
                    _ => {}
                }
            }
        }
        while let Some((at, _)) = happenings.first().filter(|(at, _)| *at <= now && !healed) {
            let _ = at;
            let (_, happening) = happenings.remove(0);
            happen(
                &operator,
                &mut gates,
                &mut replicas,
                &world,
                &mut starts,
                &mut last_step,
                now,
                happening,
                &spec,
            );
        }
        // Gates due to open (all of them once the faults heal).
        let (open, shut): (Vec<_>, Vec<_>) =
            gates.drain(..).partition(|(at, _, _)| healed || *at <= now);
        gates = shut;
        for (_, i, lease) in open {
            open_gate(&replicas[i], i, &lease, &history);
        }
        // (Re)starts due; none within two ttls of a clock step, so that every replica has read
        // the database's clock before it steps (a step before a first reading is outside the
        // model).
        let quiet_until = last_step.map(|s| s + ttl * 2);
        let due: Vec<usize> = starts
            .iter()
            .filter(|(_, at)| **at <= now && quiet_until.is_none_or(|q| now >= q))
            .map(|(i, _)| *i)
            .collect();
        for i in due {
            starts.remove(&i);
            if replicas[i].life == Life::Down {
                // A new process: its gates start open.
                history
                    .lock()
                    .gated
                    .retain(|(r, _), _| r != &replicas[i].spec.name);
                if plan.churn {
                    let priority = rng.random_range(0..3);
                    history.note(format!("r{i} comes back at priority {priority}"));
                    replicas[i].spec.place.priority = priority;
                }
                replicas[i].start(&world, rng.random())?;
                settled_from = settled_from.max(now);
            }
        }
        for r in replicas.iter_mut() {
            if let Life::Frozen(until) = r.life
                && now >= until
            {
                history.note(format!("{} resumes", r.spec.name));
                r.resume();
                resumed_gates(&history, &r.spec.name, now);
            }
        }
        operator.advance(now);
        let mut order: Vec<usize> = (0..replicas.len()).collect();
        order.shuffle(&mut rng);
        for i in order {
            if matches!(replicas[i].life, Life::Up | Life::Leaving) {
                replicas[i].advance(now);
            }
        }
        if healed && settled.is_none() && oracle::all_held(&store, &replicas, &names) {
            settled = Some(now);
            history.note(format!(
                "every lease has a live holder, {:.3} ms after the faults healed",
                ms(now - plan.heal_at)
            ));
        }
    }
    match settled {
        Some(at) if at - plan.heal_at <= plan.settle_bound => {}
        Some(at) => history.violation(
            "a holder again once faults heal",
            format!(
                "every lease had a live holder only {:.3} ms after the faults healed (bound {:.3} ms)",
                ms(at - plan.heal_at),
                ms(plan.settle_bound)
            ),
        ),
        None => history.violation(
            "a holder again once faults heal",
            format!(
                "some lease had no live holder {:.3} ms after the faults healed (bound {:.3} ms)",
                ms(end - plan.heal_at),
                ms(plan.settle_bound)
            ),
        ),
    }
    oracle::fair_shares(&store, &replicas, &plan.groups, settled_from, &history);
    for r in &mut replicas {
        r.crash();
        history.crashed(&r.spec.name);
    }
    let watch_tolerance = plan.timing.margin + plan.timing.store_timeout * 2;
    oracle::judge(
        &history,
        plan.timing.ttl.div_f64(plan.db_rate),
        watch_tolerance,
    );
    let hash = history.hash();
    let record = history.lock();
    Ok(Outcome {
        seed,
        violations: record.violations.clone(),
        hash,
        log: record.log.clone(),
    })
}

/// Does one happening.
#[allow(clippy::too_many_arguments)] // the world loop's state, lent for one step
fn happen(
    operator: &Operator,
    gates: &mut Vec<(Duration, usize, String)>,
    replicas: &mut Vec<Replica>,
    world: &World,
    starts: &mut BTreeMap<usize, Duration>,
    last_step: &mut Option<Duration>,
    now: Duration,
    happening: Happening,
    spec: &dyn Fn(usize) -> Spec,
) {
    let history = &world.history;
    let up =
        |replicas: &Vec<Replica>, i: usize| replicas.get(i).is_some_and(|r| r.life == Life::Up);
    match happening {
        Happening::Freeze { replica, for_ } if up(replicas, replica) => {
            history.note(format!("r{replica} frozen for {:.3} ms", ms(for_)));
            replicas[replica].life = Life::Frozen(now + for_);
        }
        Happening::Suspend { replica, for_ } if up(replicas, replica) => {
            history.note(format!(
                "r{replica}'s machine suspended for {:.3} ms, its monotonic clock stopped",
                ms(for_)
            ));
            let terms = replicas[replica].terms();
            replicas[replica].suspend(now + for_, for_);
            history.suspended(&format!("r{replica}"), for_, terms);
        }
        Happening::Crash {
            replica,
            restart_after,
        } if up(replicas, replica) => {
            history.note(format!("r{replica} crashes"));
            replicas[replica].crash();
            history.crashed(&format!("r{replica}"));
            starts.insert(replica, now + restart_after);
        }
        Happening::Leave {
            replica,
            rejoin_after,
        } if up(replicas, replica) => {
            history.note(format!("r{replica} leaves gracefully"));
            replicas[replica].leave();
            starts.insert(replica, now + rejoin_after);
        }
        Happening::Cut { replica, for_ } if up(replicas, replica) => {
            history.note(format!(
                "r{replica} cut off from the store for {:.3} ms",
                ms(for_)
            ));
            let until = u64::try_from((now + for_).as_nanos()).unwrap_or(u64::MAX);
            replicas[replica].cut.store(until, Ordering::SeqCst);
        }
        Happening::Join => {
            let i = replicas.len();
            history.note(format!("r{i} joins"));
            replicas.push(Replica::new(spec(i)));
            starts.insert(i, now);
        }
        Happening::Handoff { lease, to } => {
            let to = to.map(|i| format!("r{i}"));
            let (store, history) = (world.store.clone(), history.clone());
            // Asked as `leasehold leases handoff` asks, from the operator's own runtime: the
            // request may wait for a locked row.
            operator.spawn(async move {
                let Ok(name) = LeaseName::parse(&lease) else {
                    return;
                };
                let asked = handoff::request(store.as_ref(), &name, to.as_deref()).await;
                if let Ok(asked) = &asked {
                    let at = history.clock().now();
                    history
                        .lock()
                        .handoffs
                        .push((lease.clone(), asked.epoch, to.clone(), at));
                }
                history.note(format!(
                    "operator asked the holder of {lease} to hand it over{}: {}",
                    to.map(|t| format!(" to {t}")).unwrap_or_default(),
                    match asked {
                        Ok(asked) => format!("asked {} at epoch {}", asked.holder, asked.epoch),
                        Err(e) => format!("refused: {e}"),
                    }
                ));
            });
        }
        Happening::Failover { lose_last } => {
            history.note(format!(
                "the store fails over, losing its last {lose_last} commits"
            ));
            world.store.fail_over(lose_last);
            history.lock().store_events.push(now);
        }
        Happening::LockRow { lease, for_ } => {
            history.note(format!(
                "another transaction locks the row of {lease} for {:.3} ms",
                ms(for_)
            ));
            world.store.lock_row(&lease, for_);
        }
        Happening::Gate {
            replica,
            lease,
            for_,
        } if up(replicas, replica) => {
            let Some(leases) = replicas[replica].leases.clone() else {
                return;
            };
            history.note(format!(
                "r{replica}'s health check of {lease} fails for {:.3} ms: gate shut",
                ms(for_)
            ));
            leases.allow_campaigns(&lease, probe(), false);
            history
                .lock()
                .gated
                .insert((format!("r{replica}"), lease.clone()), now);
            gates.push((now + for_, replica, lease));
        }
        Happening::ClockStep { by } => {
            // A step before a replica's first reading of the database's clock is outside the
            // model (docs/ARCHITECTURE.md §9.3): every live replica must have read it. Starts
            // after the step wait two ttls (the world loop holds them back).
            let fresh = replicas.iter().any(|r| {
                matches!(r.life, Life::Up | Life::Frozen(_) | Life::Leaving)
                    && !r.read_clock.load(Ordering::SeqCst)
            });
            if fresh {
                history.note(format!(
                    "database clock step of {:.3} ms skipped: a replica has not read the clock yet",
                    ms(by)
                ));
            } else {
                history.note(format!("database clock steps forward {:.3} ms", ms(by)));
                world.store.step_clock(by);
                history.lock().store_events.push(now);
                *last_step = Some(now);
            }
        }
        other => history.note(format!("{other:?}: not applicable now, skipped")),
    }
}

/// The health check the simulator's gates speak for.
fn probe() -> GateSource {
    GateSource::HealthCheck("probe".into())
}

/// Opens replica `i`'s gate of `lease` again (on whatever process it runs now).
fn open_gate(replica: &Replica, i: usize, lease: &str, history: &History) {
    history
        .lock()
        .gated
        .remove(&(replica.spec.name.clone(), lease.to_string()));
    if let Some(leases) = &replica.leases {
        history.note(format!("r{i}'s health check of {lease} passes: gate open"));
        leases.allow_campaigns(lease, probe(), true);
    }
}

/// A resumed replica acts on its shut gates only now: they count from here.
fn resumed_gates(history: &History, replica: &str, now: Duration) {
    for ((r, _), since) in history.lock().gated.iter_mut() {
        if r == replica {
            *since = (*since).max(now);
        }
    }
}

/// An operator's client of the store, on a paused runtime of its own that keeps true time: what
/// `leasehold leases handoff` would be.
struct Operator {
    rt: tokio::runtime::Runtime,
    base: tokio::time::Instant,
}

impl Operator {
    fn new() -> anyhow::Result<Operator> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()?;
        let base = rt.block_on(async { tokio::time::Instant::now() });
        Ok(Operator { rt, base })
    }

    fn spawn(&self, task: impl Future<Output = ()> + Send + 'static) {
        self.rt.spawn(task);
    }

    fn advance(&self, now: Duration) {
        let target = self.base + now;
        self.rt
            .block_on(async move { tokio::time::sleep_until(target).await });
    }
}
