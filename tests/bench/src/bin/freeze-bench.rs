//! Figures of frozen holders between real processes on a real PostgreSQL: three replicas run
//! hello-reconciler every 15 ms; each trial freezes the holder (SIGSTOP) past the ttl until another
//! replica has acquired the next epoch, then resumes it (SIGCONT). Prints the trials, the guest
//! calls started after the frozen holder's `safe_until` (must be 0, docs/ARCHITECTURE.md §3.4),
//! each such call, and resume → `term ended` (median / p99) from the holder's own log.
//! `BENCH_TRIALS` (default 50) and `BENCH_TTL` (default 1s) change the run.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use leasehold_tests::freeze::{FreezeSettings, run_freeze_trials};
use leasehold_tests::stats::{env_count, env_duration};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let trials = env_count("BENCH_TRIALS", 50);
    let ttl = env_duration("BENCH_TTL", Duration::from_secs(1))?;
    let out = run_freeze_trials(&FreezeSettings::new(trials, ttl)).await?;
    println!("{}", out.report());
    Ok(())
}
