//! What the lease API's watch streams cost and how fast they tell: on a PostgreSQL of the bench's
//! own, two `leasehold run` replicas (ttl `WATCH_TTL`, default 3 s) hand one lease back and forth
//! `WATCH_HANDOFFS` times (default 30) through the admin API while a client watches it on each;
//! it prints the time from a term's start and end (the host's own stamp) to the event reaching
//! the client (median, p99). Then, for each count of `WATCH_COUNTS` (default 1000,2000,4000), it
//! opens that many watch streams on one replica, holds them `WATCH_WINDOW` (default 10 s) and
//! prints the host's memory and CPU per watcher, the events they got, and the times an event came
//! after the deadline the one before it set; and what `WATCH_STALLED` (default 1000) streams whose
//! clients never read cost it over the same window.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use leasehold_tests::admin::{handoff, token_file};
use leasehold_tests::flood::watch_all;
use leasehold_tests::host::{Host, HostBuilder};
use leasehold_tests::pg::Postgres;
use leasehold_tests::procstat::{cpu_seconds, rss_kib};
use leasehold_tests::sse::Watch;
use leasehold_tests::stats::{env_count, env_duration, summary};

const LEASE: &str = "leader";

async fn replica(
    name: &str,
    url: &str,
    ttl: Duration,
    token: &std::path::Path,
) -> anyhow::Result<Host> {
    HostBuilder::new(name)
        .database_url(url)
        .ttl(ttl)
        .args(&["--admin-token-file", token.to_str().unwrap()])
        .spawn()
        .await
}

/// Hands the lease back and forth `handoffs` times, watching it on both replicas.
async fn latency(hosts: &[Host; 2], handoffs: usize) -> anyhow::Result<()> {
    let mut watches = [
        Watch::open(hosts[0].addr(), LEASE, None).await?.follow(),
        Watch::open(hosts[1].addr(), LEASE, None).await?.follow(),
    ];
    let mut holder = if hosts[0].status().await?.leases[0].holder.as_deref()
        == Some(hosts[0].status().await?.replica.as_str())
    {
        0
    } else {
        1
    };
    let (mut to_started, mut to_ended) = (Vec::new(), Vec::new());
    let wait = Duration::from_secs(30);
    for _ in 0..handoffs {
        // Settle: the next holder's release notifications are listened for.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let answer = handoff(&hosts[holder], LEASE, None).await?;
        anyhow::ensure!(answer.status == 200, "handoff: {}", answer.text);
        let (ended, _) = watches[holder].until("ended", wait).await?;
        let next = 1 - holder;
        let (started, _) = watches[next].until("started", wait).await?;
        let delay = |e: &leasehold_tests::sse::SseEvent| {
            let at = e.field("at_ms").as_u64().unwrap_or(0);
            Duration::from_millis(e.received_ms().saturating_sub(at))
        };
        to_ended.push(delay(&ended));
        to_started.push(delay(&started));
        holder = next;
    }
    println!(
        "  {}",
        summary("term end → `ended` at its client", &mut to_ended)
    );
    println!(
        "  {}",
        summary("term start → `started` at its client", &mut to_started)
    );
    Ok(())
}

/// Opens `count` streams on `host` for `window`; prints what they cost and got.
async fn cost(host: &Host, count: usize, window: Duration) -> anyhow::Result<()> {
    let pid = host.pid();
    let (rss_before, cpu_before) = (rss_kib(pid)?, cpu_seconds(pid)?);
    let leases = vec![LEASE.to_string(); count];
    let addr = host.addr();
    let watching = tokio::spawn(async move { watch_all(addr, leases, window).await });
    // Measured in the middle of the window, with every stream open.
    tokio::time::sleep(window / 2).await;
    let rss_during = rss_kib(pid)?;
    let watched = watching.await??;
    let cpu = cpu_seconds(pid)? - cpu_before;
    let per_watcher_kib = rss_during.saturating_sub(rss_before) as f64 / count as f64;
    println!(
        "  {count} watchers for {window:?}: host RSS {rss_before} → {rss_during} KiB ({per_watcher_kib:.1} KiB per watcher); \
         host CPU {cpu:.2} s ({:.1} µs per watcher-second); open to the end {}, lost {}, events {}, late {}, longest gap {:?}",
        cpu * 1e6 / (count as f64 * window.as_secs_f64()),
        watched.open,
        watched.lost.len(),
        watched.events,
        watched.late,
        watched.longest_gap,
    );
    if let Some(first) = watched.lost.first() {
        println!("    first lost: {first}");
    }
    Ok(())
}

/// Opens `count` streams on `host` that never read, for `window`; prints what they cost the host.
async fn stalled(host: &Host, count: usize, window: Duration) -> anyhow::Result<()> {
    use tokio::io::AsyncWriteExt;
    let pid = host.pid();
    let rss_before = rss_kib(pid)?;
    let mut open = Vec::with_capacity(count);
    for _ in 0..count {
        let mut stream = tokio::net::TcpStream::connect(host.addr()).await?;
        stream
            .write_all(
                format!("GET /v1/leases/{LEASE}/watch HTTP/1.1\r\nHost: localhost\r\n\r\n")
                    .as_bytes(),
            )
            .await?;
        open.push(stream);
    }
    tokio::time::sleep(window).await;
    let rss = rss_kib(pid)?;
    let watchers =
        leasehold_tests::endpoint::sample(&host.metrics().await?, "leasehold_http_watchers");
    println!(
        "  {count} watchers that never read, after {window:?}: host RSS {rss_before} → {rss} KiB ({:.1} KiB per watcher); still served: {watchers:?}",
        rss.saturating_sub(rss_before) as f64 / count as f64
    );
    drop(open);
    Ok(())
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let ttl = env_duration("WATCH_TTL", Duration::from_secs(3))?;
    let handoffs = env_count("WATCH_HANDOFFS", 30);
    let window = env_duration("WATCH_WINDOW", Duration::from_secs(10))?;
    let counts: Vec<usize> = std::env::var("WATCH_COUNTS")
        .unwrap_or_else(|_| "1000,2000,4000".into())
        .split(',')
        .filter_map(|n| n.trim().parse().ok())
        .collect();
    let pg = Postgres::start_private(&[])?;
    let url = pg.fresh_database().await?;
    let dir = tempfile::tempdir()?;
    let token = token_file(dir.path(), 0o600);
    let a = replica("a", &url, ttl, &token).await?;
    leasehold_tests::eventually::eventually("a to lead", Duration::from_secs(30), async || {
        leasehold_tests::eventually::when(a.role(LEASE).await, |r| {
            *r == Some(leasehold::lease::Role::Leader)
        })
    })
    .await?;
    let b = replica("b", &url, ttl, &token).await?;
    let hosts = [a, b];
    println!("watch streams on PostgreSQL, ttl {ttl:?}:");
    latency(&hosts, handoffs).await?;
    for count in counts {
        cost(&hosts[0], count, window).await?;
    }
    stalled(&hosts[0], env_count("WATCH_STALLED", 1000), window).await?;
    Ok(())
}
