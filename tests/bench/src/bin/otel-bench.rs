//! What trace export costs the lease loop: a `leasehold run` holding a group of `OTEL_SHARDS`
//! (default 1,000) shards at ttl `OTEL_TTL` (default 1 s: a renewal every ~330 ms, so a p99 has
//! samples behind it) on a PostgreSQL of the bench's own, in three modes: without export,
//! exporting to a real OTLP receiver, and exporting to a collector that accepts and never
//! answers. The modes take turns, `OTEL_WINDOW` (default 20 s) each, for `OTEL_ROUNDS` (default
//! 4; ~240 renewals a mode) rounds, each round starting with the next mode: drift in the
//! machine's load then falls on every mode alike, where one long window per mode gave it to
//! whichever ran at the wrong time. For each mode it prints the batched renewals of all its
//! windows (median, p99, worst, from the holder's log), the spans sent, dropped and lost, and
//! the shards lost; then renewal p99 with export against without (the goal: within 10%).

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use leasehold_tests::flood::{Holding, renewals, start_holder_with};
use leasehold_tests::log::Logged;
use leasehold_tests::otlp::{Receiver, black_hole, span_counter};
use leasehold_tests::pg::Postgres;
use leasehold_tests::stats::{env_count, env_duration, quantile, summary};

/// One mode's windows, pooled.
#[derive(Default)]
struct Mode {
    name: &'static str,
    /// The collector's base URL; `None` for no export.
    endpoint: Option<String>,
    /// Every renewal round trip of every window.
    took: Vec<Duration>,
    failed: usize,
    /// Shards lost or moved, over all windows.
    lost: usize,
    /// Spans exported, dropped, failed, over all windows.
    spans: [f64; 3],
}

/// One window of `mode`: a fresh holder, its renewals over `window`, its counters.
async fn window(
    mode: &mut Mode,
    pg: &Postgres,
    (shards, ttl, window): (usize, Duration, Duration),
) -> anyhow::Result<()> {
    let url = pg.fresh_database().await?;
    let env: Vec<(&str, &str)> = match &mode.endpoint {
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
    let (took, failed) = renewals(&host, from);
    let after = Holding::of(&host).await?;
    let metrics = host.metrics().await?;
    for (i, name) in ["exported", "dropped", "export_failed"].iter().enumerate() {
        mode.spans[i] += span_counter(&metrics, name).unwrap_or(0.0);
    }
    mode.took.extend(took);
    mode.failed += failed;
    mode.lost += after.lost_since(&before);
    host.stop(Duration::from_secs(30)).await?;
    Ok(())
}

/// The p99 of `samples`, sorted in place.
fn p99(samples: &mut [Duration]) -> Duration {
    samples.sort();
    quantile(samples, 0.99)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let shards = env_count("OTEL_SHARDS", 1_000);
    let ttl = env_duration("OTEL_TTL", Duration::from_secs(1))?;
    let each = env_duration("OTEL_WINDOW", Duration::from_secs(20))?;
    let rounds = env_count("OTEL_ROUNDS", 4).max(1);
    println!(
        "trace export benchmark: leasehold {}; PostgreSQL, {shards} shards, ttl {ttl:?}, {rounds} rounds of a {each:?} window per mode, in turns",
        leasehold_tests::host::binary()?.display()
    );
    let pg = Postgres::start_private(&[])?;
    let receiver = Receiver::start().await?;
    let hole = black_hole().await?;
    let mut modes = [
        Mode {
            name: "renewal, export off",
            ..Mode::default()
        },
        Mode {
            name: "renewal, exporting to a receiver",
            endpoint: Some(receiver.endpoint()),
            ..Mode::default()
        },
        Mode {
            name: "renewal, exporting to a collector that never answers",
            endpoint: Some(hole.endpoint()),
            ..Mode::default()
        },
    ];
    for round in 0..rounds {
        for turn in 0..modes.len() {
            let mode = &mut modes[(round + turn) % 3];
            window(mode, &pg, (shards, ttl, each)).await?;
        }
        let p99s: Vec<String> = modes
            .iter()
            .map(|m| format!("{:.1?}", p99(&mut m.took.clone())))
            .collect();
        println!(
            "  after round {}: p99 so far off / on / never answered: {}",
            round + 1,
            p99s.join(" / ")
        );
    }
    for mode in &mut modes {
        println!(
            "  {} (failed {})",
            summary(mode.name, &mut mode.took),
            mode.failed
        );
        println!(
            "    spans exported {:.0}, dropped {:.0}, export failed {:.0}; shards lost or moved: {} over {rounds} windows of {shards}",
            mode.spans[0], mode.spans[1], mode.spans[2], mode.lost
        );
    }
    let [off, on, stalled] = modes.map(|mut m| p99(&mut m.took));
    let ratio = |p99: Duration| p99.as_secs_f64() / off.as_secs_f64().max(1e-9);
    println!(
        "  renewal p99: off {off:?}, exporting {on:?} ({:.2}x), never answered {stalled:?} ({:.2}x); goal: within 1.10x",
        ratio(on),
        ratio(stalled)
    );
    Ok(())
}
