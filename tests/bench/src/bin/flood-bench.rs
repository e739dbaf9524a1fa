//! What a flood of watchers costs the lease loop: a `leasehold run` holding a group of
//! `FLOOD_SHARDS` (default 1,000) shards at ttl `FLOOD_TTL` (default 3 s), on a SQLite file and on
//! a PostgreSQL of the bench's own. For each it prints the batched renewal (median, p99, worst,
//! from the holder's log) over `FLOOD_WINDOW` (default 15 s) without watchers, then over the same
//! window while `FLOOD_CLIENTS` (default 250) keep-alive clients ask for `/status`, `/` and
//! `/metrics` as fast as the host answers; what they were answered; and the leases lost.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use leasehold_tests::flood::{Holding, flood, renewals, start_holder};
use leasehold_tests::log::Logged;
use leasehold_tests::pg::Postgres;
use leasehold_tests::stats::{env_count, env_duration, summary};

async fn trial(
    backend: &str,
    url: &str,
    shards: usize,
    ttl: Duration,
    clients: usize,
    window: Duration,
) -> anyhow::Result<()> {
    let host = start_holder(url, shards, ttl).await?;
    let before = Holding::of(&host).await?;
    let quiet_from = host.log_len();
    tokio::time::sleep(window).await;
    let (mut quiet, quiet_failed) = renewals(&host, quiet_from);
    let flood_from = host.log_len();
    let flooded = flood(host.addr(), clients, window).await?;
    let (mut during, during_failed) = renewals(&host, flood_from);
    let after = Holding::of(&host).await?;
    let lost = after.lost_since(&before);
    println!("{backend}, {shards} shards, ttl {ttl:?}:");
    println!(
        "  {} (failed {quiet_failed})",
        summary("renewal, no watchers", &mut quiet)
    );
    println!(
        "  {} (failed {during_failed})",
        summary(&format!("renewal, {clients} clients flooding"), &mut during)
    );
    let per_second = |n: u64| n as f64 / flooded.took.as_secs_f64();
    println!(
        "  answered {:.0}/s: /status {:.0}/s, / {:.0}/s, /metrics {:.0}/s; {} requests failed",
        per_second(flooded.answered()),
        per_second(flooded.ok.get("/status").copied().unwrap_or(0)),
        per_second(flooded.ok.get("/").copied().unwrap_or(0)),
        per_second(flooded.ok.get("/metrics").copied().unwrap_or(0)),
        flooded.failures()
    );
    println!(
        "  shards lost or moved: {lost} of {}; role changes during the flood: {}",
        before.epochs.len(),
        after.transitions.saturating_sub(before.transitions)
    );
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let shards = env_count("FLOOD_SHARDS", 1_000);
    let clients = env_count("FLOOD_CLIENTS", 250);
    let ttl = env_duration("FLOOD_TTL", Duration::from_secs(3))?;
    let window = env_duration("FLOOD_WINDOW", Duration::from_secs(15))?;
    println!(
        "flood benchmark: leasehold {}",
        leasehold_tests::host::binary()?.display()
    );
    let dir = tempfile::tempdir()?;
    let sqlite = format!("sqlite:{}", dir.path().join("leases.db").display());
    trial("SQLite", &sqlite, shards, ttl, clients, window).await?;
    let pg = Postgres::start_private(&[])?;
    let url = pg.fresh_database().await?;
    trial("PostgreSQL", &url, shards, ttl, clients, window).await
}
