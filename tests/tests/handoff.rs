//! Handoffs between real `leasehold` processes: a release on SQLite wakes the standbys of the
//! same file at once (the event file beside it), as `NOTIFY` does on PostgreSQL.

#![allow(clippy::unwrap_used, missing_docs)]

use std::time::{Duration, Instant};

use leasehold_tests::eventually::{eventually, when};
use leasehold_tests::groups::led;
use leasehold_tests::host::{HostBuilder, wait_for_single_leader};
use leasehold_tests::log::Logged;
use leasehold_tests::status::Role;

/// Long enough that a standby which missed the wake-up (and waits for the holder's old expiry,
/// or its poll) would be an order of magnitude slower than one that heard it.
const TTL: Duration = Duration::from_secs(10);

/// What a woken standby must beat: a tenth of the ttl, far above the milliseconds a wake-up
/// takes and far below the ttl a missed one costs, on a loaded two-core machine.
const WOKEN: Duration = Duration::from_secs(1);

fn sqlite_file() -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite:{}", dir.path().join("leases.db").display());
    (dir, url)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_on_sqlite_wakes_the_standby_within_milliseconds() {
    let (_dir, url) = sqlite_file();
    let host = |name: &str| HostBuilder::new(name).database_url(&url).ttl(TTL);
    let mut a = host("a").spawn().await.unwrap();
    wait_for_single_leader(&[&a], "leader", Duration::from_secs(15))
        .await
        .unwrap();
    let b = host("b").spawn().await.unwrap();
    // b has campaigned and lost: it now waits for a's expiry, about a ttl away.
    b.wait_for_log("http listening", Duration::from_secs(5))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(b.role("leader").await, Some(Role::Standby));

    let sent = Instant::now();
    a.signal("TERM").unwrap();
    eventually("b to lead", TTL * 2, async || {
        when(b.role("leader").await, |r| *r == Some(Role::Leader))
    })
    .await
    .unwrap();
    let took = sent.elapsed();
    assert!(
        took < WOKEN,
        "b led {took:?} after a's SIGTERM (ttl {TTL:?}): the release did not wake it\n{}",
        b.log_text()
    );
    assert!(
        a.wait_exit(Duration::from_secs(10))
            .await
            .unwrap()
            .success()
    );
    eprintln!("sqlite: SIGTERM -> the standby leads in {took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_member_stopped_on_sqlite_hands_its_shards_over_within_milliseconds() {
    let (_dir, url) = sqlite_file();
    let host = |name: &str| {
        HostBuilder::new(name)
            .database_url(&url)
            .ttl(TTL)
            .args(&["--group", "g=4"])
    };
    let mut a = host("a").spawn().await.unwrap();
    let b = host("b").spawn().await.unwrap();
    // Settled: two shards each (b counts once it has been a member for a renewal interval).
    eventually("two shards each", TTL * 3, async || {
        let (sa, sb) = (a.status().await, b.status().await);
        let held = |s: &anyhow::Result<leasehold_tests::status::Status>| {
            s.as_ref().map(|s| led(s, "g").len()).unwrap_or(0)
        };
        when((held(&sa), held(&sb)), |h| *h == (2, 2))
    })
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;

    let sent = Instant::now();
    a.signal("TERM").unwrap();
    eventually("b to lead all four shards", TTL * 2, async || {
        let held = b.status().await.map(|s| led(&s, "g").len()).unwrap_or(0);
        when(held, |h| *h == 4)
    })
    .await
    .unwrap();
    let took = sent.elapsed();
    assert!(
        took < WOKEN,
        "b led every shard {took:?} after a's SIGTERM (ttl {TTL:?})"
    );
    assert!(
        a.wait_exit(Duration::from_secs(10))
            .await
            .unwrap()
            .success()
    );
    eprintln!("sqlite group: SIGTERM -> the other member leads every shard in {took:?}");
}
