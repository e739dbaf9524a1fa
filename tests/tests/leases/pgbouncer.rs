//! PgBouncer in front of the lease database: session pooling works as a direct connection does
//! (a handoff through it is as quick), transaction pooling is refused at start-up with a line that
//! names it, in bounded time, even after a session lock has stayed behind in the pool; and a
//! migration that waits for another session's advisory lock says so, and gives up.

#![allow(clippy::unwrap_used, missing_docs)]

use std::time::{Duration, Instant};

use leasehold_tests::eventually::{eventually, when};
use leasehold_tests::host::{HostBuilder, run_to_exit, time_of_day, wait_for_single_leader};
use leasehold_tests::log::Logged;
use leasehold_tests::pg;
use leasehold_tests::pgbouncer::{PgBouncer, PoolMode};
use leasehold_tests::status::Role;
use sqlx::Connection;

/// How long a refused host may take: the refusal itself is a few round trips, and the test
/// machine is a loaded two-core one.
const REFUSED_WITHIN: Duration = Duration::from_secs(20);

/// What every refusal names: the cause, and what leasehold needs instead.
fn names_transaction_pooling(stderr: &str) -> bool {
    stderr.contains("transaction (or statement) pooling")
        && stderr.contains("session pooling or a direct connection")
        && stderr.contains("LISTEN/NOTIFY")
}

/// `leasehold ARGS` runs to a non-zero exit within [`REFUSED_WITHIN`], naming transaction
/// pooling in its error line; returns how long it took.
async fn refused(args: &[&str]) -> Duration {
    let started = Instant::now();
    let (status, stderr) = run_to_exit(args, REFUSED_WITHIN).await.unwrap();
    let took = started.elapsed();
    assert!(!status.success(), "{args:?} exited {status}:\n{stderr}");
    let error_lines: Vec<&str> = stderr
        .lines()
        .filter(|l| names_transaction_pooling(l))
        .collect();
    assert_eq!(error_lines.len(), 1, "{args:?}:\n{stderr}");
    assert!(
        !stderr.contains("already exists") && !stderr.contains("DDL rights"),
        "{stderr}"
    );
    took
}

#[cfg_attr(
    given_server,
    ignore = "starts a PgBouncer of its own in front of the harness's own server"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behind_transaction_pooling_every_host_refuses_at_once_naming_the_pooling_even_after_a_session_lock_leaked()
 {
    pg::needs_own_server("starts a PgBouncer in front of the server");
    let server = pg::server();
    let bouncer = PgBouncer::start(server.admin_url(), PoolMode::Transaction).unwrap();
    let direct = server.fresh_database().await.unwrap();
    let through = bouncer.url_for(&direct).unwrap();

    for name in ["a", "b", "c"] {
        let took = refused(&["run", "--database-url", &through, "--replica-id", name]).await;
        eprintln!("transaction pooling: host {name} refused in {took:?}");
    }
    let took = refused(&["migrate", "--database-url", &through]).await;
    eprintln!("transaction pooling: migrate refused in {took:?}");

    // A migrator's session-level lock left behind in the pool: taken through the pooler, and
    // the client gone without letting go. The server process keeps it, idle in the pool.
    let database = direct.rsplit('/').next().unwrap().to_string();
    let key = leasehold::lease::postgres::migration_lock_key(&database);
    let mut leaker = sqlx::PgConnection::connect(&through).await.unwrap();
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "SELECT pg_advisory_lock({key})"
    )))
    .execute(&mut leaker)
    .await
    .unwrap();
    drop(leaker);
    let mut watcher = sqlx::PgConnection::connect(&direct).await.unwrap();
    let held: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted
            AND objid = ($1 & 4294967295)::oid",
    )
    .bind(key)
    .fetch_one(&mut watcher)
    .await
    .unwrap();
    assert_eq!(held, 1, "the lock did not stay behind in the pool");

    for name in ["d", "e"] {
        let took = refused(&["run", "--database-url", &through, "--replica-id", name]).await;
        eprintln!("transaction pooling, a lock left in the pool: host {name} refused in {took:?}");
    }
    drop(bouncer);
}

#[cfg_attr(
    given_server,
    ignore = "starts a PgBouncer of its own in front of the harness's own server"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behind_session_pooling_a_stopped_holder_hands_its_lease_to_the_standby_within_a_second() {
    pg::needs_own_server("starts a PgBouncer in front of the server");
    let server = pg::server();
    let bouncer = PgBouncer::start(server.admin_url(), PoolMode::Session).unwrap();
    let direct = server.fresh_database().await.unwrap();
    let through = bouncer.url_for(&direct).unwrap();
    // Long enough that a standby which missed the release's notification would wait seconds.
    let ttl = Duration::from_secs(10);
    let host = |name: &str| HostBuilder::new(name).database_url(&through).ttl(ttl);

    let mut a = host("a").spawn_leading("leader").await.unwrap();
    let b = host("b").spawn().await.unwrap();
    pg::wait_for_listeners(&direct, 2, Duration::from_secs(15))
        .await
        .unwrap();
    assert_eq!(b.role("leader").await, Some(Role::Standby));

    let sent = Instant::now();
    a.signal("TERM").unwrap();
    eventually("b to lead", ttl * 2, async || {
        when(b.role("leader").await, |r| *r == Some(Role::Leader))
    })
    .await
    .unwrap();
    let took = sent.elapsed();
    assert!(
        took < Duration::from_secs(1),
        "b led {took:?} after a's SIGTERM (ttl {ttl:?}): the release did not wake it\n{}\n{}",
        b.log_text(),
        bouncer.log()
    );
    assert!(
        a.wait_exit(Duration::from_secs(10))
            .await
            .unwrap()
            .success()
    );
    wait_for_single_leader(&[&b], "leader", Duration::from_secs(5))
        .await
        .unwrap();
    eprintln!("session pooling: SIGTERM -> the standby leads in {took:?}");

    // The session settings a pooler drops at connect are set by the host itself: the store's
    // sessions are bounded on the server as on a direct connection.
    let parsed = leasehold::lease::DatabaseUrl::parse(&through).unwrap();
    let store = leasehold::lease::postgres::PostgresStore::connect(
        &parsed,
        Duration::from_secs(10),
        Duration::from_secs(2),
    )
    .await
    .unwrap();
    // 9/10 of the 2 s call timeout; jit is on by the server's default.
    assert_eq!(store.show("statement_timeout").await.unwrap(), "1800ms");
    assert_eq!(store.show("lock_timeout").await.unwrap(), "1800ms");
    assert_eq!(store.show("jit").await.unwrap(), "off");
}

#[cfg_attr(
    given_server,
    ignore = "holds the migrators' lock on the harness's own server"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_migration_waiting_for_another_sessions_advisory_lock_says_who_holds_it_and_gives_up_at_the_bound()
 {
    pg::needs_own_server("holds the migrators' advisory lock");
    let direct = pg::server().fresh_database().await.unwrap();
    let database = direct.rsplit('/').next().unwrap().to_string();
    let key = leasehold::lease::postgres::migration_lock_key(&database);
    let mut holder =
        sqlx::PgConnection::connect(&format!("{direct}?application_name=stuck-migrator"))
            .await
            .unwrap();
    sqlx::query("SELECT pg_advisory_lock($1)")
        .bind(key)
        .execute(&mut holder)
        .await
        .unwrap();

    // The connect timeout bounds every wait at start-up for something another session holds.
    let bound = Duration::from_secs(6);
    let started_at = leasehold_tests::host::now_time_of_day();
    let started = Instant::now();
    let (status, stderr) = run_to_exit(
        &[
            "run",
            "--database-url",
            &direct,
            "--connect-timeout",
            "6s",
            "--replica-id",
            "waiter",
        ],
        Duration::from_secs(30),
    )
    .await
    .unwrap();
    let took = started.elapsed();
    assert!(!status.success(), "{stderr}");
    let said = stderr
        .lines()
        .find(|l| l.contains("waiting for the migrators' advisory lock"))
        .unwrap_or_else(|| panic!("no wait was said:\n{stderr}"));
    assert!(said.contains("stuck-migrator"), "{said}");
    let said_after = time_of_day(said).unwrap() - started_at;
    assert!(said_after < 4.0, "said after {said_after:.1} s:\n{stderr}");
    assert!(
        took >= bound && took < bound + Duration::from_secs(8),
        "gave up after {took:?} (bound {bound:?}):\n{stderr}"
    );
    let gave_up = stderr
        .lines()
        .find(|l| l.contains("gave up after 6s waiting for the migrators' advisory lock"))
        .unwrap_or_else(|| panic!("no clear error:\n{stderr}"));
    assert!(gave_up.contains("stuck-migrator"), "{gave_up}");
    assert!(!stderr.contains("DDL rights"), "{stderr}");
    eprintln!("the wait was said after {said_after:.2} s; gave up after {took:?}");

    // Once the lock is let go, the next host migrates.
    sqlx::query("SELECT pg_advisory_unlock($1)")
        .bind(key)
        .execute(&mut holder)
        .await
        .unwrap();
    let mut host = HostBuilder::new("after")
        .database_url(&direct)
        .spawn()
        .await
        .unwrap();
    host.stop(Duration::from_secs(20)).await.unwrap();
}
