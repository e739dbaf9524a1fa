//! Exhaustion by volume: a plugin that prints, writes or fails without end is contained by a
//! budget or a quota, and the host, its lease and the other plugins go on. Each test drives the
//! `misbehave` guest (a real compiled component) from a real plugin directory.

#![allow(clippy::unwrap_used, missing_docs)]

use std::path::Path;
use std::time::Duration;

use leasehold_tests::eventually::{eventually, when};
use leasehold_tests::host::{HostBuilder, plugin_dir};
use leasehold_tests::in_process::InProcessHost;
use leasehold_tests::log::Logged;
use leasehold_tests::status::{PluginState, Role};
use leasehold_tests::stores::{Backend, Db};

/// An in-process host on `db` (ttl 2 s) with the plugin directory `plugins`, leading `leader`.
async fn leading(name: &str, db: &Db, plugins: &Path) -> InProcessHost {
    HostBuilder::new(name)
        .database_url(&db.url().unwrap())
        .ttl(Duration::from_secs(2))
        .plugins(plugins)
        .start_in_process_leading()
        .await
        .unwrap()
}

fn manifest(interval: &str, call_timeout: &str, config: &str) -> String {
    format!(
        "lease = \"leader\"\n[schedule]\ninterval = \"{interval}\"\n[limits]\ncall_timeout = \"{call_timeout}\"\nmemory = \"16MiB\"\n[config]\n{config}\n"
    )
}

/// The host's resident memory, in KiB.
fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guest_printing_megabytes_every_call_never_fails_a_write_and_logs_only_its_budget() {
    // 20,000 lines of ~100 bytes per stream and call: 2 MB, twice what a store could ever hold
    // when output was kept in a 1 MiB pipe, and every call prints as much again.
    const LINES: u64 = 20_000;
    let db = Db::new(Backend::Sqlite).await.unwrap();
    let dir = plugin_dir(&[(
        "misbehave",
        &manifest(
            "50ms",
            "10s",
            &format!("verb = \"print\"\nlines = \"{LINES}\""),
        ),
    )])
    .unwrap();
    let host = leading("print", &db, dir.path()).await;
    let epoch = host.status().await.unwrap().leases[0].epoch;
    let calls_after = async |n: u64| {
        eventually(
            format!("{n} print calls"),
            Duration::from_secs(120),
            async || {
                when(host.plugin_status("misbehave").await, |s| {
                    s.as_ref().is_some_and(|s| s.calls >= n)
                })
            },
        )
        .await
        .unwrap()
        .unwrap()
    };
    calls_after(3).await;
    let rss_before = rss_kib();
    let status = calls_after(13).await;
    let rss_after = rss_kib();
    println!(
        "print: {} calls (init included) of {} MB per stream; host RSS {rss_before} KiB after 3, {rss_after} KiB after {}",
        status.calls,
        LINES * 100 / 1_000_000,
        status.calls
    );
    // No write failed (the guest returns an error naming the first that does), nothing trapped.
    assert_eq!(status.state, PluginState::Running, "{status:?}");
    assert_eq!(status.last_error, None, "{status:?}");
    assert_eq!(status.traps, 0, "{status:?}");

    // Per stream and call: at most 200 lines logged, the rest counted in one line, so that
    // logged + dropped is what the guest printed.
    let log = host.log_text();
    for stream in ["stdout", "stderr"] {
        let tag = format!("stream=\"{stream}\"");
        let logged = log
            .lines()
            .filter(|l| l.contains(&tag) && l.contains("misbehave"))
            .filter(|l| !l.contains("lines dropped"))
            .count() as u64;
        let reports: Vec<u64> = log
            .lines()
            .filter(|l| l.contains(&tag) && l.contains("lines dropped"))
            .map(|l| {
                let words: Vec<&str> = l.split_whitespace().collect();
                let at = words.iter().position(|w| *w == "lines").unwrap();
                words[at - 1].parse().unwrap()
            })
            .collect();
        let calls = reports.len() as u64;
        // 13 calls are init and 12 reconciles, the last of which may still be running.
        assert!(calls >= 11, "{stream}: {calls} drop reports");
        assert!(
            reports.iter().all(|d| *d == LINES - 200),
            "{stream}: dropped per call {reports:?}"
        );
        // Calls logged but not yet reported (one may be running) hold at most one budget more.
        assert!(
            logged <= (calls + 1) * 200 && logged >= calls * 200,
            "{stream}: {logged} lines logged for {calls} calls"
        );
    }
    // The lease never moved.
    assert_eq!(host.role("leader").await, Some(Role::Leader));
    assert_eq!(host.status().await.unwrap().leases[0].epoch, epoch);
}
