//! What lease groups cost and how fast they move, between real `leasehold` processes on a
//! PostgreSQL of the bench's own, watching the database every `GROUP_SAMPLE` (default 10 ms):
//! - rebalancing: a group of `GROUP_SHARDS` (default 60) on three replicas, `GROUP_TRIALS`
//!   (default 3) times a fourth joining, a member stopped by SIGTERM and one killed, at ttl
//!   `GROUP_TTL` (default 3 s). For each change: the time until every shard is held again in fair
//!   shares, the shards that moved against the fewest possible, and the longest any shard was
//!   held by no one;
//! - scale: `GROUP_SCALE` (default `4x2500`, four groups of 2,500: the 10,000 leases of the
//!   scale bench) over five replicas at ttl `SCALE_TTL` (default 6 s): the time to spread, then
//!   over `SCALE_WINDOW` (default 30 s) each replica's CPU and memory, PostgreSQL's CPU and the
//!   batched renewals.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::Context;
use leasehold_tests::host::{Host, HostBuilder};
use leasehold_tests::log::{Logged, renewals};
use leasehold_tests::pg::Postgres;
use leasehold_tests::procstat::{CpuWindow, cpu_seconds, postmaster, rss_kib, tree_cpu_seconds};
use leasehold_tests::stats::{env_count, env_duration, summary};
use sqlx::Connection;

/// Who holds each shard of every group now, by the database's clock.
async fn holders(conn: &mut sqlx::PgConnection) -> anyhow::Result<BTreeMap<String, String>> {
    let rows: Vec<(String, String)> = sqlx::query_as(
        "SELECT name, holder FROM leasehold_leases WHERE expires_at > clock_timestamp()",
    )
    .fetch_all(conn)
    .await?;
    Ok(rows.into_iter().collect())
}

/// How many shards each holder holds.
fn per_holder(held: &BTreeMap<String, String>) -> BTreeMap<&str, usize> {
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for holder in held.values() {
        *counts.entry(holder.as_str()).or_default() += 1;
    }
    counts
}

/// Whether `held` has every one of `shards` held, by `members` holders in fair shares.
fn fair(held: &BTreeMap<String, String>, shards: usize, members: usize) -> bool {
    let counts = per_holder(held);
    let (low, high) = (shards / members, shards.div_ceil(members));
    held.len() == shards
        && counts.len() == members
        && counts.values().all(|n| (low..=high).contains(n))
}

/// What one change of membership cost, as the database saw it.
struct Change {
    /// From the change until every shard was held in fair shares.
    converged: Duration,
    /// Shards whose holder differs between before and after.
    moved: usize,
    /// The longest any one shard was held by no one.
    longest_unheld: Duration,
}

/// Watches the database from now until `shards` are held by `members` in fair shares.
async fn watch(
    conn: &mut sqlx::PgConnection,
    before: &BTreeMap<String, String>,
    shards: usize,
    members: usize,
    sample: Duration,
) -> anyhow::Result<Change> {
    let started = Instant::now();
    let mut free_since: BTreeMap<String, Instant> = BTreeMap::new();
    let mut longest_unheld = Duration::ZERO;
    loop {
        let held = holders(conn).await?;
        let now = Instant::now();
        for shard in before.keys() {
            if held.contains_key(shard) {
                if let Some(since) = free_since.remove(shard) {
                    longest_unheld = longest_unheld.max(now - since);
                }
            } else {
                free_since.entry(shard.clone()).or_insert(now);
            }
        }
        if fair(&held, shards, members) {
            let moved = held
                .iter()
                .filter(|(s, h)| before.get(*s) != Some(*h))
                .count();
            return Ok(Change {
                converged: now - started,
                moved,
                longest_unheld,
            });
        }
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(120),
            "the group did not settle on {members} members: {held:?}"
        );
        tokio::time::sleep(sample).await;
    }
}

/// Waits until `shards` are held by `members` in fair shares; returns who holds what.
async fn settled(
    conn: &mut sqlx::PgConnection,
    shards: usize,
    members: usize,
) -> anyhow::Result<BTreeMap<String, String>> {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let held = holders(conn).await?;
        if fair(&held, shards, members) {
            return Ok(held);
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "the group did not settle on {members} members: {} held, by holder {:?}",
            held.len(),
            per_holder(&held)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The fewest shards that must move when a group of `shards` goes from `before` members' holdings
/// to `after` members: every member over its new share gives the surplus away.
fn fewest(
    held: &BTreeMap<String, String>,
    shards: usize,
    after: usize,
    leaver: Option<&str>,
) -> usize {
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for holder in held.values() {
        *counts.entry(holder).or_default() += 1;
    }
    let high = shards.div_ceil(after);
    let mut extra_high = shards % after;
    let mut moves = 0;
    // The members that stay keep what they can; the largest holdings keep the larger shares.
    let mut stay: Vec<(&str, usize)> = counts.into_iter().collect();
    stay.sort_by_key(|(_, n)| std::cmp::Reverse(*n));
    for (holder, n) in stay {
        if Some(holder) == leaver {
            moves += n;
            continue;
        }
        let share = if extra_high > 0 || shards.is_multiple_of(after) {
            extra_high = extra_high.saturating_sub(1);
            high
        } else {
            shards / after
        };
        moves += n.saturating_sub(share);
    }
    moves
}

/// The holder id of `host`, as its `/status` says.
async fn holder_id(host: &Host) -> anyhow::Result<String> {
    Ok(host.status().await?.replica)
}

async fn rebalancing(
    shards: usize,
    ttl: Duration,
    trials: usize,
    sample: Duration,
) -> anyhow::Result<()> {
    let pg = Postgres::start_private(&[])?;
    let url = pg.fresh_database().await?;
    let group = format!("orders={shards}");
    let start = |name: String| {
        HostBuilder::new(&name)
            .database_url(&url)
            .ttl(ttl)
            .args(&["--group", &group])
            .spawn()
    };
    let mut conn = sqlx::PgConnection::connect(&url).await?;
    let mut hosts = Vec::new();
    for i in 0..3 {
        hosts.push(start(format!("r{i}")).await?);
    }
    settled(&mut conn, shards, 3).await?;
    let (mut joins, mut leaves, mut kills) = (Vec::new(), Vec::new(), Vec::new());
    let mut next = 3;
    for _ in 0..trials {
        // A fourth joins.
        let before = settled(&mut conn, shards, 3).await?;
        let least = fewest(&before, shards, 4, None);
        let joined = Instant::now();
        hosts.push(start(format!("r{next}")).await?);
        next += 1;
        let mut change = watch(&mut conn, &before, shards, 4, sample).await?;
        change.converged = joined.elapsed();
        joins.push((change, least));

        // The oldest is stopped.
        let before = settled(&mut conn, shards, 4).await?;
        let mut leaver = hosts.remove(0);
        let id = holder_id(&leaver).await?;
        let least = fewest(&before, shards, 3, Some(&id));
        leaver.signal("TERM")?;
        let change = watch(&mut conn, &before, shards, 3, sample).await?;
        leaver.wait_exit(Duration::from_secs(30)).await?;
        leaves.push((change, least));

        // A fourth joins again, and then the oldest is killed.
        hosts.push(start(format!("r{next}")).await?);
        next += 1;
        let before = settled(&mut conn, shards, 4).await?;
        let mut victim = hosts.remove(0);
        let id = holder_id(&victim).await?;
        let least = fewest(&before, shards, 3, Some(&id));
        victim.kill().await?;
        let change = watch(&mut conn, &before, shards, 3, sample).await?;
        kills.push((change, least));
    }
    println!(
        "a group of {shards} shards on 3 replicas (ttl {ttl:?}, {trials} trials, the database sampled every {sample:?}):"
    );
    for (what, changes) in [
        ("a fourth joins (3 -> 4)", &joins),
        ("a member stops, SIGTERM (4 -> 3)", &leaves),
        ("a member is killed (4 -> 3)", &kills),
    ] {
        let mut converged: Vec<Duration> = changes.iter().map(|(c, _)| c.converged).collect();
        let mut unheld: Vec<Duration> = changes.iter().map(|(c, _)| c.longest_unheld).collect();
        let moved: Vec<String> = changes
            .iter()
            .map(|(c, least)| format!("{}/{least}", c.moved))
            .collect();
        println!("  {what}:");
        println!("    {}", summary("converged in", &mut converged));
        println!("    {}", summary("longest a shard was unheld", &mut unheld));
        println!(
            "    shards moved / fewest possible, per trial: {}",
            moved.join(", ")
        );
    }
    Ok(())
}

async fn at_scale(
    groups: usize,
    shards: usize,
    ttl: Duration,
    window: Duration,
) -> anyhow::Result<()> {
    let pg = Postgres::start_private(&[])?;
    let url = pg.fresh_database().await?;
    let total = groups * shards;
    let mut args = Vec::new();
    for g in 0..groups {
        args.push("--group".to_string());
        args.push(format!("g{g}={shards}"));
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let started = Instant::now();
    let mut hosts = Vec::new();
    for i in 0..5 {
        hosts.push(
            HostBuilder::new(&format!("r{i}"))
                .database_url(&url)
                .ttl(ttl)
                .args(&args)
                .env("RUST_LOG", "info,leasehold::lease::driver=debug")
                .spawn()
                .await?,
        );
    }
    let mut conn = sqlx::PgConnection::connect(&url).await?;
    settled(&mut conn, total, 5).await?;
    let spread = started.elapsed();
    // Past the last moves and the first renewals of every shard.
    tokio::time::sleep(ttl).await;
    let root = postmaster(&mut conn).await?;
    let pids: Vec<u32> = hosts.iter().map(Host::pid).collect();
    let read = || -> anyhow::Result<Vec<f64>> {
        let mut r = pids
            .iter()
            .map(|p| cpu_seconds(*p))
            .collect::<anyhow::Result<Vec<_>>>()?;
        r.push(tree_cpu_seconds(root)?);
        Ok(r)
    };
    let from: Vec<usize> = hosts.iter().map(|h| h.log_len()).collect();
    let cpu = CpuWindow::start(read()?);
    tokio::time::sleep(window).await;
    let pct = cpu.percent(&read()?);
    let held = holders(&mut conn).await?;
    anyhow::ensure!(
        fair(&held, total, 5),
        "the shares changed during the window: {} held",
        held.len()
    );
    let mut renewed: Vec<Duration> = hosts
        .iter()
        .zip(&from)
        .flat_map(|(h, from)| renewals(h, *from))
        .collect();
    let rss: Vec<u64> = pids
        .iter()
        .map(|p| rss_kib(*p))
        .collect::<anyhow::Result<_>>()?;
    let replicas = &pct[..5];
    let (low, high) = replicas
        .iter()
        .fold((f64::MAX, 0.0f64), |(l, h), p| (l.min(*p), h.max(*p)));
    println!(
        "{total} leases as {groups} groups of {shards} over 5 replicas (ttl {ttl:?}, {window:?} window):"
    );
    println!(
        "  spread into fair shares ({} each) {spread:.2?} after the first start",
        total / 5
    );
    println!(
        "  each replica {low:.1}-{high:.1}% of a core, RSS {:.0}-{:.0} MiB; PostgreSQL {:.1}%",
        *rss.iter().min().unwrap_or(&0) as f64 / 1024.0,
        *rss.iter().max().unwrap_or(&0) as f64 / 1024.0,
        pct[5]
    );
    println!(
        "  {}",
        summary("a replica's batched renewal (their logs)", &mut renewed)
    );
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let shards = env_count("GROUP_SHARDS", 60);
    let trials = env_count("GROUP_TRIALS", 3);
    let ttl = env_duration("GROUP_TTL", Duration::from_secs(3))?;
    let sample = env_duration("GROUP_SAMPLE", Duration::from_millis(10))?;
    let scale = std::env::var("GROUP_SCALE").unwrap_or_else(|_| "4x2500".into());
    let (groups, per) = scale
        .split_once('x')
        .and_then(|(g, s)| Some((g.parse::<usize>().ok()?, s.parse::<usize>().ok()?)))
        .context("GROUP_SCALE: GROUPSxSHARDS, e.g. 4x2500")?;
    let scale_ttl = env_duration("SCALE_TTL", Duration::from_secs(6))?;
    let window = env_duration("SCALE_WINDOW", Duration::from_secs(30))?;
    println!(
        "lease group benchmark: leasehold {}",
        leasehold_tests::host::binary()?.display()
    );
    if trials > 0 {
        rebalancing(shards, ttl, trials, sample).await?;
    }
    at_scale(groups, per, scale_ttl, window).await
}
