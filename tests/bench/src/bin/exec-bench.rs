//! Measures `leasehold exec` from outside: three replicas on a real PostgreSQL, each running the
//! shell worker of [`leasehold_tests::exec`] under lease `nightly`, every worker appending to one
//! history file. Three kinds of trial, each ended by the next holder's worker writing its start
//! line:
//!
//! - graceful (`BENCH_TRIALS`, default 30): SIGTERM to the holder's host; the stopped replica is
//!   started again after;
//! - killed (`BENCH_KILL_TRIALS`, default 20): SIGKILL to the holder's host process alone; its
//!   keeper must take the worker and its double-forked grandchild with it;
//! - frozen (`BENCH_FREEZE_TRIALS`, default 20): SIGSTOP to the holder's host process alone for
//!   three ttl, then SIGCONT; its keeper must have ended the worker by the deadline.
//!
//! Prints median, p99 and worst of signal → next worker's start per kind, how long after the
//! signal the old term's last line came, and the overlaps the history shows (any is a failure:
//! exit 1). `BENCH_TTL` (default 2s) and `LEASEHOLD_BIN` change the run.
//!
//! Then the killed and frozen trials once more with etcd's lock CLI (`BENCH_ETCD_TRIALS` each,
//! default 10; skipped with a line when `etcd` is not on PATH): three `etcdctl lock --ttl`
//! agents on one lock, and the holder's etcdctl alone killed or frozen; it counts the trials in
//! which the old holder's work still ran after the next holder's had begun.

#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use leasehold_tests::exec::{WORKER, history, now_ns, overlaps};
use leasehold_tests::host::{Host, HostBuilder};
use leasehold_tests::stats::{env_count, env_duration, summary};

/// One replica, as it is started (again).
fn replica(name: &str, url: &str, ttl: Duration, file: &Path) -> HostBuilder {
    HostBuilder::new(name)
        .database_url(url)
        .lease("nightly")
        .ttl(ttl)
        .exec(&["sh", "-c", WORKER, "worker", file.to_str().unwrap()])
}

/// The newest epoch whose worker has started, and the replica name its holder id starts with.
fn newest(file: &Path) -> Option<(i64, String)> {
    history(file)
        .into_iter()
        .filter(|l| l.what == "start")
        .max_by_key(|l| l.epoch)
        .map(|l| (l.epoch, l.holder))
}

/// Waits until a worker of an epoch after `epoch` has started; returns its start time.
async fn next_start(file: &Path, epoch: i64, within: Duration) -> anyhow::Result<u128> {
    let until = tokio::time::Instant::now() + within;
    loop {
        if let Some(l) = history(file)
            .into_iter()
            .find(|l| l.what == "start" && l.epoch > epoch)
        {
            return Ok(l.at);
        }
        if tokio::time::Instant::now() > until {
            anyhow::bail!("no worker started after epoch {epoch} within {within:?}");
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Graceful,
    Killed,
    Frozen,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let ttl = env_duration("BENCH_TTL", Duration::from_secs(2))?;
    let url = leasehold_tests::pg::server().fresh_database().await?;
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("history");
    println!(
        "exec benchmark: 3 replicas on PostgreSQL running `leasehold exec --lease nightly -- sh -c WORKER`, ttl {ttl:?}"
    );
    let names = ["a", "b", "c"];
    let mut hosts: Vec<Option<Host>> = Vec::new();
    for name in names {
        hosts.push(Some(replica(name, &url, ttl, &file).spawn().await?));
    }
    let mut failed = false;
    for (kind, label, trials) in [
        (
            Kind::Graceful,
            "graceful (SIGTERM -> the next holder's worker starts)",
            env_count("BENCH_TRIALS", 30),
        ),
        (
            Kind::Killed,
            "killed   (SIGKILL of the host alone -> the next holder's worker starts)",
            env_count("BENCH_KILL_TRIALS", 20),
        ),
        (
            Kind::Frozen,
            "frozen   (SIGSTOP of the host alone -> the next holder's worker starts)",
            env_count("BENCH_FREEZE_TRIALS", 20),
        ),
    ] {
        let mut handoffs = Vec::new();
        let mut last_after = Vec::new();
        for _ in 0..trials {
            // The current holder, once its worker has run a moment.
            let (epoch, holder) = loop {
                if let Some(found) = newest(&file) {
                    break found;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            };
            tokio::time::sleep(Duration::from_millis(200)).await;
            let i = names
                .iter()
                .position(|n| holder.starts_with(&format!("{n}-")))
                .context("the holder is none of the replicas")?;
            let host = hosts[i].as_ref().context("the holder is not running")?;
            let signal = match kind {
                Kind::Graceful => "TERM",
                Kind::Killed => "KILL",
                Kind::Frozen => "STOP",
            };
            let sent = now_ns();
            match kind {
                // The host process alone, not its group.
                Kind::Killed => rustix::process::kill_process(
                    rustix::process::Pid::from_raw(host.pid() as i32).context("pid")?,
                    rustix::process::Signal::KILL,
                )?,
                _ => host.signal(signal)?,
            }
            let started = next_start(&file, epoch, ttl * 10).await?;
            handoffs.push(Duration::from_nanos((started.saturating_sub(sent)) as u64));
            match kind {
                Kind::Graceful | Kind::Killed => {
                    let mut old = hosts[i].take().context("the holder")?;
                    if kind == Kind::Graceful {
                        old.wait_exit(Duration::from_secs(30)).await?;
                    } else {
                        let _ = old.kill().await;
                    }
                }
                Kind::Frozen => {
                    tokio::time::sleep(ttl * 3).await;
                    host.signal("CONT")?;
                }
            }
            let last = history(&file)
                .into_iter()
                .filter(|l| l.epoch == epoch)
                .map(|l| l.at)
                .max()
                .unwrap_or(sent);
            last_after.push(Duration::from_nanos(last.saturating_sub(sent) as u64));
            if hosts[i].is_none() {
                hosts[i] = Some(replica(names[i], &url, ttl, &file).spawn().await?);
            }
        }
        println!("{}", summary(label, &mut handoffs));
        println!(
            "{}",
            summary(
                "  the old term's last line, after the signal",
                &mut last_after
            )
        );
        let found = overlaps(&history(&file));
        println!("  workers of two terms at once: {}", found.len());
        for line in found.iter().take(5) {
            println!("    {line}");
        }
        failed |= !found.is_empty();
    }
    for host in hosts.into_iter().flatten() {
        drop(host);
    }
    let secs = ttl.as_secs().max(1);
    etcd_trials(secs, env_count("BENCH_ETCD_TRIALS", 10)).await?;
    if failed {
        anyhow::bail!("two terms' workers ran at once");
    }
    Ok(())
}

/// The killed and frozen trials with `etcdctl lock --ttl TTL_SECS`, a fresh lock and three fresh
/// agents each: the holder's etcdctl alone is sent SIGKILL or SIGSTOP, and the trial counts if
/// the holder's work still beat half a second after the next holder's work started.
async fn etcd_trials(ttl_secs: u64, trials: usize) -> anyhow::Result<()> {
    use leasehold_tests::etcd::Etcd;
    use rustix::process::Signal;
    if let Err(e) = leasehold_tests::etcd::binaries() {
        println!("etcd lock trials skipped: {e:#}");
        return Ok(());
    }
    let etcd = Etcd::start().await?;
    for (signal, kind) in [
        (Signal::KILL, "killed (SIGKILL of etcdctl alone)"),
        (Signal::STOP, "frozen (SIGSTOP of etcdctl alone)"),
    ] {
        let mut ran_on = 0;
        for trial in 0..trials {
            let lock = format!("nightly-{}-{trial}", signal.as_raw());
            let agents = (0..3)
                .map(|i| etcd.agent(&format!("agent {i}"), &lock, ttl_secs))
                .collect::<anyhow::Result<Vec<_>>>()?;
            let within = tokio::time::Instant::now() + Duration::from_secs(ttl_secs * 10);
            let holder = loop {
                if let Some(i) = agents.iter().position(|a| a.started().is_some()) {
                    break i;
                }
                anyhow::ensure!(
                    tokio::time::Instant::now() < within,
                    "no agent took the lock"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            };
            tokio::time::sleep(Duration::from_millis(200)).await;
            agents[holder].signal_client(signal)?;
            let next = loop {
                let started = agents
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| *i != holder)
                    .find_map(|(_, a)| a.started());
                if let Some(at) = started {
                    break at;
                }
                anyhow::ensure!(
                    tokio::time::Instant::now() < within,
                    "no other agent took the lock: {}",
                    etcd.log()
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            };
            tokio::time::sleep(Duration::from_millis(500)).await;
            if agents[holder]
                .last_beat()
                .is_some_and(|last| last > next + 0.4)
            {
                ran_on += 1;
            }
            if signal == Signal::STOP {
                let _ = agents[holder].signal_client(Signal::CONT);
            }
            for agent in &agents {
                let _ = agent.signal(Signal::KILL);
            }
        }
        println!(
            "etcdctl lock --ttl {ttl_secs}, {kind}: the old holder's work still ran after the next holder's began in {ran_on}/{trials} trials"
        );
    }
    Ok(())
}
