//! Fenced writes between real processes on a real PostgreSQL: a holder that lost its lease (without
//! knowing, or while frozen) never gets a write committed after the next holder's.

#![allow(clippy::unwrap_used, missing_docs)]

use leasehold_tests::log::Logged;
use std::time::{Duration, Instant};

use leasehold_tests::eventually::{Text, eventually, when};
use leasehold_tests::fencing::{HISTORY_SCHEMA, history, pause_writer_manifest, run_pause_trials};
use leasehold_tests::host::{Host, plugin_dir, wait_for_single_leader};

/// The lease is expired behind the holder's back (as a forced release does): its term still runs
/// until its next renewal, and every write it makes meanwhile is refused by the database fence —
/// the guest sees `lease-lost` from both kv and sql, and none of it is visible.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_that_lost_its_lease_unknowingly_has_every_write_refused() {
    let url = leasehold_tests::pg::server()
        .fresh_lease_database()
        .await
        .unwrap();
    let pool = sqlx::PgPool::connect(&url).await.unwrap();
    sqlx::raw_sql(HISTORY_SCHEMA).execute(&pool).await.unwrap();
    let dir = plugin_dir(&[("fenced-writer", &pause_writer_manifest())]).unwrap();
    // A long ttl: the next renewal (ttl/3) is seconds away, so the holder keeps writing.
    let args = [
        "--database-url",
        &url,
        "--ttl",
        "9s",
        "--plugins",
        dir.path().to_str().unwrap(),
    ];
    let role_url = leasehold_tests::fencing::writer_role(&url).await.unwrap();
    let env = [("TEST_APP_DATABASE_URL", role_url.as_str())];
    let a = Host::start_with_env("a", &args, &env).await.unwrap();
    wait_for_single_leader(&[&a], "leader", Duration::from_secs(15))
        .await
        .unwrap();
    a.wait_for_log("sql-txn ok epoch=1", Duration::from_secs(10))
        .await
        .unwrap();
    sqlx::query("UPDATE leasehold_leases SET expires_at = now()")
        .execute(&pool)
        .await
        .unwrap();
    let expired_at = Instant::now();
    // Another replica takes the lease at once (epoch 2) and writes.
    let b = Host::start_with_env("b", &args, &env).await.unwrap();
    // The writer does sql, then kv, in each tick: wait for both, or the history may miss the kv.
    eventually(
        "b to take over and write",
        Duration::from_secs(10),
        async || {
            when(Text(b.log_text()), |l| {
                l.0.contains("sql-txn ok epoch=2") && l.0.contains("kv-put ok epoch=2")
            })
        },
    )
    .await
    .unwrap();
    let log = a.log_text();
    for refused in [
        "sql-txn err=lease-lost epoch=1",
        "kv-put err=lease-lost epoch=1",
    ] {
        assert!(log.contains(refused), "{refused} missing:\n{log}");
    }
    // The old holder noticed on its own well within the ttl (its next renewal failed), and shows
    // the refusals in /status.
    a.wait_for_log(
        "lease lost",
        Duration::from_secs(9).saturating_sub(expired_at.elapsed()),
    )
    .await
    .unwrap();
    let status = a.plugin_status("fenced-writer").await.unwrap();
    assert!(status.refused_writes >= 2, "{status:?}");
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

/// The `capability-probe` guest's `slow-write` on the lease database, as a fenced `sql.execute`:
/// `INSERT INTO slow_writes … SELECT … FROM pg_sleep(1.5)`. Returns once that insert sleeps on
/// the server, with the host (ttl 30 s: no renewal falls in the sleep), a pool on the database
/// and the plugin directory.
async fn slow_fenced_write() -> (Host, sqlx::PgPool, tempfile::TempDir) {
    let url = leasehold_tests::pg::server()
        .fresh_database()
        .await
        .unwrap();
    let manifest = "lease = \"leader\"
[schedule]
interval = \"1s\"
[limits]
call_timeout = \"10s\"
[grants.sql]
database_url_env = \"TEST_APP_DATABASE_URL\"
statement_timeout = \"10s\"
[config]
verb = \"slow-write\"
sleep_ms = \"1500\"
";
    let dir = plugin_dir(&[("capability-probe", manifest)]).unwrap();
    let role_url = leasehold_tests::pg::server()
        .plugin_role(&url, "probe")
        .await
        .unwrap();
    let host = Host::start_with_env(
        "a",
        &[
            "--database-url",
            &url,
            "--ttl",
            "30s",
            "--plugins",
            dir.path().to_str().unwrap(),
        ],
        &[("TEST_APP_DATABASE_URL", role_url.as_str())],
    )
    .await
    .unwrap();
    let pool = sqlx::PgPool::connect(&url).await.unwrap();
    eventually(
        "the slow write to sleep on the server (sessions running it)",
        Duration::from_secs(20),
        async || when(slow_writes_running(&pool).await, |n| *n > 0),
    )
    .await
    .unwrap();
    let log = host.log_text();
    assert!(
        log.contains("the lease database; writes are fenced"),
        "the probe's grant is not fenced:\n{log}"
    );
    (host, pool, dir)
}

/// How many sessions are running the slow write's insert (sleeping on the server).
async fn slow_writes_running(pool: &sqlx::PgPool) -> i64 {
    sqlx::query_scalar(
        "SELECT count(*) FROM pg_stat_activity
          WHERE datname = current_database() AND state = 'active'
            AND query LIKE 'INSERT INTO slow_writes%'",
    )
    .fetch_one(pool)
    .await
    .unwrap()
}

/// How many rows of the slow write were committed.
async fn slow_writes_kept(pool: &sqlx::PgPool) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM slow_writes")
        .fetch_one(pool)
        .await
        .unwrap()
}

/// The probe's summary line of its slow write.
async fn slow_write_outcome(host: &Host) -> String {
    eventually(
        "the slow write to end (its log)",
        Duration::from_secs(15),
        async || {
            let log = host.log_text();
            log.lines()
                .find(|l| {
                    l.contains("probe slow-write ok") || l.contains("probe slow-write FAILED")
                })
                .map(str::to_string)
                .ok_or(Text(log))
        },
    )
    .await
    .unwrap()
}

/// While a fenced plugin statement runs (here it sleeps 1.5 s on the server), the lease row is not
/// locked: the fence takes its lock only just before the commit, so a renewal or a campaign
/// never waits for a plugin's slow statements. The write itself still commits under its epoch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_transaction_does_not_lock_the_lease_row_while_its_statements_run() {
    let (host, pool, _dir) = slow_fenced_write().await;
    let mut conn = pool.acquire().await.unwrap();
    let started = Instant::now();
    let locked = sqlx::raw_sql(
        "BEGIN;
         SELECT name FROM leasehold_leases WHERE name = 'leader' FOR NO KEY UPDATE NOWAIT;
         ROLLBACK;",
    )
    .execute(&mut *conn)
    .await;
    let took = started.elapsed();
    if locked.is_err() {
        let _ = sqlx::query("ROLLBACK").execute(&mut *conn).await;
    }
    let still_sleeping = slow_writes_running(&pool).await;
    println!("lease row locked while the plugin's statement sleeps: {locked:?} ({took:?})");
    assert!(
        locked.is_ok(),
        "the lease row is locked while the plugin's statement runs: {locked:?}"
    );
    assert_eq!(still_sleeping, 1, "the plugin's statement was not running");
    let outcome = slow_write_outcome(&host).await;
    assert!(
        outcome.contains("probe slow-write ok: rows=1 epoch=1"),
        "{outcome}"
    );
    assert_eq!(slow_writes_kept(&pool).await, 1);
}

/// Another replica takes the lease while a fenced plugin statement sleeps: the takeover does not
/// wait for the plugin's transaction, and the write, checked just before its commit, is refused
/// with `lease-lost` and rolled back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_write_whose_lease_is_taken_during_a_slow_statement_is_refused_and_rolled_back() {
    let (host, pool, _dir) = slow_fenced_write().await;
    // What a campaign does to an expired row, done at once behind the holder's back.
    let started = Instant::now();
    sqlx::query(
        "UPDATE leasehold_leases
            SET holder = 'usurper', epoch = epoch + 1, acquired_at = now(), renewed_at = now(),
                expires_at = now() + interval '1 minute'
          WHERE name = 'leader'",
    )
    .execute(&pool)
    .await
    .unwrap();
    let takeover = started.elapsed();
    let outcome = slow_write_outcome(&host).await;
    let rows = slow_writes_kept(&pool).await;
    println!("takeover took {takeover:?}; the slow write: {outcome}; rows kept: {rows}");
    assert!(
        outcome.contains("FAILED") && outcome.contains("lease-lost"),
        "{outcome}"
    );
    assert_eq!(rows, 0, "the refused write was kept");
    assert!(
        takeover < Duration::from_secs(1),
        "the takeover waited {takeover:?} for the plugin's transaction"
    );
}
