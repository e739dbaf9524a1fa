//! Fault trials on a cluster of its own: a PostgreSQL lease server of the run's own (with a
//! streaming standby for failovers, under a steppable clock for database clock jumps), two real
//! `leasehold` hosts each reaching it through a [`Proxy`], both running `fenced-writer` (witness
//! rows every 20 ms, fenced kv puts). Each trial waits for the holder's work, injects the
//! [`Fault`], heals it and waits for work again; the run's history is judged at the end.

use std::time::Duration;

use anyhow::{Context, bail, ensure};
use sqlx::Connection;
use tempfile::TempDir;

use super::checker::{Verdict, check, longest_pause};
use super::faults::{Fault, Side};
use super::witness::{self, Witness};
use crate::eventually::{eventually, when};
use crate::faketime::SteppedClock;
use crate::fencing::writer_manifest;
use crate::host::{Host, HostBuilder, plugin_dir, wait_for_single_leader};
use crate::log::Logged;
use crate::pg::Postgres;
use crate::proxy::{self, Proxy, upstream_of};

/// The lease the writer is bound to.
pub const LEASE: &str = "leader";

/// What a run of one fault found.
#[derive(Debug)]
pub struct FaultRun {
    /// The fault.
    pub fault: Fault,
    /// The judgement of the whole run's history.
    pub verdict: Verdict,
    /// Per trial, the longest the lease went without work from before the fault until work
    /// resumed after it (`None`: it never resumed within the fault's bound).
    pub pauses: Vec<Option<Duration>>,
    /// Per trial, how long the server took to stop and start again in a restart: time outside the
    /// hosts' doing (a crash recovery syncs every file of the data directory, seconds when the
    /// disk is busy), which each trial's bound allows on top of the fault's own.
    pub server_time: Vec<Duration>,
    /// Hosts that exited during the run, with their logs: must be empty.
    pub exits: Vec<String>,
}

impl FaultRun {
    /// The trials whose pause exceeded the fault's bound (or never ended).
    pub fn over_bound(&self, ttl: Duration) -> usize {
        let bound = self.fault.bound(ttl);
        self.pauses
            .iter()
            .zip(&self.server_time)
            .filter(|(p, server)| p.is_none_or(|p| p > bound + **server))
            .count()
    }
}

struct Cluster {
    primary: Postgres,
    /// Streaming from `primary`, for failovers.
    standby: Option<Postgres>,
    /// The lease database's name (the same on every server of the chain).
    db: String,
    proxies: Vec<Proxy>,
    hosts: Vec<Host>,
    witness: Witness,
    /// The database server's clock, for [`Fault::DatabaseClockJump`].
    db_clock: Option<SteppedClock>,
    /// Each host's clock, for [`Fault::ReplicaClockJump`].
    host_clocks: Vec<SteppedClock>,
    _plugins: TempDir,
}

impl Cluster {
    async fn start(fault: Fault, ttl: Duration) -> anyhow::Result<Cluster> {
        let db_clock = match fault {
            Fault::DatabaseClockJump => Some(SteppedClock::new()?),
            _ => None,
        };
        let env = db_clock.as_ref().map(|c| c.env()).unwrap_or_default();
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let primary = Postgres::start_private(&env)?;
        let url = primary.fresh_lease_database().await?;
        let db = url
            .rsplit('/')
            .next()
            .context("no database name")?
            .to_string();
        witness::install_commit_log(&url).await?;
        let standby = match fault {
            Fault::Failover { .. } => Some(primary.start_standby()?),
            _ => None,
        };
        let witness = Witness::create().await?;
        // Witness rows (its sql grant, unfenced there) and fenced kv puts, a call every 20 ms.
        let manifest = writer_manifest(
            witness::URL_VARIABLE,
            &format!(
                "table = \"{}\"\nmode = \"both\"\nrequeue_ms = \"20\"\n",
                witness::TABLE
            ),
        );
        let plugins = plugin_dir(&[("fenced-writer", &manifest)])?;
        let upstream = upstream_of(&url)?;
        let mut cluster = Cluster {
            primary,
            standby,
            db,
            proxies: vec![Proxy::start(upstream)?, Proxy::start(upstream)?],
            hosts: Vec::new(),
            witness,
            db_clock,
            host_clocks: Vec::new(),
            _plugins: plugins,
        };
        for (i, name) in ["a", "b"].into_iter().enumerate() {
            let mut builder = HostBuilder::new(name)
                .database_url(&cluster.proxies[i].url(&url)?)
                .lease(LEASE)
                .ttl(ttl)
                .plugins(cluster._plugins.path())
                .env(witness::URL_VARIABLE, cluster.witness.role_url());
            if fault == Fault::ReplicaClockJump {
                let clock = SteppedClock::new()?;
                for (k, v) in clock.env() {
                    builder = builder.env(k, &v);
                }
                cluster.host_clocks.push(clock);
            }
            cluster.hosts.push(builder.spawn().await?);
        }
        Ok(cluster)
    }

    fn lease_url(&self) -> String {
        self.primary.url_of(&self.db)
    }

    /// Waits for the single holder and for its work on the witness; returns its index.
    async fn steady(&self, ttl: Duration) -> anyhow::Result<usize> {
        let holder = wait_for_single_leader(&self.hosts, LEASE, ttl * 10).await?;
        let since = self.witness.now().await?;
        eventually("the holder's work on the witness", ttl * 5, async || {
            let fresh = self
                .witness
                .count_since(since)
                .await
                .map_err(|e| format!("{e:#}"))?;
            when(fresh, |n| *n > 0).map_err(|n| format!("{n} rows"))
        })
        .await?;
        Ok(holder)
    }

    /// One trial: returns the longest pause of work from just before the fault until the
    /// cluster is steady again (`None`: it was not within the fault's bound), and the time the
    /// server took to stop and start ([`FaultRun::server_time`]).
    async fn trial(
        &mut self,
        fault: Fault,
        ttl: Duration,
    ) -> anyhow::Result<(Option<Duration>, Duration)> {
        let holder = self.steady(ttl).await?;
        let start = self.witness.now().await?;
        let server_time = self.inject(fault, holder, ttl).await?;
        // Some effects come after healing (a holder learns of a failover at its next renewal,
        // the database holds campaigns off a ttl): let them play out, then wait for one holder
        // working again.
        tokio::time::sleep(ttl).await;
        let settled = self.witness.now().await?;
        let steady =
            tokio::time::timeout(fault.bound(ttl) + server_time + ttl * 5, self.steady(ttl)).await;
        if matches!(fault, Fault::Failover { .. }) {
            // The next trial's standby, once this one has recovered.
            self.standby = Some(self.primary.start_standby()?);
        }
        if !matches!(steady, Ok(Ok(_))) {
            return Ok((None, server_time));
        }
        let rows = self.witness.rows().await?;
        Ok((longest_pause(&rows, start, settled), server_time))
    }

    /// Injects `fault` and heals it; returns the time a restarted server took to stop and start.
    async fn inject(
        &mut self,
        fault: Fault,
        holder: usize,
        ttl: Duration,
    ) -> anyhow::Result<Duration> {
        let lasts = fault.duration(ttl);
        match fault {
            Fault::BlackHole {
                side,
                to_server,
                to_client,
            } => {
                let cut: Vec<usize> = match side {
                    Side::Holder => vec![holder],
                    Side::Standby => vec![1 - holder],
                    Side::Both => vec![0, 1],
                };
                let hole = proxy::Fault::BlackHole {
                    to_server,
                    to_client,
                };
                for &i in &cut {
                    self.proxies[i].set(hole);
                }
                tokio::time::sleep(lasts).await;
                for &i in &cut {
                    self.proxies[i].set(proxy::Fault::None);
                }
            }
            Fault::Restart { immediate } => {
                let stopping = std::time::Instant::now();
                if immediate {
                    self.primary.kill()?;
                } else {
                    self.primary.stop()?;
                }
                let stopped = stopping.elapsed();
                tokio::time::sleep(lasts).await;
                let starting = std::time::Instant::now();
                self.primary.restart()?;
                return Ok(stopped + starting.elapsed());
            }
            Fault::Failover { missed_takeover } => {
                self.failover(missed_takeover, holder, ttl).await?
            }
            Fault::DatabaseClockJump => {
                let clock = self.db_clock.as_ref().context("no database clock")?;
                clock.set(Duration::from_secs(60))?;
                tokio::time::sleep(lasts).await;
                clock.set(Duration::ZERO)?;
            }
            Fault::ReplicaClockJump => {
                let clock = &self.host_clocks[holder];
                clock.set(Duration::from_secs(3600))?;
                tokio::time::sleep(lasts).await;
                clock.set(Duration::ZERO)?;
            }
            Fault::SlowLock => {
                let mut conn = sqlx::PgConnection::connect(&self.lease_url()).await?;
                let mut tx = conn.begin().await?;
                sqlx::query("SELECT 1 FROM leasehold_leases WHERE name = $1 FOR UPDATE")
                    .bind(LEASE)
                    .execute(&mut *tx)
                    .await?;
                tokio::time::sleep(lasts).await;
                tx.rollback().await?;
            }
            Fault::SlowTrigger => {
                let mut conn = sqlx::PgConnection::connect(&self.lease_url()).await?;
                let sleep_s = (ttl * 2).as_secs_f64();
                sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
                    "CREATE OR REPLACE FUNCTION chaos_slow() RETURNS trigger LANGUAGE plpgsql AS
                       $$ BEGIN PERFORM pg_sleep({sleep_s}); RETURN NEW; END $$;
                     CREATE TRIGGER chaos_slow BEFORE UPDATE ON leasehold_leases
                       FOR EACH ROW EXECUTE FUNCTION chaos_slow();"
                )))
                .execute(&mut conn)
                .await?;
                tokio::time::sleep(lasts).await;
                sqlx::raw_sql("DROP TRIGGER chaos_slow ON leasehold_leases")
                    .execute(&mut conn)
                    .await?;
            }
        }
        Ok(Duration::ZERO)
    }

    /// The standby stops receiving, the primary goes on for a while (renewals, and with
    /// `missed_takeover` a takeover by the other host), then dies; the standby is promoted and
    /// the route moved to it.
    async fn failover(
        &mut self,
        missed_takeover: bool,
        holder: usize,
        ttl: Duration,
    ) -> anyhow::Result<()> {
        let standby = self.standby.take().context("no standby to promote")?;
        standby.detach_standby().await?;
        tokio::time::sleep(Fault::Failover { missed_takeover }.duration(ttl)).await;
        if missed_takeover {
            self.proxies[holder].set(proxy::Fault::BlackHole {
                to_server: true,
                to_client: true,
            });
            let other = 1 - holder;
            eventually("the other host to take over", ttl * 5, async || {
                let leader = self.hosts[other].role(LEASE).await;
                when(leader, |r| *r == Some(crate::status::Role::Leader))
                    .map_err(|r| format!("{r:?}"))
            })
            .await?;
            // Its work, so the lost epoch is seen on the witness.
            tokio::time::sleep(ttl / 4).await;
        }
        self.primary.kill()?;
        // A failover manager takes a while to notice: by then the rows the standby has may have
        // expired while their holders still trust the renewals it missed.
        tokio::time::sleep(ttl / 4).await;
        standby.promote()?;
        let promoted = std::net::SocketAddr::from(([127, 0, 0, 1], standby.port()?));
        for proxy in &self.proxies {
            proxy.route_to(promoted);
            // Connections to the dead primary are gone already; a hole is lifted with them.
            proxy.set(proxy::Fault::Reset);
            proxy.set(proxy::Fault::None);
        }
        // The killed primary's directory goes with its watchdog when this process exits.
        self.primary = standby;
        Ok(())
    }

    /// Hosts that have exited, with their logs.
    fn exited(&mut self) -> Vec<String> {
        self.hosts
            .iter_mut()
            .filter_map(|h| {
                h.has_exited()
                    .then(|| format!("{} exited:\n{}", h.name, h.log_text()))
            })
            .collect()
    }

    async fn finish(mut self, ttl: Duration) -> anyhow::Result<(Verdict, Vec<String>)> {
        let mut exits = self.exited();
        if exits.is_empty() {
            // Every acquired lease has a leader again.
            wait_for_single_leader(&self.hosts, LEASE, ttl * 10).await?;
        }
        for host in &mut self.hosts {
            match host.stop(Duration::from_secs(20)).await {
                Ok(status) if status.success() => {}
                Ok(status) => exits.push(format!("{} stopped with {status}", host.name)),
                Err(e) => exits.push(format!("{e:#}")),
            }
        }
        if std::env::var_os("CHAOS_LOGS").is_some() {
            for host in &self.hosts {
                let log = host.log_text();
                let interesting: Vec<&str> = log
                    .lines()
                    .filter(|l| !l.contains("sql-txn ok") && !l.contains("kv-put ok"))
                    .collect();
                eprintln!("--- {} ---\n{}", host.name, interesting.join("\n"));
            }
        }
        let rows = self.witness.rows().await?;
        let commits = witness::fenced_commits(&self.lease_url()).await?;
        ensure!(!rows.is_empty(), "no work was recorded at all");
        Ok((check(&rows, &commits), exits))
    }
}

/// Runs `trials` trials of `fault` on a cluster of its own with hosts at `ttl`.
pub async fn run_fault(fault: Fault, trials: usize, ttl: Duration) -> anyhow::Result<FaultRun> {
    if std::env::var("DATABASE_URL").is_ok() {
        bail!("fault trials start, restart and fail over servers of their own: unset DATABASE_URL");
    }
    let mut cluster = Cluster::start(fault, ttl).await?;
    let mut pauses = Vec::with_capacity(trials);
    let mut server_time = Vec::with_capacity(trials);
    let mut exits = Vec::new();
    for _ in 0..trials {
        let (pause, server) = cluster.trial(fault, ttl).await?;
        pauses.push(pause);
        server_time.push(server);
        exits = cluster.exited();
        if !exits.is_empty() {
            break;
        }
    }
    let (verdict, more) = cluster.finish(ttl).await?;
    exits.extend(more);
    Ok(FaultRun {
        fault,
        verdict,
        pauses,
        server_time,
        exits,
    })
}
