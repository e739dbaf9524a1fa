#![allow(clippy::unwrap_used)]
//! The in-memory store's faults, each as the PostgreSQL store meets it: a failover that loses the
//! last commits (docs/ARCHITECTURE.md §9.2) and a row another transaction keeps locked (§5.3).
//! Under paused tokio time, the store's clock.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use rand::{Rng, SeedableRng};

use super::*;
use crate::seams;

const TTL: Duration = Duration::from_secs(3);
const FLOOR: Epoch = Epoch::new(1 << 32);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn names(names: &[&str]) -> Vec<String> {
    names.iter().map(|n| n.to_string()).collect()
}

fn renewal(name: &str, epoch: Epoch) -> RenewRequest {
    RenewRequest {
        name: name.to_string(),
        epoch,
        ttl: TTL,
    }
}

async fn won(store: &MemoryStore, name: &str, holder: &str) -> Epoch {
    let campaigned = store.campaign(name, holder, TTL).await.unwrap();
    campaigned
        .epoch
        .unwrap_or_else(|| panic!("{name} not won: {campaigned:?}"))
}

async fn record(store: &MemoryStore, name: &str) -> Option<LeaseRecord> {
    store.get(&names(&[name])).await.unwrap().pop()
}

/// Campaigns until the hold-off of a failover is over, for a test about what follows it.
async fn sit_out_the_hold_off(store: &MemoryStore) {
    let seen = store.campaign("-", "-", TTL).await.unwrap();
    tokio::time::sleep(seen.held_off_for.unwrap_or_default()).await;
}

// A failover that loses the last commits.

#[tokio::test(start_paused = true)]
async fn a_failover_puts_back_the_tables_as_they_were_before_the_lost_commits() {
    let store = MemoryStore::new();
    let a = won(&store, "a", "me").await;
    won(&store, "b", "me").await;
    store
        .heartbeat("g", "me", &names(&["a"]), TTL)
        .await
        .unwrap();
    store.request_handoff("a", None).await.unwrap().unwrap();
    store.fail_over(2);
    // The heartbeat and the handoff request are lost; both campaigns kept.
    assert!(record(&store, "b").await.unwrap().is_held());
    assert!(store.members().await.unwrap().is_empty());
    let renewed = store.renew("me", &[renewal("a", a)]).await.unwrap();
    assert_eq!(renewed.landed, names(&["a"]));
    assert!(renewed.handoffs.is_empty(), "{renewed:?}");
}

#[tokio::test(start_paused = true)]
async fn calls_that_write_nothing_are_no_commits_a_failover_can_lose() {
    let store = MemoryStore::new();
    won(&store, "a", "me").await;
    // A lost campaign, a refused renewal and release, a read: nothing written.
    assert_eq!(store.campaign("a", "you", TTL).await.unwrap().epoch, None);
    let renewed = store
        .renew("you", &[renewal("a", Epoch::new(1))])
        .await
        .unwrap();
    assert!(renewed.landed.is_empty());
    assert!(!store.release("a", "you", Epoch::new(1)).await.unwrap());
    store.get(&names(&["a"])).await.unwrap();
    won(&store, "b", "me").await;
    store.fail_over(1);
    assert!(record(&store, "a").await.is_some());
    assert_eq!(record(&store, "b").await, None);
}

#[tokio::test(start_paused = true)]
async fn a_failover_past_the_journal_goes_back_to_the_oldest_state_it_keeps() {
    let store = MemoryStore::new();
    let commits = FAILOVER_CAN_LOSE + 6;
    for i in 0..commits {
        won(&store, &format!("l{i}"), "me").await;
    }
    store.fail_over(usize::MAX);
    let kept: Vec<String> = store
        .list(None, 1_000)
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.name)
        .collect();
    let mut expected: Vec<String> = (0..6).map(|i| format!("l{i}")).collect();
    expected.sort();
    assert_eq!(kept, expected);
}

#[tokio::test(start_paused = true)]
async fn the_first_campaign_after_a_failover_records_it_and_wins_nothing_not_even_a_lease_nobody_held()
 {
    let store = MemoryStore::new();
    let long = Duration::from_secs(10);
    store.campaign("long", "me", long).await.unwrap();
    store.fail_over(0);
    let first = store
        .campaign_many("you", &names(&["long", "new"]), TTL)
        .await
        .unwrap();
    assert!(first.won.is_empty(), "{first:?}");
    // The hold-off of each lease is the longer of its recorded ttl and the campaign's.
    assert_eq!(first.held_off_for, Some(long));
    assert_eq!(
        first.lost,
        [
            ("long".to_string(), Some(long)),
            ("new".to_string(), Some(TTL))
        ]
    );
    // The change is recorded once: the next campaign's hold-off counts from the first.
    tokio::time::sleep(ms(500)).await;
    let next = store.campaign("new", "you", TTL).await.unwrap();
    assert_eq!((next.epoch, next.held_off_for), (None, Some(TTL - ms(500))));
}

#[tokio::test(start_paused = true)]
async fn campaigns_after_a_failover_wait_the_longer_of_the_recorded_and_their_own_ttl_from_when_it_was_seen()
 {
    let store = MemoryStore::new();
    let (long, short) = (Duration::from_secs(10), Duration::from_secs(1));
    for (name, ttl) in [("long", long), ("short", short)] {
        store.campaign(name, "me", ttl).await.unwrap();
        store.release(name, "me", Epoch::new(1)).await.unwrap();
    }
    store.fail_over(0);
    // Seen two seconds after the failover: the hold-off counts from then.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let all = names(&["long", "short", "new"]);
    let seen = store.campaign_many("you", &all, TTL).await.unwrap();
    assert_eq!(seen.held_off_for, Some(long));
    tokio::time::sleep(TTL).await;
    let mut after_own_ttl = store.campaign_many("you", &all, TTL).await.unwrap();
    after_own_ttl.won.sort();
    assert_eq!(
        after_own_ttl.won,
        [
            ("new".to_string(), FLOOR.next()),
            ("short".to_string(), FLOOR.next())
        ]
    );
    assert_eq!(after_own_ttl.lost, [("long".to_string(), Some(long - TTL))]);
    assert_eq!(after_own_ttl.held_off_for, Some(long - TTL));
    tokio::time::sleep(long - TTL).await;
    assert_eq!(won(&store, "long", "you").await, FLOOR.next());
}

#[tokio::test(start_paused = true)]
async fn a_failover_that_lost_a_campaign_never_hands_its_epoch_out_again() {
    let store = MemoryStore::new();
    assert_eq!(won(&store, "x", "me").await, Epoch::new(1));
    store.fail_over(1);
    // `me` runs on at epoch 1, which the new primary never saw handed out.
    let first = store.campaign("x", "you", TTL).await.unwrap();
    assert_eq!(first.epoch, None);
    tokio::time::sleep(first.held_off_for.unwrap()).await;
    let epoch = won(&store, "x", "you").await;
    assert!(
        epoch >= FLOOR,
        "epoch {epoch} may have been handed out before"
    );
    let renewed = store
        .renew("me", &[renewal("x", Epoch::new(1))])
        .await
        .unwrap();
    assert!(renewed.landed.is_empty());
}

#[tokio::test(start_paused = true)]
async fn renewals_and_releases_during_the_hold_off_go_by_the_rows_the_failover_kept() {
    let store = MemoryStore::new();
    let both = names(&["x", "y"]);
    let campaigned = store.campaign_many("me", &both, TTL).await.unwrap();
    assert_eq!(campaigned.won.len(), 2);
    tokio::time::sleep(ms(2_000)).await;
    let renewals = [renewal("x", Epoch::new(1)), renewal("y", Epoch::new(1))];
    assert_eq!(store.renew("me", &renewals).await.unwrap().landed, both);
    // The renewal is lost: the rows expire at 3 s again, not 5 s.
    store.fail_over(1);
    let held_off = store.campaign("x", "you", TTL).await.unwrap();
    assert_eq!((held_off.epoch, held_off.held_off_for), (None, Some(TTL)));
    // Within the kept expiry a renewal lands, hold-off or not, as PostgreSQL's does.
    tokio::time::sleep(ms(500)).await;
    let renewed = store.renew("me", &renewals[..1]).await.unwrap();
    assert_eq!(renewed.landed, names(&["x"]));
    // Past it, the lease is no longer the holder's, though it renewed until 5 s.
    tokio::time::sleep(ms(1_000)).await;
    let renewed = store.renew("me", &renewals[1..]).await.unwrap();
    assert!(
        renewed.landed.is_empty() && renewed.busy.is_empty(),
        "{renewed:?}"
    );
    assert!(store.release("x", "me", Epoch::new(1)).await.unwrap());
    assert!(!store.release("y", "me", Epoch::new(1)).await.unwrap());
}

#[tokio::test(start_paused = true)]
async fn epochs_never_repeat_for_a_lease_across_any_number_of_failovers() {
    let store = MemoryStore::new();
    let leases = names(&["a", "b", "c"]);
    let holders = ["p", "q", "r"];
    let mut rng = rand::rngs::SmallRng::seed_from_u64(7);
    // Every epoch handed out of each lease, lost by a failover or not.
    let mut handed_out: BTreeMap<String, Vec<Epoch>> = BTreeMap::new();
    let (mut failovers, mut won_after_one) = (0, 0);
    for _ in 0..2_000 {
        match rng.random_range(0..10) {
            0..=3 => {
                let holder = holders[rng.random_range(0..holders.len())];
                let campaigned = store.campaign_many(holder, &leases, TTL).await.unwrap();
                for (name, epoch) in campaigned.won {
                    let before = handed_out.entry(name.clone()).or_default();
                    if let Some(last) = before.iter().max() {
                        assert!(epoch > *last, "{name} at {epoch} after {before:?}");
                    }
                    before.push(epoch);
                    won_after_one += usize::from(failovers > 0);
                }
            }
            4 => {
                let name = &leases[rng.random_range(0..leases.len())];
                store.force_release(name).await.unwrap();
            }
            5 => {
                for r in store.get(&leases).await.unwrap() {
                    store.release(&r.name, &r.holder, r.epoch).await.unwrap();
                }
            }
            6 => {
                // Up to a few commits lost, the commit that recorded the last failover among them.
                store.fail_over(rng.random_range(0..6));
                failovers += 1;
            }
            _ => tokio::time::sleep(ms(rng.random_range(0..2_000))).await,
        }
    }
    assert!(
        failovers > 100 && won_after_one > 100,
        "{failovers} {won_after_one}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_failover_ends_row_locks_fails_a_call_waiting_for_one_and_tells_listeners() {
    let store = Arc::new(MemoryStore::new());
    let mut heard = store.listen_releases(CancellationToken::new()).unwrap();
    let epoch = won(&store, "x", "me").await;
    store.lock_row("x", Duration::from_secs(60));
    let waiting = {
        let store = store.clone();
        tokio::spawn(async move {
            let started = seams::now();
            let renewed = store
                .renew_one("me", &renewal("x", epoch), Duration::from_secs(10))
                .await;
            (renewed, started.elapsed())
        })
    };
    tokio::time::sleep(ms(100)).await;
    store.fail_over(0);
    let (renewed, took) = waiting.await.unwrap();
    assert!(
        matches!(&renewed, Err(StoreError::Unavailable(text)) if text.contains("failover")),
        "{renewed:?}"
    );
    assert_eq!(took, ms(100));
    assert_eq!(heard.recv().await, Some(ReleaseNotice::Resubscribed));
    // The lock went with the old primary: the holder renews its row at once.
    let renewed = store.renew("me", &[renewal("x", epoch)]).await.unwrap();
    assert_eq!(renewed.landed, names(&["x"]));
}

// A row another transaction keeps locked.

#[tokio::test(start_paused = true)]
async fn a_campaign_skips_a_locked_free_row_and_names_it() {
    let store = MemoryStore::new();
    for name in ["a", "c"] {
        won(&store, name, "gone").await;
        store.force_release(name).await.unwrap();
    }
    store.lock_row("a", Duration::from_secs(5));
    let mut outcome = store
        .campaign_many("me", &names(&["a", "b", "c"]), TTL)
        .await
        .unwrap();
    outcome.won.sort();
    assert_eq!(
        outcome.won,
        [
            ("b".to_string(), Epoch::new(1)),
            ("c".to_string(), Epoch::new(2))
        ]
    );
    assert_eq!(outcome.locked, [("a".to_string(), vec![LOCKER_PID])]);
    assert_eq!(outcome.lost, [("a".to_string(), None)]);
    // Untouched, and won once the lock goes.
    assert_eq!(record(&store, "a").await.unwrap().epoch, Epoch::new(1));
    tokio::time::sleep(Duration::from_secs(5)).await;
    let again = store
        .campaign_many("me", &names(&["a"]), TTL)
        .await
        .unwrap();
    assert_eq!(again.won, [("a".to_string(), Epoch::new(2))]);
    assert!(again.locked.is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_campaign_reports_a_locked_held_row_by_its_expiry_not_as_locked() {
    let store = MemoryStore::new();
    won(&store, "a", "holder").await;
    store.lock_row("a", Duration::from_secs(60));
    let outcome = store
        .campaign_many("me", &names(&["a"]), TTL)
        .await
        .unwrap();
    assert!(outcome.locked.is_empty(), "{outcome:?}");
    assert_eq!(outcome.lost, [("a".to_string(), Some(TTL))]);
}

#[tokio::test(start_paused = true)]
async fn locking_a_lease_without_a_row_locks_nothing() {
    let store = MemoryStore::new();
    store.lock_row("ghost", Duration::from_secs(60));
    assert_eq!(won(&store, "ghost", "me").await, Epoch::new(1));
    let renewed = store
        .renew("me", &[renewal("ghost", Epoch::new(1))])
        .await
        .unwrap();
    assert_eq!(renewed.landed, names(&["ghost"]));
}

#[tokio::test(start_paused = true)]
async fn a_batched_renewal_puts_a_held_locked_row_in_busy_and_renews_the_rest() {
    let store = MemoryStore::new();
    for name in ["a", "b", "c", "gone"] {
        won(&store, name, "me").await;
    }
    store.force_release("gone").await.unwrap();
    won(&store, "gone", "other").await;
    tokio::time::sleep(ms(1_000)).await;
    store.lock_row("b", Duration::from_secs(5));
    store.lock_row("gone", Duration::from_secs(5));
    let requests: Vec<RenewRequest> = ["a", "b", "c", "gone"]
        .iter()
        .map(|n| renewal(n, Epoch::new(1)))
        .collect();
    let renewed = store.renew("me", &requests).await.unwrap();
    assert_eq!(renewed.landed, names(&["a", "c"]));
    // A locked row no longer ours is neither.
    assert_eq!(renewed.busy, names(&["b"]));
    assert_eq!(record(&store, "b").await.unwrap().expires_in_ms, 2_000);
}

#[tokio::test(start_paused = true)]
async fn renewing_one_lease_waits_for_its_row_lock_and_lands_once_it_goes() {
    let store = MemoryStore::new();
    won(&store, "a", "me").await;
    store.lock_row("a", ms(200));
    let started = seams::now();
    let renewed = store
        .renew_one("me", &renewal("a", Epoch::new(1)), Duration::from_secs(1))
        .await
        .unwrap();
    assert_eq!(started.elapsed(), ms(200));
    assert!(renewed.landed);
    // Written as computed when it reached the row, as PostgreSQL's waiting update is.
    assert_eq!(record(&store, "a").await.unwrap().expires_in_ms, 2_800);
}

#[tokio::test(start_paused = true)]
async fn renewing_one_lease_gives_up_at_nine_tenths_of_its_timeout_while_the_row_stays_locked() {
    let store = MemoryStore::new();
    won(&store, "a", "me").await;
    store.lock_row("a", Duration::from_secs(5));
    let started = seams::now();
    let renewed = store
        .renew_one("me", &renewal("a", Epoch::new(1)), Duration::from_secs(1))
        .await;
    assert!(
        matches!(renewed, Err(StoreError::Timeout { op: "renew", after }) if after == ms(900)),
        "{renewed:?}"
    );
    assert_eq!(started.elapsed(), ms(900));
    assert_eq!(record(&store, "a").await.unwrap().expires_in_ms, 2_100);
    // A lease that is not ours is not waited for.
    let started = seams::now();
    let other = store
        .renew_one("you", &renewal("a", Epoch::new(1)), Duration::from_secs(1))
        .await
        .unwrap();
    assert!(!other.landed);
    assert_eq!(started.elapsed(), Duration::ZERO);
}

#[tokio::test(start_paused = true)]
async fn a_release_that_waited_for_a_lock_is_judged_by_when_it_reached_the_row() {
    let store = Arc::new(MemoryStore::new());
    let mut heard = store.listen_releases(CancellationToken::new()).unwrap();
    store
        .campaign("a", "me", Duration::from_secs(1))
        .await
        .unwrap();
    tokio::time::sleep(ms(500)).await;
    store.lock_row("a", Duration::from_secs(1));
    // The row expires during the wait; the release, judged at 0.5 s, still counts.
    assert!(store.release("a", "me", Epoch::new(1)).await.unwrap());
    assert_eq!(record(&store, "a").await.unwrap().expires_in_ms, -1_000);
    assert_eq!(
        heard.recv().await,
        Some(ReleaseNotice::Released("a".into()))
    );
    let terms = store.terms(&names(&["a"]), 1).await.unwrap();
    assert_eq!(terms[0].term.end, Some(TermEnd::Released));
    assert_eq!(terms[0].term.ended_ms_ago, Some(1_000));
}

#[tokio::test(start_paused = true)]
async fn a_release_gives_up_at_the_store_s_lock_timeout_and_leaves_the_row_held() {
    let store = MemoryStore::new().with_call_timeout(Duration::from_secs(1));
    won(&store, "a", "me").await;
    store.lock_row("a", Duration::from_secs(5));
    let started = seams::now();
    let released = store.release("a", "me", Epoch::new(1)).await;
    assert!(
        matches!(released, Err(StoreError::Timeout { op: "release", after }) if after == ms(900)),
        "{released:?}"
    );
    assert_eq!(started.elapsed(), ms(900));
    assert!(record(&store, "a").await.unwrap().is_held());
}

#[tokio::test(start_paused = true)]
async fn releasing_many_waits_for_every_locked_row_and_releases_all_or_none() {
    let store = MemoryStore::new().with_call_timeout(Duration::from_secs(1));
    let both = names(&["a", "b"]);
    let long = Duration::from_secs(60);
    store.campaign_many("me", &both, long).await.unwrap();
    let leases = [
        ("a".to_string(), Epoch::new(1)),
        ("b".to_string(), Epoch::new(1)),
    ];
    store.lock_row("b", Duration::from_secs(5));
    let gave_up = store.release_many("me", &leases).await;
    assert!(
        matches!(gave_up, Err(StoreError::Timeout { .. })),
        "{gave_up:?}"
    );
    assert!(record(&store, "a").await.unwrap().is_held());
    // Both locked, each for less than the lock timeout: the release waits for the later.
    tokio::time::sleep(ms(3_500)).await;
    store.lock_row("a", ms(300));
    let started = seams::now();
    let mut released = store.release_many("me", &leases).await.unwrap();
    released.sort();
    assert_eq!(released, both);
    assert_eq!(started.elapsed(), ms(600));
}

#[tokio::test(start_paused = true)]
async fn a_forced_release_and_a_handoff_request_wait_for_the_lock_too() {
    let store = MemoryStore::new();
    won(&store, "a", "me").await;
    store.lock_row("a", ms(300));
    let started = seams::now();
    let asked = store.request_handoff("a", Some("you")).await.unwrap();
    assert_eq!(asked.unwrap().epoch, Epoch::new(1));
    assert_eq!(started.elapsed(), ms(300));
    store.lock_row("a", ms(300));
    let forced = store.force_release("a").await.unwrap();
    assert_eq!(forced, Some(("me".to_string(), Epoch::new(1))));
    assert_eq!(started.elapsed(), ms(600));
}

#[tokio::test(start_paused = true)]
async fn two_writers_queued_on_one_lock_are_applied_one_after_the_other() {
    let store = Arc::new(MemoryStore::new());
    won(&store, "a", "me").await;
    store.lock_row("a", ms(300));
    let release = tokio::spawn({
        let store = store.clone();
        async move { store.release("a", "me", Epoch::new(1)).await.unwrap() }
    });
    let force = tokio::spawn({
        let store = store.clone();
        async move { store.force_release("a").await.unwrap() }
    });
    let (released, forced) = (release.await.unwrap(), force.await.unwrap());
    // The second finds the row the first expired, judges it again and leaves it.
    assert!(released != forced.is_some(), "{released} {forced:?}");
}

#[tokio::test(start_paused = true)]
async fn the_same_calls_in_the_same_order_give_the_same_answers() {
    async fn script() -> Vec<String> {
        let store = MemoryStore::new();
        let mut answers = Vec::new();
        let all = names(&["a", "b", "c"]);
        answers.push(format!("{:?}", store.campaign_many("p", &all, TTL).await));
        store.lock_row("b", ms(700));
        tokio::time::sleep(ms(400)).await;
        let renewals = [
            renewal("a", Epoch::new(1)),
            renewal("b", Epoch::new(1)),
            renewal("c", Epoch::new(1)),
        ];
        answers.push(format!("{:?}", store.renew("p", &renewals).await));
        answers.push(format!(
            "{:?}",
            store.renew_one("p", &renewals[1], TTL).await
        ));
        store.fail_over(2);
        answers.push(format!("{:?}", store.campaign_many("q", &all, TTL).await));
        sit_out_the_hold_off(&store).await;
        answers.push(format!("{:?}", store.force_release("a").await));
        answers.push(format!("{:?}", store.campaign_many("q", &all, TTL).await));
        answers.push(format!("{:?}", store.terms(&all, 5).await));
        answers
    }
    assert_eq!(script().await, script().await);
}
