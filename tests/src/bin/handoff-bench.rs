//! Measures leadership handoff between real `leasehold` processes on a real PostgreSQL:
//! - graceful: SIGTERM to the leader → a standby reports `leader` in `/status`;
//! - crash: SIGKILL to the leader → a standby reports `leader` (the ttl must run out first).
//!
//! Three replicas; after each trial the stopped one is started again. Prints median, p99 and
//! worst per kind. `BENCH_TRIALS` (default 20) and `BENCH_TTL` (default 2s) change the run.

#![allow(clippy::unwrap_used)]

use leasehold_tests::log::Logged;
use std::time::{Duration, Instant};

use anyhow::Context;
use leasehold_tests::host::{Host, last_log_time, log_time};
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

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let trials = env_count("BENCH_TRIALS", 20);
    let ttl = env_duration("BENCH_TTL", Duration::from_secs(2))?;
    let db = Db::new(Backend::Postgres).await?;
    let url = db.url().context("postgres url")?;
    // Every replica runs the hello reconciler, so a takeover also measures plugin activation.
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
    println!("handoff benchmark: 3 replicas on PostgreSQL, ttl {ttl:?}, {trials} trials per kind");

    let mut graceful = Vec::new();
    let mut crash = Vec::new();
    // From the processes' own log timestamps: the old holder's release, the new holder's campaign.
    let mut release_part = Vec::new();
    let mut takeover_part = Vec::new();
    // From the new holder's log: lease acquired -> its first reconcile call running.
    let mut activation = Vec::new();
    for kind in ["TERM", "KILL"] {
        for trial in 0..trials {
            let leader = wait_leader(&client, &hosts, ttl * 5).await?;
            // Let the replacement replica finish its first campaign so every standby is idle.
            tokio::time::sleep(Duration::from_millis(300)).await;
            let mut old = hosts.remove(leader);
            let sent = Instant::now();
            old.signal(kind)?;
            let new = wait_leader(&client, &hosts, ttl * 5)
                .await
                .with_context(|| format!("{kind} trial {trial}"))?;
            let took = sent.elapsed();
            old.wait_exit(Duration::from_secs(30)).await?;
            if kind == "TERM" {
                graceful.push(took);
                let old_log = old.log_text();
                let epoch_line = hosts[new].log_text();
                let epoch = epoch_line
                    .lines()
                    .rev()
                    .find(|l| l.contains("lease acquired"))
                    .and_then(|l| l.split("epoch=").nth(1))
                    .and_then(|r| r.split_whitespace().next())
                    .unwrap_or("?")
                    .to_string();
                // The first reconcile runs within milliseconds, but its line reaches this
                // process through a pipe: wait for it rather than miss it.
                let _ = hosts[new]
                    .wait_for_log(
                        &format!("bench from epoch {epoch},"),
                        Duration::from_secs(2),
                    )
                    .await;
                let new_log = hosts[new].log_text();
                if let (Some(acq), Some(first)) = (
                    last_log_time(&new_log, "lease acquired"),
                    log_time(&new_log, &format!("bench from epoch {epoch},")),
                ) {
                    activation.push(Duration::from_secs_f64((first - acq).max(0.0)));
                }
                if let (Some(sig), Some(rel), Some(acq)) = (
                    log_time(&old_log, "SIGTERM received"),
                    log_time(&old_log, "lease released"),
                    last_log_time(&new_log, "lease acquired"),
                ) {
                    release_part.push(Duration::from_secs_f64((rel - sig).max(0.0)));
                    takeover_part.push(Duration::from_secs_f64((acq - rel).max(0.0)));
                }
            } else {
                crash.push(took);
            }
            hosts.push(Host::start(&format!("r{next_name}"), &args).await?);
            next_name += 1;
        }
    }
    println!(
        "{}",
        summary(
            "graceful handoff (SIGTERM -> new leader in /status)",
            &mut graceful
        )
    );
    println!(
        "{}",
        summary(
            "  of which signal -> released  (old holder's log)",
            &mut release_part
        )
    );
    println!(
        "{}",
        summary(
            "  of which released -> acquired (new holder's log)",
            &mut takeover_part
        )
    );
    println!(
        "{}",
        summary(
            "activation (lease acquired -> first reconcile, new holder's log)",
            &mut activation
        )
    );
    println!(
        "{}",
        summary(
            "crash failover   (SIGKILL -> new leader in /status)",
            &mut crash
        )
    );
    Ok(())
}
