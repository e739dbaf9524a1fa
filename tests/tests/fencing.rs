//! Fenced writes between real processes on a real PostgreSQL: a holder that lost its lease (without
//! knowing, or while frozen) never gets a write committed after the next holder's.

#![allow(clippy::unwrap_used, missing_docs)]

use std::time::{Duration, Instant};

use leasehold_tests::fencing::{HISTORY_SCHEMA, WRITER_MANIFEST, history, run_pause_trials};
use leasehold_tests::host::{Host, plugin_dir, plugin_status, wait_for_single_leader};

/// The lease is expired behind the holder's back (as a forced release does): its term still runs
/// until its next renewal, and every write it makes meanwhile is refused by the database fence —
/// the guest sees `lease-lost` from both kv and sql, and none of it is visible.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_that_lost_its_lease_unknowingly_has_every_write_refused() {
    let url = leasehold_tests::pg::server()
        .fresh_database()
        .await
        .unwrap();
    let parsed = leasehold::lease::DatabaseUrl::parse(&url).unwrap();
    leasehold::lease::open_store(&parsed, Duration::from_secs(10), Duration::from_secs(10))
        .await
        .unwrap();
    let pool = sqlx::PgPool::connect(&url).await.unwrap();
    sqlx::raw_sql(HISTORY_SCHEMA).execute(&pool).await.unwrap();
    let dir = plugin_dir(&[("fenced-writer", WRITER_MANIFEST)]).unwrap();
    // A long ttl: the next renewal (ttl/3) is seconds away, so the holder keeps writing.
    let args = [
        "--database-url",
        &url,
        "--ttl",
        "9s",
        "--plugins",
        dir.path().to_str().unwrap(),
    ];
    let env = [("LEASEHOLD_TEST_APP_URL", url.as_str())];
    let a = Host::start_with_env("a", &args, &env).unwrap();
    wait_for_single_leader(&[&a], "leader", Duration::from_secs(15))
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !a.log_text().contains("sql-txn ok epoch=1") {
        assert!(Instant::now() < deadline, "no write: {}", a.log_text());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    sqlx::query("UPDATE leasehold_leases SET expires_at = now()")
        .execute(&pool)
        .await
        .unwrap();
    let expired_at = Instant::now();
    // Another replica takes the lease at once (epoch 2) and writes.
    let b = Host::start_with_env("b", &args, &env).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    // The writer does sql, then kv, in each tick: wait for both, or the history may miss the kv.
    while !(b.log_text().contains("sql-txn ok epoch=2")
        && b.log_text().contains("kv-put ok epoch=2"))
    {
        assert!(Instant::now() < deadline, "no takeover: {}", b.log_text());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let log = a.log_text();
    for refused in [
        "sql-txn err=lease-lost epoch=1",
        "kv-put err=lease-lost epoch=1",
    ] {
        assert!(log.contains(refused), "{refused} missing:\n{log}");
    }
    // The old holder noticed on its own well within the ttl (its next renewal failed), and shows
    // the refusals in /status.
    while !a.log_text().contains("lease lost") {
        assert!(
            expired_at.elapsed() < Duration::from_secs(9),
            "the old holder did not notice within the ttl:\n{}",
            a.log_text()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let status = plugin_status(&a, "fenced-writer").await.unwrap();
    assert!(status["refused_writes"].as_u64().unwrap() >= 2, "{status}");
    let h = history(&pool).await.unwrap();
    assert_eq!(h.stale, 0, "{h:?}");
    assert!(
        h.accepted.contains_key(&("fence_history".into(), 2)),
        "{h:?}"
    );
    assert!(
        h.accepted.contains_key(&("leasehold_kv".into(), 2)),
        "{h:?}"
    );
    let kv_epoch: i64 = sqlx::query_scalar("SELECT epoch FROM leasehold_kv WHERE key = 'last'")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(kv_epoch, 2);
}

/// SIGSTOP the holder past the ttl, let the other host take over and write, resume: over several
/// trials no write of an older epoch commits after a newer one, in the app table or in kv. The
/// benchmark runs the same trials a hundred times (`make bench`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frozen_holders_never_commit_stale_writes() {
    let trials: usize = std::env::var("FENCE_TRIALS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(6);
    let out = run_pause_trials(trials, "1s").await.unwrap();
    eprintln!(
        "{} trials: {:?}; takeovers {:?}; refusals seen {}",
        out.trials, out.history, out.takeover_s, out.refused_seen
    );
    assert_eq!(out.trials, trials);
    assert_eq!(out.history.stale, 0, "{:?}", out.history);
    // Every trial produced a new epoch that wrote through both capabilities.
    let epochs = out
        .history
        .accepted
        .keys()
        .filter(|(source, _)| source == "fence_history")
        .count();
    assert!(epochs > trials, "{:?}", out.history);
}
