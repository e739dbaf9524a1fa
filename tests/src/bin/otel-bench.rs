//! What trace export costs the lease loop: a `leasehold run` holding a group of `OTEL_SHARDS`
//! (default 1,000) shards at ttl `OTEL_TTL` (default 3 s) on a PostgreSQL of the bench's own,
//! three times over `OTEL_WINDOW` (default 30 s) each: without export, exporting to a real OTLP
//! receiver, and exporting to a collector that accepts and never answers. For each it prints the
//! batched renewal (median, p99, worst, from the holder's log), the spans sent, dropped and lost,
//! and the leases lost; then renewal p99 with export against without (the goal: within 10%).

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use leasehold_tests::flood::{Holding, renewals, start_holder_with};
use leasehold_tests::log::Logged;
use leasehold_tests::otlp::{Receiver, black_hole};
use leasehold_tests::pg::Postgres;
use leasehold_tests::stats::{env_count, env_duration, summary};

/// One trial's renewal p99.
async fn trial(
    name: &str,
    pg: &Postgres,
    (shards, ttl, window): (usize, Duration, Duration),
    endpoint: Option<&str>,
) -> anyhow::Result<Duration> {
    let url = pg.fresh_database().await?;
    let env: Vec<(&str, &str)> = match endpoint {
        Some(endpoint) => vec![
            ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint),
            ("OTEL_SERVICE_NAME", "otel-bench"),
        ],
        None => Vec::new(),
    };
    let mut host = start_holder_with(&url, shards, ttl, &env).await?;
    let before = Holding::of(&host).await?;
    let from = host.log_len();
    tokio::time::sleep(window).await;
    let (mut took, failed) = renewals(&host, from);
    let after = Holding::of(&host).await?;
    let lost = after.lost_since(&before);
    let metrics = host.metrics().await?;
    let counter = |name: &str| {
        let line = format!("leasehold_trace_spans_{name}_total ");
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(&line)?.trim().parse::<f64>().ok())
            .map_or("-".to_string(), |v| format!("{v:.0}"))
    };
    took.sort();
    // As `summary` picks it.
    let p99 = match took.len() {
        0 => Duration::ZERO,
        n => took[((n - 1) as f64 * 0.99).round() as usize],
    };
    println!("  {} (failed {failed})", summary(name, &mut took));
    println!(
        "    spans exported {}, dropped {}, export failed {}; shards lost or moved: {lost} of {}",
        counter("exported"),
        counter("dropped"),
        counter("export_failed"),
        before.epochs.len()
    );
    host.stop(Duration::from_secs(30)).await?;
    Ok(p99)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let shards = env_count("OTEL_SHARDS", 1_000);
    let ttl = env_duration("OTEL_TTL", Duration::from_secs(3))?;
    let window = env_duration("OTEL_WINDOW", Duration::from_secs(30))?;
    println!(
        "trace export benchmark: leasehold {}; PostgreSQL, {shards} shards, ttl {ttl:?}, {window:?} each",
        leasehold_tests::host::binary()?.display()
    );
    let pg = Postgres::start_private(&[])?;
    let setting = (shards, ttl, window);
    let off = trial("renewal, export off", &pg, setting, None).await?;
    let receiver = Receiver::start().await?;
    let on = trial(
        "renewal, exporting to a receiver",
        &pg,
        setting,
        Some(&receiver.endpoint()),
    )
    .await?;
    let hole = black_hole().await?;
    let stalled = trial(
        "renewal, exporting to a collector that never answers",
        &pg,
        setting,
        Some(&hole.endpoint()),
    )
    .await?;
    let ratio = |p99: Duration| p99.as_secs_f64() / off.as_secs_f64().max(1e-9);
    println!(
        "  renewal p99: off {off:?}, exporting {on:?} ({:.2}x), never answered {stalled:?} ({:.2}x); goal: within 1.10x",
        ratio(on),
        ratio(stalled)
    );
    Ok(())
}
