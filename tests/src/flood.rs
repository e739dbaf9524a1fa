//! A flood of watchers, shared by the flood test and its benchmark: a `leasehold run` holding every
//! shard of one big lease group at a short ttl ([`start_holder`]), hundreds of keep-alive HTTP
//! clients asking it for `/status`, `/`, `/metrics` and the lease API as fast as it answers
//! ([`flood`]), watch streams held open meanwhile ([`watch_all`]), and what it held and how its
//! renewals went before and during the flood ([`Holding`], [`renewals`]).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use anyhow::Context;
use tokio::time::Instant;

use crate::endpoint::Endpoint;
use crate::eventually::eventually_every;
use crate::groups::led;
use crate::host::{Host, HostBuilder};

/// The group every shard of which the holder holds.
pub const GROUP: &str = "orders";

/// What each flooding client asks for, by client number modulo its length: the status (what the
/// page polls) three times out of eight, the page, the metrics, the lease API's list and one
/// lease, and a lease's readiness once each.
pub const PATHS: [&str; 8] = [
    "/status",
    "/status",
    "/status",
    "/",
    "/metrics",
    "/v1/leases",
    "/v1/leases/orders/0",
    "/readyz/leases/orders/0",
];

/// Starts `leasehold run` on `url` holding `shards` shards of [`GROUP`] at `ttl`, logging each
/// renewal's round trip, and waits (at most a minute) until it leads them all.
pub async fn start_holder(url: &str, shards: usize, ttl: Duration) -> anyhow::Result<Host> {
    start_holder_with(url, shards, ttl, &[]).await
}

/// [`start_holder`], with the variables `env` set for the host besides.
pub async fn start_holder_with(
    url: &str,
    shards: usize,
    ttl: Duration,
    env: &[(&str, &str)],
) -> anyhow::Result<Host> {
    let mut builder = HostBuilder::new("a")
        .database_url(url)
        .ttl(ttl)
        .args(&["--group", &format!("{GROUP}={shards}")])
        .env("RUST_LOG", "info,leasehold::lease::driver=debug");
    for (key, value) in env {
        builder = builder.env(key, value);
    }
    let host = builder.spawn().await?;
    eventually_every(
        format!("a to lead all {shards} shards"),
        Duration::from_secs(60),
        Duration::from_millis(200),
        async || {
            let status = host.status().await.map_err(|e| e.to_string())?;
            match led(&status, GROUP).len() {
                n if n == shards => Ok(()),
                n => Err(format!("{n} led")),
            }
        },
    )
    .await?;
    Ok(host)
}

/// What a replica holds, by its own `/status` and `/metrics`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holding {
    /// Each shard it leads, with the epoch the store shows it at.
    pub epochs: BTreeMap<String, i64>,
    /// Its role changes over every lease (`leasehold_lease_transitions_total`, summed).
    pub transitions: u64,
}

impl Holding {
    /// What `host` holds now.
    pub async fn of(host: &Endpoint) -> anyhow::Result<Holding> {
        let status = host.status().await?;
        let led = led(&status, GROUP);
        let epochs = status
            .leases
            .iter()
            .filter(|l| led.contains(&l.name))
            .map(|l| {
                Ok((
                    l.name.clone(),
                    l.epoch.context("a led shard without epoch")?.get(),
                ))
            })
            .collect::<anyhow::Result<_>>()?;
        let transitions = host
            .metrics()
            .await?
            .lines()
            .filter(|l| l.starts_with("leasehold_lease_transitions_total{"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>() as u64;
        Ok(Holding {
            epochs,
            transitions,
        })
    }

    /// How many of the shards held `before` are no longer held at the same epoch now: lost,
    /// or moved and back.
    pub fn lost_since(&self, before: &Holding) -> usize {
        before
            .epochs
            .iter()
            .filter(|(shard, epoch)| self.epochs.get(*shard) != Some(epoch))
            .count()
    }
}

/// What a flood got from the host.
#[derive(Debug, Clone, Default)]
pub struct Flooded {
    /// Answers with status 200, by path.
    pub ok: BTreeMap<&'static str, u64>,
    /// Requests that failed or answered otherwise, by path.
    pub failed: BTreeMap<&'static str, u64>,
    /// How long it ran.
    pub took: Duration,
    /// The first failure, as the client saw it.
    pub first_failure: Option<String>,
}

impl Flooded {
    /// Answers with status 200 over every path.
    pub fn answered(&self) -> u64 {
        self.ok.values().sum()
    }

    /// Requests that failed, over every path.
    pub fn failures(&self) -> u64 {
        self.failed.values().sum()
    }
}

/// `clients` clients, each on a keep-alive connection of its own, ask `addr` for their path of
/// [`PATHS`] one request after another, reading every answer whole, for `window`. Each request is
/// bounded by 10 s and each client by a million requests.
pub async fn flood(addr: SocketAddr, clients: usize, window: Duration) -> anyhow::Result<Flooded> {
    let started = Instant::now();
    let until = started + window;
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..clients {
        let path = PATHS[i % PATHS.len()];
        // One connection per client, kept alive: the pool keeps one idle connection to the host.
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .pool_max_idle_per_host(1)
            .build()?;
        tasks.spawn(async move {
            let (mut ok, mut failed, mut first) = (0u64, 0u64, None);
            let url = format!("http://{addr}{path}");
            for _ in 0..1_000_000 {
                if Instant::now() >= until {
                    break;
                }
                let answered = match client.get(&url).send().await {
                    Ok(response) if response.status().is_success() => {
                        match response.bytes().await {
                            Ok(_) => true,
                            Err(e) => {
                                first.get_or_insert_with(|| format!("{path}: {e:#}"));
                                false
                            }
                        }
                    }
                    Ok(response) => {
                        first.get_or_insert_with(|| format!("{path}: {}", response.status()));
                        false
                    }
                    Err(e) => {
                        first.get_or_insert_with(|| format!("{path}: {e:?}"));
                        false
                    }
                };
                if answered {
                    ok += 1;
                } else {
                    failed += 1;
                }
            }
            (path, ok, failed, first)
        });
    }
    let mut flooded = Flooded::default();
    while let Some(done) = tasks.join_next().await {
        let (path, ok, failed, first) = done?;
        if flooded.first_failure.is_none() {
            flooded.first_failure = first;
        }
        *flooded.ok.entry(path).or_default() += ok;
        *flooded.failed.entry(path).or_default() += failed;
    }
    flooded.took = started.elapsed();
    Ok(flooded)
}

/// What the watch streams of [`watch_all`] got.
#[derive(Debug, Clone, Default)]
pub struct Watched {
    /// Streams that stayed open to the end.
    pub open: usize,
    /// Streams that ended or failed before it, with why.
    pub lost: Vec<String>,
    /// Events received, over every stream.
    pub events: u64,
    /// Times an event came after the deadline the one before it set (its arrival plus its
    /// `stop_within_ms`): a client would have stopped its work for want of news.
    pub late: u64,
    /// The longest wait between two events of one stream.
    pub longest_gap: Duration,
}

/// One watch stream of `/v1/leases/LEASE/watch` on `addr` per lease of `leases`, each read as it
/// comes for `window`. They come from 127.0.0.1, and beyond the share of streams one address may
/// hold at the default bound (1,024) from 127.0.0.2 and on, as from several apps.
pub async fn watch_all(
    addr: SocketAddr,
    leases: Vec<String>,
    window: Duration,
) -> anyhow::Result<Watched> {
    let until = Instant::now() + window;
    let share = leasehold::testing::watchers_per_address(leasehold::testing::MAX_WATCHERS);
    let mut tasks = tokio::task::JoinSet::new();
    for (i, lease) in leases.into_iter().enumerate() {
        let app = u8::try_from(1 + i / share).context("more streams than 127.0.0.0/24 holds")?;
        let from = std::net::IpAddr::from([127, 0, 0, app]);
        tasks.spawn(async move {
            let mut watch = crate::sse::Watch::open_from(Some(from), addr, &lease, None).await?;
            let (mut events, mut late, mut longest) = (0u64, 0u64, Duration::ZERO);
            let (mut last, mut deadline): (Instant, Option<Instant>) = (Instant::now(), None);
            while Instant::now() < until {
                let left = until.saturating_duration_since(Instant::now());
                let event = match watch.next(left.min(Duration::from_secs(10))).await {
                    Ok(event) => event,
                    Err(_) if Instant::now() >= until => break,
                    Err(e) => return Err(e.context(format!("watch of {lease}"))),
                };
                events += 1;
                longest = longest.max(event.received_at - last);
                last = event.received_at;
                if deadline.is_some_and(|d| event.received_at > d) {
                    late += 1;
                }
                let within = event.field("stop_within_ms").as_u64().unwrap_or(0);
                deadline = (within > 0).then(|| event.received_at + Duration::from_millis(within));
            }
            anyhow::Ok((events, late, longest))
        });
    }
    let mut watched = Watched::default();
    while let Some(done) = tasks.join_next().await {
        match done? {
            Ok((events, late, longest)) => {
                watched.open += 1;
                watched.events += events;
                watched.late += late;
                watched.longest_gap = watched.longest_gap.max(longest);
            }
            Err(e) => watched.lost.push(format!("{e:#}")),
        }
    }
    Ok(watched)
}

/// The batched renewals `host` logged from log line `from` on, and how many of them failed.
pub fn renewals(host: &Host, from: usize) -> (Vec<Duration>, usize) {
    use crate::log::Logged;
    let lines = host.log_lines_from(from);
    let failed = lines
        .iter()
        .filter(|l| l.contains("renewal returned") && l.contains("ok=false"))
        .count();
    (crate::log::renewals(host, from), failed)
}

/// The median of `samples` (sorted in place); zero for none.
pub fn median(samples: &mut [Duration]) -> Duration {
    samples.sort();
    samples.get(samples.len() / 2).copied().unwrap_or_default()
}
