//! The line of standbys for a lease, as every `LeaseStore` keeps it (docs/ARCHITECTURE.md §5.8):
//! who a release or a campaign that finds the lease free gives it to, how a grant is taken up
//! or lapses, and when a waiter of higher priority asks the holder to step aside.
//!
//! The same assertions against every backend: the in-memory store, the simulator's fault layer
//! over it, a real SQLite file and a real PostgreSQL database.

#![allow(clippy::unwrap_used, missing_docs)]

use std::time::Duration;

use leasehold::lease::store::{Bid, InLine, Place};
use leasehold::lease::{Epoch, LeaseStore, ReleaseNotice, RenewRequest};
use leasehold_tests::stores::{Backend, Db};

const LONG: Duration = Duration::from_secs(60);

/// A place in line at `priority` that lasts `alive_for`.
fn place(priority: i64, alive_for: Duration) -> InLine {
    InLine {
        place: Place {
            priority,
            preempt_after: None,
        },
        alive_for,
    }
}

/// `holder` campaigns for `lease` in line at `line`.
async fn wait_in_line(
    s: &dyn LeaseStore,
    lease: &str,
    holder: &str,
    line: InLine,
) -> leasehold::lease::CampaignedMany {
    let bid = Bid {
        name: lease.to_string(),
        line: Some(line),
    };
    s.campaign_in_line(holder, &[bid], LONG).await.unwrap()
}

fn renew(name: &str, epoch: Epoch) -> RenewRequest {
    RenewRequest {
        name: name.to_string(),
        epoch,
        ttl: LONG,
    }
}

/// The next notice that is not a release of another lease, within 5 s.
async fn next_notice(rx: &mut tokio::sync::mpsc::Receiver<ReleaseNotice>) -> ReleaseNotice {
    tokio::time::timeout(Duration::from_secs(5), rx.recv())
        .await
        .expect("a notice")
        .unwrap()
}

/// On PostgreSQL the release listener subscribes in the background: wait until it has.
async fn until_listening(db: &Db) {
    if let Some(url) = db.url().filter(|u| u.starts_with("postgres")) {
        leasehold_tests::pg::wait_for_listeners(&url, 1, Duration::from_secs(20))
            .await
            .unwrap();
    }
}

fn granted(lease: &str, holder: &str, epoch: Epoch) -> ReleaseNotice {
    ReleaseNotice::Granted {
        lease: lease.into(),
        holder: holder.into(),
        epoch,
    }
}

async fn a_release_gives_the_lease_to_the_live_waiter_of_highest_priority_then_earliest(
    backend: Backend,
) {
    let db = Db::new(backend).await.unwrap();
    let s = db.open().await.unwrap();
    let stop = tokio_util::sync::CancellationToken::new();
    let mut notices = s.listen_releases(stop.clone()).unwrap();
    until_listening(&db).await;
    let e = s.campaign("q", "h", LONG).await.unwrap().epoch.unwrap();
    for (holder, priority) in [("low", 1), ("b", 3), ("c", 3)] {
        let lost = wait_in_line(s.as_ref(), "q", holder, place(priority, LONG)).await;
        assert!(lost.won.is_empty() && lost.granted.is_empty(), "{lost:?}");
        // Distinct join times, so that arrival decides between equal priorities.
        tokio::time::sleep(Duration::from_millis(5)).await;
    }

    // h lets go: b is first (priority 3, before c), at the next epoch, told by a notice.
    let released = s.release_giving("h", &[("q".into(), e)]).await.unwrap();
    assert_eq!(released.len(), 1);
    assert_eq!(released[0].given_to.as_deref(), Some("b"), "{backend:?}");
    assert_eq!(next_notice(&mut notices).await, granted("q", "b", e.next()));
    let seen = s.read_grant("q", "b", e.next()).await.unwrap();
    let left = seen.left.expect("the grant is b's");
    assert!(left <= LONG && left > LONG / 2, "{backend:?}: {left:?}");
    // Nobody else reads it as theirs, nor the epoch before.
    assert_eq!(s.read_grant("q", "c", e.next()).await.unwrap().left, None);
    assert_eq!(s.read_grant("q", "b", e).await.unwrap().left, None);
    // b takes it up with its first renewal; a campaign of c finds it held.
    assert_eq!(
        s.renew("b", &[renew("q", e.next())]).await.unwrap().landed,
        ["q"]
    );
    let lost = wait_in_line(s.as_ref(), "q", "c", place(3, LONG)).await;
    assert!(lost.won.is_empty() && lost.granted.is_empty(), "{lost:?}");

    // Then c (priority 3), then low.
    let e2 = e.next();
    assert!(s.release("q", "b", e2).await.unwrap());
    assert_eq!(
        next_notice(&mut notices).await,
        granted("q", "c", e2.next())
    );
    s.renew("c", &[renew("q", e2.next())]).await.unwrap();
    assert!(s.release("q", "c", e2.next()).await.unwrap());
    let e4 = Epoch::new(e.get() + 3);
    assert_eq!(next_notice(&mut notices).await, granted("q", "low", e4));
    s.renew("low", &[renew("q", e4)]).await.unwrap();

    // Nobody left in line: a release frees the lease for any campaign.
    assert!(s.release("q", "low", e4).await.unwrap());
    assert_eq!(
        next_notice(&mut notices).await,
        ReleaseNotice::Released("q".into())
    );
    assert_eq!(
        s.campaign("q", "x", LONG).await.unwrap().epoch,
        Some(e4.next())
    );
    stop.cancel();
}

async fn a_grant_nobody_takes_up_lapses_and_the_next_live_waiter_gets_the_lease(backend: Backend) {
    let db = Db::new(backend).await.unwrap();
    let s = db.open().await.unwrap();
    let e = s.campaign("q", "h", LONG).await.unwrap().epoch.unwrap();
    let grant_for = Duration::from_millis(600);
    wait_in_line(s.as_ref(), "q", "dies", place(0, grant_for)).await;
    tokio::time::sleep(Duration::from_millis(5)).await;
    wait_in_line(s.as_ref(), "q", "next", place(0, LONG)).await;

    // The head gets it, and dies before taking it up: the grant lasts its place's time.
    assert!(s.release("q", "h", e).await.unwrap());
    let left = s.read_grant("q", "dies", e.next()).await.unwrap().left;
    assert!(
        left.is_some_and(|l| l <= grant_for),
        "{backend:?}: {left:?}"
    );
    let lost = wait_in_line(s.as_ref(), "q", "next", place(0, LONG)).await;
    assert!(lost.won.is_empty(), "{backend:?}: the grant still runs");
    let wait = lost.lost[0].1.expect("until the grant lapses");
    assert!(wait <= grant_for, "{backend:?}: {wait:?}");
    tokio::time::sleep(wait + Duration::from_millis(20)).await;

    // Lapsed: the next waiter's campaign wins it, at the next epoch.
    let won = wait_in_line(s.as_ref(), "q", "next", place(0, LONG)).await;
    assert_eq!(
        won.won,
        [("q".to_string(), Epoch::new(e.get() + 2))],
        "{backend:?}"
    );
    assert_eq!(
        s.read_grant("q", "dies", e.next()).await.unwrap().left,
        None
    );
}

async fn a_campaign_that_finds_the_lease_free_gives_it_to_the_head_of_the_line(backend: Backend) {
    let db = Db::new(backend).await.unwrap();
    let s = db.open().await.unwrap();
    let stop = tokio_util::sync::CancellationToken::new();
    let mut notices = s.listen_releases(stop.clone()).unwrap();
    until_listening(&db).await;
    let short = Duration::from_millis(500);
    let e = s
        .campaign("q", "crashes", short)
        .await
        .unwrap()
        .epoch
        .unwrap();
    wait_in_line(s.as_ref(), "q", "first", place(5, LONG)).await;
    tokio::time::sleep(short + Duration::from_millis(50)).await;

    // The holder's lease ran out (it crashed): a campaign from outside the line wins nothing,
    // and gives the lease to the head.
    let outside = s
        .campaign_many("outsider", &["q".to_string()], LONG)
        .await
        .unwrap();
    assert!(outside.won.is_empty(), "{backend:?}: {outside:?}");
    assert_eq!(outside.gave, ["q"], "{backend:?}");
    assert_eq!(
        next_notice(&mut notices).await,
        granted("q", "first", e.next())
    );
    // The head learns of it from its next campaign, should the notice be lost.
    let found = wait_in_line(s.as_ref(), "q", "first", place(5, LONG)).await;
    assert_eq!(found.granted.len(), 1, "{backend:?}: {found:?}");
    assert_eq!(found.granted[0].0, "q");
    assert_eq!(found.granted[0].1, e.next());
    assert!(found.granted[0].2 <= LONG);
    stop.cancel();
}

/// A campaign the server committed as the call timed out: the replica never learnt it won, and
/// campaigns again. That campaign takes the lease up at the epoch it won, with the time its row
/// has left, instead of waiting a whole ttl for its own row to expire and winning a later epoch.
async fn a_lease_won_by_a_campaign_whose_answer_was_lost_comes_back_to_its_next_campaign(
    backend: Backend,
) {
    let db = Db::new(backend).await.unwrap();
    let s = db.open().await.unwrap();
    let ttl = Duration::from_secs(30);
    let bid = |name: &str| Bid {
        name: name.to_string(),
        line: Some(place(0, ttl)),
    };
    let first = s.campaign_in_line("h", &[bid("q")], ttl).await.unwrap();
    let [(_, e)] = first.won.as_slice() else {
        panic!("{backend:?}: {first:?}")
    };
    // The answer above is the one the replica never got.
    let again = s.campaign_in_line("h", &[bid("q")], ttl).await.unwrap();
    assert!(
        again.won.is_empty() && again.lost.is_empty(),
        "{backend:?}: {again:?}"
    );
    assert_eq!(again.granted.len(), 1, "{backend:?}: {again:?}");
    let (name, epoch, left) = &again.granted[0];
    assert_eq!((name.as_str(), epoch), ("q", e), "{backend:?}");
    assert!(*left <= ttl && *left > ttl / 2, "{backend:?}: {left:?}");
    // Taken up, it is renewed at that epoch like any other.
    let renewed = s.renew("h", &[renew("q", *e)]).await.unwrap();
    assert_eq!(renewed.landed, ["q"], "{backend:?}");
}

async fn a_waiter_whose_place_lapsed_is_passed_over(backend: Backend) {
    let db = Db::new(backend).await.unwrap();
    let s = db.open().await.unwrap();
    let e = s.campaign("q", "h", LONG).await.unwrap().epoch.unwrap();
    let brief = Duration::from_millis(200);
    wait_in_line(s.as_ref(), "q", "gone", place(9, brief)).await;
    wait_in_line(s.as_ref(), "q", "stays", place(0, LONG)).await;
    tokio::time::sleep(brief + Duration::from_millis(50)).await;
    assert!(s.release("q", "h", e).await.unwrap());
    assert!(
        s.read_grant("q", "stays", e.next())
            .await
            .unwrap()
            .left
            .is_some(),
        "{backend:?}: the lapsed waiter of priority 9 is passed over"
    );
}

async fn a_handoff_naming_a_waiter_gives_it_the_lease_before_the_head(backend: Backend) {
    let db = Db::new(backend).await.unwrap();
    let s = db.open().await.unwrap();
    let e = s.campaign("q", "h", LONG).await.unwrap().epoch.unwrap();
    wait_in_line(s.as_ref(), "q", "head-0000000a", place(9, LONG)).await;
    wait_in_line(s.as_ref(), "q", "named-0000000b", place(0, LONG)).await;
    // Named by its replica id, as `leases handoff --to` names it.
    s.request_handoff("q", Some("named"))
        .await
        .unwrap()
        .unwrap();
    assert!(s.release("q", "h", e).await.unwrap());
    let seen = s.read_grant("q", "named-0000000b", e.next()).await.unwrap();
    assert!(seen.left.is_some(), "{backend:?}: {seen:?}");
}

async fn a_waiter_of_higher_priority_asks_the_holder_to_step_aside_once_per_preempt_after(
    backend: Backend,
) {
    let db = Db::new(backend).await.unwrap();
    let s = db.open().await.unwrap();
    let stop = tokio_util::sync::CancellationToken::new();
    let mut notices = s.listen_releases(stop.clone()).unwrap();
    until_listening(&db).await;
    let after = Duration::from_millis(400);
    let at = |priority| InLine {
        place: Place {
            priority,
            preempt_after: Some(after),
        },
        alive_for: LONG,
    };
    // The holder won in line at priority 0; p (5) and q (1) wait.
    let e = wait_in_line(s.as_ref(), "q", "h", at(0)).await.won[0].1;
    let lost = wait_in_line(s.as_ref(), "q", "p", at(5)).await;
    wait_in_line(s.as_ref(), "q", "q", at(1)).await;
    // Not yet: p's campaign is due when it will have waited long enough.
    let wait = lost.lost[0].1.expect("a wait");
    assert!(wait <= after, "{backend:?}: {wait:?}");
    assert!(
        s.renew("h", &[renew("q", e)])
            .await
            .unwrap()
            .handoffs
            .is_empty()
    );
    tokio::time::sleep(after + Duration::from_millis(20)).await;

    // Waited long enough: the holder is asked, as by `leases handoff`, and its release gives
    // the lease to p, the head.
    let asking = wait_in_line(s.as_ref(), "q", "p", at(5)).await;
    assert_eq!(asking.asked, ["q"], "{backend:?}");
    assert_eq!(
        next_notice(&mut notices).await,
        ReleaseNotice::HandoffRequested {
            lease: "q".into(),
            epoch: e
        }
    );
    assert_eq!(
        s.renew("h", &[renew("q", e)]).await.unwrap().handoffs,
        ["q"]
    );
    assert!(s.release("q", "h", e).await.unwrap());
    assert_eq!(next_notice(&mut notices).await, granted("q", "p", e.next()));
    s.renew("p", &[renew("q", e.next())]).await.unwrap();

    // q's priority rises to 9. It has waited far longer than preempt_after, but the lease
    // moved for a preemption just now: not before preempt_after has passed since.
    let lost = wait_in_line(s.as_ref(), "q", "q", at(9)).await;
    assert!(
        s.renew("p", &[renew("q", e.next())])
            .await
            .unwrap()
            .handoffs
            .is_empty(),
        "{backend:?}: a second move within one preempt_after of the last"
    );
    let wait = lost.lost[0].1.expect("a wait");
    assert!(wait <= after && wait > after / 2, "{backend:?}: {wait:?}");
    tokio::time::sleep(wait + Duration::from_millis(20)).await;
    wait_in_line(s.as_ref(), "q", "q", at(9)).await;
    assert_eq!(
        s.renew("p", &[renew("q", e.next())])
            .await
            .unwrap()
            .handoffs,
        ["q"],
        "{backend:?}: one preempt_after after the last move"
    );
    stop.cancel();
}

macro_rules! queue_conformance {
    ($($test:ident),* $(,)?) => {
        mod memory { $( #[tokio::test(flavor = "multi_thread", worker_threads = 4)] async fn $test() { super::$test(super::Backend::Memory).await } )* }
        mod memory_faults_off { $( #[tokio::test(flavor = "multi_thread", worker_threads = 4)] async fn $test() { super::$test(super::Backend::MemoryFaultsOff).await } )* }
        mod sqlite { $( #[tokio::test(flavor = "multi_thread", worker_threads = 4)] async fn $test() { super::$test(super::Backend::Sqlite).await } )* }
        mod postgres { $( #[tokio::test(flavor = "multi_thread", worker_threads = 4)] async fn $test() { super::$test(super::Backend::Postgres).await } )* }
    };
}

queue_conformance!(
    a_release_gives_the_lease_to_the_live_waiter_of_highest_priority_then_earliest,
    a_grant_nobody_takes_up_lapses_and_the_next_live_waiter_gets_the_lease,
    a_campaign_that_finds_the_lease_free_gives_it_to_the_head_of_the_line,
    a_lease_won_by_a_campaign_whose_answer_was_lost_comes_back_to_its_next_campaign,
    a_waiter_whose_place_lapsed_is_passed_over,
    a_handoff_naming_a_waiter_gives_it_the_lease_before_the_head,
    a_waiter_of_higher_priority_asks_the_holder_to_step_aside_once_per_preempt_after,
);
