//! The SQLite event file (`leases.db-events`) attacked by whoever may write the lease file's
//! directory, against real `leasehold run` processes: a symbolic link at its path (to a file, or
//! to nowhere) and a FIFO are refused at start-up with a warning naming the path and what is
//! there, nothing is written through them, and the host still starts, leads and stops on
//! SIGTERM; forged `handoff` lines for five seconds cost the holder a handful of renewals, not
//! one each; a 10 MB line without a newline is dropped without the host's memory growing by it.

#![allow(clippy::unwrap_used, missing_docs)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use leasehold_tests::endpoint::sample;
use leasehold_tests::eventually::{eventually, when};
use leasehold_tests::host::{Host, HostBuilder};
use leasehold_tests::log::Logged;
use leasehold_tests::status::{Role, StatusExt};

/// A host on `dir/leases.db` campaigning for `leader`.
fn on_sqlite(name: &str, dir: &Path) -> HostBuilder {
    let url = format!("sqlite:{}", dir.join("leases.db").display());
    HostBuilder::new(name).database_url(&url).lease("leader")
}

fn events(dir: &Path) -> PathBuf {
    dir.join("leases.db-events")
}

/// Starts a host on `dir`, whose event file's path holds something else, and returns its log
/// once it has led and stopped on SIGTERM; fails if the wake-ups were not refused, naming the
/// path and `found`.
async fn refused_then_led_and_stopped(name: &str, dir: &Path, found: &str) -> String {
    let started = Instant::now();
    let mut host = on_sqlite(name, dir).spawn_leading("leader").await.unwrap();
    let warning = host
        .wait_for_log("release wake-ups are off", Duration::from_secs(10))
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", host.log_text()));
    println!("{name}: {warning}");
    let path = events(dir).display().to_string();
    assert!(
        warning.contains(&path) && warning.contains(found),
        "{warning}"
    );
    let last = host.stop_for_last_line().await.unwrap();
    println!(
        "{name}: led and stopped on SIGTERM {:.1} s after its start",
        started.elapsed().as_secs_f64()
    );
    assert!(last.contains("released 1 of 1"), "{last}");
    host.log_text()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_symlink_at_the_event_file_s_path_is_refused_and_its_target_left_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let victim = dir.path().join("victim.txt");
    let text: String = (0..7000).map(|i| format!("line {i:04}\n")).collect();
    assert_eq!(text.len(), 70_000);
    std::fs::write(&victim, &text).unwrap();
    std::os::unix::fs::symlink(&victim, events(dir.path())).unwrap();
    let found = format!("a symbolic link to {}", victim.display());
    refused_then_led_and_stopped("linked", dir.path(), &found).await;
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), text);
    assert!(events(dir.path()).is_symlink());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dangling_symlink_at_the_event_file_s_path_is_refused_and_nothing_created() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("created-by-host.txt");
    std::os::unix::fs::symlink(&target, events(dir.path())).unwrap();
    let found = format!("a symbolic link to {}", target.display());
    refused_then_led_and_stopped("dangling", dir.path(), &found).await;
    assert!(!target.exists(), "the host created {}", target.display());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fifo_at_the_event_file_s_path_is_refused_without_holding_up_start_or_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let made = std::process::Command::new("mkfifo")
        .arg(events(dir.path()))
        .status()
        .unwrap();
    assert!(made.success());
    refused_then_led_and_stopped("fifo", dir.path(), "a FIFO").await;
    let kind = std::fs::symlink_metadata(events(dir.path())).unwrap();
    assert!(std::os::unix::fs::FileTypeExt::is_fifo(&kind.file_type()));
}

/// Renewals the host has made, by `/metrics` (asked again if a busy machine delays an answer).
async fn renewals(host: &Host) -> f64 {
    let text = eventually("/metrics", Duration::from_secs(20), async || {
        host.metrics().await.map_err(|e| format!("{e:#}"))
    })
    .await
    .unwrap();
    sample(&text, "leasehold_lease_renew_seconds_count").unwrap_or_default()
}

/// Appends `line` to `file` as fast as a small pause allows, in writes of 50 lines, for `how_long`;
/// returns the lines written.
fn forge(file: &Path, line: &str, how_long: Duration) -> usize {
    let mut out = std::fs::OpenOptions::new().append(true).open(file).unwrap();
    let batch = line.repeat(50);
    let start = Instant::now();
    let mut lines = 0;
    while start.elapsed() < how_long {
        out.write_all(batch.as_bytes()).unwrap();
        lines += 50;
        std::thread::sleep(Duration::from_micros(500));
    }
    lines
}

/// At the default ttl (15 s: a renewal every 5 s, a failed one retried every 1 s), a holder fed
/// forged handoff requests for its own lease and epoch for 5 s renews at most once a second for
/// them, and keeps its lease: the row holds no request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_handoff_lines_for_five_seconds_cost_a_handful_of_renewals() {
    let dir = tempfile::tempdir().unwrap();
    let host = on_sqlite("forged", dir.path())
        .spawn_leading("leader")
        .await
        .unwrap();
    let epoch = host.status().await.unwrap().lease("leader").unwrap().epoch;
    let line = format!("handoff {} leader\n", epoch.unwrap());
    // Quiet first, for the cadence alone.
    let before = renewals(&host).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let quiet = renewals(&host).await - before;
    let file = events(dir.path());
    let before = renewals(&host).await;
    let lines = tokio::task::spawn_blocking(move || forge(&file, &line, Duration::from_secs(5)))
        .await
        .unwrap();
    // What the listener still had queued.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let flooded = renewals(&host).await - before;
    println!("renewals in 5 s: {quiet} quiet, {flooded} under {lines} forged lines");
    // One a second for the notices (6 over 5.5 s), and the cadence's own, which a notice's
    // renewal usually stands in for.
    assert!(
        flooded <= 10.0,
        "{flooded} renewals under {lines} forged lines"
    );
    assert_eq!(host.role("leader").await, Some(Role::Leader));
    assert_eq!(
        host.status().await.unwrap().lease("leader").unwrap().epoch,
        epoch
    );
}

/// A forger appends 10 MB without a newline, in pieces the listener reads as they come: the
/// listener keeps 4 KiB of it at most, says once that it dropped such a line, and reads the
/// lines after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ten_megabyte_line_without_a_newline_is_dropped_without_the_host_s_memory_growing() {
    let dir = tempfile::tempdir().unwrap();
    let host = on_sqlite("long", dir.path())
        .spawn_leading("leader")
        .await
        .unwrap();
    let file = events(dir.path());
    let pid = host.pid();
    let rss = || leasehold_tests::procstat::rss_kib(pid).unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = rss();
    let written = tokio::task::spawn_blocking(move || {
        let mut out = std::fs::OpenOptions::new()
            .append(true)
            .open(&file)
            .unwrap();
        let piece = vec![b'x'; 64 << 10];
        let mut written = 0;
        while written < 10_000_000 {
            out.write_all(&piece).unwrap();
            written += piece.len();
            // One wake-up a piece, each read whole (a wake-up reads up to 128 KiB).
            std::thread::sleep(Duration::from_millis(10));
        }
        written
    })
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after = rss();
    println!(
        "host RSS {before} KiB before {written} bytes without a newline, {after} KiB after (+{} KiB)",
        after.saturating_sub(before)
    );
    assert!(
        after < before + 2048,
        "the host grew from {before} to {after} KiB"
    );
    let warned = host
        .wait_for_log("event file lines longer than", Duration::from_secs(5))
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", host.log_text()));
    println!("{warned}");
    // The line ends; what follows is read again: a handoff notice renews at once.
    let epoch = host.status().await.unwrap().lease("leader").unwrap().epoch;
    let count = renewals(&host).await;
    let mut out = std::fs::OpenOptions::new()
        .append(true)
        .open(events(dir.path()))
        .unwrap();
    write!(out, "\nhandoff {} leader\n", epoch.unwrap()).unwrap();
    eventually(
        "a renewal for the notice after the long line",
        Duration::from_secs(2),
        async || when(renewals(&host).await, |n| *n > count),
    )
    .await
    .unwrap();
}
