//! The lease database changes incarnation (docs/ARCHITECTURE.md §9.2): a promoted standby may have
//! missed the old primary's last renewals and campaigns, so once a campaign sees the new system
//! identifier or timeline, no lease is taken for a full ttl and every epoch issued is above any
//! issued before. First on the store, with the recorded incarnation rewritten to look like another;
//! then with a real streaming standby promoted while its primary is killed.

#![allow(clippy::unwrap_used, missing_docs)]

use leasehold::lease::Epoch;
use std::time::Duration;

use leasehold::lease::LeaseStore;
use leasehold::lease::store::RenewRequest;
use leasehold_tests::stores::{Backend, Db};

const TTL: Duration = Duration::from_millis(1_500);

/// Makes the database believe its leases were last campaigned in another incarnation, as a
/// promoted standby does (its rows came from the old primary's timeline).
async fn forget_incarnation(url: &str) {
    let pool = sqlx::PgPool::connect(url).await.unwrap();
    sqlx::query("UPDATE leasehold_incarnation SET timeline = timeline - 1")
        .execute(&pool)
        .await
        .unwrap();
    pool.close().await;
}

#[tokio::test]
async fn after_a_change_of_incarnation_no_lease_is_taken_for_a_ttl_and_epochs_jump_above_all_before()
 {
    let db = Db::new(Backend::Postgres).await.unwrap();
    let (a, b) = (db.open().await.unwrap(), db.open().await.unwrap());
    let url = db.url().unwrap();

    // Before any change: campaigns work as ever, epochs count from 1.
    let won = a.campaign("held", "a", TTL).await.unwrap();
    assert_eq!((won.epoch, won.held_off_for), (Some(Epoch::new(1)), None));
    let won = a.campaign("expiring", "a", TTL).await.unwrap();
    assert_eq!(won.epoch, Some(Epoch::new(1)));

    forget_incarnation(&url).await;
    // The first campaign that sees the change records it and wins nothing, even for a lease
    // nobody has ever held (the lost history may have handed it out).
    let first = b.campaign("never-held", "b", TTL).await.unwrap();
    assert_eq!(first.epoch, None);
    let held_off = first.held_off_for.expect("the change holds campaigns off");
    assert!(
        held_off >= TTL - Duration::from_millis(50) && held_off <= TTL,
        "{held_off:?}"
    );

    // A holder keeps its lease: its renewal lands where the new incarnation still shows it.
    let renewal = RenewRequest {
        name: "held".into(),
        epoch: Epoch::new(1),
        ttl: TTL,
    };
    let renewed = a.renew("a", std::slice::from_ref(&renewal)).await.unwrap();
    assert_eq!(renewed.landed, vec!["held".to_string()]);

    // Past the expiry of `expiring`, but within the hold-off: still nothing to win.
    tokio::time::sleep(TTL / 2).await;
    let early = b.campaign("expiring", "b", TTL).await.unwrap();
    assert_eq!(early.epoch, None);
    assert!(early.held_off_for.is_some_and(|d| d < held_off));

    // A full ttl after the change was seen: epochs resume above everything issued before.
    let renewed = a.renew("a", std::slice::from_ref(&renewal)).await.unwrap();
    assert_eq!(renewed.landed, vec!["held".to_string()]);
    tokio::time::sleep(early.held_off_for.unwrap()).await;
    let late = b.campaign("expiring", "b", TTL).await.unwrap();
    let epoch = late.epoch.expect("taken once the hold-off is over");
    assert!(
        epoch > Epoch::new(1 << 32),
        "epoch {epoch} must clear the floor"
    );
    let fresh = b.campaign("never-held", "b", TTL).await.unwrap();
    assert!(fresh.epoch.unwrap() > Epoch::new(1 << 32));
    // The holder that renewed through the change still holds at its epoch.
    assert_eq!(b.campaign("held", "b", TTL).await.unwrap().epoch, None);
}

#[tokio::test]
async fn the_recorded_incarnation_cannot_be_removed_or_its_floor_lowered() {
    let db = Db::new(Backend::Postgres).await.unwrap();
    let store = db.open().await.unwrap();
    store.campaign("x", "a", TTL).await.unwrap();
    let pool = sqlx::PgPool::connect(&db.url().unwrap()).await.unwrap();
    for statement in [
        "DELETE FROM leasehold_incarnation",
        "TRUNCATE leasehold_incarnation",
        "UPDATE leasehold_incarnation SET epoch_floor = epoch_floor - 1",
    ] {
        let err = sqlx::query(statement).execute(&pool).await.unwrap_err();
        assert!(
            err.to_string().contains("cannot"),
            "{statement} must be refused: {err}"
        );
    }
}

/// A lease store on `url`, as a replica would open it.
async fn store_on(url: &str) -> std::sync::Arc<dyn LeaseStore> {
    let url = leasehold::lease::DatabaseUrl::parse(url).unwrap();
    let wait = Duration::from_secs(10);
    leasehold::lease::open_store(&url, wait, wait)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    given_server,
    ignore = "DATABASE_URL is set, and this test kills and promotes PostgreSQL servers of its own instead of using it"
)]
async fn a_promoted_standby_that_missed_a_campaign_issues_no_epoch_twice() {
    leasehold_tests::pg::needs_own_server("kills and promotes servers of its own");
    let primary = leasehold_tests::pg::Postgres::start_private(&[]).unwrap();
    let db = primary.fresh_database().await.unwrap();
    let name = db.rsplit('/').next().unwrap().to_string();
    let a = store_on(&db).await;
    let standby = primary.start_standby().unwrap();
    assert_eq!(
        a.campaign("x", "a", TTL).await.unwrap().epoch,
        Some(Epoch::new(1))
    );
    standby.wait_for_replay(&db).await.unwrap();

    // The standby stops receiving; the primary goes on: a campaign it will never see, and a
    // renewal it will never see.
    standby.detach_standby().await.unwrap();
    assert_eq!(
        a.campaign("y", "a", TTL).await.unwrap().epoch,
        Some(Epoch::new(1))
    );
    let renewal = RenewRequest {
        name: "x".into(),
        epoch: Epoch::new(1),
        ttl: TTL,
    };
    assert_eq!(a.renew("a", &[renewal]).await.unwrap().landed, ["x"]);

    primary.kill().unwrap();
    standby.promote().unwrap();
    let b = store_on(&standby.url_of(&name)).await;
    // Without the hold-off, `y` would go to b at epoch 1 at once: the epoch `a` holds it at.
    let first = b.campaign("y", "b", TTL).await.unwrap();
    assert_eq!(first.epoch, None, "the change must hold campaigns off");
    let hold = first.held_off_for.unwrap();
    tokio::time::sleep(hold).await;
    let epoch = b.campaign("y", "b", TTL).await.unwrap().epoch.unwrap();
    assert!(
        epoch > Epoch::new(1 << 32),
        "epoch {epoch} was issued before the failover"
    );
    let epoch = b.campaign("x", "b", TTL).await.unwrap().epoch.unwrap();
    assert!(
        epoch > Epoch::new(1 << 32),
        "epoch {epoch} was issued before the failover"
    );
    standby.kill().unwrap();
}
