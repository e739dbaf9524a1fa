//! `leasehold-sim`: runs seeds of the lease simulator and reports what the oracle found
//! (`make sim`, `make sim SEED=…`, `make sim SEEDS=…`).

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use clap::Parser;

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
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if let Some(seed) = args.seed {
        let outcome = leasehold_sim::run(seed, true)?;
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
    let threads = args
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let next = AtomicU64::new(args.from);
    let end = args.from.saturating_add(args.seeds);
    let failed: Mutex<Vec<u64>> = Mutex::new(Vec::new());
    let errors: Mutex<Vec<String>> = Mutex::new(Vec::new());
    let started = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..threads.max(1) {
            s.spawn(|| {
                loop {
                    let seed = next.fetch_add(1, Ordering::SeqCst);
                    if seed >= end {
                        return;
                    }
                    match leasehold_sim::run(seed, false) {
                        Ok(outcome) if outcome.violations.is_empty() => {}
                        Ok(outcome) => {
                            for v in &outcome.violations {
                                println!("seed {seed}: violation: {}: {}", v.rule, v.detail);
                            }
                            println!("  replay: make sim SEED={seed}");
                            failed.lock().unwrap_or_else(|p| p.into_inner()).push(seed);
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
    let failed = failed.into_inner().unwrap_or_default();
    let errors = errors.into_inner().unwrap_or_default();
    for e in &errors {
        println!("error: {e}");
    }
    #[allow(clippy::cast_precision_loss)] // a rate for people
    let rate = args.seeds as f64 / took.max(1e-9);
    println!(
        "seeds: {}, violations: {} (seeds {:?}), seeds per second: {rate:.1}",
        args.seeds,
        failed.len(),
        failed
    );
    if !failed.is_empty() || !errors.is_empty() {
        std::process::exit(1);
    }
    Ok(())
}
