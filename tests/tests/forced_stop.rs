//! A guest spinning forever is stopped when its replica loses the lease, before the database lease
//! expires. The lease is lost by stopping PostgreSQL under the holder, so renewals fail and the
//! term ends at `safe_until`. The host runs in-process: the end of the call shows in `/metrics`,
//! and what ended it in `/status`. Its own test binary, because it stops the server its tests
//! share.

#![allow(clippy::unwrap_used, missing_docs)]

use std::time::Duration;

use leasehold_tests::endpoint::sample;
use leasehold_tests::eventually::{Text, eventually_every};
use leasehold_tests::host::{HostBuilder, now_time_of_day, plugin_dir};
use leasehold_tests::pg;
use leasehold_tests::status::Role;
use leasehold_tests::stores::{Backend, Db};

/// The calls of the guest that have ended (whatever ended them).
const ENDED: &str = "leasehold_plugin_call_seconds_count{plugin=\"misbehave\"}";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[cfg_attr(
    given_server,
    ignore = "DATABASE_URL is set, and this test stops and starts the server: it needs the one the harness starts itself"
)]
async fn a_spinning_guest_is_stopped_before_the_database_lease_expires() {
    pg::needs_own_server("stops and starts the server");
    let db = Db::new(Backend::Postgres).await.unwrap();
    let url = db.url().unwrap();
    // A call deadline far beyond the ttl: only the end of the term can stop this guest.
    let manifest = "[schedule]\ninterval = \"100ms\"\n[limits]\ncall_timeout = \"10m\"\n[config]\nverb = \"loop\"\n";
    let dir = plugin_dir(&[("misbehave", manifest)]).unwrap();
    let mut host = HostBuilder::new("spin")
        .database_url(&url)
        .ttl(Duration::from_secs(2))
        .plugins(dir.path())
        .start_in_process_leading()
        .await
        .unwrap();
    // Wait until the guest is inside its endless reconcile (init and one reconcile call counted).
    host.wait_for_plugin(
        "misbehave",
        "the guest to start spinning (its /status)",
        Duration::from_secs(10),
        |s| s.calls >= 2,
    )
    .await
    .unwrap();
    // Only init has ended so far.
    let ended = sample(&host.metrics().await.unwrap(), ENDED).unwrap_or(0.0);

    tokio::task::spawn_blocking(|| pg::server().stop())
        .await
        .unwrap()
        .unwrap();

    // The spinning call ends; seen a few milliseconds after it does, so the time taken here is
    // never earlier than the real one.
    eventually_every(
        "the spinning call to end (the exposition)",
        Duration::from_secs(10),
        Duration::from_millis(5),
        async || {
            let text = host.metrics().await.unwrap();
            if sample(&text, ENDED).is_some_and(|n| n > ended) {
                Ok(())
            } else {
                Err(Text(text))
            }
        },
    )
    .await
    .unwrap();
    let interrupted = now_time_of_day();
    // It was cancelled (no deadline, fuel budget or trap ended it: those are recorded), and the
    // host survives: it answers and reports the lease as no longer led.
    let status = host.status().await.unwrap();
    assert_ne!(status.leases[0].role, Role::Leader, "{status:?}");
    let plugin = host.plugin_status("misbehave").await.unwrap();
    assert!(plugin.last_error.is_none(), "{plugin:?}");
    // And counted as a call stopped by force, which alert rules watch.
    let forced = sample(
        &host.metrics().await.unwrap(),
        "leasehold_plugin_forced_stops_total{plugin=\"misbehave\"}",
    );
    assert_eq!(forced, Some(1.0));

    // The row now holds the last renewal that committed before the outage, by the database clock:
    // when the database lets anyone else in. Stop the host first so it cannot take the lease
    // again; its release cannot reach the stopped server, and the stop waits for the attempt.
    let stopped = host.stop().await.unwrap();
    assert!(
        !stopped.all_released() && stopped.left[0].why.contains("release failed"),
        "{stopped:?}"
    );
    tokio::task::spawn_blocking(|| pg::server().restart())
        .await
        .unwrap()
        .unwrap();
    let pool = sqlx::PgPool::connect(&url).await.unwrap();
    let (epoch, expiry): (i64, f64) = sqlx::query_as(
        "SELECT epoch, extract(epoch FROM expires_at)::float8 FROM leasehold_leases WHERE name = 'leader'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    pool.close().await;
    assert_eq!(epoch, 1, "the lease changed hands during the test");
    let expiry_of_day = expiry.rem_euclid(86_400.0);
    assert!(
        interrupted < expiry_of_day,
        "the guest was stopped at {interrupted:.3}s of the day, after the lease expired at {expiry_of_day:.3}s"
    );
    println!(
        "spinning guest stopped {:.0} ms before the database lease expired",
        (expiry_of_day - interrupted) * 1000.0
    );
}
