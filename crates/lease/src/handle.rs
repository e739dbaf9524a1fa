//! The [`Leases`] handle: what the rest of the host (the supervisor, the groups' runner, the
//! endpoint, the command line) sees of this replica's leases and asks of them. The
//! [`Driver`](super::driver::Driver) builds it, publishes into it, and carries out what it asks.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use tokio::sync::{Notify, mpsc, watch};

use super::coordinator::{Event, GateSource};
use super::groups::GroupStatus;
use super::health::LoopHealth;
use super::identity::HolderId;
use super::leadership::Leadership;
use super::store::{Epoch, LeaseStore};
use super::timing::Timing;

/// The leases of this replica as the rest of the host sees them: the identity, the store and a leadership
/// watch per lease. Cheap to share behind an `Arc`.
#[derive(Debug)]
pub struct Leases {
    /// This process's holder id.
    holder: HolderId,
    /// The store, for read-only views such as `/status`.
    store: Arc<dyn LeaseStore>,
    /// The timing in force.
    timing: Timing,
    /// Leadership of each lease, as published by the driver.
    leaderships: BTreeMap<String, watch::Receiver<Leadership>>,
    /// Requests from the rest of the host: step-downs and campaign gates.
    requests: mpsc::UnboundedSender<Event>,
    /// Woken when another replica releases a lease (or notifications may have been lost), so
    /// that lease groups look at their members and holders again at once.
    released: Arc<Notify>,
    /// What each lease group looks like from this replica, as its runner last saw it.
    groups: watch::Sender<Vec<GroupStatus>>,
    /// The lease groups a failing health check keeps this replica out of.
    closed_groups: watch::Sender<BTreeSet<String>>,
    /// Whether the lease loop's store calls land: readiness.
    health: Arc<LoopHealth>,
    /// Every release this replica has done (shared with the driver), for the shutdown's account
    /// of what became of each lease.
    releases: Releases,
}

/// Each release done: the lease, its epoch, and the store's error when it failed (the lease is
/// then left to expire by its ttl).
pub(super) type Releases = Arc<std::sync::Mutex<Vec<(String, Epoch, Option<String>)>>>;

impl Leases {
    /// The handle of a driver that takes `requests` and publishes each lease's leadership on the
    /// receivers of `leaderships`; the driver shares [`Leases::released_signal`],
    /// [`Leases::health`] and [`Leases::release_log`] with it.
    pub(super) fn new(
        holder: HolderId,
        store: Arc<dyn LeaseStore>,
        timing: Timing,
        leaderships: BTreeMap<String, watch::Receiver<Leadership>>,
        requests: mpsc::UnboundedSender<Event>,
    ) -> Leases {
        Leases {
            holder,
            store,
            timing,
            leaderships,
            requests,
            released: Arc::new(Notify::new()),
            groups: watch::Sender::new(Vec::new()),
            closed_groups: watch::Sender::new(Default::default()),
            health: Arc::new(LoopHealth::default()),
            releases: Releases::default(),
        }
    }

    /// What the driver wakes when another replica releases a lease.
    pub(super) fn released_signal(&self) -> Arc<Notify> {
        self.released.clone()
    }

    /// Where the driver records each release it does.
    pub(super) fn release_log(&self) -> Releases {
        self.releases.clone()
    }

    /// This process's holder id.
    pub fn holder(&self) -> &HolderId {
        &self.holder
    }

    /// The lease store.
    pub fn store(&self) -> &Arc<dyn LeaseStore> {
        &self.store
    }

    /// The timing in force.
    pub fn timing(&self) -> &Timing {
        &self.timing
    }

    /// Whether the lease loop's store calls land: when they do not, this replica cannot
    /// campaign, whatever the display's own reads say.
    pub fn health(&self) -> &Arc<LoopHealth> {
        &self.health
    }

    /// The names of the leases this replica campaigns for.
    pub fn lease_names(&self) -> impl Iterator<Item = &str> {
        self.leaderships.keys().map(String::as_str)
    }

    /// Follows the leadership of `lease`.
    pub fn subscribe(&self, lease: &str) -> Option<watch::Receiver<Leadership>> {
        self.leaderships.get(lease).cloned()
    }

    /// The current leadership of `lease`.
    pub fn leadership(&self, lease: &str) -> Option<Leadership> {
        self.leaderships.get(lease).map(|rx| rx.borrow().clone())
    }

    /// Asks the driver to give `lease` up in order and campaign again later.
    pub fn step_down(&self, lease: &str) {
        // The driver is gone only after shutdown, when there is nothing to step down from.
        let _ = self.requests.send(Event::StepDown {
            lease: lease.to_string(),
        });
    }

    /// Asks the driver to give `lease` up in order, and to wait `wait` longer than a step-down's
    /// poll before campaigning for it again: the work bound to it keeps ending soon after it is
    /// taken (the host's supervisor judges that churn).
    pub fn step_down_backing_off(&self, lease: &str, wait: std::time::Duration) {
        let _ = self.requests.send(Event::BackOff {
            lease: lease.to_string(),
            wait,
        });
        self.step_down(lease);
    }

    /// Allows or forbids campaigning for `lease` on behalf of `source` (a standby whose health
    /// check fails must not take it over): campaigns are allowed only while no source forbids
    /// them.
    pub fn allow_campaigns(&self, lease: &str, source: GateSource, allowed: bool) {
        let _ = self.requests.send(Event::CampaignGate {
            lease: lease.to_string(),
            source,
            open: allowed,
        });
    }

    /// Tells the driver whether a lease group's plan gives shard `lease` to this replica.
    pub fn assign(&self, lease: &str, yours: bool) {
        let _ = self.requests.send(Event::Assign {
            lease: lease.to_string(),
            yours,
        });
    }

    /// Asks the driver to campaign for `lease` now, if it may.
    pub fn campaign_now(&self, lease: &str) {
        let _ = self.requests.send(Event::CampaignNow {
            lease: lease.to_string(),
        });
    }

    /// Resolves when another replica next releases a lease (or notifications may have been lost).
    pub async fn released_elsewhere(&self) {
        self.released.notified().await
    }

    /// The lease groups as this replica last saw them.
    pub fn groups(&self) -> Vec<GroupStatus> {
        self.groups.borrow().clone()
    }

    /// Publishes the lease groups' state (their runner does). Followers are woken only by a
    /// change: the runner publishes at every look.
    pub fn publish_groups(&self, groups: Vec<GroupStatus>) {
        self.groups.send_if_modified(|old| {
            let changed = *old != groups;
            *old = groups;
            changed
        });
    }

    /// Follows the lease groups' state (a health check bound to a group does).
    pub fn subscribe_groups(&self) -> watch::Receiver<Vec<GroupStatus>> {
        self.groups.subscribe()
    }

    /// Lets this replica take part in `group`, or keeps it out (a health check bound to the group
    /// fails): the group's runner then leaves the group and gives up its shards.
    pub fn allow_group(&self, group: &str, open: bool) {
        self.closed_groups.send_if_modified(|closed| {
            if open {
                closed.remove(group)
            } else {
                closed.insert(group.to_string())
            }
        });
    }

    /// Every release done so far, in order: the lease, its epoch, and the store's error when the
    /// release failed and the lease was left to expire by its ttl.
    pub fn releases(&self) -> Vec<(String, Epoch, Option<String>)> {
        self.releases.lock().map(|r| r.clone()).unwrap_or_default()
    }

    /// Follows which groups this replica is kept out of (the groups' runner does).
    pub fn closed_groups(&self) -> watch::Receiver<BTreeSet<String>> {
        self.closed_groups.subscribe()
    }
}
