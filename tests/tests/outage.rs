//! A PostgreSQL outage under running `leasehold` processes: the holder fails closed (its term ends
//! by `safe_until`, nobody leads), `/readyz` says 503 with the reason, no process exits, and
//! leadership (and readiness) return with a new epoch when the database does. Its own test binary, because it stops the server its tests share.

#![allow(clippy::unwrap_used, missing_docs)]

use leasehold::lease::Epoch;
use leasehold_tests::log::Logged;
use std::time::Duration;

use leasehold_tests::eventually::{eventually, when};
use leasehold_tests::host::{Host, last_log_time, now_time_of_day, wait_for_single_leader};
use leasehold_tests::pg;
use leasehold_tests::status::Role;
use leasehold_tests::stores::{Backend, Db};

/// Both hosts' roles of the lease `leader`, asked at once: while the database is down each answer
/// takes up to the store timeout.
async fn roles(hosts: &[&Host; 2]) -> [Role; 2] {
    let (a, b) = tokio::join!(hosts[0].role("leader"), hosts[1].role("leader"));
    [a, b].map(|role| role.expect("a host stopped answering /status"))
}

/// The holder's epoch as `host` sees it. A replica's view of who holds a lease is a snapshot of
/// the store up to a quarter second old: a standby sees a new holder within one refresh.
async fn epoch_seen_by(host: &Host) -> Epoch {
    eventually("the holder's epoch", Duration::from_secs(2), async || {
        when(
            host.status().await.unwrap().leases[0].epoch,
            Option::is_some,
        )
    })
    .await
    .unwrap()
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[cfg_attr(
    given_server,
    ignore = "DATABASE_URL is set, and this test stops and starts the server: it needs the one the harness starts itself"
)]
async fn a_database_outage_fails_closed_and_recovers() {
    pg::needs_own_server("stops and starts the server");
    let db = Db::new(Backend::Postgres).await.unwrap();
    let url = db.url().unwrap();
    let ttl = Duration::from_secs(2);
    let a = Host::start("a", &["--database-url", &url, "--ttl", "2s"])
        .await
        .unwrap();
    let b = Host::start("b", &["--database-url", &url, "--ttl", "2s"])
        .await
        .unwrap();
    let hosts = [&a, &b];
    let leader = wait_for_single_leader(&hosts, "leader", Duration::from_secs(15))
        .await
        .unwrap();
    let epoch = epoch_seen_by(&a).await;

    pg::server().stop().unwrap();
    let stopped_at = now_time_of_day();
    // Within ttl (safe_until is earlier still) nobody may lead any more.
    eventually(
        "nobody to lead and the holder's term to end: the roles",
        ttl + Duration::from_secs(3),
        async || {
            let now = roles(&hosts).await;
            // "uncertain" comes with the first failed renewal; the term (and its plugins) ends
            // later.
            let ended = hosts[leader].log_text().contains("term ended");
            when(now, |now| now.iter().all(|r| *r != Role::Leader) && ended)
        },
    )
    .await
    .unwrap();
    // Timed by the holder's own log, free of this test's polling.
    let ended = last_log_time(&hosts[leader].log_text(), "term ended").unwrap();
    let fail_closed = Duration::from_secs_f64((ended - stopped_at).max(0.0));
    assert!(
        fail_closed < ttl,
        "the holder stopped leading only after {fail_closed:?}, ttl {ttl:?}"
    );
    let status = hosts[leader].status().await.unwrap();
    assert!(status.store_error.is_some(), "{status:?}");
    // Not ready while the store is down, with the reason; alive all the same.
    for h in hosts {
        let (code, body) = h.get("/readyz").await.unwrap();
        assert_eq!(code, 503, "{body}");
        // Why: the lease loop's own calls fail (it cannot campaign), or the display's read does.
        assert!(
            body.contains("cannot campaign") || body.contains("lease store"),
            "{body}"
        );
        assert_eq!(h.get("/healthz").await.unwrap().0, 200);
    }
    // Ride out the outage for a few ttls: nobody exits, nobody leads.
    tokio::time::sleep(ttl * 2).await;
    assert!(roles(&hosts).await.iter().all(|r| *r != Role::Leader));

    pg::server().restart().unwrap();
    wait_for_single_leader(&hosts, "leader", Duration::from_secs(20))
        .await
        .unwrap();
    // Ready again once each replica's own next call lands: a standby whose last campaign failed
    // is ready at its next retry, at most a quarter of the poll (ttl/4) after the server is back.
    for h in hosts {
        eventually("ready again", ttl, async || {
            let (code, body) = h.get("/readyz").await?;
            anyhow::ensure!(code == 200, "{code} {body}");
            Ok(())
        })
        .await
        .unwrap();
    }
    let new_epoch = epoch_seen_by(&a).await;
    assert_eq!(new_epoch, epoch.next());
    for h in hosts {
        let log = h.log_text();
        assert!(!log.contains("panicked"), "{log}");
    }
    let log = hosts[leader].log_text();
    assert!(log.contains("renewal failing"), "{log}");
    assert!(log.contains("no renewal landed before safe_until"), "{log}");
    println!("database stopped -> no leader after {fail_closed:?} (ttl {ttl:?})");
}
