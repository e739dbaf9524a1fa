//! Measures leadership handoff between real `leasehold` processes on a real PostgreSQL:
//! - graceful: SIGTERM to the leader → the next holder's plugin runs its first call;
//! - crash: SIGKILL to the leader → the same (the ttl must run out first).
//!
//! Each is read from the processes' own log timestamps (the signal's time from this process's
//! clock, the same wall clock), so no polling of `/status` loads the machine during a handoff.
//! Three replicas; after each trial the stopped one is started again. Prints median, p99 and
//! worst per kind. `BENCH_TRIALS` (graceful, default 30), `BENCH_CRASH_TRIALS` (default 20) and
//! `BENCH_TTL` (default 2s) change the run; `LEASEHOLD_BIN` measures another build.

#![allow(clippy::unwrap_used)]

use leasehold_tests::log::Logged;
use std::time::{Duration, Instant};

use anyhow::Context;
use leasehold_tests::host::{Host, last_log_time, log_time, now_time_of_day, time_of_day};
use leasehold_tests::stats::{env_count, env_duration, summary};
use leasehold_tests::status::Role;
use leasehold_tests::stores::{Backend, Db};

async fn leader_index(client: &reqwest::Client, hosts: &[Host]) -> Option<usize> {
    let roles = futures_roles(client, hosts).await;
    let leaders: Vec<usize> = roles
        .iter()
        .enumerate()
        .filter(|(_, r)| **r == Some(Role::Leader))
        .map(|(i, _)| i)
        .collect();
    (leaders.len() == 1).then(|| leaders[0])
}

async fn futures_roles(client: &reqwest::Client, hosts: &[Host]) -> Vec<Option<Role>> {
    let mut handles = Vec::new();
    for h in hosts {
        let (addr, client) = (h.addr(), client.clone());
        handles.push(tokio::spawn(async move {
            let body = client
                .get(format!("http://{addr}/status"))
                .send()
                .await
                .ok()?
                .bytes()
                .await
                .ok()?;
            let status = leasehold_tests::status::parse(&body).ok()?;
            Some(status.leases.first()?.role)
        }));
    }
    let mut out = Vec::new();
    for h in handles {
        out.push(h.await.ok().flatten());
    }
    out
}

async fn wait_leader(
    client: &reqwest::Client,
    hosts: &[Host],
    timeout: Duration,
) -> anyhow::Result<usize> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(i) = leader_index(client, hosts).await {
            return Ok(i);
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "no single leader within {timeout:?}"
        );
        // A light poll: on two cores a hot loop would slow the very handoff it measures.
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// The epoch of the last lease this host's log says it acquired.
fn last_epoch(log: &str) -> Option<i64> {
    log.lines()
        .rev()
        .find(|l| l.contains("lease acquired"))?
        .split("epoch=")
        .nth(1)?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Waits for the first reconcile of `epoch` in any of `hosts`' logs, reading only the lines
/// after `from` (each host's log length before the signal); returns its log time (seconds since
/// midnight) and the host's index.
async fn first_call(
    hosts: &[Host],
    from: &[usize],
    epoch: i64,
    timeout: Duration,
) -> anyhow::Result<(f64, usize)> {
    let needle = format!("bench from epoch {epoch}, tick 0");
    let deadline = Instant::now() + timeout;
    loop {
        for (i, (h, from)) in hosts.iter().zip(from).enumerate() {
            let line = h
                .log_lines_from(*from)
                .into_iter()
                .find(|l| l.contains(&needle));
            if let Some(t) = line.as_deref().and_then(time_of_day) {
                return Ok((t, i));
            }
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "no host ran epoch {epoch} within {timeout:?}"
        );
        // The log timestamp is the measurement: this wait only needs to notice it, lightly.
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let graceful_trials = env_count("BENCH_TRIALS", 30);
    let crash_trials = env_count("BENCH_CRASH_TRIALS", 20);
    let ttl = env_duration("BENCH_TTL", Duration::from_secs(2))?;
    let db = Db::new(Backend::Postgres).await?;
    let url = db.url().context("postgres url")?;
    // Every replica runs the hello reconciler: a handoff ends when its first call runs.
    let plugins = leasehold_tests::host::plugin_dir(&[(
        "hello-reconciler",
        "[schedule]\ninterval = \"5s\"\n[config]\ngreeting = \"bench\"\n",
    )])?;
    let plugin_path = plugins
        .path()
        .to_str()
        .context("plugin dir path")?
        .to_string();
    let ttl_text = humantime::format_duration(ttl).to_string();
    let args = [
        "--database-url",
        url.as_str(),
        "--ttl",
        ttl_text.as_str(),
        "--plugins",
        plugin_path.as_str(),
    ];
    let mut hosts: Vec<Host> = Vec::new();
    for i in 0..3 {
        hosts.push(Host::start(&format!("r{i}"), &args).await?);
    }
    let mut next_name = 3;
    let client = reqwest::Client::new();
    println!(
        "handoff benchmark: 3 replicas on PostgreSQL, ttl {ttl:?}, {graceful_trials} graceful and {crash_trials} crash trials; leasehold {}",
        leasehold_tests::host::binary()?.display()
    );

    let mut graceful = Vec::new();
    let mut crash = Vec::new();
    // From the processes' own log timestamps: the old holder's release, the new holder's campaign
    // and its plugin's first call.
    let mut release_part = Vec::new();
    let mut takeover_part = Vec::new();
    let mut activation = Vec::new();
    for (kind, trials) in [("TERM", graceful_trials), ("KILL", crash_trials)] {
        for trial in 0..trials {
            let leader = wait_leader(&client, &hosts, ttl * 5).await?;
            // Let the replacement replica finish its first campaign so every standby is idle;
            // then a delay anywhere within a renewal interval, so that signals do not keep the
            // same phase to the holder's renewals (a crash just after a renewal costs a full ttl).
            let phase = ttl / 3 * (trial as u32 % 10) / 10;
            tokio::time::sleep(Duration::from_millis(300) + phase).await;
            let mut old = hosts.remove(leader);
            let epoch = last_epoch(&old.log_text()).context("the holder's epoch")?;
            let from: Vec<usize> = hosts.iter().map(|h| h.log_len()).collect();
            let sent = now_time_of_day();
            old.signal(kind)?;
            let (running, new) = first_call(&hosts, &from, epoch + 1, ttl * 5)
                .await
                .with_context(|| format!("{kind} trial {trial}"))?;
            let took = Duration::from_secs_f64((running - sent).max(0.0));
            old.wait_exit(Duration::from_secs(30)).await?;
            let new_log = hosts[new].log_text();
            let acquired = last_log_time(&new_log, "lease acquired");
            if let Some(acq) = acquired {
                activation.push(Duration::from_secs_f64((running - acq).max(0.0)));
            }
            if kind == "TERM" {
                graceful.push(took);
                if let (Some(rel), Some(acq)) =
                    (log_time(&old.log_text(), "lease released"), acquired)
                {
                    release_part.push(Duration::from_secs_f64((rel - sent).max(0.0)));
                    takeover_part.push(Duration::from_secs_f64((acq - rel).max(0.0)));
                }
            } else {
                crash.push(took);
            }
            hosts.push(Host::start(&format!("r{next_name}"), &args).await?);
            next_name += 1;
        }
    }
    let lines = [
        summary(
            "graceful handoff (SIGTERM -> the next holder's plugin running)",
            &mut graceful,
        ),
        summary(
            "  of which signal -> released  (old holder's log)",
            &mut release_part,
        ),
        summary(
            "  of which released -> acquired (new holder's log)",
            &mut takeover_part,
        ),
        summary(
            "  and acquired -> plugin running, every trial (new holder's log)",
            &mut activation,
        ),
        summary(
            "crash failover   (SIGKILL -> the next holder's plugin running)",
            &mut crash,
        ),
    ];
    for line in lines {
        println!("{line}");
    }
    Ok(())
}
