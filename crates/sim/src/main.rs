//! `leasehold-sim`: runs seeds of the lease simulator and reports what the oracle found
//! (`make sim`, `make sim SEED=…`, `make sim SEEDS=…`, `make sim MUTANTS=all`).

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

use clap::Parser;
use leasehold_sim::Planted;

/// Runs seeded simulations of the lease layer and checks every run.
#[derive(Debug, Parser)]
#[command(name = "leasehold-sim")]
struct Args {
    /// Replays one seed: prints its event log, its violations, and on the last line the log's
    /// hash.
    #[arg(long)]
    seed: Option<u64>,
    /// How many seeds to run.
    #[arg(long, default_value_t = 20_000)]
    seeds: u64,
    /// The first seed.
    #[arg(long, default_value_t = 0)]
    from: u64,
    /// Threads to run seeds on (default: one per core).
    #[arg(long)]
    threads: Option<usize>,
    /// Plants a bug (by name) in every run: with `--seed`, to replay how a seed caught it.
    #[arg(long, value_parser = planted)]
    plant: Option<Planted>,
    /// Proves the oracle can fail: plants each bug named (`all`, or names separated by commas)
    /// and runs seeds until one catches it; fails if one is still missed after `--seeds`.
    #[arg(long)]
    mutants: Option<String>,
    /// Runs this many of the seeds a second time, spread over the range, and fails unless each
    /// gives the same event log hash again.
    #[arg(long, default_value_t = 20)]
    replay_check: u64,
}

fn planted(name: &str) -> Result<Planted, String> {
    Planted::ALL
        .into_iter()
        .find(|p| p.name() == name)
        .ok_or_else(|| {
            let names: Vec<&str> = Planted::ALL.iter().map(|p| p.name()).collect();
            format!(
                "no planted bug is called {name:?}; there are {}",
                names.join(", ")
            )
        })
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let threads = args
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
        .max(1);
    if let Some(seed) = args.seed {
        let outcome = leasehold_sim::run(seed, args.plant, true)?;
        for v in &outcome.violations {
            println!("violation: {}: {}", v.rule, v.detail);
        }
        println!(
            "seed {seed}: {} violations, log hash {}",
            outcome.violations.len(),
            outcome.hash
        );
        std::process::exit(i32::from(!outcome.violations.is_empty()));
    }
    if let Some(which) = &args.mutants {
        let bugs = match which.as_str() {
            "all" => Planted::ALL.to_vec(),
            names => names
                .split(',')
                .map(|n| planted(n.trim()))
                .collect::<Result<_, _>>()
                .map_err(anyhow::Error::msg)?,
        };
        let mut missed = 0;
        for bug in bugs {
            let started = Instant::now();
            match hunt(bug, args.from, args.seeds, threads)? {
                Some((seed, rule)) => println!(
                    "planted {}: caught by seed {seed} ({} seeds in), {rule}, in {:.1} s; replay: make sim SEED={seed} PLANT={}",
                    bug.name(),
                    seed - args.from + 1,
                    started.elapsed().as_secs_f64(),
                    bug.name()
                ),
                None => {
                    missed += 1;
                    println!(
                        "planted {}: MISSED by all {} seeds from {}",
                        bug.name(),
                        args.seeds,
                        args.from
                    );
                }
            }
        }
        if missed > 0 {
            println!("{missed} planted bugs missed");
            std::process::exit(1);
        }
        return Ok(());
    }
    sweep(&args, threads)
}

/// Runs the seeds of `from..from + count` with `bug` planted until one finds a violation; the
/// first seed (in seed order) that does, and its first violation's rule.
fn hunt(
    bug: Planted,
    from: u64,
    count: u64,
    threads: usize,
) -> anyhow::Result<Option<(u64, &'static str)>> {
    let next = AtomicU64::new(from);
    let end = from.saturating_add(count);
    let found: Mutex<Option<(u64, &'static str)>> = Mutex::new(None);
    let stop = AtomicBool::new(false);
    let errors: Mutex<Vec<String>> = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                while !stop.load(Ordering::SeqCst) {
                    let seed = next.fetch_add(1, Ordering::SeqCst);
                    if seed >= end {
                        return;
                    }
                    match leasehold_sim::run(seed, Some(bug), false) {
                        Ok(outcome) => {
                            if let Some(v) = outcome.violations.first() {
                                let mut found = found.lock().unwrap_or_else(|p| p.into_inner());
                                if found.is_none_or(|(s, _)| seed < s) {
                                    *found = Some((seed, v.rule));
                                }
                                stop.store(true, Ordering::SeqCst);
                            }
                        }
                        Err(e) => {
                            errors
                                .lock()
                                .unwrap_or_else(|p| p.into_inner())
                                .push(format!("seed {seed}: {e:#}"));
                            stop.store(true, Ordering::SeqCst);
                        }
                    }
                }
            });
        }
    });
    if let Some(e) = errors.into_inner().unwrap_or_default().first() {
        anyhow::bail!("{e}");
    }
    Ok(found.into_inner().unwrap_or(None))
}

/// Runs every seed of the range, reports each violation with the command that replays it, then
/// replays a sample and compares hashes; the last line says how many seeds ran, how many broke
/// a promise, and how fast.
fn sweep(args: &Args, threads: usize) -> anyhow::Result<()> {
    let next = AtomicU64::new(args.from);
    let end = args.from.saturating_add(args.seeds);
    let every = (args.seeds / args.replay_check.max(1)).max(1);
    let sampled = |seed: u64| args.replay_check > 0 && (seed - args.from).is_multiple_of(every);
    let failed: Mutex<Vec<u64>> = Mutex::new(Vec::new());
    let errors: Mutex<Vec<String>> = Mutex::new(Vec::new());
    let hashes: Mutex<BTreeMap<u64, String>> = Mutex::new(BTreeMap::new());
    let started = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                loop {
                    let seed = next.fetch_add(1, Ordering::SeqCst);
                    if seed >= end {
                        return;
                    }
                    match leasehold_sim::run(seed, args.plant, false) {
                        Ok(outcome) => {
                            if sampled(seed) {
                                hashes
                                    .lock()
                                    .unwrap_or_else(|p| p.into_inner())
                                    .insert(seed, outcome.hash.clone());
                            }
                            if !outcome.violations.is_empty() {
                                for v in &outcome.violations {
                                    println!("seed {seed}: violation: {}: {}", v.rule, v.detail);
                                }
                                println!("  replay: make sim SEED={seed}");
                                failed.lock().unwrap_or_else(|p| p.into_inner()).push(seed);
                            }
                        }
                        Err(e) => errors
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .push(format!("seed {seed}: {e:#}")),
                    }
                }
            });
        }
    });
    let took = started.elapsed().as_secs_f64();
    let mut errors = errors.into_inner().unwrap_or_default();
    let hashes = hashes.into_inner().unwrap_or_default();
    for (seed, hash) in &hashes {
        match leasehold_sim::run(*seed, args.plant, false) {
            Ok(again) if &again.hash == hash => {}
            Ok(again) => errors.push(format!(
                "seed {seed} does not replay: log hash {hash}, then {}",
                again.hash
            )),
            Err(e) => errors.push(format!("seed {seed}: {e:#}")),
        }
    }
    let mut failed = failed.into_inner().unwrap_or_default();
    failed.sort_unstable();
    for e in &errors {
        println!("error: {e}");
    }
    println!(
        "replayed {} seeds: {}",
        hashes.len(),
        if errors.is_empty() {
            "same hashes"
        } else {
            "see errors above"
        }
    );
    #[allow(clippy::cast_precision_loss)] // a rate for people
    let rate = args.seeds as f64 / took.max(1e-9);
    println!(
        "seeds: {}, violations: {}{}, seeds per second: {rate:.1}",
        args.seeds,
        failed.len(),
        match failed.is_empty() {
            true => String::new(),
            false => format!(" (seeds {failed:?})"),
        }
    );
    if !failed.is_empty() || !errors.is_empty() {
        std::process::exit(1);
    }
    Ok(())
}
