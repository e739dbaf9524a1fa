//! Measures leadership handoff between real `leasehold` processes on a real PostgreSQL:
//! - graceful: SIGTERM to the leader → the next holder's plugin runs its first call;
//! - crash: SIGKILL to the leader → the same (the ttl must run out first);
//!
//! then the graceful trials again beside idle `LISTEN` sessions of another application
//! (`BENCH_OTHER_LISTENERS`, default 100), a few more (`BENCH_STATEMENT_LOG_TRIALS`, default 10)
//! with the server logging every statement to check the hosts' figures against, the graceful
//! trials on one SQLite file (`BENCH_SQLITE_TRIALS`, default 30), and a table of the release →
//! acquired part on both stores. First it times what one synchronous commit costs on the
//! server (`BENCH_COMMITS`, default 20): a handoff's grant is one, so that is its floor.
//!
//! Each is read from the processes' own log timestamps (the signal's time from this process's
//! clock, the same wall clock), so no polling of `/status` loads the machine during a handoff.
//! The statement log is on only for its own series: it slows every statement.
//! Three replicas; after each trial the stopped one is started again. Prints median, p99 and
//! worst per kind. `BENCH_TRIALS` (graceful, default 30), `BENCH_CRASH_TRIALS` (default 20) and
//! `BENCH_TTL` (default 2s) change the run; `LEASEHOLD_BIN` measures another build.
//!
//! Then, after the leasehold replicas are gone, the same trials with etcd's own lock CLI as the
//! reference: a single-node etcd started here, three agents `etcdctl lock --ttl N LOCK -- WORK`
//! (N the ttl rounded to whole seconds), whose work prints its start time on the same clock
//! ([`leasehold_tests::etcd`]). A graceful stop is SIGTERM to the holder's etcdctl and its work,
//! a crash SIGKILL to both; a handoff ends when the next holder's work prints that it started.
//! A table sets both systems' figures side by side. `BENCH_ETCD=0` skips etcd; without `etcd`
//! and `etcdctl` on PATH it is skipped with a line saying so.

#![allow(clippy::unwrap_used)]

use leasehold_tests::log::Logged;
use std::time::{Duration, Instant};

use anyhow::Context;
use leasehold_tests::etcd::{Agent, Etcd};
use leasehold_tests::host::{Host, last_log_time, log_time, now_time_of_day, time_of_day};
use leasehold_tests::statement_log;
use leasehold_tests::stats::{env_count, env_duration, summary};
use leasehold_tests::status::Role;
use leasehold_tests::stores::{Backend, Db};
use rustix::process::Signal;

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

/// The figures of one store's trials, from the processes' own log timestamps.
#[derive(Default)]
struct Trials {
    /// SIGTERM -> the next holder's plugin running.
    graceful: Vec<Duration>,
    /// Of which: the signal -> the old holder's `lease released`.
    release_part: Vec<Duration>,
    /// Of which: `lease released` -> the new holder's `lease acquired`.
    takeover_part: Vec<Duration>,
    /// `lease acquired` -> the plugin's first call, every trial.
    activation: Vec<Duration>,
    /// The release as the database logged it -> the new holder's `lease acquired`.
    db_takeover: Vec<Duration>,
    /// The release as the database logged it -> the old holder's `lease released` (negative
    /// ones count as zero: the database stamps whole milliseconds).
    released_logged_after: Vec<Duration>,
    /// The release statement's execution on the server.
    db_release: Vec<Duration>,
    /// The successor's first statement after the release (the read of its grant, or a
    /// campaign), executing on the server.
    db_campaign: Vec<Duration>,
    /// The release as the database logged it -> the successor's first statement begins (its
    /// bind): the notice's delivery and the standby's answer to it.
    db_woken: Vec<Duration>,
    /// That statement's bind on the server: planning it, for a statement planned each time.
    db_campaign_bind: Vec<Duration>,
    /// Which statement that was, by trial: a read of a grant or a campaign.
    successor_reads: usize,
    /// SIGKILL -> the next holder's plugin running.
    crash: Vec<Duration>,
}

/// Runs `graceful_trials` SIGTERM and `crash_trials` SIGKILL trials between three replicas
/// started with `args` (named `{prefix}0`, …), starting a fresh replica after each.
async fn run_trials(
    prefix: &str,
    args: &[&str],
    ttl: Duration,
    graceful_trials: usize,
    crash_trials: usize,
    statements: Option<&std::path::Path>,
) -> anyhow::Result<Trials> {
    let mut hosts: Vec<Host> = Vec::new();
    for i in 0..3 {
        hosts.push(Host::start(&format!("{prefix}{i}"), args).await?);
    }
    let mut next_name = 3;
    let client = reqwest::Client::new();
    let mut out = Trials::default();
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
            let logged_from = statements.map(statement_log::len);
            let sent = now_time_of_day();
            old.signal(kind)?;
            let (running, new) = first_call(&hosts, &from, epoch + 1, ttl * 5)
                .await
                .with_context(|| format!("{prefix}: {kind} trial {trial}"))?;
            let took = Duration::from_secs_f64((running - sent).max(0.0));
            old.wait_exit(Duration::from_secs(30)).await?;
            let new_log = hosts[new].log_text();
            let acquired = last_log_time(&new_log, "lease acquired");
            if let Some(acq) = acquired {
                out.activation
                    .push(Duration::from_secs_f64((running - acq).max(0.0)));
            }
            if let (Some(path), Some(from), Some(acq), true) =
                (statements, logged_from, acquired, kind == "TERM")
            {
                let rel = log_time(&old.log_text(), "lease released");
                database_side(
                    &mut out,
                    &statement_log::read_from(path, from),
                    sent,
                    acq,
                    rel,
                );
            }
            if kind == "TERM" {
                out.graceful.push(took);
                if let (Some(rel), Some(acq)) =
                    (log_time(&old.log_text(), "lease released"), acquired)
                {
                    out.release_part
                        .push(Duration::from_secs_f64((rel - sent).max(0.0)));
                    out.takeover_part
                        .push(Duration::from_secs_f64((acq - rel).max(0.0)));
                }
            } else {
                out.crash.push(took);
            }
            hosts.push(Host::start(&format!("{prefix}{next_name}"), args).await?);
            next_name += 1;
        }
    }
    Ok(out)
}

/// What the database's statement log says of one graceful trial signalled at `sent`: when the
/// release ran (the first after the signal), against the new holder's `lease acquired` at
/// `acquired` and the old holder's `lease released` at `released`; and what the release and the
/// first campaign after it took on the server.
fn database_side(
    out: &mut Trials,
    logged: &[statement_log::Logged],
    sent: f64,
    acquired: f64,
    released: Option<f64>,
) {
    let secs = |s: f64| Duration::from_secs_f64(s.max(0.0));
    let executed = |l: &&statement_log::Logged| l.phase == "execute" || l.phase == "statement";
    // The release's line is written as it finishes executing, stamped to the millisecond below.
    // (`WITH released AS` is the release of the releases before the line.)
    let is_release =
        |l: &statement_log::Logged| l.runs("WITH here AS") || l.runs("WITH released AS");
    let Some(release) = logged
        .iter()
        .filter(executed)
        .find(|l| l.at >= sent - 0.001 && is_release(l))
    else {
        return;
    };
    out.db_takeover.push(secs(acquired - release.at));
    if let Some(rel) = released {
        out.released_logged_after.push(secs(rel - release.at));
    }
    out.db_release
        .push(Duration::from_secs_f64(release.took_ms / 1000.0));
    let ms = |took: f64| Duration::from_secs_f64(took / 1000.0);
    // The successor's first statement: the read of its grant, or (before the line, or when
    // nobody waited in it) a campaign.
    let reads = |l: &statement_log::Logged| l.runs("SELECT (SELECT floor(");
    let successor = |l: &statement_log::Logged| reads(l) || l.runs("WITH cur AS");
    if let Some(bind) = logged
        .iter()
        .find(|l| l.phase == "bind" && l.at >= release.at && successor(l))
    {
        out.db_woken
            .push(secs(bind.at - bind.took_ms / 1000.0 - release.at));
        out.db_campaign_bind.push(ms(bind.took_ms));
        out.successor_reads += usize::from(reads(bind));
        if let Some(first) = logged
            .iter()
            .filter(executed)
            .find(|l| l.pid == bind.pid && l.at >= bind.at && successor(l))
        {
            out.db_campaign.push(ms(first.took_ms));
        }
    }
}

/// Prints one store's figures.
fn print_trials(trials: &mut Trials) {
    let lines = [
        summary(
            "graceful handoff (SIGTERM -> the next holder's plugin running)",
            &mut trials.graceful,
        ),
        summary(
            "  of which signal -> released  (old holder's log)",
            &mut trials.release_part,
        ),
        summary(
            "  of which released -> acquired (new holder's log)",
            &mut trials.takeover_part,
        ),
        summary(
            "  and acquired -> plugin running, every trial (new holder's log)",
            &mut trials.activation,
        ),
        summary(
            "crash failover   (SIGKILL -> the next holder's plugin running)",
            &mut trials.crash,
        ),
        summary(
            "database: release logged -> acquired (new holder's log; the database stamps whole ms)",
            &mut trials.db_takeover,
        ),
        summary(
            "database: release logged -> `lease released` in the old holder's log",
            &mut trials.released_logged_after,
        ),
        summary(
            "database: the release statement, executing on the server",
            &mut trials.db_release,
        ),
        summary(
            "database: release logged -> the successor's first statement begins (notice, wake-up)",
            &mut trials.db_woken,
        ),
        summary(
            "database: that statement planned (bind) on the server",
            &mut trials.db_campaign_bind,
        ),
        summary(
            "database: that statement executing on the server",
            &mut trials.db_campaign,
        ),
    ];
    // A series measures some of these only (no crashes, no statement log): the rest say nothing.
    for line in lines.iter().filter(|l| !l.ends_with(": no samples")) {
        println!("{line}");
    }
    if !trials.db_woken.is_empty() {
        println!(
            "database: the successor's first statement was the read of its grant in {} of {} trials (else a campaign)",
            trials.successor_reads,
            trials.db_woken.len()
        );
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let graceful_trials = env_count("BENCH_TRIALS", 30);
    let crash_trials = env_count("BENCH_CRASH_TRIALS", 20);
    let sqlite_trials = env_count("BENCH_SQLITE_TRIALS", 30);
    let ttl = env_duration("BENCH_TTL", Duration::from_secs(2))?;
    let db = Db::new(Backend::Postgres).await?;
    let url = db.url().context("postgres url")?;
    // What one synchronous commit costs on this server's disk: the floor under a handoff, whose
    // grant is one. Alone (as a release comes, after the database sat idle) and back to back.
    let (mut lone, mut back_to_back) =
        commits(&url, env_count("BENCH_COMMITS", 20), ttl / 3).await?;
    let lone_line = summary(
        "a lone synchronous commit on this server (one-row UPDATE after ttl/3 idle, client's view)",
        &mut lone,
    );
    println!("{lone_line}");
    println!(
        "{}",
        summary("the same commits back to back", &mut back_to_back)
    );
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
    println!(
        "handoff benchmark: 3 replicas on PostgreSQL, ttl {ttl:?}, {graceful_trials} graceful and {crash_trials} crash trials; leasehold {}",
        leasehold_tests::host::binary()?.display()
    );
    let mut postgres = run_trials("r", &args, ttl, graceful_trials, crash_trials, None).await?;
    print_trials(&mut postgres);

    // The same graceful trials with idle `LISTEN` sessions of another application on the same
    // database: before PostgreSQL 19 a NOTIFY wakes every listening session of the database,
    // which is what a shared database costs a handoff (README, Operations).
    let others = env_count("BENCH_OTHER_LISTENERS", 100);
    let mut crowded = Trials::default();
    if others > 0 && graceful_trials > 0 {
        let listeners = idle_listeners(&url, others).await?;
        println!(
            "handoff benchmark: the same {graceful_trials} graceful trials beside {others} idle LISTEN sessions of another application on the database"
        );
        crowded = run_trials("l", &args, ttl, graceful_trials, 0, None).await?;
        print_trials(&mut crowded);
        drop(listeners);
    }

    // The database's own record of a few more graceful trials, to check the hosts' logs against:
    // the statement log slows every statement, so the figures above run without it.
    let statements = leasehold_tests::pg::server().log_file();
    let check_trials = env_count("BENCH_STATEMENT_LOG_TRIALS", 10);
    let mut logged = Trials::default();
    match &statements {
        Some(path) if check_trials > 0 => {
            let server = leasehold_tests::pg::server();
            server.log_every_statement(true).await?;
            println!(
                "handoff benchmark: {check_trials} more graceful trials with the server logging every statement, to check the hosts' figures against the database's own record"
            );
            logged = run_trials("c", &args, ttl, check_trials, 0, Some(path)).await?;
            server.log_every_statement(false).await?;
            print_trials(&mut logged);
        }
        Some(_) => println!("database statement log: not read (BENCH_STATEMENT_LOG_TRIALS=0)"),
        None => println!("database statement log: not read (DATABASE_URL names the server)"),
    }

    // The same graceful trials on one SQLite file (the default store, `make run`): the release
    // wakes the standbys through the event file beside it.
    let sqlite_dir = tempfile::tempdir()?;
    let sqlite_url = format!("sqlite:{}", sqlite_dir.path().join("leases.db").display());
    let sqlite_args = [
        "--database-url",
        sqlite_url.as_str(),
        "--ttl",
        ttl_text.as_str(),
        "--plugins",
        plugin_path.as_str(),
    ];
    println!(
        "handoff benchmark: 3 replicas on one SQLite file, ttl {ttl:?}, {sqlite_trials} graceful trials"
    );
    let mut sqlite = run_trials("s", &sqlite_args, ttl, sqlite_trials, 0, None).await?;
    print_trials(&mut sqlite);

    let leasehold = Figures {
        graceful: postgres.graceful,
        crash: postgres.crash,
    };
    let etcd = if std::env::var("BENCH_ETCD").as_deref() == Ok("0") {
        println!("etcd lock: not measured (BENCH_ETCD=0)");
        None
    } else if let Err(e) = leasehold_tests::etcd::binaries() {
        println!("etcd lock: not measured: {e:#}");
        None
    } else {
        Some(etcd_trials(graceful_trials, crash_trials, ttl).await?)
    };
    print_table(&leasehold, etcd.as_ref());
    print_stores(&postgres.takeover_part, &sqlite.takeover_part);
    let row = |figure: &str, samples: &[Duration]| {
        println!("{figure:<58} | {}", median_p99_max(samples));
    };
    row(
        &format!("the same beside {others} idle LISTEN sessions"),
        &crowded.takeover_part,
    );
    row(
        &format!("SIGTERM -> plugin running, beside {others} LISTEN sessions"),
        &crowded.graceful,
    );
    row(
        "checked: released -> acquired, hosts' logs (statement log on)",
        &logged.takeover_part,
    );
    row(
        "checked: the database's release -> acquired (same trials)",
        &logged.db_takeover,
    );
    row(
        "checked: the database's release -> old holder's `released`",
        &logged.released_logged_after,
    );
    println!("floor: {lone_line}");
    Ok(())
}

/// `count` one-row updates on the database at `url`, each committed alone after `gap` idle, then
/// `count` back to back: what the client waits for each (one round trip, one synchronous commit).
async fn commits(
    url: &str,
    count: usize,
    gap: Duration,
) -> anyhow::Result<(Vec<Duration>, Vec<Duration>)> {
    use sqlx::Connection;
    let mut conn = sqlx::PgConnection::connect(url).await?;
    sqlx::query("CREATE TABLE IF NOT EXISTS handoff_bench_commit (n BIGINT NOT NULL)")
        .execute(&mut conn)
        .await?;
    sqlx::query("INSERT INTO handoff_bench_commit SELECT 0 WHERE NOT EXISTS (SELECT FROM handoff_bench_commit)")
        .execute(&mut conn)
        .await?;
    let update = "UPDATE handoff_bench_commit SET n = n + 1";
    // Prepared first, so that every one timed is the statement alone.
    sqlx::query(update).execute(&mut conn).await?;
    let (mut lone, mut back_to_back) = (Vec::new(), Vec::new());
    for _ in 0..count {
        tokio::time::sleep(gap).await;
        let started = Instant::now();
        sqlx::query(update).execute(&mut conn).await?;
        lone.push(started.elapsed());
    }
    for _ in 0..count {
        let started = Instant::now();
        sqlx::query(update).execute(&mut conn).await?;
        back_to_back.push(started.elapsed());
    }
    Ok((lone, back_to_back))
}

/// `count` sessions on the database at `url` that `LISTEN` on a channel of their own and then
/// sit idle, as another application's would; kept open until dropped.
async fn idle_listeners(
    url: &str,
    count: usize,
) -> anyhow::Result<Vec<sqlx::postgres::PgListener>> {
    let mut listeners = Vec::with_capacity(count);
    for _ in 0..count {
        let mut listener = sqlx::postgres::PgListener::connect(url).await?;
        listener.listen("another_application").await?;
        listeners.push(listener);
    }
    Ok(listeners)
}

/// The handoff's own part on each store, side by side: the old holder's release to the new
/// holder's acquisition, both from their logs.
fn print_stores(postgres: &[Duration], sqlite: &[Duration]) {
    let figure = "released -> acquired, old holder's log -> new holder's";
    let (pg, lite) = (median_p99_max(postgres), median_p99_max(sqlite));
    let (w0, w1) = (figure.len(), pg.len().max("PostgreSQL".len()));
    println!();
    println!(
        "{:<w0$} | {:<w1$} | SQLite",
        "figure (median / p99 / max)", "PostgreSQL"
    );
    println!("{figure:<w0$} | {pg:<w1$} | {lite}");
}

/// One system's handoff times: graceful handoffs and crash failovers.
struct Figures {
    graceful: Vec<Duration>,
    crash: Vec<Duration>,
}

/// The same trials with etcd's lock CLI: three `etcdctl lock` agents on one lock, the holder
/// stopped (SIGTERM) or crashed (SIGKILL) with the same phase spread, the time from the signal
/// to the next holder's work printing its start, and a fresh agent started after each trial.
async fn etcd_trials(
    graceful_trials: usize,
    crash_trials: usize,
    ttl: Duration,
) -> anyhow::Result<Figures> {
    // etcdctl takes whole seconds (and etcd raises a ttl under its minimum, 2 s with the default
    // election timeout, to that minimum).
    let ttl_secs = (ttl.as_secs_f64().round() as u64).max(1);
    let etcd_ttl = Duration::from_secs(ttl_secs);
    let lock = "bench";
    let etcd = Etcd::start().await?;
    let mut agents = Vec::new();
    for i in 0..3 {
        agents.push(etcd.agent(&format!("e{i}"), lock, ttl_secs)?);
    }
    let mut next_name = 3;
    println!(
        "etcd lock benchmark: etcd {}, one node at {}, 3 agents `etcdctl lock --ttl {ttl_secs}`, {graceful_trials} graceful and {crash_trials} crash trials",
        etcd.version(),
        etcd.endpoint()
    );
    let mut graceful = Vec::new();
    let mut crash = Vec::new();
    // Trials where the old holder's work printed after the next holder's had started: two
    // holders working at once, which stopping etcdctl and its work together must rule out.
    let mut overlaps = 0;
    for (kind, signal, trials) in [
        ("TERM", Signal::TERM, graceful_trials),
        ("KILL", Signal::KILL, crash_trials),
    ] {
        for trial in 0..trials {
            let holder = wait_holder(&etcd, &agents, lock, etcd_ttl * 5)
                .await
                .with_context(|| format!("etcd {kind} trial {trial}"))?;
            // As for leasehold: a delay anywhere within the client's renewal interval (etcdctl
            // keeps its lease alive every ttl/3), so a crash does not keep one phase to it.
            let phase = etcd_ttl / 3 * (trial as u32 % 10) / 10;
            tokio::time::sleep(Duration::from_millis(300) + phase).await;
            let mut old = agents.remove(holder);
            let sent = now_time_of_day();
            old.signal(signal)?;
            let (running, _) = first_start(&agents, etcd_ttl * 5)
                .await
                .with_context(|| format!("etcd {kind} trial {trial}"))?;
            let took = Duration::from_secs_f64((running - sent).max(0.0));
            old.wait_exit(Duration::from_secs(30)).await?;
            if old.last_beat().is_some_and(|beat| beat > running) {
                overlaps += 1;
            }
            if kind == "TERM" {
                graceful.push(took);
            } else {
                crash.push(took);
            }
            agents.push(etcd.agent(&format!("e{next_name}"), lock, ttl_secs)?);
            next_name += 1;
        }
    }
    println!(
        "{}",
        summary(
            "graceful handoff (SIGTERM to etcdctl and its work -> the next holder's work running)",
            &mut graceful,
        )
    );
    println!(
        "{}",
        summary(
            "crash failover   (SIGKILL to etcdctl and its work -> the next holder's work running)",
            &mut crash,
        )
    );
    println!(
        "  old holder's work printing after the next holder's started: {overlaps} of {} trials",
        graceful.len() + crash.len()
    );
    Ok(Figures { graceful, crash })
}

/// Waits until exactly one agent's work has started and every agent has queued for `lock` (the
/// replacement's etcdctl has its key, so every waiter is idle); returns the holder's index.
async fn wait_holder(
    etcd: &Etcd,
    agents: &[Agent],
    lock: &str,
    timeout: Duration,
) -> anyhow::Result<usize> {
    let deadline = Instant::now() + timeout;
    loop {
        let holders: Vec<usize> = (0..agents.len())
            .filter(|&i| agents[i].started().is_some())
            .collect();
        anyhow::ensure!(holders.len() <= 1, "agents {holders:?} all hold the lock");
        if let [holder] = holders[..]
            && etcd.lock_keys(lock).await? == agents.len()
        {
            return Ok(holder);
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "no agent holds the lock with all queued within {timeout:?}; etcdctl said: {}",
            agents
                .iter()
                .map(|a| format!("{}: {:?}", a.name, a.messages()))
                .collect::<Vec<_>>()
                .join("; ")
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Waits for the first agent whose work has started; returns its start time (seconds since
/// midnight, the work's own reading) and its index.
async fn first_start(agents: &[Agent], timeout: Duration) -> anyhow::Result<(f64, usize)> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(found) = agents
            .iter()
            .enumerate()
            .find_map(|(i, a)| Some((a.started()?, i)))
        {
            return Ok(found);
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "no agent took the lock within {timeout:?}"
        );
        // The work's own timestamp is the measurement: this wait only needs to notice it.
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Median / p99 / max of `samples`, picked as `summary` picks them.
fn median_p99_max(samples: &[Duration]) -> String {
    let mut sorted = samples.to_vec();
    sorted.sort();
    let Some(max) = sorted.last() else {
        return "no samples".to_string();
    };
    let pick = |q: f64| sorted[((sorted.len() - 1) as f64 * q).round() as usize];
    format!("{:.2?} / {:.2?} / {max:.2?}", pick(0.5), pick(0.99))
}

/// Both systems' figures side by side, as plain text.
fn print_table(leasehold: &Figures, etcd: Option<&Figures>) {
    let etcd_cell = |pick: fn(&Figures) -> &Vec<Duration>| {
        etcd.map(|e| median_p99_max(pick(e)))
            .unwrap_or_else(|| "not measured".to_string())
    };
    let rows = [
        [
            "figure (median / p99 / max)".to_string(),
            "leasehold".to_string(),
            "etcd lock".to_string(),
        ],
        [
            "graceful handoff, SIGTERM -> the next holder's work starts".to_string(),
            median_p99_max(&leasehold.graceful),
            etcd_cell(|f| &f.graceful),
        ],
        [
            "crash failover, SIGKILL -> the next holder's work starts".to_string(),
            median_p99_max(&leasehold.crash),
            etcd_cell(|f| &f.crash),
        ],
    ];
    let width = |col: usize| rows.iter().map(|r| r[col].len()).max().unwrap_or(0);
    let (w0, w1) = (width(0), width(1));
    println!();
    for [figure, ours, theirs] in &rows {
        println!("{figure:<w0$} | {ours:<w1$} | {theirs}");
    }
}
