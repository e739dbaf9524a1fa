#![allow(clippy::unwrap_used)]
//! The driver against the in-memory store under paused tokio time: each `Driver` is a replica,
//! several share one `MemoryStore`. Timing throughout is `Timing::from_ttl(3s)`: renew every 1 s,
//! retry every 200 ms, poll every 600 ms (+ up to 20% jitter), margin 250 ms, store calls time out
//! after 600 ms.

use std::sync::Mutex;
use std::time::Duration;

use tokio::task::JoinHandle;

use super::*;
use crate::leadership::Role;
use crate::memory::{Health, MemoryStore};
use crate::store::{Epoch, LeaseRecord};

const LEASE: &str = "reconciler";
const TTL: Duration = Duration::from_secs(3);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn timing() -> Timing {
    let t = Timing::from_ttl(TTL);
    assert_eq!(t.validate(), Ok(()));
    t
}

/// One replica: a running driver for [`LEASE`] on a shared store.
struct Replica {
    leases: Arc<Leases>,
    root: CancellationToken,
    run: JoinHandle<()>,
}

fn replica(store: &Arc<MemoryStore>, id: &str) -> Replica {
    let root = CancellationToken::new();
    let shared: Arc<dyn LeaseStore> = store.clone();
    let (driver, leases) = Driver::new(
        shared,
        crate::seams::Seams::system().holder_id(id),
        timing(),
        [LEASE.to_string()],
        root.clone(),
    );
    Replica {
        leases,
        root,
        run: tokio::spawn(driver.run()),
    }
}

impl Replica {
    fn watch(&self) -> watch::Receiver<Leadership> {
        self.leases.subscribe(LEASE).unwrap()
    }

    fn role(&self) -> Role {
        self.leases.leadership(LEASE).unwrap().role
    }

    /// Cancels the root token and waits for the ordered shutdown to finish.
    async fn stop(self) {
        self.root.cancel();
        tokio::time::timeout(TTL * 10, self.run)
            .await
            .expect("the driver did not finish its shutdown")
            .unwrap();
    }
}

/// Waits (in paused time) until the published leadership satisfies `pred`.
async fn wait_for(
    rx: &mut watch::Receiver<Leadership>,
    within: Duration,
    what: &str,
    pred: impl FnMut(&Leadership) -> bool,
) -> Leadership {
    let got = tokio::time::timeout(within, rx.wait_for(pred))
        .await
        .map(|r| r.map(|l| l.clone()));
    match got {
        Ok(Ok(l)) => l,
        Ok(Err(_)) => panic!("the driver stopped while waiting for {what}"),
        Err(_) => panic!("no {what} within {within:?}; last: {:?}", *rx.borrow()),
    }
}

async fn wait_for_role(
    rx: &mut watch::Receiver<Leadership>,
    role: Role,
    within: Duration,
) -> Leadership {
    wait_for(rx, within, &format!("{role:?}"), |l| l.role == role).await
}

/// Waits for leadership and returns it with its running term.
async fn wait_for_leader(rx: &mut watch::Receiver<Leadership>, within: Duration) -> (Epoch, Term) {
    let l = wait_for_role(rx, Role::Leader, within).await;
    let term = l.term.expect("a leader has a term");
    assert!(!term.is_cancelled());
    assert_eq!(Some(term.epoch), l.epoch);
    (term.epoch, term)
}

/// Records the moment `term` is cancelled.
fn when_cancelled(term: &Term) -> JoinHandle<Instant> {
    let term = term.clone();
    tokio::spawn(async move {
        term.cancelled().await;
        crate::seams::now()
    })
}

async fn row(store: &MemoryStore) -> LeaseRecord {
    let mut rows = store.get(&[LEASE.to_string()]).await.unwrap();
    assert_eq!(rows.len(), 1);
    rows.remove(0)
}

#[tokio::test(start_paused = true)]
async fn a_lone_replica_acquires_and_keeps_renewing() {
    let store = Arc::new(MemoryStore::new());
    let a = replica(&store, "a");
    let mut rx = a.watch();
    let (epoch, term) = wait_for_leader(&mut rx, ms(10)).await;
    assert_eq!(epoch, Epoch::new(1));
    assert_eq!(term.lease, LEASE);
    let first = term.safe_until();
    assert_eq!(first, crate::seams::now() + TTL - ms(250));

    // Ten ttls later: still the same term, its deadline pushed forward by every renewal.
    tokio::time::sleep(TTL * 10).await;
    assert!(!term.is_cancelled());
    assert!(term.safe_until() > crate::seams::now());
    assert!(term.safe_until() >= first + TTL * 9);
    let l = a.leases.leadership(LEASE).unwrap();
    assert_eq!((l.role, l.epoch), (Role::Leader, Some(Epoch::new(1))));
    let r = row(&store).await;
    assert_eq!(
        (r.holder.as_str(), r.epoch),
        (a.leases.holder().as_str(), Epoch::new(1))
    );
    assert!(r.is_held());
    a.stop().await;
}

/// (a) Renewals fail → Uncertain → the term is cancelled no later than `safe_until` → Standby.
#[tokio::test(start_paused = true)]
async fn failing_renewals_end_the_term_by_safe_until_then_standby() {
    let store = Arc::new(MemoryStore::new());
    let a = replica(&store, "a");
    let mut rx = a.watch();
    let (_, term) = wait_for_leader(&mut rx, ms(10)).await;
    let ended = when_cancelled(&term);

    store.set_health(Health::Failing);
    let uncertain = wait_for_role(&mut rx, Role::Uncertain, TTL).await;
    assert_eq!(uncertain.epoch, Some(Epoch::new(1)));
    // Uncertain, but the term runs on until its deadline.
    let running = uncertain.term.expect("the term runs until safe_until");
    assert!(!running.is_cancelled());
    let safe_until = term.safe_until();
    assert!(crate::seams::now() < safe_until);

    let ended_at = ended.await.unwrap();
    assert!(
        ended_at <= safe_until,
        "term cancelled {:?} after safe_until",
        ended_at - safe_until
    );
    // ...and not cut short either: it ran right up to the deadline.
    assert_eq!(ended_at, safe_until);
    let after = wait_for(&mut rx, ms(10), "term gone", |l| l.term.is_none()).await;
    assert_eq!(after.role, Role::Uncertain, "the lease may still be ours");

    let standby = wait_for_role(&mut rx, Role::Standby, TTL).await;
    assert!(standby.term.is_none() && standby.epoch.is_none());
    assert!(crate::seams::now() > safe_until);
    // By then the store has expired the lease by its own clock.
    store.set_health(Health::Up);
    assert!(!row(&store).await.is_held());
    a.stop().await;
}

/// (b) A store that never answers fails closed: the term still ends by `safe_until`.
#[tokio::test(start_paused = true)]
async fn hanging_store_fails_closed() {
    let store = Arc::new(MemoryStore::new());
    let a = replica(&store, "a");
    let mut rx = a.watch();
    let (_, term) = wait_for_leader(&mut rx, ms(10)).await;
    let safe_until = term.safe_until();
    let ended = when_cancelled(&term);

    store.set_health(Health::Hanging);
    wait_for_role(&mut rx, Role::Uncertain, TTL).await;
    assert!(!term.is_cancelled());
    let ended_at = ended.await.unwrap();
    assert!(ended_at <= safe_until);
    assert_eq!(term.safe_until(), safe_until, "no renewal landed");

    wait_for_role(&mut rx, Role::Standby, TTL).await;
    // Campaigns hang and time out: it stays standby for as long as the store hangs.
    tokio::time::sleep(TTL * 3).await;
    assert_eq!(a.role(), Role::Standby);
    // Shutdown does not wait for the hung store longer than a store timeout.
    let stopping = crate::seams::now();
    a.stop().await;
    assert!(crate::seams::now() - stopping <= timing().store_timeout);
}

/// (c) A renewal landing while uncertain, with the term still running: the same term goes on.
#[tokio::test(start_paused = true)]
async fn recovery_while_the_term_runs_keeps_the_term() {
    let store = Arc::new(MemoryStore::new());
    let a = replica(&store, "a");
    let mut rx = a.watch();
    let (_, term) = wait_for_leader(&mut rx, ms(10)).await;
    store.set_health(Health::Failing);
    wait_for_role(&mut rx, Role::Uncertain, TTL).await;
    let before = term.safe_until();

    store.set_health(Health::Up);
    let (epoch, again) = wait_for_leader(&mut rx, timing().retry_interval + ms(1)).await;
    assert_eq!(epoch, Epoch::new(1));
    assert!(!term.is_cancelled(), "the term never ended");
    assert!(again.safe_until() > before);
    assert_eq!(term.safe_until(), again.safe_until(), "one term, extended");
    a.stop().await;
}

/// (c) The store comes back after `safe_until` but before the lease expired in the store: the
/// retry lands, and a new term starts with the same epoch.
#[tokio::test(start_paused = true)]
async fn recovery_before_expiry_restarts_the_term_with_the_same_epoch() {
    let store = Arc::new(MemoryStore::new());
    let a = replica(&store, "a");
    let mut rx = a.watch();
    let (_, term) = wait_for_leader(&mut rx, ms(10)).await;
    // The store set expires_at = now + ttl at the campaign; safe_until is 250 ms before that.
    let expires_at = crate::seams::now() + TTL;
    store.set_health(Health::Failing);
    term.cancelled().await;
    assert!(crate::seams::now() < expires_at);

    // Retries go every 200 ms: one falls in the 250 ms between safe_until and the expiry.
    store.set_health(Health::Up);
    let (epoch, again) = wait_for_leader(&mut rx, ms(250)).await;
    assert!(crate::seams::now() < expires_at);
    assert_eq!(epoch, Epoch::new(1), "renewed, not re-acquired");
    assert!(term.is_cancelled(), "the old term stays ended");
    assert!(again.safe_until() > crate::seams::now());
    assert_eq!(row(&store).await.epoch, Epoch::new(1));
    a.stop().await;
}

/// (c) The store comes back after the lease expired: the replica campaigns again and wins the
/// next epoch.
#[tokio::test(start_paused = true)]
async fn recovery_after_expiry_recampaigns_with_the_next_epoch() {
    let store = Arc::new(MemoryStore::new());
    let a = replica(&store, "a");
    let mut rx = a.watch();
    let (_, term) = wait_for_leader(&mut rx, ms(10)).await;
    store.set_health(Health::Failing);
    wait_for_role(&mut rx, Role::Standby, TTL * 2).await;
    assert!(term.is_cancelled());
    // Campaigns keep failing while the store is down.
    tokio::time::sleep(TTL).await;
    assert_eq!(a.role(), Role::Standby);

    store.set_health(Health::Up);
    let poll = timing().poll_interval;
    let (epoch, again) = wait_for_leader(&mut rx, poll + poll / 5 + ms(1)).await;
    assert_eq!(epoch, Epoch::new(2));
    assert_eq!(again.epoch, Epoch::new(2));
    let r = row(&store).await;
    assert_eq!(
        (r.holder.as_str(), r.epoch),
        (a.leases.holder().as_str(), Epoch::new(2))
    );
    a.stop().await;
}

/// (d) Two replicas on one store: exactly one leads; when it shuts down, the other takes over at
/// once (release notification, not polling) with the next epoch.
#[tokio::test(start_paused = true)]
async fn two_replicas_one_leader_and_instant_handover() {
    let store = Arc::new(MemoryStore::new());
    let a = replica(&store, "a");
    let b = replica(&store, "b");
    let (ra, rb) = (a.watch(), b.watch());
    // Whichever campaigned first leads; give both a few ttls and check all along.
    for _ in 0..100 {
        tokio::time::sleep(ms(97)).await;
        let roles = (a.role(), b.role());
        assert!(
            matches!(
                roles,
                (Role::Leader, Role::Standby) | (Role::Standby, Role::Leader)
            ),
            "{roles:?}"
        );
    }
    let (leader, other, mut other_rx) = if a.role() == Role::Leader {
        (a, b, rb)
    } else {
        (b, a, ra)
    };
    let lead = leader.leases.leadership(LEASE).unwrap();
    assert_eq!(lead.epoch, Some(Epoch::new(1)), "no churn");
    let term = lead.term.unwrap();
    let ended = when_cancelled(&term);

    let handover = crate::seams::now();
    leader.root.cancel();
    let (epoch, _) = wait_for_leader(&mut other_rx, timing().poll_interval / 10).await;
    let took = crate::seams::now() - handover;
    assert_eq!(epoch, Epoch::new(2));
    assert!(took < timing().poll_interval / 10, "took {took:?}");
    assert!(ended.await.unwrap() <= crate::seams::now());
    assert_eq!(leader.role(), Role::Standby);
    let r = row(&store).await;
    assert_eq!(
        (r.holder.as_str(), r.epoch),
        (other.leases.holder().as_str(), Epoch::new(2))
    );
    leader.stop().await;
    other.stop().await;
}

/// (e) A task spawned on the term is waited for before the lease is released at shutdown.
#[tokio::test(start_paused = true)]
async fn shutdown_waits_for_term_tasks_before_releasing() {
    let store = Arc::new(MemoryStore::new());
    let a = replica(&store, "a");
    let mut rx = a.watch();
    let (_, term) = wait_for_leader(&mut rx, ms(10)).await;
    let b = replica(&store, "b");
    let mut rb = b.watch();

    let drained = Arc::new(Mutex::new(None));
    let holder = a.leases.holder().as_str().to_string();
    term.spawn({
        let (term, store, drained) = (term.clone(), store.clone(), drained.clone());
        async move {
            term.cancelled().await;
            // A slow drain, longer than a renewal interval.
            tokio::time::sleep(ms(1500)).await;
            let r = row(&store).await;
            assert!(r.is_held(), "released while a term task still ran");
            assert_eq!((r.holder, r.epoch), (holder, Epoch::new(1)));
            *drained.lock().unwrap() = Some(crate::seams::now());
        }
    });

    let stopping = crate::seams::now();
    a.root.cancel();
    let (epoch, _) = wait_for_leader(&mut rb, TTL).await;
    let taken = crate::seams::now();
    let drained = drained.lock().unwrap().expect("the term task finished");
    assert_eq!(epoch, Epoch::new(2));
    assert_eq!(drained, stopping + ms(1500));
    assert!(taken >= drained, "taken over before the drain finished");
    assert!(
        taken - drained < ms(10),
        "the release followed the drain at once"
    );
    a.stop().await;
    b.stop().await;
}

/// Shutdown releases the lease in the store (expired now, epoch kept).
#[tokio::test(start_paused = true)]
async fn shutdown_releases_the_lease_keeping_its_epoch() {
    let store = Arc::new(MemoryStore::new());
    let a = replica(&store, "a");
    let mut rx = a.watch();
    wait_for_leader(&mut rx, ms(10)).await;
    let leases = a.leases.clone();
    a.stop().await;
    let r = row(&store).await;
    assert!(!r.is_held());
    assert_eq!(r.epoch, Epoch::new(1));
    assert_eq!(leases.leadership(LEASE).unwrap().role, Role::Standby);
    // The next acquisition, by a new process, gets the next epoch.
    let b = replica(&store, "b");
    let (epoch, _) = wait_for_leader(&mut b.watch(), ms(10)).await;
    assert_eq!(epoch, Epoch::new(2));
    b.stop().await;
}

/// A step-down hands the lease to a waiting standby at once, and the replica that stepped down
/// does not take it straight back.
#[tokio::test(start_paused = true)]
async fn step_down_hands_the_lease_to_the_standby() {
    let store = Arc::new(MemoryStore::new());
    let a = replica(&store, "a");
    let (_, term) = wait_for_leader(&mut a.watch(), ms(10)).await;
    let b = replica(&store, "b");
    let mut rb = b.watch();
    tokio::time::sleep(TTL).await;
    assert_eq!(b.role(), Role::Standby);

    let asked = crate::seams::now();
    a.leases.step_down(LEASE);
    let (epoch, _) = wait_for_leader(&mut rb, ms(10)).await;
    assert_eq!(epoch, Epoch::new(2));
    assert!(term.is_cancelled());
    assert!(crate::seams::now() - asked < ms(10));
    tokio::time::sleep(TTL).await;
    assert_eq!((a.role(), b.role()), (Role::Standby, Role::Leader));
    a.stop().await;
    b.stop().await;
}

/// A lone replica that steps down waits a poll before campaigning again (and then wins the next
/// epoch): its own release notification must not make it campaign at once.
#[tokio::test(start_paused = true)]
async fn step_down_alone_reacquires_after_a_poll() {
    let store = Arc::new(MemoryStore::new());
    let a = replica(&store, "a");
    let mut rx = a.watch();
    let poll = timing().poll_interval;
    let (mut epoch, _) = wait_for_leader(&mut rx, ms(10)).await;
    for round in 0..20 {
        let asked = crate::seams::now();
        a.leases.step_down(LEASE);
        wait_for_role(&mut rx, Role::Standby, ms(10)).await;
        let (again, _) = wait_for_leader(&mut rx, poll * 2).await;
        assert_eq!(again, epoch.next());
        let waited = crate::seams::now() - asked;
        assert!(
            waited >= poll,
            "round {round}: campaigned again after {waited:?}"
        );
        epoch = again;
    }
    a.stop().await;
}

/// A forward step of the database's clock shortens the lease in the store while its holder runs
/// on its monotonic `safe_until`. Whoever reads the step (the standby winning the lease early, or
/// the holder's next renewal) stays quiet for a ttl, so the two terms never overlap.
#[tokio::test(start_paused = true)]
async fn a_database_clock_step_never_makes_two_live_terms() {
    for step in [ms(1_000), ms(2_200), ms(2_900), ms(10_000)] {
        let store = Arc::new(MemoryStore::new());
        let a = replica(&store, "a");
        let mut ra = a.watch();
        wait_for_leader(&mut ra, TTL).await;
        let b = replica(&store, "b");
        tokio::time::sleep(ms(1_337)).await;
        store.step_clock(step);
        for _ in 0..(4 * TTL.as_millis() / 10) {
            tokio::time::sleep(ms(10)).await;
            let live = |r: &Replica| {
                r.leases
                    .leadership(LEASE)
                    .unwrap()
                    .term
                    .is_some_and(|t| t.is_live())
            };
            assert!(
                !(live(&a) && live(&b)),
                "two live terms after a {step:?} step: {:?} / {:?}",
                a.leases.leadership(LEASE),
                b.leases.leadership(LEASE)
            );
        }
        // Someone leads again after the quiet.
        assert!(
            a.role() == Role::Leader || b.role() == Role::Leader,
            "{step:?}: {:?} / {:?}",
            a.role(),
            b.role()
        );
        a.stop().await;
        b.stop().await;
    }
}

/// Runs `test` on a current-thread runtime of its own with paused time, and fails if it has not
/// finished within `limit` on the wall clock: a task that wakes at once again and again keeps
/// paused time from moving, so such a test would hang rather than fail.
fn on_paused_time_within(limit: Duration, test: impl Future<Output = ()> + Send + 'static) {
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    let run = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
            .unwrap();
        runtime.block_on(test);
        let _ = done_tx.send(());
    });
    match done_rx.recv_timeout(limit) {
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => panic!(
            "not done within {limit:?} on the wall clock: something keeps paused time from moving"
        ),
        // Done, or panicked: the panic is the test's.
        _ => {
            if let Err(panic) = run.join() {
                std::panic::resume_unwind(panic);
            }
        }
    }
}

/// A renewal that finds the row locked (another session's open transaction) is sent again alone
/// and waits for the lock. Meanwhile the batch has no lease to carry: neither its time nor a
/// handoff notice may wake the driver at once again and again (which would stop paused time,
/// hence the watchdog).
#[test]
fn a_lone_renewal_waiting_for_a_row_lock_leaves_the_driver_asleep_until_it_answers() {
    on_paused_time_within(Duration::from_secs(60), async {
        let store = Arc::new(MemoryStore::new());
        let a = replica(&store, "a");
        let mut rx = a.watch();
        let (_, term) = wait_for_leader(&mut rx, ms(10)).await;
        let won = crate::seams::now();
        let ended = when_cancelled(&term);
        // Locked from 1.5 s to 3.5 s: the batch at 2 s finds it busy, and the lone renewal waits
        // past the next batch's time (3 s), within the term (safe_until 3.75 s).
        tokio::time::sleep(ms(1500)).await;
        store.lock_row(LEASE, ms(2000));
        tokio::time::sleep(ms(700)).await;
        store.request_handoff(LEASE, None).await.unwrap();
        wait_for_role(&mut rx, Role::Standby, TTL).await;
        // The lone renewal read the request once the lock went, and the lease was handed over.
        let ended_at = ended.await.unwrap();
        assert!(ended_at >= won + ms(3500), "{:?}", ended_at - won);
        let r = row(&store).await;
        assert!(!r.is_held());
        assert_eq!(r.epoch, Epoch::new(1));
        a.stop().await;
    });
}
