//! What leases cost at scale, between real `leasehold` processes on a PostgreSQL of the bench's
//! own (so that its CPU is the bench's alone):
//! - for each count in `SCALE_LEASES` (default 1,000 and 10,000): three replicas campaign for
//!   every lease; the first to start holds them all, the other two stand by. Over a window of
//!   `SCALE_WINDOW` (default 30 s) at ttl `SCALE_TTL` (default 6 s) it prints the CPU of the
//!   holder, of each standby and of PostgreSQL (% of one core), the holder's batched renewal
//!   (median, p99, worst, from its own log) and what a `/metrics` scrape costs;
//! - an idle host holding its lease with ten plugins: CPU over the window and resident memory.

#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use anyhow::Context;
use leasehold_tests::host::{Host, HostBuilder};
use leasehold_tests::log::{Logged, renewals};
use leasehold_tests::pg::Postgres;
use leasehold_tests::procstat::{
    CpuWindow, cpu_seconds, peak_rss_kib, postmaster, rss_kib, tree_cpu_seconds,
};
use leasehold_tests::stats::{env_duration, summary};
use sqlx::Connection;

/// How many leases each holder holds now, by the database's clock.
async fn held_by(url: &str) -> anyhow::Result<Vec<(String, i64)>> {
    let mut conn = sqlx::PgConnection::connect(url).await?;
    let rows = sqlx::query_as(
        "SELECT holder, count(*) FROM leasehold_leases WHERE expires_at > now() GROUP BY holder",
    )
    .fetch_all(&mut conn)
    .await?;
    conn.close().await?;
    Ok(rows)
}

/// One scrape of `/metrics`: how long it took and how many bytes and series it returned.
async fn scrape(host: &Host) -> anyhow::Result<(Duration, usize, usize)> {
    let started = Instant::now();
    let body = reqwest::get(format!("http://{}/metrics", host.addr()))
        .await?
        .text()
        .await?;
    let took = started.elapsed();
    let series = body.lines().filter(|l| !l.starts_with('#')).count();
    Ok((took, body.len(), series))
}

async fn at_scale(count: usize, ttl: Duration, window: Duration) -> anyhow::Result<()> {
    let pg = Postgres::start_private(&[])?;
    let url = pg.fresh_database().await?;
    let names: Vec<String> = (0..count).map(|i| format!("\"shard-{i:05}\"")).collect();
    let config = format!("leases = [{}]\n", names.join(", "));
    let start = |name: &str, log: &str| {
        HostBuilder::new(name)
            .database_url(&url)
            .ttl(ttl)
            .config(&config)
            .env("RUST_LOG", log)
            .spawn()
    };
    // The holder logs each renewal's round trip (a debug line every ttl/3).
    let holder = start("holder", "info,leasehold::lease::driver=debug").await?;
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let held = held_by(&url).await?;
        if held.len() == 1 && held[0].1 == i64::try_from(count)? {
            break;
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "the first replica did not take all {count} leases: {held:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let standbys = [
        start("standby-1", "info").await?,
        start("standby-2", "info").await?,
    ];
    // Past the standbys' start-up and first campaigns.
    tokio::time::sleep(ttl * 2).await;
    let root = {
        let mut conn = sqlx::PgConnection::connect(&url).await?;
        let root = postmaster(&mut conn).await?;
        conn.close().await?;
        root
    };
    let pids = [holder.pid(), standbys[0].pid(), standbys[1].pid()];
    let read = || -> anyhow::Result<Vec<f64>> {
        let mut r = pids
            .iter()
            .map(|p| cpu_seconds(*p))
            .collect::<anyhow::Result<Vec<_>>>()?;
        r.push(tree_cpu_seconds(root)?);
        Ok(r)
    };
    let from = holder.log_len();
    let cpu = CpuWindow::start(read()?);
    tokio::time::sleep(window).await;
    let pct = cpu.percent(&read()?);
    let mut renewed = renewals(&holder, from);
    let held = held_by(&url).await?;
    anyhow::ensure!(
        held.len() == 1 && held[0].1 == i64::try_from(count)?,
        "the holder lost leases during the window: {held:?}"
    );
    let (holder_scrape, holder_bytes, holder_series) = scrape(&holder).await?;
    let (standby_scrape, _, _) = scrape(&standbys[0]).await?;
    println!(
        "{count} leases x 3 replicas (ttl {ttl:?}, {window:?} window): holder {:.1}% of a core, standbys {:.1}% and {:.1}%, PostgreSQL {:.1}%",
        pct[0], pct[1], pct[2], pct[3]
    );
    println!(
        "  {}",
        summary("holder's batched renewal (its log)", &mut renewed)
    );
    println!(
        "  /metrics: {holder_series} series, {} KiB; a scrape takes {holder_scrape:.1?} on the holder, {standby_scrape:.1?} on a standby",
        holder_bytes / 1024
    );
    Ok(())
}

async fn idle_host(window: Duration) -> anyhow::Result<()> {
    let pg = Postgres::start_private(&[])?;
    let url = pg.fresh_database().await?;
    let dist = leasehold_tests::host::guests_dist();
    let plugins = tempfile::tempdir()?;
    for i in 0..10 {
        std::fs::copy(
            dist.join("hello-reconciler.wasm"),
            plugins.path().join(format!("idle-{i}.wasm")),
        )?;
        std::fs::write(
            plugins.path().join(format!("idle-{i}.toml")),
            "[schedule]\ninterval = \"60s\"\n[config]\ngreeting = \"idle\"\n",
        )?;
    }
    let host = HostBuilder::new("idle")
        .database_url(&url)
        .plugins(plugins.path())
        .spawn()
        .await?;
    host.wait_for_log("idle-9", Duration::from_secs(60))
        .await
        .context("the ten plugins did not start")?;
    // Past the first calls of every plugin.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let cpu = CpuWindow::start(vec![cpu_seconds(host.pid())?]);
    tokio::time::sleep(window).await;
    let pct = cpu.percent(&[cpu_seconds(host.pid())?]);
    let rss = rss_kib(host.pid())?;
    let peak = peak_rss_kib(host.pid())?;
    println!(
        "idle host holding its lease with 10 plugins (default ttl, {window:?} window): {:.2}% of a core, RSS {:.1} MiB (peak {:.1} MiB)",
        pct[0],
        rss as f64 / 1024.0,
        peak as f64 / 1024.0
    );
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let counts: Vec<usize> = std::env::var("SCALE_LEASES")
        .unwrap_or_else(|_| "1000,10000".into())
        .split(',')
        .map(|c| {
            c.trim()
                .parse()
                .context("SCALE_LEASES: counts, comma-separated")
        })
        .collect::<anyhow::Result<_>>()?;
    let ttl = env_duration("SCALE_TTL", Duration::from_secs(6))?;
    let window = env_duration("SCALE_WINDOW", Duration::from_secs(30))?;
    println!(
        "scale benchmark: leasehold {}",
        leasehold_tests::host::binary()?.display()
    );
    for count in counts {
        at_scale(count, ttl, window).await?;
    }
    idle_host(window.min(Duration::from_secs(20))).await
}
