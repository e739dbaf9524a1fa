//! The fault suite in full (`make chaos`): every fault of `chaos::faults` on a cluster of its
//! own, `CHAOS_TRIALS` trials each (default 20), hosts at `CHAOS_TTL` (default 2s); `CHAOS_FAULT`
//! (a substring of a fault's name, e.g. `failover`) runs only the matching ones. Prints per fault:
//! trials, overlapping terms, stale fenced commits, epochs going back, epochs handed out twice
//! (all must be 0), and the longest pause of work per trial (median / max) against the fault's
//! bound. Exits 1 when a history is unsafe, a pause exceeds its bound or a host exited.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use leasehold_tests::chaos::checker::Summary;
use leasehold_tests::chaos::faults::Fault;
use leasehold_tests::chaos::trials::run_fault;
use leasehold_tests::stats::{env_count, env_duration};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let trials = env_count("CHAOS_TRIALS", 20);
    let ttl = env_duration("CHAOS_TTL", Duration::from_secs(2))?;
    let only = std::env::var("CHAOS_FAULT").unwrap_or_default();
    let mut summary = Summary::default();
    let mut failed = Vec::new();
    for fault in Fault::all() {
        let name = fault.name();
        if !name.contains(&only) {
            continue;
        }
        eprintln!("{name}: {trials} trials…");
        let run = run_fault(fault, trials, ttl).await?;
        summary.add_run(&name, &run.verdict, &run.pauses);
        let mut this = Summary::default();
        this.add_run(&name, &run.verdict, &run.pauses);
        let over = run.over_bound(ttl);
        let server = run.server_time.iter().max().copied().unwrap_or_default();
        println!(
            "{this}  (bound {:.1} s + the server's own stop and start, at most {:.1} s; over it {over})",
            fault.bound(ttl).as_secs_f64(),
            server.as_secs_f64()
        );
        if !run.verdict.is_safe() {
            failed.push(format!("{name}: {}", run.verdict));
        }
        if over > 0 {
            failed.push(format!("{name}: {over} trials over the bound"));
        }
        failed.extend(run.exits.iter().map(|e| format!("{name}: {e}")));
    }
    println!(
        "\nttl {:.1} s; recovery = the longest pause of work from just before the fault until one holder worked steadily again\n{summary}",
        ttl.as_secs_f64()
    );
    if !failed.is_empty() {
        eprintln!("\nFAILED:\n{}", failed.join("\n"));
        std::process::exit(1);
    }
    Ok(())
}
