//! What `/status`, the page (which polls it) and `/readyz` show of the lease store: one
//! [`Snapshot`], served to every request, never read from the store per request.
//!
//! - [`Snapshots`]: the shared handle. A request takes the last snapshot while it is fresh
//!   (younger than [`MAX_AGE`] and no lease changed role since); otherwise it starts a refresh,
//!   unless one is under way (single flight: every request joins the one in progress), and waits
//!   for it at most [`JOIN_WAIT`] before answering with the last snapshot and its age. Should a
//!   lease have changed role since that one, the answer is this replica's own knowledge instead
//!   ([`super::status::local_status`]), with the reason in `store_error`: roles never wait for the store.
//! - A refresh reads the lease rows and terms once ([`super::status::status_of`]) through the store's
//!   observers' connections, never the pools the lease loop renews on, bounded by a second: a
//!   store that is slow or down costs a watcher an old snapshot, and the lease loop nothing.
//! - [`Snapshot`]: the leases' part of `/status` serialised once per refresh; a request adds only
//!   its age, the lease groups and the plugins, which are in memory and small.
//!
//! A flood of `/status` thus costs the store at most one read per [`MAX_AGE`] (more only while
//! leases change hands), however many clients ask.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use super::Status;
use super::bridge::LeaseLoop;
use crate::lease::groups::GroupStatus;
use crate::lease::health::CallsFailing;
use crate::lease::{Leadership, Leases, Role};
use crate::supervisor::ProcessStatus;
use crate::supervisor::{PluginStatus, StatusBoard};

/// How old a snapshot may be before a request asks for a new one. The page polls every 500 ms
/// and Prometheus-style probes every few seconds: 250 ms keeps every page poll at most one
/// snapshot behind, while a flood costs the store at most four reads a second.
pub(crate) const MAX_AGE: Duration = Duration::from_millis(250);

/// How long a request waits for a refresh in progress before it answers with the last snapshot:
/// a refresh takes a few ms on a healthy store, so this is only spent when the store is slow or
/// down, and then a watcher should get the last answer at once rather than hang.
pub(crate) const JOIN_WAIT: Duration = Duration::from_millis(100);

/// How long the first request waits for the first snapshot: longer than a refresh can take (it
/// gives up on the store after a second and answers from local knowledge).
const FIRST_WAIT: Duration = Duration::from_secs(5);

/// One reading of the leases for display.
#[derive(Debug)]
pub(crate) struct Snapshot {
    /// When the refresh that made it began: a reading of the store is at least this recent.
    began: Instant,
    /// When the refresh that made it finished.
    taken: Instant,
    /// Why the store could not be read, if it could not (the leases then come from local
    /// knowledge): `/readyz` is 503 with it.
    store_error: Option<String>,
    /// The serialised fields of [`Status`] from `replica` to `leases`, without braces; `None`
    /// when the serialisation could not be split, and `status` is serialised per request.
    leases_json: Option<Vec<u8>>,
    /// The status it was made from (without groups and plugins).
    status: Status,
    /// This replica's role in each lease, in name order, as the snapshot shows them (read after
    /// the store).
    roles: Vec<Role>,
    /// The same roles as they were before the store was read: should one have changed during
    /// the read, the store's part may predate it (a lease won, its row not yet seen), and the
    /// snapshot is stale at once.
    roles_before: Vec<Role>,
}

/// What [`Status`] serialises to before and after the part a [`Snapshot`] keeps, when its age is
/// zero and it has no groups, plugins or processes: the fields a request fills in.
const HEAD: &[u8] = br#"{"snapshot_age_ms":0,"#;
const TAIL: &[u8] = br#","groups":[],"plugins":[],"processes":[]}"#;

impl Snapshot {
    /// A snapshot of `status`, taken now. Its groups, plugins and processes are left out: a
    /// request adds them as they are then.
    fn new(mut status: Status, began: Instant) -> Snapshot {
        status.groups = Vec::new();
        status.plugins = Vec::new();
        status.processes = Vec::new();
        let roles: Vec<Role> = status.leases.iter().map(|l| l.role).collect();
        let leases_json = serde_json::to_vec(&status).ok().and_then(|json| {
            json.strip_prefix(HEAD)
                .and_then(|rest| rest.strip_suffix(TAIL))
                .map(<[u8]>::to_vec)
        });
        Snapshot {
            began,
            taken: Instant::now(),
            store_error: status.store_error.clone(),
            leases_json,
            status,
            roles_before: roles.clone(),
            roles,
        }
    }

    /// How long ago it was taken.
    pub fn age(&self) -> Duration {
        self.taken.elapsed()
    }

    /// The status it was made from: its leases as the store showed them (without groups,
    /// plugins and processes).
    pub fn status(&self) -> &Status {
        &self.status
    }

    /// Why the store could not be read at the last refresh, if it could not.
    pub fn store_error(&self) -> Option<&str> {
        self.store_error.as_deref()
    }

    /// The `/status` body: this snapshot with its age, and the groups, plugins and the lease
    /// loop's failing calls as they are now.
    pub fn body(
        &self,
        groups: &[GroupStatus],
        (plugins, processes): (&[PluginStatus], &[ProcessStatus]),
        failing: Option<&CallsFailing>,
    ) -> Vec<u8> {
        let age_ms = u64::try_from(self.age().as_millis()).unwrap_or(u64::MAX);
        let (groups_json, plugins_json) = (serde_json::to_vec(groups), serde_json::to_vec(plugins));
        let processes_json = serde_json::to_vec(processes);
        let failing_json = failing.map(serde_json::to_vec).transpose();
        match (
            &self.leases_json,
            groups_json,
            plugins_json,
            processes_json,
            failing_json,
        ) {
            (Some(leases), Ok(groups), Ok(plugins), Ok(processes), Ok(failing)) => {
                let mut body = Vec::with_capacity(
                    leases.len() + groups.len() + plugins.len() + processes.len() + 64,
                );
                body.extend_from_slice(br#"{"snapshot_age_ms":"#);
                body.extend_from_slice(age_ms.to_string().as_bytes());
                body.push(b',');
                body.extend_from_slice(leases);
                body.extend_from_slice(br#","groups":"#);
                body.extend_from_slice(&groups);
                body.extend_from_slice(br#","plugins":"#);
                body.extend_from_slice(&plugins);
                body.extend_from_slice(br#","processes":"#);
                body.extend_from_slice(&processes);
                if let Some(failing) = failing {
                    body.extend_from_slice(br#","lease_calls_failing":"#);
                    body.extend_from_slice(&failing);
                }
                body.push(b'}');
                body
            }
            // Never expected (the fields serialise in declaration order): the slow way.
            _ => {
                let mut status = serde_json::to_value(&self.status).unwrap_or_default();
                status["snapshot_age_ms"] = age_ms.into();
                status["groups"] = serde_json::to_value(groups).unwrap_or_default();
                status["plugins"] = serde_json::to_value(plugins).unwrap_or_default();
                status["processes"] = serde_json::to_value(processes).unwrap_or_default();
                if let Some(failing) = failing {
                    status["lease_calls_failing"] =
                        serde_json::to_value(failing).unwrap_or_default();
                }
                serde_json::to_vec(&status).unwrap_or_default()
            }
        }
    }
}

/// The snapshot every observer of this replica shares, and the one refresh that may be under way.
#[derive(Debug, Clone)]
pub(crate) struct Snapshots {
    /// What is shared with the refreshes.
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    /// The leases shown.
    leases: Arc<Leases>,
    /// The plugins shown, when plugins are enabled.
    plugins: Option<StatusBoard>,
    /// The last snapshot; `None` before the first refresh.
    latest: watch::Sender<Option<Arc<Snapshot>>>,
    /// Whether a refresh is under way.
    refreshing: AtomicBool,
    /// Each lease's leadership, in name order: a snapshot showing another role for any is stale
    /// at once, so that a new holder or a lost lease shows at the next request.
    roles: Vec<watch::Receiver<Leadership>>,
    /// The last answer from this replica's own knowledge, while the store is slow: reused while
    /// it is fresh, so that a flood during an outage renders it once per change.
    local: Mutex<Option<Arc<Snapshot>>>,
    /// Where refreshes run: the lease loop, whichever runtime serves HTTP.
    lease_loop: LeaseLoop,
}

impl Snapshots {
    /// The snapshots of the leases of `lease_loop` (and the statuses of `plugins`). Refreshes
    /// run on the lease loop.
    pub fn new(lease_loop: LeaseLoop, plugins: Option<StatusBoard>) -> Snapshots {
        let leases = lease_loop.leases().clone();
        let roles = leases
            .lease_names()
            .filter_map(|name| leases.subscribe(name))
            .collect();
        Snapshots {
            inner: Arc::new(Inner {
                leases,
                plugins,
                latest: watch::Sender::new(None),
                refreshing: AtomicBool::new(false),
                roles,
                local: Mutex::new(None),
                lease_loop,
            }),
        }
    }

    /// A snapshot for a request: the last one while it is fresh, else the one a refresh (this
    /// request's or the one under way) makes within [`JOIN_WAIT`], else the last one if it shows
    /// every lease's role as it is, else one from this replica's own knowledge. `None` only when
    /// there has never been one and the first did not come within `FIRST_WAIT`.
    pub async fn get(&self) -> Option<Arc<Snapshot>> {
        // Subscribed first, so that a refresh finishing after the look below is not missed.
        let mut latest = self.inner.latest.subscribe();
        let last = latest.borrow_and_update().clone();
        if let Some(last) = &last
            && self.is_fresh(last)
        {
            return Some(last.clone());
        }
        self.refresh();
        let wait = if last.is_some() {
            JOIN_WAIT
        } else {
            FIRST_WAIT
        };
        let _ = tokio::time::timeout(wait, latest.changed()).await;
        let last = latest.borrow().clone()?;
        if self.shows_current_roles(&last.roles) {
            return Some(last);
        }
        let mut local = self.inner.local.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(fresh) = local.as_ref().filter(|l| self.is_fresh(l)) {
            return Some(fresh.clone());
        }
        let why = format!(
            "the lease store has not answered for {:?}; roles, holders and epochs are this replica's own knowledge",
            last.age()
        );
        let made = Arc::new(Snapshot::new(
            super::status::local_status(&self.inner.leases, why),
            Instant::now(),
        ));
        *local = Some(made.clone());
        Some(made)
    }

    /// A snapshot for a probe: the last one while it is fresh and the store answered it, else
    /// one whose refresh began after this call, however long that takes (a refresh gives up on
    /// the store after a second), at most `FIRST_WAIT`. `None` when none came by then.
    pub async fn current(&self) -> Option<Arc<Snapshot>> {
        let asked = Instant::now();
        let mut latest = self.inner.latest.subscribe();
        if let Some(last) = latest.borrow_and_update().clone()
            && last.store_error.is_none()
            && self.is_fresh(&last)
        {
            return Some(last);
        }
        let deadline = asked + FIRST_WAIT;
        loop {
            // A refresh under way may have begun before the store came back: then one more.
            self.refresh();
            if tokio::time::timeout_at(deadline, latest.changed())
                .await
                .is_err()
            {
                return None;
            }
            let snapshot = latest.borrow_and_update().clone();
            if let Some(snapshot) = snapshot
                && snapshot.began >= asked
            {
                return Some(snapshot);
            }
        }
    }

    /// The `/status` body of a snapshot, with the groups and plugins as they are now.
    pub fn body(&self, snapshot: &Snapshot) -> Vec<u8> {
        let board = self.inner.plugins.as_ref();
        let plugins = board.map(StatusBoard::snapshot).unwrap_or_default();
        let processes = board.map(StatusBoard::processes).unwrap_or_default();
        let failing = self.inner.leases.health().failing();
        snapshot.body(
            &self.inner.leases.groups(),
            (&plugins, &processes),
            failing.as_ref(),
        )
    }

    /// Younger than [`MAX_AGE`], and no lease has changed role since before its read.
    fn is_fresh(&self, snapshot: &Snapshot) -> bool {
        snapshot.age() < MAX_AGE && self.shows_current_roles(&snapshot.roles_before)
    }

    /// Whether `roles` (in name order) are each lease's role now.
    fn shows_current_roles(&self, roles: &[Role]) -> bool {
        self.inner.roles.len() == roles.len()
            && self
                .inner
                .roles
                .iter()
                .zip(roles)
                .all(|(now, shown)| now.borrow().role == *shown)
    }

    /// Each lease's role now, in name order.
    fn current_roles(&self) -> Vec<Role> {
        self.inner.roles.iter().map(|r| r.borrow().role).collect()
    }

    /// Starts a refresh unless one is under way.
    fn refresh(&self) {
        if self.inner.refreshing.swap(true, Ordering::AcqRel) {
            return;
        }
        let (inner, roles_before) = (self.inner.clone(), self.current_roles());
        self.inner.lease_loop.spawn(async move {
            let began = Instant::now();
            let mut snapshot = Snapshot::new(super::status::status_of(&inner.leases).await, began);
            snapshot.roles_before = roles_before;
            // Cleared first: whoever wakes to this snapshot and finds it too old can start the
            // next refresh.
            inner.refreshing.store(false, Ordering::Release);
            inner.latest.send_replace(Some(Arc::new(snapshot)));
        });
    }
}

#[cfg(test)]
mod tests {
    use tokio_util::sync::CancellationToken;

    use super::*;
    use crate::http::LeaseStatus;
    use crate::lease::memory::{Health, MemoryStore};
    use crate::lease::{Driver, Epoch, Role, Timing};

    /// Snapshots of a replica of lease `leader` on `store`, and its driver (not running).
    fn replica(store: &Arc<MemoryStore>) -> (Driver, Arc<Leases>, Snapshots) {
        let (driver, leases) = Driver::new(
            store.clone(),
            crate::lease::seams::Seams::system().holder_id("a"),
            Timing::from_ttl(Duration::from_secs(3)),
            ["leader".to_string()],
            CancellationToken::new(),
        );
        let snapshots = Snapshots::new(LeaseLoop::here(leases.clone()), None);
        (driver, leases, snapshots)
    }

    /// `n` requests for a snapshot at once; every one answered.
    async fn crowd(snapshots: &Snapshots, n: usize) -> Vec<Arc<Snapshot>> {
        let mut asked = tokio::task::JoinSet::new();
        for _ in 0..n {
            let snapshots = snapshots.clone();
            asked.spawn(async move { snapshots.get().await });
        }
        let answers = asked.join_all().await;
        answers.into_iter().map(|a| a.unwrap()).collect()
    }

    #[tokio::test(start_paused = true)]
    async fn a_crowd_of_requests_shares_one_read_of_the_store_per_max_age() {
        let store = Arc::new(MemoryStore::new());
        let (_driver, _leases, snapshots) = replica(&store);
        // One read each of the rows, the terms and the lines, for 500 requests at once.
        let first = crowd(&snapshots, 500).await;
        assert_eq!(store.calls(), 3);
        assert!(first.iter().all(|s| Arc::ptr_eq(s, &first[0])));
        // Fresh: served as it is.
        tokio::time::advance(MAX_AGE / 2).await;
        crowd(&snapshots, 500).await;
        assert_eq!(store.calls(), 3);
        // Too old: one more read for the next crowd.
        tokio::time::advance(MAX_AGE).await;
        let second = crowd(&snapshots, 500).await;
        assert_eq!(store.calls(), 6);
        assert!(!Arc::ptr_eq(&second[0], &first[0]));
        assert!(second[0].age() < MAX_AGE);
    }

    #[tokio::test(start_paused = true)]
    async fn status_shows_each_lease_s_line_the_next_holder_first_without_its_holder() {
        use crate::lease::LeaseStore;
        use crate::lease::store::{Bid, InLine, Place};
        let store = Arc::new(MemoryStore::new());
        let (_driver, _leases, snapshots) = replica(&store);
        let ttl = Duration::from_secs(60);
        store.campaign("leader", "h-00000001", ttl).await.unwrap();
        for (holder, priority) in [("low-00000002", 1), ("high-00000003", 5)] {
            let bid = Bid {
                name: "leader".into(),
                line: Some(InLine {
                    place: Place {
                        priority,
                        preempt_after: None,
                    },
                    alive_for: ttl,
                }),
            };
            store.campaign_in_line(holder, &[bid], ttl).await.unwrap();
            tokio::time::advance(Duration::from_millis(10)).await;
        }
        let snapshot = snapshots.get().await.unwrap();
        let line = &snapshot.status().leases[0].line;
        let seen: Vec<(&str, i64)> = line
            .iter()
            .map(|w| (w.holder.as_str(), w.priority))
            .collect();
        assert_eq!(seen, [("high-00000003", 5), ("low-00000002", 1)]);
        assert!(line[1].waited_ms >= 10, "{line:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_hanging_store_is_answered_at_once_with_the_last_snapshot_and_its_age() {
        let store = Arc::new(MemoryStore::new());
        let (_driver, _leases, snapshots) = replica(&store);
        let first = snapshots.get().await.unwrap();
        assert_eq!(first.store_error(), None);
        store.set_health(Health::Hanging);
        tokio::time::advance(MAX_AGE * 2).await;
        // The refresh hangs: the request gets the last snapshot after JOIN_WAIT, with its age.
        let asked = Instant::now();
        let last = snapshots.get().await.unwrap();
        assert!(asked.elapsed() <= JOIN_WAIT);
        assert!(Arc::ptr_eq(&last, &first));
        let body: Status = serde_json::from_slice(&snapshots.body(&last)).unwrap();
        assert!(
            body.snapshot_age_ms >= 2 * MAX_AGE.as_millis() as u64,
            "{body:?}"
        );
        // Once the refresh gives up on the store (after a second), the replica's own knowledge,
        // with the reason: what `/readyz` answers 503 with.
        tokio::time::advance(Duration::from_secs(1)).await;
        tokio::task::yield_now().await;
        let failed = snapshots.get().await.unwrap();
        assert!(
            failed
                .store_error()
                .is_some_and(|e| e.contains("timed out")),
            "{failed:?}"
        );
        // A probe waits for a read begun after it asked, rather than take that failure or the
        // last answer: a store that is back is ready at once.
        store.set_health(Health::Up);
        let probed = snapshots.current().await.unwrap();
        assert_eq!(probed.store_error(), None);
        assert!(!Arc::ptr_eq(&probed, &failed));
        store.set_health(Health::Hanging);
        tokio::time::advance(MAX_AGE).await;
        let asked = Instant::now();
        let probed = snapshots.current().await.unwrap();
        assert!(probed.store_error().is_some(), "{probed:?}");
        assert!(
            asked.elapsed() >= Duration::from_millis(500),
            "{:?}",
            asked.elapsed()
        );
    }

    #[tokio::test]
    async fn a_change_of_role_shows_at_once_while_the_store_hangs() {
        let store = Arc::new(MemoryStore::new());
        let (driver, leases, snapshots) = replica(&store);
        let running = tokio::spawn(driver.run());
        let mut leadership = leases.subscribe("leader").unwrap();
        let within = Duration::from_secs(10);
        tokio::time::timeout(within, leadership.wait_for(|l| l.role == Role::Leader))
            .await
            .unwrap()
            .unwrap();
        let leading = snapshots.get().await.unwrap();
        assert_eq!(leading.status.leases[0].role, Role::Leader);
        // Renewals and the snapshot's read hang alike; the holder stops leading.
        store.set_health(Health::Hanging);
        tokio::time::timeout(within, leadership.wait_for(|l| l.role != Role::Leader))
            .await
            .unwrap()
            .unwrap();
        let shown = snapshots.get().await.unwrap();
        assert_ne!(shown.status.leases[0].role, Role::Leader);
        assert!(
            shown
                .store_error()
                .is_some_and(|e| e.contains("own knowledge")),
            "{shown:?}"
        );
        running.abort();
    }

    #[tokio::test]
    async fn a_change_of_role_makes_the_snapshot_stale_at_once() {
        let store = Arc::new(MemoryStore::new());
        let (driver, leases, snapshots) = replica(&store);
        let before = snapshots.get().await.unwrap();
        assert_eq!(before.status.leases[0].role, Role::Standby);
        let running = tokio::spawn(driver.run());
        let mut leadership = leases.subscribe("leader").unwrap();
        tokio::time::timeout(
            Duration::from_secs(5),
            leadership.wait_for(|l| l.role == Role::Leader),
        )
        .await
        .unwrap()
        .unwrap();
        // Well within MAX_AGE of the last snapshot, yet the new role shows.
        assert!(
            before.age() < MAX_AGE,
            "too slow to tell: {:?}",
            before.age()
        );
        let after = snapshots.get().await.unwrap();
        assert_eq!(after.status.leases[0].role, Role::Leader);
        running.abort();
    }

    fn status() -> Status {
        Status {
            snapshot_age_ms: 0,
            replica: "a-1".into(),
            store: "sqlite".into(),
            store_error: Some("get failed".into()),
            leases: vec![LeaseStatus {
                name: "leader".into(),
                role: Role::Leader,
                holder: Some("a-1".into()),
                epoch: Some(Epoch::new(3)),
                expires_in_ms: Some(1200),
                ttl_ms: 3000,
                terms: Vec::new(),
                last_handoff: None,
                line: Vec::new(),
            }],
            groups: Vec::new(),
            plugins: Vec::new(),
            processes: Vec::new(),
            lease_calls_failing: None,
        }
    }

    #[test]
    fn a_snapshot_is_serialised_once_and_served_with_its_age_groups_and_plugins() {
        let group = GroupStatus {
            name: "orders".into(),
            shards: 4,
            held: 2,
            members: 2,
            target: 2,
            member: true,
            moves: 0,
            handoffs: 0,
            takeovers: 0,
            gated: false,
            count_conflict: None,
            other_counts: 0,
        };
        // The groups of the refresh are left out: a request shows them as they are then.
        let old = GroupStatus {
            held: 1,
            ..group.clone()
        };
        let snapshot = Snapshot::new(
            Status {
                groups: vec![old],
                ..status()
            },
            Instant::now(),
        );
        assert!(
            snapshot.leases_json.is_some(),
            "Status no longer serialises as HEAD … TAIL: snapshot_age_ms first, groups and plugins last"
        );
        let body = snapshot.body(std::slice::from_ref(&group), (&[], &[]), None);
        let served: Status = serde_json::from_slice(&body).unwrap();
        let expected = Status {
            snapshot_age_ms: served.snapshot_age_ms,
            groups: vec![group],
            ..status()
        };
        assert_eq!(
            serde_json::to_value(&served).unwrap(),
            serde_json::to_value(&expected).unwrap()
        );
        assert!(served.snapshot_age_ms < 1000);
        assert_eq!(snapshot.store_error(), Some("get failed"));

        // The lease loop's failing calls, as they are at the answer, come last.
        let failing = crate::lease::health::CallsFailing {
            op: "campaign".into(),
            cause: crate::lease::health::Cause::Permission,
            error: "campaign failed: permission denied".into(),
            failures: 3,
            failing_for_ms: 1500,
        };
        let body = snapshot.body(&[], (&[], &[]), Some(&failing));
        let served: Status = serde_json::from_slice(&body).unwrap();
        assert_eq!(served.lease_calls_failing, Some(failing));
    }
}
