//! Attacks on the lease core from outside (docs/ARCHITECTURE.md §3.5, §5.3): a row lock taken with
//! `psql`, a release committed under a waiting renewal, a campaign the host stopped waiting for,
//! and the database's wall clock stepped with libfaketime under running `leasehold` processes whose
//! `/status` is sampled all along.

#![allow(clippy::unwrap_used, missing_docs)]

use leasehold::lease::Epoch;
use leasehold_tests::log::Logged;
use std::process::Stdio;
use std::time::{Duration, Instant};

use leasehold::lease::postgres::PostgresStore;
use leasehold::lease::{DatabaseUrl, LeaseStore, RenewRequest};
use leasehold_tests::eventually::{eventually, when};
use leasehold_tests::faketime::SteppedClock;
use leasehold_tests::host::{Host, wait_for_single_leader};
use leasehold_tests::pg;
use leasehold_tests::stats::env_count;
use leasehold_tests::status::{Role, StatusExt};
use sqlx::Connection;

async fn store(url: &str, call_timeout: Duration) -> PostgresStore {
    PostgresStore::connect(
        &DatabaseUrl::parse(url).unwrap(),
        Duration::from_secs(10),
        call_timeout,
    )
    .await
    .unwrap()
}

fn renewal(name: &str, epoch: Epoch, ttl: Duration) -> RenewRequest {
    RenewRequest {
        name: name.into(),
        epoch,
        ttl,
    }
}

/// `psql URL -c SQL` in the background, as an operator would run it.
fn psql(url: &str, sql: &str) -> tokio::process::Child {
    tokio::process::Command::new("psql")
        .args(["-X", "-q", "-v", "ON_ERROR_STOP=1", url, "-c", sql])
        .stdout(Stdio::null())
        .spawn()
        .expect("psql (Debian's postgresql-client; scripts/install-deps.sh installs it)")
}

/// Waits until a backend of the database holds a lock on a `leasehold_leases` row.
async fn wait_for_row_lock(url: &str) {
    let mut conn = sqlx::PgConnection::connect(url).await.unwrap();
    eventually(
        "psql to take its lock (a session sleeping with it)",
        Duration::from_secs(10),
        async || {
            // In pg_sleep, so past its FOR UPDATE; not this very query, whose text names it too.
            let waiting: bool = sqlx::query_scalar(
                "SELECT EXISTS (SELECT 1 FROM pg_stat_activity
                                 WHERE datname = current_database() AND pid <> pg_backend_pid()
                                   AND wait_event = 'PgSleep')",
            )
            .fetch_one(&mut conn)
            .await
            .unwrap();
            when(waiting, |w| *w)
        },
    )
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_psql_lock_on_one_lease_row_does_not_stall_the_other_leases() {
    let url = pg::server().fresh_database().await.unwrap();
    let host = Host::start(
        "a",
        &["--database-url", &url, "--ttl", "2s", "--lease", "a,b"],
    )
    .await
    .unwrap();
    for lease in ["a", "b"] {
        wait_for_single_leader(&[&host], lease, Duration::from_secs(15))
            .await
            .unwrap();
    }
    let from = host.log_len();
    // An operator holds lease a's row for twice its ttl.
    let mut lock = psql(
        &url,
        "BEGIN; SELECT * FROM leasehold_leases WHERE name = 'a' FOR SHARE; SELECT pg_sleep(4); COMMIT;",
    );
    wait_for_row_lock(&url).await;
    let until = Instant::now() + Duration::from_secs(4);
    let mut roles_of_b = Vec::new();
    while Instant::now() < until {
        let role = host.role("b").await.unwrap();
        if !roles_of_b.contains(&role) {
            roles_of_b.push(role);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(lock.wait().await.unwrap().success());
    let log = host.log_lines_from(from);
    let of_b: Vec<&String> = log
        .iter()
        .filter(|l| l.contains("lease=b") && (l.contains("term ended") || l.contains("lost")))
        .collect();
    assert!(of_b.is_empty(), "lease b suffered from a's lock: {of_b:#?}");
    assert_eq!(
        roles_of_b,
        [Role::Leader],
        "b's role while a's row was locked"
    );
    let status = host.status().await.unwrap();
    let b = status.lease("b").unwrap();
    assert_eq!(b.epoch, Some(Epoch::new(1)), "b kept its first term: {b:?}");
    // a could not be renewed while locked; it ended its own term in time, nothing else.
    assert!(
        log.iter()
            .any(|l| l.contains("lease=a") && l.contains("term ended")),
        "{log:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewal_that_waited_behind_a_release_does_not_revive_the_lease() {
    let url = pg::server().fresh_database().await.unwrap();
    let s = store(&url, Duration::from_secs(5)).await;
    let ttl = Duration::from_secs(30);
    let epoch = s.campaign("r", "me", ttl).await.unwrap().epoch.unwrap();
    // Another session locks the row, then releases the lease: its expiry is written after the
    // renewal below has started waiting for the row.
    let mut tx = pg::lock_lease_row(&url, "r", pg::RowLock::NoKeyUpdate)
        .await
        .unwrap();
    let waiting = tokio::spawn(async move {
        s.renew_one("me", &renewal("r", epoch, ttl), Duration::from_secs(5))
            .await
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    sqlx::query("UPDATE leasehold_leases SET expires_at = clock_timestamp() WHERE name = 'r'")
        .execute(&mut *tx)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    tx.commit().await.unwrap();
    let renewed = waiting.await.unwrap().unwrap();
    assert!(
        !renewed.landed,
        "a renewal judged by its start time revived a released lease"
    );
    let s = store(&url, Duration::from_secs(5)).await;
    assert_eq!(
        s.campaign("r", "next", ttl).await.unwrap().epoch,
        Some(epoch.next()),
        "the released lease is free for the next holder"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_campaign_the_host_stopped_waiting_for_never_commits_later() {
    let url = pg::server().fresh_database().await.unwrap();
    // The store timeout of a 5 s ttl: the host waits 1 s for any call.
    let call_timeout = Duration::from_secs(1);
    let s = store(&url, call_timeout).await;
    let short = Duration::from_millis(200);
    let epoch = s.campaign("c", "old", short).await.unwrap().epoch.unwrap();
    tokio::time::sleep(short * 2).await;
    // The row has expired, but a session holds it for 3 s.
    let mut lock = psql(
        &url,
        "BEGIN; SELECT * FROM leasehold_leases WHERE name = 'c' FOR UPDATE; SELECT pg_sleep(3); COMMIT;",
    );
    wait_for_row_lock(&url).await;
    let started = Instant::now();
    let campaign =
        tokio::time::timeout(call_timeout, s.campaign("c", "me", Duration::from_secs(60))).await;
    // Whether the host saw its own timeout or the server's first, the campaign failed for it.
    assert!(
        !matches!(campaign, Ok(Ok(ref c)) if c.epoch.is_some()),
        "{campaign:?}"
    );
    assert!(started.elapsed() < call_timeout + Duration::from_millis(200));
    assert!(lock.wait().await.unwrap().success());
    let row = s.get(&["c".to_string()]).await.unwrap();
    assert_eq!(
        (row[0].holder.as_str(), row[0].epoch),
        ("old", epoch),
        "the abandoned campaign committed after the host gave up on it"
    );
}

/// Samples both hosts' role of lease `leader` for `how_long`, in the order a, b, a: a double
/// leader is only counted when b says leader between two answers of a that both say leader (so
/// a handover between two sequential polls is not mistaken for one).
async fn overlaps(a: &Host, b: &Host, how_long: Duration) -> (usize, usize) {
    let until = Instant::now() + how_long;
    let (mut overlaps, mut samples) = (0, 0);
    while Instant::now() < until {
        let (a1, b1, a2, b2) = (role(a).await, role(b).await, role(a).await, role(b).await);
        samples += 1;
        // b leads between two answers of a that both lead, or a between two of b.
        let lead = |r: &Option<Role>| *r == Some(Role::Leader);
        if lead(&b1) && lead(&a2) && (lead(&a1) || lead(&b2)) {
            overlaps += 1;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    (overlaps, samples)
}

async fn role(h: &Host) -> Option<Role> {
    h.role("leader").await
}

/// Two hosts on `url` with ttl 3 s; the wall clock of `stepped` (the database server, or both
/// hosts when `hosts_follow` is set) jumps ahead by each of `steps` in turn.
async fn clock_step_trials(
    url: &str,
    clock: &SteppedClock,
    hosts_follow: bool,
    steps: &[Duration],
) -> Vec<String> {
    let env = if hosts_follow {
        clock.env()
    } else {
        Vec::new()
    };
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let args = ["--database-url", url, "--ttl", "3s"];
    let a = Host::start_with_env("a", &args, &env).await.unwrap();
    let b = Host::start_with_env("b", &args, &env).await.unwrap();
    wait_for_single_leader(&[&a, &b], "leader", Duration::from_secs(20))
        .await
        .unwrap();
    let mut ahead = Duration::ZERO;
    let mut report = Vec::new();
    for step in steps {
        // Let the leader renew on the current clock first, then step it.
        let (before, _) = overlaps(&a, &b, Duration::from_millis(1_500)).await;
        ahead += *step;
        clock.set(ahead).unwrap();
        let (after, samples) = overlaps(&a, &b, Duration::from_secs(8)).await;
        assert_eq!(
            (before, after),
            (0, 0),
            "two leaders after a {step:?} step ({samples} samples)\na:\n{}\nb:\n{}",
            a.log_text(),
            b.log_text()
        );
        wait_for_single_leader(&[&a, &b], "leader", Duration::from_secs(20))
            .await
            .unwrap();
        let epoch = a.status().await.unwrap().leases[0].epoch;
        report.push(format!(
            "{step:?} step: 0 of {samples} samples with two leaders; epoch now {}",
            epoch.map_or_else(|| "none".to_string(), |e| e.to_string())
        ));
    }
    let seen = |h: &Host| {
        h.log_text()
            .matches("database clock stepped forward")
            .count()
    };
    report.push(format!("steps seen: a {}, b {}", seen(&a), seen(&b)));
    report
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_stepped_postgres_clock_never_makes_two_leaders() {
    let clock = SteppedClock::new().unwrap();
    let env = clock.env();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let server = pg::Postgres::start_private(&env).unwrap();
    let url = server.fresh_database().await.unwrap();
    let trials = env_count("CLOCK_STEP_TRIALS", 1);
    let mut steps = Vec::new();
    for _ in 0..trials {
        // Within a renewal's reach, past the lease's end, and far past it.
        steps.extend([
            Duration::from_millis(1_500),
            Duration::from_millis(2_600),
            Duration::from_secs(8),
        ]);
    }
    let report = clock_step_trials(&url, &clock, false, &steps).await;
    eprintln!("{}", report.join("\n"));
    assert!(
        !report.last().unwrap().contains("a 0, b 0"),
        "nobody saw the steps: {report:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_stepped_wall_clock_does_not_reach_sqlite_leases() {
    let clock = SteppedClock::new().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite:{}", dir.path().join("leases.db").display());
    let trials = env_count("CLOCK_STEP_TRIALS", 1);
    let steps = vec![Duration::from_secs(8); 2 * trials];
    let report = clock_step_trials(&url, &clock, true, &steps).await;
    eprintln!("{}", report.join("\n"));
    // The boot clock does not step: nobody sees a step, and the leader keeps its first term.
    assert!(report.last().unwrap().contains("a 0, b 0"), "{report:?}");
    assert!(report[0].contains("epoch now 1"), "{report:?}");
}
