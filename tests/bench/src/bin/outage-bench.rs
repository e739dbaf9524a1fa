//! What a database outage costs the log and the database: on a PostgreSQL of the bench's own,
//! `OUTAGE_REPLICAS` (default 2) `leasehold run` replicas at ttl `OUTAGE_TTL` (default 2 s) reach
//! the server through a TCP proxy that accepts every connection and closes it while the server is
//! down (as HAProxy does with no primary behind it). Each of `OUTAGE_TRIALS` (default 3) trials
//! stops the server for `OUTAGE_LENGTH` (default 20 s) and starts it again; the bench prints, per
//! replica, the warnings and errors it logged, its failed campaigns a second and how many of each
//! cause (from `leasehold_store_errors_total`), the connection attempts a second per replica (the
//! proxy's count of connections accepted), and the time from the restart to a leader.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use leasehold_tests::host::{Host, wait_for_single_leader};
use leasehold_tests::log::Logged;
use leasehold_tests::pg::Postgres;
use leasehold_tests::proxy::{Proxy, upstream_of};
use leasehold_tests::stats::{env_count, env_duration, summary};

/// The campaigns `host` has seen fail, by the `cause` label of its metrics (every cause a line
/// of its own, so the total is their sum).
async fn failed_campaigns(host: &Host) -> anyhow::Result<BTreeMap<String, f64>> {
    let metrics = host.metrics().await?;
    let mut by_cause = BTreeMap::new();
    for line in metrics
        .lines()
        .filter(|l| l.starts_with("leasehold_store_errors_total{") && l.contains("op=\"campaign\""))
    {
        let Some(count) = line.rsplit(' ').next().and_then(|n| n.parse::<f64>().ok()) else {
            continue;
        };
        let cause = line
            .split_once("cause=\"")
            .and_then(|(_, rest)| rest.split_once('"'))
            .map_or("?", |(cause, _)| cause);
        *by_cause.entry(cause.to_string()).or_insert(0.0) += count;
    }
    Ok(by_cause)
}

/// The failures in `during` and not in `before`, per cause, and their total.
fn failed_between(before: &BTreeMap<String, f64>, during: &BTreeMap<String, f64>) -> (f64, String) {
    let mut total = 0.0;
    let mut causes = Vec::new();
    for (cause, n) in during {
        let n = n - before.get(cause).copied().unwrap_or(0.0);
        if n > 0.0 {
            total += n;
            causes.push(format!("{cause} {n}"));
        }
    }
    (total, causes.join(", "))
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let replicas = env_count("OUTAGE_REPLICAS", 2);
    let trials = env_count("OUTAGE_TRIALS", 3);
    let ttl = env_duration("OUTAGE_TTL", Duration::from_secs(2))?;
    let length = env_duration("OUTAGE_LENGTH", Duration::from_secs(20))?;
    let pg = Postgres::start_private(&[])?;
    let url = pg.fresh_database().await?;
    let proxy = Proxy::start(upstream_of(&url)?)?;
    let through = proxy.url(&url)?;
    let ttl_arg = format!("{}ms", ttl.as_millis());
    let mut hosts = Vec::new();
    for i in 0..replicas {
        let args = [
            "--database-url",
            through.as_str(),
            "--ttl",
            ttl_arg.as_str(),
        ];
        hosts.push(Host::start(&format!("r{i}"), &args).await?);
    }
    let all: Vec<&Host> = hosts.iter().collect();
    wait_for_single_leader(&all, "leader", Duration::from_secs(30)).await?;
    println!(
        "outage benchmark: {replicas} replicas, ttl {ttl:?}, {trials} outages of {length:?} behind a proxy that accepts and closes"
    );
    let mut back = Vec::new();
    for trial in 0..trials {
        // Settled: listeners subscribed, renewals landing.
        tokio::time::sleep(ttl).await;
        let mut from = Vec::new();
        let mut before = Vec::new();
        for h in &hosts {
            from.push(h.log_len());
            before.push(failed_campaigns(h).await?);
        }
        pg.stop()?;
        let connects_before = proxy.accepted();
        tokio::time::sleep(length).await;
        let connects = proxy.accepted() - connects_before;
        let mut during = Vec::new();
        for h in &hosts {
            during.push(failed_campaigns(h).await?);
        }
        pg.restart()?;
        let restarted = Instant::now();
        wait_for_single_leader(&all, "leader", Duration::from_secs(60)).await?;
        back.push(restarted.elapsed());
        for (i, h) in hosts.iter().enumerate() {
            let lines = h.log_lines_from(from[i]);
            let warned = lines
                .iter()
                .filter(|l| l.contains(" WARN ") || l.contains(" ERROR "))
                .count();
            let (failed, causes) = failed_between(&before[i], &during[i]);
            println!(
                "  trial {trial}, {}: {warned} warnings and errors, {:.2} failed campaigns a second (by cause: {causes})",
                h.name,
                failed / length.as_secs_f64()
            );
        }
        println!(
            "  trial {trial}: {:.2} connection attempts a second per replica (the proxy's count)",
            connects as f64 / hosts.len() as f64 / length.as_secs_f64()
        );
    }
    println!(
        "  {}",
        summary("server restarted → a leader again", &mut back)
    );
    Ok(())
}
