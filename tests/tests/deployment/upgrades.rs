//! Upgrades and rollbacks (README, Operations, Upgrades and rollbacks): this release runs beside
//! the previous one, built from the repository's own history (`scripts/build-release.sh`, which
//! `make test` runs first), on PostgreSQL and on SQLite — a handoff each way, a crash of either,
//! the previous release restarted on the schema this one migrated — with one holder at a time
//! and epochs only going up, as the database's own record of the terms shows. And a database
//! whose protocol is above this binary's is refused: at start, before each campaign, and on
//! PostgreSQL by the database itself for a session that announces no protocol.

#![allow(clippy::unwrap_used, missing_docs)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use leasehold_tests::eventually::eventually;
use leasehold_tests::host::{Host, HostBuilder, run_to_exit};
use leasehold_tests::log::Logged;
use leasehold_tests::stores::{Backend, Db};
use sqlx::Connection;

const LEASE: &str = "mixed";
const TTL: Duration = Duration::from_secs(2);

/// The previous release's binary, or `None` when the changelog names no earlier release.
fn previous_release() -> Option<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let out = Command::new(root.join("scripts/build-release.sh"))
        .arg("--built")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let path = String::from_utf8(out.stdout).unwrap();
    match path.lines().last() {
        Some(path) => Some(PathBuf::from(path.trim())),
        None => {
            eprintln!("{stderr}");
            None
        }
    }
}

/// (role, holder, epoch) of the lease as `host` answers the versioned lease API, which both
/// releases serve.
async fn seen(host: &Host) -> Option<(String, String, i64)> {
    let (code, body) = host.get(&format!("/v1/leases/{LEASE}")).await.ok()?;
    if code != 200 {
        return None;
    }
    let v: serde_json::Value = serde_json::from_str(&body).ok()?;
    Some((
        v["role"].as_str()?.to_string(),
        v["holder"].as_str().unwrap_or_default().to_string(),
        v["epoch"].as_i64().unwrap_or_default(),
    ))
}

/// Waits until `host` leads, and returns its epoch.
async fn leads(host: &Host, within: Duration) -> i64 {
    eventually(
        format!("{} to lead", host.name),
        within,
        async || match seen(host).await {
            Some((role, _, epoch)) if role == "leader" => Ok(epoch),
            other => Err(other),
        },
    )
    .await
    .unwrap()
}

/// Waits until `host` has campaigned and stands by (a release wakes it once it listens).
async fn stands_by(host: &Host) {
    eventually(
        format!("{} to stand by", host.name),
        TTL * 5,
        async || match seen(host).await {
            Some((role, holder, _)) if role == "standby" && !holder.is_empty() => Ok(()),
            other => Err(other),
        },
    )
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
}

/// The lease's terms as the database recorded them: (epoch, holder, started ms, ended ms).
async fn terms(url: &str) -> Vec<(i64, String, i64, Option<i64>)> {
    if url.starts_with("sqlite:") {
        let mut conn = sqlx::SqliteConnection::connect(url).await.unwrap();
        sqlx::query_as(
            "SELECT epoch, holder, started_at_ms, ended_at_ms FROM leasehold_terms
              WHERE name = ?1 ORDER BY epoch",
        )
        .bind(LEASE)
        .fetch_all(&mut conn)
        .await
        .unwrap()
    } else {
        let mut conn = sqlx::PgConnection::connect(url).await.unwrap();
        sqlx::query_as(
            "SELECT epoch, holder, (extract(epoch FROM started_at) * 1000)::bigint,
                    (extract(epoch FROM ended_at) * 1000)::bigint
               FROM leasehold_terms WHERE name = $1 ORDER BY epoch",
        )
        .bind(LEASE)
        .fetch_all(&mut conn)
        .await
        .unwrap()
    }
}

/// A rolling upgrade, a rollback and crashes on one store, with the previous release as `old`.
async fn beside_the_previous_release(url: &str) {
    let Some(previous) = previous_release() else {
        return;
    };
    let old = |name: &str| {
        HostBuilder::new(name)
            .program(&previous)
            .database_url(url)
            .lease(LEASE)
            .ttl(TTL)
    };
    let new = |name: &str| {
        HostBuilder::new(name)
            .database_url(url)
            .lease(LEASE)
            .ttl(TTL)
    };
    let version = |bin: &Path| {
        let out = Command::new(bin).arg("--version").output().unwrap();
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    };
    eprintln!(
        "previous: {}; this: {}",
        version(&previous),
        version(&leasehold_tests::host::binary().unwrap())
    );
    // (holder, epoch) of each term as the hosts saw it.
    let mut led = Vec::new();

    // The previous release alone creates the schema and leads.
    let mut a = old("old-a").spawn().await.unwrap();
    led.push(("old-a", leads(&a, TTL * 5).await));
    // This release joins (a rolling upgrade: it migrates the schema to its own) and stands by.
    let mut b = new("new-b").spawn().await.unwrap();
    stands_by(&b).await;
    // Handoff from the previous release to this one.
    a.signal("TERM").unwrap();
    led.push(("new-b", leads(&b, TTL * 3).await));
    a.wait_exit(TTL * 3).await.unwrap();
    // The previous release starts again on the schema this release migrated (a replica rolled
    // back), and takes the lease back at the handoff.
    let mut a = old("old-a").spawn().await.unwrap();
    stands_by(&a).await;
    b.signal("TERM").unwrap();
    led.push(("old-a", leads(&a, TTL * 3).await));
    b.wait_exit(TTL * 3).await.unwrap();
    // A crash of the previous release: this one takes over at the expiry.
    let mut b = new("new-b").spawn().await.unwrap();
    stands_by(&b).await;
    a.kill().await.unwrap();
    led.push(("new-b", leads(&b, TTL * 4).await));
    // A crash of this release: the previous one takes over at the expiry.
    let a = old("old-a").spawn().await.unwrap();
    stands_by(&a).await;
    b.kill().await.unwrap();
    led.push(("old-a", leads(&a, TTL * 4).await));
    // The whole cluster rolled back: the previous release alone, restarted.
    drop(a);
    let c = old("old-c").spawn().await.unwrap();
    led.push(("old-c", leads(&c, TTL * 4).await));
    drop(c);

    let recorded = terms(url).await;
    eprintln!("terms: {recorded:?}");
    // Every term the hosts saw is recorded, by the release that saw it, and nothing else.
    let release_of = |holder: &str| {
        if holder.starts_with("old-") {
            "old"
        } else {
            "new"
        }
    };
    assert_eq!(
        recorded
            .iter()
            .map(|(epoch, holder, _, _)| (release_of(holder), *epoch))
            .collect::<Vec<_>>(),
        led.iter()
            .map(|(name, epoch)| (release_of(name), *epoch))
            .collect::<Vec<_>>()
    );
    for pair in recorded.windows(2) {
        let ((e1, h1, s1, end1), (e2, h2, s2, _)) = (&pair[0], &pair[1]);
        assert!(e2 > e1, "epochs only go up: {e1} then {e2}");
        let end1 = end1.unwrap_or_else(|| panic!("term {e1} of {h1} never ended"));
        assert!(
            s1 <= &end1 && end1 <= *s2,
            "one holder at a time: {h1}'s term {e1} ended at {end1}, {h2}'s term {e2} began at {s2}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn this_release_runs_beside_the_previous_one_and_rolls_back_to_it_on_sqlite() {
    let db = Db::new(Backend::Sqlite).await.unwrap();
    beside_the_previous_release(&db.url().unwrap()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn this_release_runs_beside_the_previous_one_and_rolls_back_to_it_on_postgres() {
    let db = Db::new(Backend::Postgres).await.unwrap();
    beside_the_previous_release(&db.url().unwrap()).await;
}

/// Raises the schema's required protocol above every binary's.
async fn raise_protocol(url: &str) {
    let sql = "UPDATE leasehold_protocol SET required = 99, since = '9.0.0', why = 'a rule from the future'";
    if url.starts_with("sqlite:") {
        let mut conn = sqlx::SqliteConnection::connect(url).await.unwrap();
        sqlx::raw_sql(sql).execute(&mut conn).await.unwrap();
    } else {
        let mut conn = sqlx::PgConnection::connect(url).await.unwrap();
        sqlx::raw_sql(sql).execute(&mut conn).await.unwrap();
    }
}

const REFUSED: &str = "this database needs leasehold ≥ 9.0.0 (protocol 99: a rule from the future)";

/// A binary below the schema's protocol refuses to start, and one that runs when the protocol is
/// raised holds on to its lease but cannot take one.
async fn a_newer_protocol_is_refused(url: &str) {
    let host = |name: &str| {
        HostBuilder::new(name)
            .database_url(url)
            .lease(LEASE)
            .ttl(TTL)
    };
    let mut a = host("a").spawn().await.unwrap();
    let epoch = leads(&a, TTL * 5).await;
    let b = host("b").spawn().await.unwrap();
    stands_by(&b).await;

    raise_protocol(url).await;
    // The holder keeps renewing its term; the standby's campaigns are refused, so a release hands
    // the lease to nobody.
    tokio::time::sleep(TTL).await;
    assert_eq!(
        seen(&a).await.map(|s| (s.0, s.2)),
        Some(("leader".to_string(), epoch))
    );
    a.signal("TERM").unwrap();
    a.wait_exit(TTL * 3).await.unwrap();
    b.wait_for_log(REFUSED, TTL * 3).await.unwrap();
    tokio::time::sleep(TTL).await;
    assert_eq!(seen(&b).await.map(|s| s.0), Some("standby".to_string()));
    let (_, metrics) = b.get("/metrics").await.unwrap();
    assert!(
        metrics.contains(r#"leasehold_store_errors_total{op="campaign",cause="protocol"}"#),
        "{metrics}"
    );

    // A binary started on it refuses at once, naming the release it needs and its own.
    let (status, stderr) = run_to_exit(
        &[
            "run",
            "--database-url",
            url,
            "--lease",
            LEASE,
            "--http",
            "127.0.0.1:0",
        ],
        Duration::from_secs(30),
    )
    .await
    .unwrap();
    assert!(!status.success(), "{stderr}");
    assert!(stderr.contains(REFUSED), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "this is leasehold {}, which speaks protocol {}: upgrade this replica",
            env!("CARGO_PKG_VERSION"),
            leasehold::lease::protocol::PROTOCOL
        )),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_that_needs_a_newer_protocol_is_refused_at_start_and_before_each_campaign_on_sqlite()
 {
    let db = Db::new(Backend::Sqlite).await.unwrap();
    a_newer_protocol_is_refused(&db.url().unwrap()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_that_needs_a_newer_protocol_is_refused_at_start_and_before_each_campaign_on_postgres()
 {
    let db = Db::new(Backend::Postgres).await.unwrap();
    a_newer_protocol_is_refused(&db.url().unwrap()).await;
}

/// On PostgreSQL the database refuses, by itself, a campaign from a session that announces no
/// protocol (a binary from before the check), and takes one that announces enough.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_refuses_a_takeover_from_a_session_below_the_protocol_by_itself() {
    let url = leasehold_tests::pg::server()
        .fresh_lease_database()
        .await
        .unwrap();
    let insert = "INSERT INTO leasehold_leases (name, holder, epoch, acquired_at, renewed_at, expires_at, ttl_ms)
                  VALUES ('by-hand', 'someone', 1, now(), now(), now() + interval '1 minute', 60000)";
    let mut conn = sqlx::PgConnection::connect(&url).await.unwrap();
    sqlx::raw_sql("UPDATE leasehold_protocol SET required = 2, since = '9.0.0', why = 'a rule from the future'")
        .execute(&mut conn)
        .await
        .unwrap();
    let refused = sqlx::raw_sql(insert).execute(&mut conn).await.unwrap_err();
    let db = refused.as_database_error().unwrap();
    assert_eq!(db.code().as_deref(), Some("LH002"));
    assert_eq!(
        db.message(),
        "this database needs leasehold ≥ 9.0.0 (protocol 2: a rule from the future); this replica speaks protocol 1"
    );
    // Renewals and releases are not takeovers: they pass.
    sqlx::raw_sql("UPDATE leasehold_leases SET ttl_ms = ttl_ms")
        .execute(&mut conn)
        .await
        .unwrap();
    // A session announcing protocol 2 may take it.
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "SET leasehold.protocol = 2; {insert}"
    )))
    .execute(&mut conn)
    .await
    .unwrap();
}
