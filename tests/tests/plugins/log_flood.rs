//! A plugin flooding the host's log is held to its rate across calls: a real `leasehold run`
//! process on a real PostgreSQL, two copies of the `misbehave` guest writing as much as each
//! call allows (one through the `log` import, one to stdout and stderr) on a 10 ms schedule, and a
//! quiet `hello-reconciler` beside them; and one plugin flooding on every shard of a lease group.
//! The host's stderr is what is measured.

#![allow(clippy::unwrap_used, missing_docs)]

use std::time::{Duration, Instant};

use leasehold::testing::{BURST_BYTES, RATE_BYTES_PER_SECOND, REPORT_INTERVAL};
use leasehold_tests::endpoint::sample;
use leasehold_tests::host::{HostBuilder, guests_dist, time_of_day, wait_for_single_leader};
use leasehold_tests::log::Logged;
use leasehold_tests::status::Role;
use leasehold_tests::stores::{Backend, Db};

/// How long the flood is measured.
const FLOOD: Duration = Duration::from_secs(12);

/// The quiet plugin's greeting, to find its lines.
const QUIET: &str = "quiet-plugin-says-hi";

fn manifest(interval: &str, config: &str) -> String {
    format!(
        "lease = \"leader\"\n[schedule]\ninterval = \"{interval}\"\n[limits]\ncall_timeout = \"5s\"\nmemory = \"32MiB\"\n[config]\n{config}\n"
    )
}

/// The bytes `lines` take on stderr, newlines included.
fn bytes(lines: &[String]) -> u64 {
    lines.iter().map(|l| l.len() as u64 + 1).sum()
}

/// The most a plugin may add to the host's log in `time`: its burst and its rate, each line's
/// text and the host's own around it included (the bucket charges 256 bytes a line for that).
fn allowed(time: Duration) -> u64 {
    BURST_BYTES + (RATE_BYTES_PER_SECOND as f64 * time.as_secs_f64()) as u64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_flooding_its_log_stays_within_its_rate_and_a_quiet_one_is_still_heard() {
    let db = Db::new(Backend::Postgres).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let dist = guests_dist();
    let plugins = [
        // 5,000 log lines a call: five times the call's budget, every 10 ms.
        (
            "flood-log",
            "misbehave",
            manifest("10ms", "verb = \"log-flood\"\nlines = \"5000\""),
        ),
        // 20,000 lines of ~100 bytes to stdout and as many to stderr a call.
        (
            "flood-print",
            "misbehave",
            manifest("10ms", "verb = \"print\"\nlines = \"20000\""),
        ),
        (
            "quiet",
            "hello-reconciler",
            manifest("200ms", &format!("greeting = \"{QUIET}\"")),
        ),
    ];
    for (name, guest, manifest) in &plugins {
        std::fs::copy(
            dist.join(format!("{guest}.wasm")),
            dir.path().join(format!("{name}.wasm")),
        )
        .unwrap();
        std::fs::write(dir.path().join(format!("{name}.toml")), manifest).unwrap();
    }
    let mut host = HostBuilder::new("flood")
        .database_url(&db.url().unwrap())
        .ttl(Duration::from_secs(2))
        .plugins(dir.path())
        .spawn()
        .await
        .unwrap();
    wait_for_single_leader(&[&host], "leader", Duration::from_secs(30))
        .await
        .unwrap();
    let epoch = host.status().await.unwrap().leases[0].epoch;
    // Both floods are under way (and have spent their burst) before the measure starts.
    for name in ["flood-log", "flood-print"] {
        host.wait_for_plugin(name, "a few calls", Duration::from_secs(30), |s| {
            s.calls >= 5
        })
        .await
        .unwrap();
    }
    tokio::time::sleep(Duration::from_secs(1)).await;

    let from = host.log_len();
    let started = Instant::now();
    // Polled each second so that a host without a rate fails at once, not after holding
    // hundreds of megabytes of log here.
    let slack = 64 << 10;
    let bound = |time: Duration| 2 * allowed(time + Duration::from_secs(2)) + slack;
    while started.elapsed() < FLOOD {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let grown = bytes(&host.log_lines_from(from));
        let time = started.elapsed();
        assert!(
            grown <= bound(time),
            "the host's log grew by {grown} bytes in {time:?} ({:.1} MiB a minute), over {}",
            grown as f64 / time.as_secs_f64() * 60.0 / f64::from(1 << 20),
            bound(time)
        );
    }
    let time = started.elapsed();
    let lines = host.log_lines_from(from);
    let grown = bytes(&lines);
    println!(
        "log flood: the host's stderr grew by {grown} bytes in {time:?}: {:.2} MiB a minute (bound {} bytes)",
        grown as f64 / time.as_secs_f64() * 60.0 / f64::from(1 << 20),
        bound(time)
    );
    assert!(grown <= bound(time), "{grown} bytes in {time:?}");
    for name in ["flood-log", "flood-print"] {
        // The span of its calls, on its own lines and on the host's about them.
        let tag = format!("{{plugin={name} ");
        let of: Vec<String> = lines.iter().filter(|l| l.contains(&tag)).cloned().collect();
        // Its "plugin initialised" line is the host's, not the bucket's.
        let most = allowed(time + Duration::from_secs(2)) + (8 << 10);
        println!("log flood: {name} wrote {} bytes", bytes(&of));
        assert!(
            bytes(&of) <= most,
            "{name}: {} bytes over {most}",
            bytes(&of)
        );
        // Its drops are reported in one line per interval, not one per call or line.
        let reports = of
            .iter()
            .filter(|l| l.contains("plugin output dropped in the last"))
            .count() as u64;
        let most_reports = FLOOD.as_secs() / REPORT_INTERVAL.as_secs() + 1;
        assert!(
            (1..=most_reports).contains(&reports),
            "{name}: {reports} drop reports in {time:?}"
        );
    }

    // The quiet plugin was heard all along: no gap of 2 s between its lines (it logs every
    // 200 ms), while the floods lost most of theirs.
    let heard: Vec<f64> = lines
        .iter()
        .filter(|l| l.contains(QUIET))
        .filter_map(|l| time_of_day(l))
        .collect();
    assert!(
        heard.len() as f64 >= FLOOD.as_secs_f64() / 0.2 / 2.0,
        "the quiet plugin logged {} lines in {time:?}",
        heard.len()
    );
    let gap = heard.windows(2).map(|w| w[1] - w[0]).fold(0.0, f64::max);
    assert!(gap < 2.0, "the quiet plugin went unheard for {gap:.1} s");
    let metrics = host.metrics().await.unwrap();
    let dropped = |plugin: &str| {
        sample(
            &metrics,
            &format!("leasehold_plugin_log_dropped_total{{plugin=\"{plugin}\"}}"),
        )
        .unwrap_or(-1.0)
    };
    println!(
        "log flood: dropped lines: flood-log {}, flood-print {}, quiet {}",
        dropped("flood-log"),
        dropped("flood-print"),
        dropped("quiet")
    );
    assert!(dropped("flood-log") > 100_000.0, "{metrics}");
    assert!(dropped("flood-print") > 100_000.0, "{metrics}");
    assert_eq!(dropped("quiet"), 0.0, "{metrics}");
    // The lease never moved.
    assert_eq!(host.role("leader").await, Some(Role::Leader));
    assert_eq!(host.status().await.unwrap().leases[0].epoch, epoch);
    // And the log's writer thread never had to drop a line, which it would say as it exits.
    let exit = host.stop(Duration::from_secs(15)).await.unwrap();
    assert!(exit.success(), "{exit:?}");
    let last = host.log_lines_from(from);
    assert!(
        !last
            .iter()
            .any(|l| l.contains("stderr was not read fast enough")),
        "the host's log queue overflowed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_flooding_on_every_shard_of_a_group_shares_one_rate() {
    const SHARDS: u32 = 4;
    let db = Db::new(Backend::Postgres).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(
        guests_dist().join("misbehave.wasm"),
        dir.path().join("flood.wasm"),
    )
    .unwrap();
    let manifest = manifest("10ms", "verb = \"log-flood\"\nlines = \"5000\"")
        .replace("lease = \"leader\"", "group = \"orders\"");
    std::fs::write(dir.path().join("flood.toml"), manifest).unwrap();
    let host = HostBuilder::new("shards")
        .database_url(&db.url().unwrap())
        .ttl(Duration::from_secs(2))
        .plugins(dir.path())
        .args(&["--group", &format!("orders={SHARDS}")])
        .spawn()
        .await
        .unwrap();
    // One instance per shard, all flooding.
    let stores = "leasehold_plugin_stores{plugin=\"flood\"}";
    leasehold_tests::eventually::eventually(
        "an instance of the plugin on every shard",
        Duration::from_secs(60),
        async || {
            let metrics = host.metrics().await.unwrap();
            match sample(&metrics, stores) {
                Some(n) if n >= f64::from(SHARDS) => Ok(()),
                n => Err(format!("{stores} = {n:?}")),
            }
        },
    )
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;

    let from = host.log_len();
    let started = Instant::now();
    let most = |time: Duration| allowed(time + Duration::from_secs(2)) + (8 << 10);
    while started.elapsed() < FLOOD {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let grown = bytes(&host.log_lines_from(from));
        let time = started.elapsed();
        assert!(
            grown <= most(time),
            "{SHARDS} shards of one plugin grew the host's log by {grown} bytes in {time:?}, over one plugin's {}",
            most(time)
        );
    }
    let time = started.elapsed();
    let lines = host.log_lines_from(from);
    let of: Vec<&String> = lines
        .iter()
        .filter(|l| l.contains("{plugin=flood "))
        .collect();
    let shards: std::collections::BTreeSet<&str> = of
        .iter()
        .filter(|l| l.contains("log flood line"))
        .filter_map(|l| l.split("lease=").nth(1)?.split_whitespace().next())
        .collect();
    println!(
        "log flood: {SHARDS} shards of one plugin grew the host's log by {} bytes in {time:?}, lines from {shards:?}",
        bytes(&lines)
    );
    // Every shard was heard from, within one plugin's rate.
    assert_eq!(shards.len(), SHARDS as usize, "{shards:?}");
    assert!(bytes(&lines) <= most(time), "{} bytes", bytes(&lines));
}
