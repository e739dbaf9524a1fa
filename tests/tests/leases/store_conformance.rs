//! One conformance suite for every `LeaseStore` backend (docs/ARCHITECTURE.md §2, §5): the same
//! assertions against the in-memory store, a real SQLite file and a real PostgreSQL database.

#![allow(clippy::unwrap_used, missing_docs)]

use leasehold::lease::Epoch;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use leasehold::lease::{LeaseStore, ReleaseNotice, RenewRequest};
use leasehold_tests::eventually::{eventually, when};
use leasehold_tests::pg::{RowLock, lock_lease_row};
use leasehold_tests::stores::{Backend, Db};

const LONG: Duration = Duration::from_secs(60);
/// A lease that is meant to expire during the test. Long enough that the calls made while it must
/// still be held (16 contenders queueing on one SQLite file, a loaded machine) finish inside it.
const SHORT: Duration = Duration::from_secs(1);

async fn expire(ttl: Duration) {
    tokio::time::sleep(ttl + Duration::from_millis(50)).await;
}

/// On PostgreSQL the release listener subscribes in the background: wait until it has.
async fn until_listening(db: &Db) {
    if let Some(url) = db.url().filter(|u| u.starts_with("postgres")) {
        leasehold_tests::pg::wait_for_listeners(&url, 1, Duration::from_secs(20))
            .await
            .unwrap();
    }
}

fn renew_req(name: &str, epoch: Epoch) -> RenewRequest {
    RenewRequest {
        name: name.to_string(),
        epoch,
        ttl: LONG,
    }
}

async fn concurrent_campaigns_have_one_winner(backend: Backend) {
    let db = Db::new(backend).await.unwrap();
    let mut stores: Vec<Arc<dyn LeaseStore>> = Vec::new();
    for _ in 0..16 {
        stores.push(db.open().await.unwrap());
    }
    // Every contender campaigns at once, from its own connection pool, for several rounds of
    // fresh lease names (a new row) and for an expired row (the update path). The first winner's
    // ttl is long: sixteen contenders queueing on one SQLite file on a loaded machine can take
    // longer than a short ttl, and a late campaign would then rightly win epoch 2. The row is
    // expired by a forced release instead, which leaves it as a lapsed ttl would.
    for round in 0..3 {
        let name = format!("contested-{round}");
        let winners = campaign_all(&stores, &name, "h", LONG).await;
        assert_eq!(
            winners,
            vec![Epoch::new(1)],
            "{backend:?} round {round}: one winner, epoch 1"
        );
        assert!(stores[0].force_release(&name).await.unwrap().is_some());
        let winners = campaign_all(&stores, &name, "g", LONG).await;
        assert_eq!(
            winners,
            vec![Epoch::new(2)],
            "{backend:?} round {round} (expired row): one winner, epoch 2"
        );
    }
}

/// Every store campaigns for `name` at the same moment; returns the epochs won.
async fn campaign_all(
    stores: &[Arc<dyn LeaseStore>],
    name: &str,
    holder: &str,
    ttl: Duration,
) -> Vec<Epoch> {
    let tasks: Vec<_> = stores
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let (s, name, holder) = (s.clone(), name.to_string(), format!("{holder}{i}"));
            tokio::spawn(async move { s.campaign(&name, &holder, ttl).await.unwrap().epoch })
        })
        .collect();
    futures_join(tasks).await.into_iter().flatten().collect()
}

async fn futures_join<T>(tasks: Vec<tokio::task::JoinHandle<T>>) -> Vec<T> {
    let mut out = Vec::new();
    for t in tasks {
        out.push(t.await.unwrap());
    }
    out
}

async fn epochs_strictly_increase(backend: Backend) {
    let db = Db::new(backend).await.unwrap();
    let s = db.open().await.unwrap();
    let mut epochs = Vec::new();
    // acquire
    epochs.push(s.campaign("e", "a", SHORT).await.unwrap().epoch.unwrap());
    assert_eq!(
        s.campaign("e", "b", SHORT).await.unwrap().epoch,
        None,
        "held lease must not be taken"
    );
    // expire, then steal
    expire(SHORT).await;
    epochs.push(s.campaign("e", "b", LONG).await.unwrap().epoch.unwrap());
    // release, then re-acquire by another
    assert!(s.release("e", "b", epochs[1]).await.unwrap());
    epochs.push(s.campaign("e", "a", LONG).await.unwrap().epoch.unwrap());
    // release, then re-acquire by the same holder: still a new epoch
    assert!(s.release("e", "a", epochs[2]).await.unwrap());
    epochs.push(s.campaign("e", "a", LONG).await.unwrap().epoch.unwrap());
    assert_eq!(epochs, [1, 2, 3, 4].map(Epoch::new), "{backend:?}");
    let row = &s.get(&["e".to_string()]).await.unwrap()[0];
    assert_eq!((row.holder.as_str(), row.epoch), ("a", Epoch::new(4)));
    assert!(row.is_held());
}

async fn stale_epoch_cannot_renew(backend: Backend) {
    let db = Db::new(backend).await.unwrap();
    let s = db.open().await.unwrap();
    let old = s.campaign("r", "a", SHORT).await.unwrap().epoch.unwrap();
    assert_eq!(
        s.renew("a", &[renew_req("r", old)]).await.unwrap().landed,
        vec!["r"]
    );
    // The renewal above extended the lease by LONG: give it back by releasing, then take it over.
    assert!(s.release("r", "a", old).await.unwrap());
    let new = s.campaign("r", "b", LONG).await.unwrap().epoch.unwrap();
    assert_eq!(new, old.next());
    assert!(
        s.renew("a", &[renew_req("r", old)])
            .await
            .unwrap()
            .landed
            .is_empty(),
        "old holder, old epoch"
    );
    assert!(
        s.renew("a", &[renew_req("r", new)])
            .await
            .unwrap()
            .landed
            .is_empty(),
        "old holder, new epoch"
    );
    assert!(
        s.renew("b", &[renew_req("r", old)])
            .await
            .unwrap()
            .landed
            .is_empty(),
        "new holder, old epoch"
    );
    assert_eq!(
        s.renew("b", &[renew_req("r", new)]).await.unwrap().landed,
        vec!["r"]
    );
    // An expired lease cannot be renewed, even by its holder at its epoch: it must be re-campaigned.
    let e = s.campaign("x", "a", SHORT).await.unwrap().epoch.unwrap();
    expire(SHORT).await;
    assert!(
        s.renew("a", &[renew_req("x", e)])
            .await
            .unwrap()
            .landed
            .is_empty(),
        "expired lease renewed"
    );
    assert!(
        !s.release("x", "a", e).await.unwrap(),
        "expired lease released"
    );
}

async fn release_lets_a_standby_in_at_once(backend: Backend) {
    let db = Db::new(backend).await.unwrap();
    let holder = db.open().await.unwrap();
    let standby = db.open().await.unwrap();
    let stop = tokio_util_token();
    let mut notices = standby.listen_releases(stop.clone());
    until_listening(&db).await;
    let e = holder
        .campaign("l", "a", LONG)
        .await
        .unwrap()
        .epoch
        .unwrap();
    assert_eq!(standby.campaign("l", "b", LONG).await.unwrap().epoch, None);
    assert!(
        !standby.release("l", "b", e).await.unwrap(),
        "a non-holder must not release"
    );
    assert!(
        !holder.release("l", "a", e.next()).await.unwrap(),
        "a wrong epoch must not release"
    );
    assert_eq!(
        standby.campaign("l", "b", LONG).await.unwrap().epoch,
        None,
        "lease still held"
    );
    let started = Instant::now();
    assert!(holder.release("l", "a", e).await.unwrap());
    if let Some(rx) = notices.as_mut() {
        let notice = tokio::time::timeout(Duration::from_secs(5), rx.recv())
            .await
            .expect("release notification")
            .unwrap();
        assert_eq!(notice, ReleaseNotice::Released("l".into()), "{backend:?}");
        println!(
            "{backend:?}: release -> notification in {:?}",
            started.elapsed()
        );
    }
    assert_eq!(
        standby.campaign("l", "b", LONG).await.unwrap().epoch,
        Some(e.next()),
        "{backend:?}"
    );
    stop.cancel();
}

async fn forced_release_expires_whoever_holds_and_keeps_the_epoch(backend: Backend) {
    let db = Db::new(backend).await.unwrap();
    let holder = db.open().await.unwrap();
    let admin = db.open().await.unwrap();
    let stop = tokio_util_token();
    let mut notices = admin.listen_releases(stop.clone());
    until_listening(&db).await;
    assert_eq!(
        admin.force_release("f").await.unwrap(),
        None,
        "no such lease"
    );
    let e = holder
        .campaign("f", "a", LONG)
        .await
        .unwrap()
        .epoch
        .unwrap();
    assert_eq!(
        admin.force_release("f").await.unwrap(),
        Some(("a".into(), e))
    );
    assert_eq!(
        admin.force_release("f").await.unwrap(),
        None,
        "already expired"
    );
    if let Some(rx) = notices.as_mut() {
        let notice = tokio::time::timeout(Duration::from_secs(5), rx.recv())
            .await
            .expect("release notification")
            .unwrap();
        assert_eq!(notice, ReleaseNotice::Released("f".into()), "{backend:?}");
    }
    // The holder's renewal is refused; the next acquisition gets the next epoch.
    let renewed = holder
        .renew(
            "a",
            &[RenewRequest {
                name: "f".into(),
                epoch: e,
                ttl: LONG,
            }],
        )
        .await
        .unwrap()
        .landed;
    assert!(renewed.is_empty(), "{backend:?}");
    assert_eq!(
        admin.campaign("f", "b", LONG).await.unwrap().epoch,
        Some(e.next())
    );
    stop.cancel();
}

fn tokio_util_token() -> tokio_util::sync::CancellationToken {
    tokio_util::sync::CancellationToken::new()
}

async fn rows_are_never_deleted(backend: Backend) {
    let db = Db::new(backend).await.unwrap();
    let s = db.open().await.unwrap();
    let e = s.campaign("kept", "a", SHORT).await.unwrap().epoch.unwrap();
    assert!(s.release("kept", "a", e).await.unwrap());
    s.campaign("lapsed", "a", SHORT)
        .await
        .unwrap()
        .epoch
        .unwrap();
    expire(SHORT).await;
    let rows = s.list(None, 10).await.unwrap();
    let names: Vec<_> = rows
        .iter()
        .map(|r| (r.name.as_str(), r.epoch.get(), r.is_held()))
        .collect();
    assert_eq!(
        names,
        vec![("kept", 1, false), ("lapsed", 1, false)],
        "{backend:?}"
    );
    // The schema itself refuses deletes and epoch rewinds.
    let url = db.url();
    match backend {
        Backend::Postgres => {
            let pool = sqlx::PgPool::connect(&url.unwrap()).await.unwrap();
            let err = sqlx::query("DELETE FROM leasehold_leases")
                .execute(&pool)
                .await
                .unwrap_err();
            assert!(err.to_string().contains("cannot be deleted"), "{err}");
            let err = sqlx::query("UPDATE leasehold_leases SET epoch = 0")
                .execute(&pool)
                .await
                .unwrap_err();
            assert!(err.to_string().contains("epoch"), "{err}");
        }
        Backend::Sqlite => {
            let pool = sqlx::SqlitePool::connect(&url.unwrap()).await.unwrap();
            let err = sqlx::query("DELETE FROM leasehold_leases")
                .execute(&pool)
                .await
                .unwrap_err();
            assert!(err.to_string().contains("cannot be deleted"), "{err}");
            let err = sqlx::query("UPDATE leasehold_leases SET epoch = 1 - epoch")
                .execute(&pool)
                .await
                .unwrap_err();
            assert!(err.to_string().contains("epoch"), "{err}");
        }
        Backend::Memory | Backend::MemoryFaultsOff => {}
    }
    assert_eq!(s.list(None, 10).await.unwrap().len(), 2);
}

/// Runs `sql` on a connection of type `$conn` to `$url` in a transaction that is rolled back:
/// the error if it was refused, else the (name, epoch) rows it left. A macro because the two
/// drivers' connections share no trait this needs.
macro_rules! attack {
    ($conn:ty, $url:expr, $sql:expr) => {{
        use sqlx::Connection;
        let mut conn = <$conn>::connect($url).await.unwrap();
        let mut tx = conn.begin().await.unwrap();
        match sqlx::query(sqlx::AssertSqlSafe($sql.to_string()))
            .execute(&mut *tx)
            .await
        {
            Err(e) => Err(e.to_string()),
            Ok(_) => Ok::<Vec<(String, i64)>, String>(
                sqlx::query_as("SELECT name, epoch FROM leasehold_leases ORDER BY name")
                    .fetch_all(&mut *tx)
                    .await
                    .unwrap(),
            ),
        }
    }};
}

/// Statements that would take a row away or give a name an old epoch back, run from outside the
/// lease store on the real database (as the table's owner, who passes every privilege check), are
/// refused by the schema; the next campaign of each lease still gets its epoch + 1.
async fn truncates_replaces_and_renames_cannot_reset_an_epoch(backend: Backend) {
    let db = Db::new(backend).await.unwrap();
    let s = db.open().await.unwrap();
    // Lease "a" is at epoch 2, "b" at epoch 1; both released, so any campaign may take them.
    for _ in 0..2 {
        let e = s.campaign("a", "h", LONG).await.unwrap().epoch.unwrap();
        assert!(s.release("a", "h", e).await.unwrap());
    }
    let e = s.campaign("b", "h", LONG).await.unwrap().epoch.unwrap();
    assert!(s.release("b", "h", e).await.unwrap());

    // Each attack with the words its refusal must contain.
    let attacks: &[(&str, &str)] = match backend {
        Backend::Postgres => &[
            // The row-level delete guard does not fire for TRUNCATE.
            ("TRUNCATE leasehold_leases", "cannot be truncated"),
            // Renaming b makes b vanish: the same as deleting it.
            (
                "UPDATE leasehold_leases SET name = 'c' WHERE name = 'b'",
                "cannot be renamed",
            ),
        ],
        Backend::Sqlite => &[
            // REPLACE deletes the conflicting row without firing delete triggers.
            (
                "INSERT OR REPLACE INTO leasehold_leases
                    (name, holder, epoch, acquired_at_ms, renewed_at_ms, expires_at_ms, ttl_ms)
                    VALUES ('a', 'intruder', 1, 0, 0, 0, 1000)",
                "would reset its epoch",
            ),
            (
                "REPLACE INTO leasehold_leases
                    (name, holder, epoch, acquired_at_ms, renewed_at_ms, expires_at_ms, ttl_ms)
                    VALUES ('a', 'intruder', 2, 0, 0, 0, 1000)",
                "would reset its epoch",
            ),
            // Renaming b onto a replaces a (epoch 2 -> 1) and makes b vanish.
            (
                "UPDATE OR REPLACE leasehold_leases SET name = 'a' WHERE name = 'b'",
                "cannot be renamed",
            ),
            (
                "UPDATE leasehold_leases SET name = 'c' WHERE name = 'b'",
                "cannot be renamed",
            ),
        ],
        Backend::Memory | Backend::MemoryFaultsOff => &[],
    };
    let url = db.url();
    let mut got_through = Vec::new();
    for (sql, refusal) in attacks {
        // Each attack runs in a transaction that is rolled back, so one that gets through does
        // not change what the next one meets.
        let outcome = match backend {
            Backend::Postgres => attack!(sqlx::PgConnection, url.as_deref().unwrap(), sql),
            Backend::Sqlite => attack!(sqlx::SqliteConnection, url.as_deref().unwrap(), sql),
            Backend::Memory | Backend::MemoryFaultsOff => unreachable!(),
        };
        match outcome {
            Ok(rows) => got_through.push(format!("{sql}\n  left rows {rows:?}")),
            Err(e) => assert!(e.contains(refusal), "{sql}: refused with {e:?}"),
        }
    }
    assert!(
        got_through.is_empty(),
        "{backend:?}: these got through:\n{}",
        got_through.join("\n")
    );
    let rows: Vec<_> = s
        .list(None, 10)
        .await
        .unwrap()
        .into_iter()
        .map(|r| (r.name, r.epoch))
        .collect();
    assert_eq!(
        rows,
        vec![("a".into(), Epoch::new(2)), ("b".into(), Epoch::new(1))],
        "{backend:?}"
    );
    assert_eq!(
        s.campaign("a", "g", LONG).await.unwrap().epoch,
        Some(Epoch::new(3)),
        "{backend:?}"
    );
    assert_eq!(
        s.campaign("b", "g", LONG).await.unwrap().epoch,
        Some(Epoch::new(2)),
        "{backend:?}"
    );
}

async fn batch_renew_reports_each_of_1000(backend: Backend) {
    let db = Db::new(backend).await.unwrap();
    let s = db.open().await.unwrap();
    let mut batch = Vec::new();
    let started = Instant::now();
    for i in 0..1000 {
        let name = format!("lease-{i:04}");
        let epoch = s.campaign(&name, "me", LONG).await.unwrap().epoch.unwrap();
        batch.push(renew_req(&name, epoch));
    }
    let acquire = started.elapsed();
    // Some requests must not land: wrong epochs, and names nobody acquired.
    let mut expected: BTreeSet<String> = batch.iter().map(|r| r.name.clone()).collect();
    for r in batch.iter_mut().step_by(97) {
        r.epoch = r.epoch.next();
        expected.remove(&r.name);
    }
    for i in 0..5 {
        batch.push(renew_req(&format!("missing-{i}"), Epoch::new(1)));
    }
    let started = Instant::now();
    let landed: BTreeSet<String> = s
        .renew("me", &batch)
        .await
        .unwrap()
        .landed
        .into_iter()
        .collect();
    let renew = started.elapsed();
    assert_eq!(landed, expected, "{backend:?}");
    assert_eq!(landed.len(), 989);
    println!(
        "{backend:?}: 1,000 campaigns in {acquire:?}; one batched renewal of 1,005 requests in {renew:?}"
    );
    // Another holder's batch renews nothing.
    assert!(s.renew("other", &batch).await.unwrap().landed.is_empty());
}

/// Eight replicas campaign at once, each in one statement, for overlapping sets of 120 leases in
/// their own orders: 40 new names, 40 whose holder's lease expired, 40 another holder holds.
/// Every free lease has exactly one winner, at the previous epoch + 1; the held ones stay as they
/// were (holder, epoch and expiry), and every loser learns how long each held one has left.
async fn batched_campaigns_have_one_winner_per_lease_and_leave_held_leases_alone(backend: Backend) {
    let db = Db::new(backend).await.unwrap();
    let setup = db.open().await.unwrap();
    let name = |kind: &str, i: usize| format!("{kind}-{i:02}");
    let (new, expired, held): (Vec<String>, Vec<String>, Vec<String>) = (
        (0..40).map(|i| name("new", i)).collect(),
        (0..40).map(|i| name("expired", i)).collect(),
        (0..40).map(|i| name("held", i)).collect(),
    );
    let short = setup.campaign_many("old", &expired, SHORT).await.unwrap();
    assert_eq!(short.won.len(), 40, "{backend:?}");
    let kept = setup.campaign_many("keeper", &held, LONG).await.unwrap();
    assert_eq!(kept.won.len(), 40, "{backend:?}");
    // The keeper's rows are written once more by its renewal, to be compared after the race.
    let renew: Vec<RenewRequest> = held.iter().map(|n| renew_req(n, Epoch::new(1))).collect();
    // The held leases' time left is bounded by what the test's own clock saw pass since this
    // renewal, not by a fixed margin: a loaded machine may take seconds to open eight sessions.
    let renewed = std::time::Instant::now();
    assert_eq!(
        setup.renew("keeper", &renew).await.unwrap().landed.len(),
        40
    );
    let before = setup.get(&held).await.unwrap();
    expire(SHORT).await;

    let mut all: Vec<String> = new.iter().chain(&expired).chain(&held).cloned().collect();
    all.sort();
    let mut tasks = Vec::new();
    for i in 0..8usize {
        let store = db.open().await.unwrap();
        // Each replica wants a different three quarters of the leases, in its own order.
        let mut wanted: Vec<String> = all
            .iter()
            .enumerate()
            .filter(|(k, _)| (k + i) % 4 != 0)
            .map(|(_, n)| n.clone())
            .collect();
        let turn = (i * 13) % wanted.len();
        wanted.rotate_left(turn);
        if i % 2 == 1 {
            wanted.reverse();
        }
        tasks.push(tokio::spawn(async move {
            let outcome = store
                .campaign_many(&format!("r{i}"), &wanted, LONG)
                .await
                .unwrap();
            (wanted, outcome)
        }));
    }
    let outcomes = futures_join(tasks).await;
    // A second of slack for the database clock's read against ours.
    let least_left = LONG.saturating_sub(renewed.elapsed() + Duration::from_secs(1));

    let mut winners: std::collections::BTreeMap<String, Vec<(String, Epoch)>> = Default::default();
    for (i, (wanted, outcome)) in outcomes.iter().enumerate() {
        let reported: BTreeSet<&str> = outcome
            .won
            .iter()
            .map(|(n, _)| n.as_str())
            .chain(outcome.lost.iter().map(|(n, _)| n.as_str()))
            .collect();
        let wanted_set: BTreeSet<&str> = wanted.iter().map(String::as_str).collect();
        assert_eq!(
            reported, wanted_set,
            "{backend:?} r{i}: one outcome per lease asked for"
        );
        for (lease, epoch) in &outcome.won {
            winners
                .entry(lease.clone())
                .or_default()
                .push((format!("r{i}"), *epoch));
        }
        for (lease, wait) in &outcome.lost {
            if lease.starts_with("held") {
                let wait = wait.unwrap_or_else(|| panic!("{backend:?} r{i}: no wait for {lease}"));
                assert!(
                    wait >= least_left && wait <= LONG,
                    "{backend:?} r{i}: {lease} has {wait:?} left, at least {least_left:?} expected"
                );
            } else if let Some(wait) = wait {
                assert!(*wait <= LONG, "{backend:?} r{i}: {lease} has {wait:?} left");
            }
        }
    }
    for lease in new.iter().chain(&expired) {
        let won = winners.get(lease).cloned().unwrap_or_default();
        let expected_epoch = Epoch::new(if lease.starts_with("new") { 1 } else { 2 });
        assert_eq!(won.len(), 1, "{backend:?}: {lease} won by {won:?}");
        assert_eq!(won[0].1, expected_epoch, "{backend:?}: {lease}");
        let row = &setup.get(std::slice::from_ref(lease)).await.unwrap()[0];
        assert_eq!(
            (row.holder.as_str(), row.epoch),
            (won[0].0.as_str(), expected_epoch)
        );
    }
    for lease in &held {
        assert!(
            !winners.contains_key(lease),
            "{backend:?}: {lease} was taken"
        );
    }
    let after = setup.get(&held).await.unwrap();
    for (b, a) in before.iter().zip(&after) {
        assert_eq!(
            (&a.name, &a.holder, a.epoch, a.ttl_ms),
            (&b.name, &b.holder, b.epoch, b.ttl_ms),
            "{backend:?}"
        );
        assert!(
            a.expires_in_ms <= b.expires_in_ms,
            "{backend:?}: {a:?} was extended"
        );
    }
    // The keeper still renews every one of them.
    assert_eq!(
        setup.renew("keeper", &renew).await.unwrap().landed.len(),
        40
    );
}

async fn listing_is_paginated(backend: Backend) {
    let db = Db::new(backend).await.unwrap();
    let s = db.open().await.unwrap();
    for i in 0..25 {
        s.campaign(&format!("p{i:02}"), "a", LONG)
            .await
            .unwrap()
            .epoch
            .unwrap();
    }
    let mut seen = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let page = s.list(after.as_deref(), 10).await.unwrap();
        assert!(page.len() <= 10);
        seen.extend(page.iter().map(|r| r.name.clone()));
        if page.len() < 10 {
            break;
        }
        after = page.last().map(|r| r.name.clone());
    }
    let expected: Vec<String> = (0..25).map(|i| format!("p{i:02}")).collect();
    assert_eq!(seen, expected, "{backend:?}");
    let got = s.get(&["p03".into(), "nope".into()]).await.unwrap();
    assert_eq!(got.len(), 1);
    assert!(
        got[0].expires_in_ms > 50_000 && got[0].expires_in_ms <= 60_000,
        "{got:?}"
    );
    s.ping().await.unwrap();
}

async fn group_members_see_each_other_and_the_held_shards_and_lapse_by_the_database_clock(
    backend: Backend,
) {
    let db = Db::new(backend).await.unwrap();
    let (a, b) = (db.open().await.unwrap(), db.open().await.unwrap());
    let shards: Vec<String> = (0..4).map(|i| format!("orders/{i}")).collect();
    a.campaign("orders/1", "a", LONG)
        .await
        .unwrap()
        .epoch
        .unwrap();
    b.campaign("orders/3", "b", SHORT)
        .await
        .unwrap()
        .epoch
        .unwrap();
    // A lease outside the list is not reported, even one whose name looks like a shard.
    a.campaign("orders/9", "a", LONG)
        .await
        .unwrap()
        .epoch
        .unwrap();
    let first = a.heartbeat("orders", "a", &shards, LONG).await.unwrap();
    let ids = |v: &leasehold::lease::GroupView| {
        v.members.iter().map(|m| m.id.clone()).collect::<Vec<_>>()
    };
    assert_eq!(ids(&first), ["a"], "{backend:?}");
    assert!(first.db_now.is_some());
    assert_eq!(
        first.holders,
        [
            ("orders/1".to_string(), "a".to_string()),
            ("orders/3".to_string(), "b".to_string())
        ]
    );
    // b joins with a short ttl, a while after a; a member of another group is not one of this
    // group.
    tokio::time::sleep(Duration::from_millis(50)).await;
    b.heartbeat("orders", "b", &shards, SHORT).await.unwrap();
    b.heartbeat("billing", "c", &[], LONG).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let second = a.heartbeat("orders", "a", &shards, LONG).await.unwrap();
    assert_eq!(ids(&second), ["a", "b"], "{backend:?}");
    let age = |v: &leasehold::lease::GroupView, id: &str| {
        v.members.iter().find(|m| m.id == id).unwrap().member_for
    };
    // a's membership runs on from its first heartbeat; b's is younger.
    assert!(
        age(&second, "a") >= Duration::from_millis(100),
        "{second:?}"
    );
    assert!(age(&second, "b") < age(&second, "a"), "{second:?}");
    // Each row's time left is the ttl it was last heartbeated with, less the time since.
    let left = |v: &leasehold::lease::GroupView, id: &str| {
        v.members.iter().find(|m| m.id == id).unwrap().expires_in
    };
    assert!(
        left(&second, "b") <= SHORT && left(&second, "b") > SHORT / 2,
        "{second:?}"
    );
    assert!(left(&second, "a") > SHORT, "{second:?}");
    // b stops heartbeating: its row and its shard lapse by the database's clock.
    expire(SHORT).await;
    let third = a.heartbeat("orders", "a", &shards, LONG).await.unwrap();
    assert_eq!(ids(&third), ["a"], "{backend:?}");
    assert_eq!(third.holders, [("orders/1".to_string(), "a".to_string())]);
    // b comes back: a new membership, counted from now.
    let back = b.heartbeat("orders", "b", &shards, LONG).await.unwrap();
    assert_eq!(ids(&back), ["a", "b"], "{backend:?}");
    assert!(age(&back, "b") < SHORT, "{back:?}");
    // Leaving takes effect at once, and only for the groups named.
    b.leave(&["orders".to_string()], "b").await.unwrap();
    let fourth = a.heartbeat("orders", "a", &shards, LONG).await.unwrap();
    assert_eq!(ids(&fourth), ["a"], "{backend:?}");
    let billing = a.heartbeat("billing", "a", &[], LONG).await.unwrap();
    assert_eq!(ids(&billing), ["a", "c"], "{backend:?}");
    // Each member's shard count is the length of the list it last heartbeated with.
    let counts =
        |v: &leasehold::lease::GroupView| v.members.iter().map(|m| m.shards).collect::<Vec<_>>();
    assert_eq!(counts(&billing), [Some(0), Some(0)], "{backend:?}");
    b.heartbeat("orders", "b", &shards[..2], LONG)
        .await
        .unwrap();
    let fifth = a.heartbeat("orders", "a", &shards, LONG).await.unwrap();
    assert_eq!(
        counts(&fifth),
        [Some(shards.len() as u32), Some(2)],
        "{backend:?}"
    );
    // Every live member of every group, in group then member order, for the cluster's view.
    let all = a.members().await.unwrap();
    let listed: Vec<(&str, &str, Option<u32>)> = all
        .iter()
        .map(|m| (m.group.as_str(), m.member.as_str(), m.shards))
        .collect();
    assert_eq!(
        listed,
        [
            ("billing", "a", Some(0)),
            ("billing", "c", Some(0)),
            ("orders", "a", Some(shards.len() as u32)),
            ("orders", "b", Some(2)),
        ],
        "{backend:?}"
    );
    assert!(
        all.iter()
            .all(|m| m.expires_in_ms > 0 && m.member_for_ms >= 0),
        "{all:?}"
    );
}

async fn replicas_starting_at_once_migrate_safely(backend: Backend) {
    // Eight replicas open the same brand-new database at the same moment: every one must come up,
    // and the schema must be created exactly once.
    let db = Arc::new(Db::new(backend).await.unwrap());
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let db = db.clone();
            tokio::spawn(async move { db.open().await.map_err(|e| e.to_string()) })
        })
        .collect();
    let stores: Vec<_> = futures_join(tasks)
        .await
        .into_iter()
        .collect::<Result<_, _>>()
        .unwrap();
    let e = stores[3]
        .campaign("m", "a", LONG)
        .await
        .unwrap()
        .epoch
        .unwrap();
    assert_eq!(stores[5].get(&["m".to_string()]).await.unwrap()[0].epoch, e);
}

/// The release listener survives the loss of its connection and reports that it resubscribed.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_listener_reconnects_after_its_connection_is_killed() {
    let db = Db::new(Backend::Postgres).await.unwrap();
    let holder = db.open().await.unwrap();
    let standby = db.open().await.unwrap();
    let stop = tokio_util_token();
    let mut rx = standby.listen_releases(stop.clone()).unwrap();
    let admin = sqlx::PgPool::connect(&db.url().unwrap()).await.unwrap();
    // Wait until the listener is subscribed, then kill its backend.
    let killed = eventually(
        "the listener's backend to be found (backends terminated)",
        Duration::from_secs(10),
        async || {
            let n: i64 = sqlx::query_scalar(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
                  WHERE datname = current_database() AND query LIKE 'LISTEN%'",
            )
            .fetch_one(&admin)
            .await
            .unwrap();
            when(n, |n| *n > 0)
        },
    )
    .await
    .unwrap();
    assert_eq!(killed, 1, "more than one listener's backend");
    let notice = tokio::time::timeout(Duration::from_secs(10), rx.recv())
        .await
        .expect("resubscribed")
        .unwrap();
    assert_eq!(notice, ReleaseNotice::Resubscribed);
    let e = holder
        .campaign("n", "a", LONG)
        .await
        .unwrap()
        .epoch
        .unwrap();
    assert!(holder.release("n", "a", e).await.unwrap());
    let notice = tokio::time::timeout(Duration::from_secs(10), rx.recv())
        .await
        .expect("notification after reconnect")
        .unwrap();
    assert_eq!(notice, ReleaseNotice::Released("n".into()));
    stop.cancel();
}

async fn releasing_many_at_once_releases_only_the_holder_s_at_their_epochs_and_notifies_each(
    backend: Backend,
) {
    let db = Db::new(backend).await.unwrap();
    let holder = db.open().await.unwrap();
    let other = db.open().await.unwrap();
    let stop = tokio_util_token();
    let mut notices = other.listen_releases(stop.clone());
    until_listening(&db).await;
    let names: Vec<String> = (0..5).map(|i| format!("m/{i}")).collect();
    let mut epochs = Vec::new();
    for name in &names[..4] {
        epochs.push(
            holder
                .campaign(name, "a", LONG)
                .await
                .unwrap()
                .epoch
                .unwrap(),
        );
    }
    let theirs = other
        .campaign(&names[4], "b", LONG)
        .await
        .unwrap()
        .epoch
        .unwrap();
    let asked = vec![
        (names[0].clone(), epochs[0]),
        (names[1].clone(), epochs[1]),
        (names[2].clone(), epochs[2].next()),  // a wrong epoch
        (names[4].clone(), theirs),            // another holder's
        ("m/none".to_string(), Epoch::new(1)), // no such lease
    ];
    let mut released = holder.release_many("a", &asked).await.unwrap();
    released.sort();
    assert_eq!(released, names[..2], "{backend:?}");
    if let Some(rx) = notices.as_mut() {
        let mut seen = Vec::new();
        for _ in 0..2 {
            let notice = tokio::time::timeout(Duration::from_secs(5), rx.recv())
                .await
                .expect("release notification")
                .unwrap();
            seen.push(notice);
        }
        seen.sort_by_key(|n| format!("{n:?}"));
        assert_eq!(
            seen,
            [
                ReleaseNotice::Released(names[0].clone()),
                ReleaseNotice::Released(names[1].clone())
            ],
            "{backend:?}"
        );
    }
    for (i, name) in names[..2].iter().enumerate() {
        assert_eq!(
            other.campaign(name, "b", LONG).await.unwrap().epoch,
            Some(epochs[i].next()),
            "{backend:?}: {name} free for the next holder"
        );
    }
    for name in [&names[2], &names[3], &names[4]] {
        assert_eq!(
            holder.campaign(name, "c", LONG).await.unwrap().epoch,
            None,
            "{backend:?}: {name} still held"
        );
    }
    stop.cancel();
}

async fn the_terms_of_a_lease_say_who_held_it_from_when_to_when_and_how_each_ended(
    backend: Backend,
) {
    use leasehold::lease::history::{PRUNE_EVERY, RecordedTerm, TERMS_KEPT, TermEnd};
    let db = Db::new(backend).await.unwrap();
    let s = db.open().await.unwrap();
    let names = ["t".to_string(), "never".to_string()];
    let terms = |per_lease| {
        let s = s.clone();
        let names = names.clone();
        async move {
            let records = s.terms(&names, per_lease).await.unwrap();
            assert!(records.iter().all(|r| r.lease == "t"), "{records:?}");
            records
                .into_iter()
                .map(|r| r.term)
                .collect::<Vec<RecordedTerm>>()
        }
    };
    assert_eq!(terms(10).await, vec![], "{backend:?}: nothing recorded yet");

    let e1 = s.campaign("t", "a", LONG).await.unwrap().epoch.unwrap();
    let now = terms(10).await;
    assert_eq!(
        (now.len(), now[0].epoch, now[0].holder.as_str()),
        (1, e1, "a")
    );
    assert_eq!(
        (now[0].end, now[0].ended_ms_ago),
        (None, None),
        "{backend:?}: open"
    );
    // Each way a term ends: released by its holder, forced by an operator, expired and taken over.
    assert!(s.release("t", "a", e1).await.unwrap());
    let released = terms(1).await;
    assert_eq!(
        (released[0].epoch, released[0].end),
        (e1, Some(TermEnd::Released)),
        "{backend:?}: ended by its release, before any campaign came"
    );
    let e2 = s.campaign("t", "b", LONG).await.unwrap().epoch.unwrap();
    assert!(s.force_release("t").await.unwrap().is_some());
    let e3 = s.campaign("t", "c", SHORT).await.unwrap().epoch.unwrap();
    expire(SHORT).await;
    let lapsed = terms(1).await;
    assert_eq!(
        lapsed[0].end,
        Some(TermEnd::Expired),
        "{backend:?}: ended when its row expired, before any campaign came"
    );
    let e4 = s.campaign("t", "d", LONG).await.unwrap().epoch.unwrap();

    let all = terms(10).await;
    let seen: Vec<_> = all
        .iter()
        .map(|t| (t.epoch, t.holder.as_str(), t.end))
        .collect();
    assert_eq!(
        seen,
        vec![
            (e4, "d", None),
            (e3, "c", Some(TermEnd::Expired)),
            (e2, "b", Some(TermEnd::Forced)),
            (e1, "a", Some(TermEnd::Released)),
        ],
        "{backend:?}: newest first"
    );
    for pair in all.windows(2) {
        let (newer, older) = (&pair[0], &pair[1]);
        let ended = older.ended_ms_ago.unwrap();
        assert!(
            newer.started_ms_ago <= ended && ended <= older.started_ms_ago,
            "{backend:?}: each term ends after it starts and before the next starts: {all:?}"
        );
    }
    // The expired term ended when its row expired, a ttl after it began, not at the takeover.
    let lasted = all[1].started_ms_ago - all[1].ended_ms_ago.unwrap();
    let ttl = i64::try_from(SHORT.as_millis()).unwrap();
    assert!(
        (lasted - ttl).abs() <= 50,
        "{backend:?}: lasted {lasted} ms of {ttl}"
    );
    let newest: Vec<_> = terms(2).await.iter().map(|t| t.epoch).collect();
    assert_eq!(
        newest,
        [e4, e3],
        "{backend:?}: at most per_lease, the newest"
    );

    // A lease's oldest terms are pruned: at least the newest TERMS_KEPT stay, fewer than
    // TERMS_KEPT + PRUNE_EVERY. Batched releases end their terms too.
    let mut epoch = e4;
    for _ in 0..TERMS_KEPT + PRUNE_EVERY {
        assert_eq!(
            s.release_many("d", &[("t".into(), epoch)]).await.unwrap(),
            ["t"]
        );
        epoch = s.campaign("t", "d", LONG).await.unwrap().epoch.unwrap();
    }
    let kept = terms(TERMS_KEPT * 4).await;
    assert!(
        (TERMS_KEPT..TERMS_KEPT + PRUNE_EVERY).contains(&(kept.len() as u32)),
        "{backend:?}: {} kept",
        kept.len()
    );
    assert_eq!((kept[0].epoch, kept[0].end), (epoch, None));
    assert!(
        kept[1..].iter().all(|t| t.end == Some(TermEnd::Released)),
        "{kept:?}"
    );
    let epochs: Vec<i64> = kept.iter().map(|t| t.epoch.get()).collect();
    let newest: Vec<i64> = (0..kept.len() as i64).map(|i| epoch.get() - i).collect();
    assert_eq!(epochs, newest, "{backend:?}: the newest kept, none skipped");

    // A batched campaign opens a term for each lease it wins, and none for those it does not.
    let batch: Vec<String> = ["m1", "m2", "t"].map(String::from).to_vec();
    let won = s.campaign_many("e", &batch, LONG).await.unwrap().won;
    assert_eq!(
        won.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(),
        ["m1", "m2"]
    );
    let opened = s.terms(&batch, 10).await.unwrap();
    let by_lease: Vec<_> = opened
        .iter()
        .map(|r| (r.lease.as_str(), r.term.holder.as_str()))
        .collect();
    assert_eq!(&by_lease[..2], [("m1", "e"), ("m2", "e")], "{backend:?}");
    assert_eq!(
        opened.iter().filter(|r| r.lease == "t").count(),
        TERMS_KEPT.min(10) as usize
    );
}

/// The next notice of a release listener, if the backend has one.
async fn next_notice(
    notices: &mut Option<tokio::sync::mpsc::Receiver<ReleaseNotice>>,
) -> Option<ReleaseNotice> {
    let rx = notices.as_mut()?;
    let notice = tokio::time::timeout(Duration::from_secs(5), rx.recv())
        .await
        .expect("a notice")
        .unwrap();
    Some(notice)
}

async fn a_handoff_request_reaches_the_holder_and_its_release_reserves_the_lease_for_the_named_replica(
    backend: Backend,
) {
    // Holder ids as replicas write them: the replica id and a suffix per process start.
    let (a, b, c) = ("a-0000000a", "b-0000000b", "c-0000000c");
    let short = |name: &str, epoch| RenewRequest {
        name: name.to_string(),
        epoch,
        ttl: SHORT,
    };
    let db = Db::new(backend).await.unwrap();
    let s = db.open().await.unwrap();
    let admin = db.open().await.unwrap();
    let stop = tokio_util_token();
    let mut notices = s.listen_releases(stop.clone());
    until_listening(&db).await;
    assert_eq!(
        admin.request_handoff("h", None).await.unwrap(),
        None,
        "{backend:?}: no such lease"
    );

    // Asked with --to b: the holder hears of it (a notice, and its next renewal), and its
    // release reserves the lease for b.
    let e = s.campaign("h", a, SHORT).await.unwrap().epoch.unwrap();
    let asked = admin
        .request_handoff("h", Some("b"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!((asked.holder.as_str(), asked.epoch), (a, e), "{backend:?}");
    if let Some(notice) = next_notice(&mut notices).await {
        let want = ReleaseNotice::HandoffRequested {
            lease: "h".into(),
            epoch: e,
        };
        assert_eq!(notice, want, "{backend:?}");
    }
    let renewed = s.renew(a, &[short("h", e)]).await.unwrap();
    assert_eq!(
        (renewed.landed, renewed.handoffs),
        (names(&["h"]), names(&["h"]))
    );
    assert!(s.release("h", a, e).await.unwrap());
    if let Some(notice) = next_notice(&mut notices).await {
        assert_eq!(notice, ReleaseNotice::Released("h".into()), "{backend:?}");
    }
    let lost = s.campaign("h", c, LONG).await.unwrap();
    assert_eq!(
        lost.epoch, None,
        "{backend:?}: reserved for b, c must not win"
    );
    let wait = lost.wait.expect("how long the reservation lasts");
    assert!(wait > SHORT / 2 && wait <= SHORT, "{backend:?}: {wait:?}");
    assert_eq!(
        s.campaign("h", b, SHORT).await.unwrap().epoch,
        Some(e.next()),
        "{backend:?}: the named replica wins at once"
    );
    // The request was for a's term: b's renewal carries none.
    let renewed = s.renew(b, &[short("h", e.next())]).await.unwrap();
    assert!(renewed.handoffs.is_empty(), "{backend:?}: {renewed:?}");

    // Without --to, anyone may take it at once after the release.
    admin.request_handoff("h", None).await.unwrap().unwrap();
    let renewed = s.renew(b, &[short("h", e.next())]).await.unwrap();
    assert_eq!(renewed.handoffs, names(&["h"]), "{backend:?}");
    assert!(s.release("h", b, e.next()).await.unwrap());
    assert_eq!(
        s.campaign("h", c, SHORT).await.unwrap().epoch,
        Some(Epoch::new(e.get() + 2))
    );

    // A reservation lapses after one ttl of the lease: then anyone's campaign wins.
    admin
        .request_handoff("h", Some("b-0000000b"))
        .await
        .unwrap()
        .unwrap();
    assert!(s.release("h", c, Epoch::new(e.get() + 2)).await.unwrap());
    assert_eq!(s.campaign("h", a, SHORT).await.unwrap().epoch, None);
    expire(SHORT).await;
    assert_eq!(
        s.campaign("h", a, SHORT).await.unwrap().epoch,
        Some(Epoch::new(e.get() + 3))
    );

    // A forced release ends a handoff under way: nobody is reserved the lease.
    admin
        .request_handoff("h", Some("b"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        admin.force_release("h").await.unwrap(),
        Some((a.into(), Epoch::new(e.get() + 3)))
    );
    assert_eq!(
        s.campaign("h", c, SHORT).await.unwrap().epoch,
        Some(Epoch::new(e.get() + 4))
    );
    stop.cancel();
}

fn names(names: &[&str]) -> Vec<String> {
    names.iter().map(|n| n.to_string()).collect()
}

macro_rules! conformance {
    ($($test:ident),* $(,)?) => {
        mod memory { $( #[tokio::test(flavor = "multi_thread", worker_threads = 4)] async fn $test() { super::$test(super::Backend::Memory).await } )* }
        // The simulator's fault layer over the memory store, its faults off: what the simulator
        // runs against cannot drift from the stores that ship.
        mod memory_faults_off { $( #[tokio::test(flavor = "multi_thread", worker_threads = 4)] async fn $test() { super::$test(super::Backend::MemoryFaultsOff).await } )* }
        mod sqlite { $( #[tokio::test(flavor = "multi_thread", worker_threads = 4)] async fn $test() { super::$test(super::Backend::Sqlite).await } )* }
        mod postgres { $( #[tokio::test(flavor = "multi_thread", worker_threads = 4)] async fn $test() { super::$test(super::Backend::Postgres).await } )* }
    };
}

conformance!(
    concurrent_campaigns_have_one_winner,
    epochs_strictly_increase,
    stale_epoch_cannot_renew,
    release_lets_a_standby_in_at_once,
    releasing_many_at_once_releases_only_the_holder_s_at_their_epochs_and_notifies_each,
    forced_release_expires_whoever_holds_and_keeps_the_epoch,
    rows_are_never_deleted,
    truncates_replaces_and_renames_cannot_reset_an_epoch,
    batch_renew_reports_each_of_1000,
    batched_campaigns_have_one_winner_per_lease_and_leave_held_leases_alone,
    listing_is_paginated,
    replicas_starting_at_once_migrate_safely,
    group_members_see_each_other_and_the_held_shards_and_lapse_by_the_database_clock,
    the_terms_of_a_lease_say_who_held_it_from_when_to_when_and_how_each_ended,
    a_handoff_request_reaches_the_holder_and_its_release_reserves_the_lease_for_the_named_replica,
);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_sessions_give_up_before_the_host_does_and_commit_durably() {
    use leasehold::lease::DatabaseUrl;
    use leasehold::lease::postgres::PostgresStore;
    let url = leasehold_tests::pg::server()
        .fresh_database()
        .await
        .unwrap();
    // The default store timeout (ttl 15 s / 5 = 3 s): the server stops a tenth sooner.
    let connect = |url: String| async move {
        PostgresStore::connect(
            &DatabaseUrl::parse(&url).unwrap(),
            Duration::from_secs(10),
            Duration::from_secs(3),
        )
        .await
        .unwrap()
    };
    let store = connect(url.clone()).await;
    for setting in [
        "statement_timeout",
        "lock_timeout",
        "idle_in_transaction_session_timeout",
    ] {
        assert_eq!(store.show(setting).await.unwrap(), "2700ms", "{setting}");
    }
    assert_eq!(store.show("synchronous_commit").await.unwrap(), "on");
    // Longer values in the URL's options cannot let a statement outlive the host's wait, nor an
    // asynchronous commit let a crash forget an epoch already handed out.
    let store = connect(format!(
        "{url}?options=-c%20statement_timeout%3D1h%20-c%20lock_timeout%3D0%20-c%20synchronous_commit%3Doff"
    ))
    .await;
    assert_eq!(store.show("statement_timeout").await.unwrap(), "2700ms");
    assert_eq!(store.show("lock_timeout").await.unwrap(), "2700ms");
    assert_eq!(store.show("synchronous_commit").await.unwrap(), "on");
}

/// A standby's campaign takes no lock on a row someone holds: with the holder's row locked by
/// another session (a plugin's fenced write holds `FOR SHARE` until it commits; here an operator's
/// `FOR UPDATE`), the batch answers at once, reporting the held lease's expiry and winning the
/// free one. A campaign that locked every row it looked at would queue behind that session, and
/// the holder's skip-locked renewal would find its own row busy behind the standby.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_batched_campaign_never_waits_for_a_held_row_s_lock() {
    let db = Db::new(Backend::Postgres).await.unwrap();
    let s = db.open().await.unwrap();
    assert_eq!(
        s.campaign("held", "keeper", LONG).await.unwrap().epoch,
        Some(Epoch::new(1))
    );
    let tx = lock_lease_row(&db.url().unwrap(), "held", RowLock::Update)
        .await
        .unwrap();
    let started = Instant::now();
    let names = ["free".to_string(), "held".to_string()];
    let outcome = s.campaign_many("standby", &names, LONG).await.unwrap();
    let took = started.elapsed();
    assert_eq!(outcome.won, [("free".to_string(), Epoch::new(1))]);
    let wait = outcome.one("held").wait.unwrap();
    assert!(wait > Duration::from_secs(50) && wait <= LONG, "{wait:?}");
    // Far below the store's 9 s lock timeout: it never queued for the lock.
    assert!(
        took < Duration::from_secs(2),
        "the campaign waited {took:?}"
    );
    tx.rollback().await.unwrap();
}

/// A free lease whose row another session keeps locked (a fenced transaction checked early and
/// left open holds it `FOR KEY SHARE`; here `FOR SHARE`) is left out of the campaign, not waited
/// for: the batch wins the other free leases at once, and reports the locked one with the server
/// process holding the lock. The row is untouched, and won once the lock goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_campaign_skips_a_free_row_another_session_keeps_locked_and_wins_the_rest() {
    let db = Db::new(Backend::Postgres).await.unwrap();
    let s = db.open().await.unwrap();
    for name in ["a", "c"] {
        assert_eq!(
            s.campaign(name, "gone", LONG).await.unwrap().epoch,
            Some(Epoch::new(1))
        );
        s.force_release(name).await.unwrap();
    }
    let tx = lock_lease_row(&db.url().unwrap(), "a", RowLock::Share)
        .await
        .unwrap();
    let mut probe = <sqlx::PgConnection as sqlx::Connection>::connect(&db.url().unwrap())
        .await
        .unwrap();
    let lockers: Vec<i32> = sqlx::query_scalar(
        "SELECT pid FROM pg_stat_activity
          WHERE datname = current_database() AND state = 'idle in transaction'",
    )
    .fetch_all(&mut probe)
    .await
    .unwrap();
    let started = Instant::now();
    let names = ["a".to_string(), "b".to_string(), "c".to_string()];
    let mut outcome = s.campaign_many("standby", &names, LONG).await.unwrap();
    let took = started.elapsed();
    outcome.won.sort();
    assert_eq!(
        outcome.won,
        [
            ("b".to_string(), Epoch::new(1)),
            ("c".to_string(), Epoch::new(2))
        ],
        "{outcome:?}"
    );
    assert_eq!(outcome.locked, [("a".to_string(), lockers)]);
    assert_eq!(outcome.one("a").epoch, None);
    assert!(
        took < Duration::from_secs(2),
        "the campaign waited {took:?}"
    );
    tx.rollback().await.unwrap();
    let again = s.campaign_many("standby", &names[..1], LONG).await.unwrap();
    assert_eq!(again.won, [("a".to_string(), Epoch::new(2))]);
    assert!(again.locked.is_empty());
}

/// The store's sessions search the lease schema alone, whatever the server's default path.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_sessions_search_the_lease_schema_alone() {
    use leasehold::lease::DatabaseUrl;
    use leasehold::lease::postgres::PostgresStore;
    let url = leasehold_tests::pg::server()
        .fresh_database()
        .await
        .unwrap();
    let store = PostgresStore::connect(
        &DatabaseUrl::parse(&url).unwrap(),
        Duration::from_secs(10),
        Duration::from_secs(3),
    )
    .await
    .unwrap();
    assert_eq!(store.show("search_path").await.unwrap(), "\"public\"");
}

/// A batched renewal neither waits for nor skips silently a row another session has locked: with
/// one of three rows held `FOR SHARE` (a plugin's fenced write in flight), the other two are
/// renewed at once, the locked one comes back busy (still ours, for a renewal of its own), a row
/// lost to a newer epoch comes back as neither, and nothing of the locked row changed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_batched_renewal_reports_a_locked_row_busy_and_renews_the_rest() {
    let db = Db::new(Backend::Postgres).await.unwrap();
    let s = db.open().await.unwrap();
    let mut epochs = Vec::new();
    for name in ["a", "b", "c", "gone"] {
        epochs.push(s.campaign(name, "me", LONG).await.unwrap().epoch.unwrap());
    }
    s.force_release("gone").await.unwrap();
    assert_eq!(
        s.campaign("gone", "other", LONG).await.unwrap().epoch,
        Some(epochs[3].next())
    );
    let before = s.get(&["b".into()]).await.unwrap();
    let tx = lock_lease_row(&db.url().unwrap(), "b", RowLock::Share)
        .await
        .unwrap();
    let started = Instant::now();
    let requests: Vec<RenewRequest> = ["a", "b", "c", "gone"]
        .iter()
        .zip(&epochs)
        .map(|(name, epoch)| renew_req(name, *epoch))
        .collect();
    let renewed = s.renew("me", &requests).await.unwrap();
    let took = started.elapsed();
    let mut landed = renewed.landed.clone();
    landed.sort();
    assert_eq!(landed, ["a", "c"]);
    assert_eq!(renewed.busy, ["b"]);
    assert!(renewed.db_now.is_some());
    assert!(took < Duration::from_secs(2), "the renewal waited {took:?}");
    tx.rollback().await.unwrap();
    let after = s.get(&["b".into()]).await.unwrap();
    assert_eq!(
        (&after[0].holder, after[0].epoch),
        (&before[0].holder, before[0].epoch)
    );
    assert!(
        after[0].expires_in_ms <= before[0].expires_in_ms,
        "the locked row was renewed: {before:?} then {after:?}"
    );
    // With nothing locked, every lease still ours lands and none is busy.
    let renewed = s.renew("me", &requests).await.unwrap();
    let mut landed = renewed.landed.clone();
    landed.sort();
    assert_eq!(landed, ["a", "b", "c"]);
    assert!(renewed.busy.is_empty(), "{:?}", renewed.busy);
}

/// Each connection of the PostgreSQL store warms up as it opens (its first winning campaign would
/// otherwise load PL/pgSQL and compile the row guard on the handoff's path), and the warm-up runs
/// the lease statements on no lease at all: a store opened on a live table leaves no row, no
/// changed incarnation and no release notification behind, and its first campaign still wins.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_warming_up_a_connection_leaves_no_row_term_incarnation_or_notification() {
    use sqlx::Connection;
    let db = Db::new(Backend::Postgres).await.unwrap();
    let url = db.url().unwrap();
    let first = db.open().await.unwrap();
    let epoch = first
        .campaign("a", "me", LONG)
        .await
        .unwrap()
        .epoch
        .unwrap();
    let mut listener = sqlx::postgres::PgListener::connect(&url).await.unwrap();
    listener
        .listen(leasehold::lease::postgres::RELEASE_CHANNEL)
        .await
        .unwrap();
    let mut conn = sqlx::PgConnection::connect(&url).await.unwrap();
    let incarnation = "SELECT json_agg(i)::text FROM leasehold_incarnation AS i";
    let before: String = sqlx::query_scalar(incarnation)
        .fetch_one(&mut conn)
        .await
        .unwrap();
    let second = db.open().await.unwrap();
    assert_eq!(
        second.campaign("b", "you", LONG).await.unwrap().epoch,
        Some(Epoch::new(1))
    );
    let after: String = sqlx::query_scalar(incarnation)
        .fetch_one(&mut conn)
        .await
        .unwrap();
    assert_eq!(after, before, "the incarnation changed");
    let rows: Vec<String> = sqlx::query_scalar("SELECT name FROM leasehold_leases ORDER BY name")
        .fetch_all(&mut conn)
        .await
        .unwrap();
    assert_eq!(rows, ["a", "b"]);
    let terms: Vec<String> = sqlx::query_scalar("SELECT name FROM leasehold_terms ORDER BY name")
        .fetch_all(&mut conn)
        .await
        .unwrap();
    assert_eq!(terms, ["a", "b"], "a warm-up left a term");
    assert_eq!(
        first.get(&["a".into()]).await.unwrap()[0].epoch,
        epoch,
        "lease a moved"
    );
    let heard = tokio::time::timeout(Duration::from_millis(300), listener.recv()).await;
    assert!(heard.is_err(), "a warm-up notified: {heard:?}");
}

/// SQLite times count on the machine's boot clock, which starts again at zero after a reboot: a
/// row written in an earlier boot (here: its boot id changed, its expiry far ahead) has expired,
/// whatever its numbers say. Without the boot id, every lease would stay taken for as long as the
/// machine had been up before the reboot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_rows_of_an_earlier_boot_have_expired() {
    let db = Db::new(Backend::Sqlite).await.unwrap();
    let s = db.open().await.unwrap();
    let e = s.campaign("b", "a", LONG).await.unwrap().epoch.unwrap();
    assert!(s.get(&["b".into()]).await.unwrap()[0].is_held());
    let mut conn = <sqlx::SqliteConnection as sqlx::Connection>::connect(&db.url().unwrap())
        .await
        .unwrap();
    sqlx::query(
        "UPDATE leasehold_leases SET boot = 'an-earlier-boot', expires_at_ms = 9000000000000",
    )
    .execute(&mut conn)
    .await
    .unwrap();
    let row = &s.get(&["b".into()]).await.unwrap()[0];
    assert!(!row.is_held(), "{row:?}");
    assert!(
        s.renew("a", &[renew_req("b", e)])
            .await
            .unwrap()
            .landed
            .is_empty(),
        "a lease of an earlier boot was renewed"
    );
    assert_eq!(
        s.campaign("b", "c", LONG).await.unwrap().epoch,
        Some(e.next())
    );
}
