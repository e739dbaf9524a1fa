//! The thin async loop around the [`Coordinator`]: it waits for the next deadline, a store result,
//! a release notification or the shutdown, steps the machine and carries out the effects.
//!
//! Store calls run as their own tasks with the timeouts the coordinator chose, so a hung query
//! never delays a deadline: a term is ended at `safe_until` whatever the store is doing.
//!
//! The rest of the host drives it through the [`Leases`] handle (`lease::handle`). What it says
//! in the log is worded in `driver/logs.rs`, what it records in the metrics in `driver/gauges.rs`.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use rand::Rng;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{Instrument, debug, info, info_span, warn};

use super::coordinator::{Announcement, Coordinator, Effect, EndReason, Event};
use super::handle::{Leases, Releases};
use super::health::{LoopHealth, Recorder};
use super::identity::HolderId;
use super::leadership::{Leadership, Term, TermControl};
use super::seams::{self, Origin, Seams};
use super::store::{
    Bid, Epoch, InLine, LeaseStore, Place, ReleaseNotice, RenewRequest, StoreError, within,
};
use super::timing::Timing;
use crate::metrics::LeaseMetrics;
use leasehold_lease_core::buggify::{Planted, buggify, planted};

mod gauges;
mod logs;

/// The target of the driver's log lines, those its [`logs`] writes among them: operators filter
/// on it.
const LOG_TARGET: &str = module_path!();

/// The most queued events handed to the coordinator in one step: enough for a lease group's
/// look at its largest (a group has at most 10,000 shards), and a bound on how long one step takes.
const MAX_BATCH: usize = 10_000;

/// A running term as the driver keeps it.
struct ActiveTerm {
    /// What subscribers are handed.
    term: Term,
    /// What ends it and moves its deadline.
    control: TermControl,
}

/// One lease's publisher, and the count of its term changes it publishes.
struct Publisher {
    /// Where its leadership goes.
    tx: watch::Sender<Leadership>,
    /// How many times a term of it started or ended here ([`Leadership::changes`]).
    changes: u64,
}

/// Drives the [`Coordinator`] for every lease of this replica. Build with [`Driver::new`] and run
/// with [`Driver::run`].
pub struct Driver {
    /// The state machine.
    coordinator: Coordinator,
    /// Where the coordinator's instants count from.
    origin: Origin,
    /// The wall clock terms are stamped with, and the jitter's seed.
    seams: Seams,
    /// The store the effects go to.
    store: Arc<dyn LeaseStore>,
    /// This process's holder id.
    holder: HolderId,
    /// The process's root token: cancelling it starts the ordered shutdown; terms are its children.
    root: CancellationToken,
    /// Publishers of each lease's leadership.
    publishers: BTreeMap<String, Publisher>,
    /// Running terms by lease.
    terms: BTreeMap<String, ActiveTerm>,
    /// Store results and term confirmations come back here.
    events_tx: mpsc::UnboundedSender<Event>,
    events_rx: mpsc::UnboundedReceiver<Event>,
    /// Step-downs and campaign gates from the rest of the host.
    requests_rx: mpsc::UnboundedReceiver<Event>,
    /// Store calls in flight, so shutdown can wait for them.
    calls: TaskTracker,
    /// Woken on each release notification (shared with [`Leases`]).
    released: Arc<tokio::sync::Notify>,
    /// Releases asked for by the step being carried out, sent together after it.
    releases: Vec<(String, Epoch, Duration)>,
    /// Every release done, as [`Leases::releases`] reports them.
    done: Releases,
    /// With lease groups: cancelled once this replica has left them, which must come before its
    /// shards are released (so that the members taking them over no longer count it).
    groups_left: Option<CancellationToken>,
    /// Where transitions, renewal latency and loss-to-stop are recorded.
    metrics: Arc<LeaseMetrics>,
    /// Whether the store calls land (shared with [`Leases`]).
    health: Arc<LoopHealth>,
    /// Where this replica stands in each lease's line; [`Place::default`] for a lease not named.
    places: BTreeMap<String, Place>,
}

impl Driver {
    /// A driver for `leases`, and the [`Leases`] handle the rest of the host uses. Cancelling `root`
    /// releases every lease in order and makes [`Driver::run`] return. The system's wall clock
    /// and entropy; the composition root hands in its own [`Seams`] through
    /// [`Driver::with_shards`].
    pub fn new(
        store: Arc<dyn LeaseStore>,
        holder: HolderId,
        timing: Timing,
        leases: impl IntoIterator<Item = String>,
        root: CancellationToken,
    ) -> (Driver, Arc<Leases>) {
        Self::with_shards(store, holder, timing, leases, [], root, Seams::system())
    }

    /// [`Driver::new`], with the shards of lease groups too: campaigned for only once their
    /// group's runner assigns them to this replica ([`Leases::assign`]), and the wall clock and
    /// random source of `seams`.
    pub fn with_shards(
        store: Arc<dyn LeaseStore>,
        holder: HolderId,
        timing: Timing,
        leases: impl IntoIterator<Item = String>,
        shards: impl IntoIterator<Item = String>,
        root: CancellationToken,
        seams: Seams,
    ) -> (Driver, Arc<Leases>) {
        let leases: Vec<String> = leases.into_iter().collect();
        let shards: Vec<String> = shards.into_iter().collect();
        let seed = seams.rng("coordinator").random();
        let origin = Origin::now();
        let coordinator = Coordinator::with_shards(
            timing,
            leases.iter().cloned(),
            shards.iter().cloned(),
            origin.core_now(),
            seed,
        );
        let mut publishers = BTreeMap::new();
        let mut leaderships = BTreeMap::new();
        for name in leases.into_iter().chain(shards) {
            let (tx, rx) = watch::channel(Leadership::standby());
            publishers.insert(name.clone(), Publisher { tx, changes: 0 });
            leaderships.insert(name, rx);
        }
        let (events_tx, events_rx) = mpsc::unbounded_channel();
        let (requests_tx, requests_rx) = mpsc::unbounded_channel();
        let leases = Arc::new(Leases::new(
            holder.clone(),
            store.clone(),
            timing,
            leaderships,
            requests_tx,
        ));
        let driver = Driver {
            coordinator,
            origin,
            seams,
            store,
            holder,
            root,
            publishers,
            terms: BTreeMap::new(),
            events_tx,
            events_rx,
            requests_rx,
            calls: TaskTracker::new(),
            metrics: Arc::default(),
            released: leases.released_signal(),
            groups_left: None,
            releases: Vec::new(),
            health: leases.health().clone(),
            done: leases.release_log(),
            places: BTreeMap::new(),
        };
        (driver, leases)
    }

    /// On shutdown, waits (no longer than two store calls) for `left` before releasing anything:
    /// the lease groups' runner cancels it once this replica has left its groups.
    pub fn leaving_groups_first(mut self, left: CancellationToken) -> Self {
        self.groups_left = Some(left);
        self
    }

    /// Stands in each lease's line at its place in `places` (priority, preemption); a lease not
    /// named stands at [`Place::default`].
    pub fn with_places(mut self, places: BTreeMap<String, Place>) -> Self {
        self.places = places;
        self
    }

    /// Records into `metrics` (by default, into a registry nobody reads).
    pub fn with_metrics(mut self, metrics: Arc<LeaseMetrics>) -> Self {
        let ttl = self.coordinator.timing().ttl;
        gauges::show_from_start(&metrics, self.publishers.keys(), ttl);
        self.metrics = metrics;
        self
    }

    /// Runs until the root token is cancelled and every lease has been released in order.
    pub async fn run(mut self) {
        let mut notices = self.store.listen_releases(self.root.child_token());
        let mut shutdown_seen = false;
        loop {
            let deadline = self
                .coordinator
                .next_deadline()
                .map(|t| self.origin.to_runtime(t));
            // Biased: branches are polled in this order, not in the runtime's random one, so a
            // seeded run replays exactly; every queue is drained into the batch below anyway.
            let event = tokio::select! {
                biased;
                _ = self.root.cancelled(), if !shutdown_seen => {
                    shutdown_seen = true;
                    match self.groups_left.take() {
                        Some(left) => {
                            self.after_leaving_groups(left);
                            Event::Tick
                        }
                        None => {
                            info!(holder = %self.holder, "shutting down: releasing leases in order");
                            Event::Shutdown
                        }
                    }
                }
                Some(event) = self.events_rx.recv() => event,
                notice = next_notice(&mut notices) => match notice {
                    // A fault point: a notice lost on its way, as a dropped connection loses
                    // one; the poll is the fallback.
                    Some(_) if buggify("drop-notice") => Event::Tick,
                    Some(ReleaseNotice::Released(lease)) => {
                        debug!(lease = %lease, "release notified");
                        self.released.notify_one();
                        Event::ReleasedElsewhere { lease }
                    }
                    Some(ReleaseNotice::Resubscribed) => {
                        self.released.notify_one();
                        Event::Resubscribed
                    }
                    Some(ReleaseNotice::HandoffRequested { lease, epoch }) => {
                        debug!(lease = %lease, epoch = epoch.get(), "handoff notice: renewing now to read the request");
                        Event::HandoffNoticed { lease, epoch }
                    }
                    Some(ReleaseNotice::Granted { lease, holder, epoch }) => self.granted(lease, holder, epoch),
                    None => { notices = None; Event::Tick }
                },
                Some(request) = self.requests_rx.recv() => request,
                _ = sleep_until(deadline) => Event::Tick,
            };
            // Everything else already queued goes in the same step: one look at every lease
            // for the lot, not one per event (a group's look can queue thousands).
            let mut batch = vec![event];
            while batch.len() < MAX_BATCH {
                match self.requests_rx.try_recv() {
                    Ok(request) => batch.push(request),
                    Err(_) => break,
                }
            }
            while batch.len() < MAX_BATCH {
                match self.events_rx.try_recv() {
                    Ok(event) => batch.push(event),
                    Err(_) => break,
                }
            }
            // Release notices come in thousands when another replica gives up a group's shards.
            while batch.len() < MAX_BATCH {
                match notices.as_mut().map(|rx| rx.try_recv()) {
                    Some(Ok(ReleaseNotice::Released(lease))) => {
                        self.released.notify_one();
                        batch.push(Event::ReleasedElsewhere { lease });
                    }
                    Some(Ok(ReleaseNotice::Resubscribed)) => {
                        self.released.notify_one();
                        batch.push(Event::Resubscribed);
                    }
                    Some(Ok(ReleaseNotice::HandoffRequested { lease, epoch })) => {
                        batch.push(Event::HandoffNoticed { lease, epoch });
                    }
                    Some(Ok(ReleaseNotice::Granted {
                        lease,
                        holder,
                        epoch,
                    })) => {
                        batch.push(self.granted(lease, holder, epoch));
                    }
                    _ => break,
                }
            }
            let effects = self.coordinator.step_all(batch, self.origin.core_now());
            for effect in effects {
                self.execute(effect);
            }
            self.release_gathered();
            self.publish();
            if self.coordinator.is_finished() {
                break;
            }
        }
        self.calls.close();
        self.calls.wait().await;
        info!(holder = %self.holder, "lease driver stopped");
    }

    /// A grant notice: a read of the row if it names this replica; for another, a look at the
    /// lease (the line moved), as a release notice is.
    fn granted(&self, lease: String, holder: String, epoch: Epoch) -> Event {
        if holder == self.holder.as_str() {
            debug!(lease = %lease, epoch = epoch.get(), "grant notice: reading the row to take the lease up");
            Event::GrantNoticed { lease, epoch }
        } else {
            Event::Tick
        }
    }

    /// Sends the releases one step asked for: one alone by the prepared single-lease statement
    /// (the handoff's fast path), several in one statement.
    fn release_gathered(&mut self) {
        let releases = std::mem::take(&mut self.releases);
        let (store, holder) = (self.store.clone(), self.holder.clone());
        match releases.as_slice() {
            [] => {}
            [(lease, epoch, timeout)] => {
                let (lease, epoch, timeout) = (lease.clone(), *epoch, *timeout);
                let span = info_span!("release", lease = %lease, epoch = epoch.get(), holder = %holder, outcome = tracing::field::Empty);
                let recorder = self.recorder();
                let metrics = self.metrics.clone();
                self.call(span, async move {
                    let leases = [(lease.clone(), epoch)];
                    let result = within(
                        timeout,
                        "release",
                        store.release_giving(holder.as_str(), &leases),
                    )
                    .await;
                    if let Ok(released) = &result {
                        logs::released(&holder, &lease, epoch, !released.is_empty());
                        if released.iter().any(|r| r.given_to.is_some()) {
                            metrics.count_grant(&lease, "release");
                        }
                    }
                    let result = result.map(|released| !released.is_empty());
                    Event::ReleaseDone {
                        lease,
                        result: recorder.outcome("release", result),
                    }
                });
            }
            several => {
                let timeout = several.iter().map(|r| r.2).max().unwrap_or_default();
                let leases: Vec<(String, Epoch)> =
                    several.iter().map(|(l, e, _)| (l.clone(), *e)).collect();
                let span = info_span!("release", leases = leases.len(), holder = %holder, outcome = tracing::field::Empty);
                let events = self.events_tx.clone();
                let recorder = self.recorder();
                let metrics = self.metrics.clone();
                let work = async move {
                    let result = within(
                        timeout,
                        "release",
                        store.release_giving(holder.as_str(), &leases),
                    )
                    .await;
                    if let Ok(released) = &result {
                        for given in released.iter().filter(|r| r.given_to.is_some()) {
                            metrics.count_grant(&given.name, "release");
                        }
                    }
                    let result = result
                        .map(|released| released.into_iter().map(|r| r.name).collect::<Vec<_>>());
                    let result = recorder.outcome("release", result);
                    let released: BTreeSet<String> = match &result {
                        Ok(names) => names.iter().cloned().collect(),
                        Err(_) => BTreeSet::new(),
                    };
                    if result.is_ok() {
                        for (lease, epoch) in &leases {
                            logs::released(&holder, lease, *epoch, released.contains(lease));
                        }
                    }
                    leases
                        .into_iter()
                        .map(|(lease, _)| Event::ReleaseDone {
                            result: match &result {
                                Ok(_) => Ok(released.contains(&lease)),
                                Err(e) => Err(e.clone()),
                            },
                            lease,
                        })
                        .for_each(|done| {
                            let _ = events.send(done);
                        });
                };
                self.calls.spawn(work.instrument(span));
            }
        }
    }

    /// Carries out one effect of a step.
    fn execute(&mut self, effect: Effect) {
        match effect {
            Effect::Campaign { leases, timeout } => self.campaign(leases, timeout),
            Effect::ReadGrant {
                lease,
                epoch,
                timeout,
            } => self.read_grant(lease, epoch, timeout),
            Effect::Renew { batch, timeout } => self.renew(batch, timeout),
            Effect::RenewOne { request, timeout } => self.renew_one(request, timeout),
            // Gathered, and sent together once the step's effects are done (`release_gathered`).
            Effect::Release {
                lease,
                epoch,
                timeout,
            } => self.releases.push((lease, epoch, timeout)),
            Effect::StartTerm {
                lease,
                epoch,
                safe_until,
            } => {
                let safe_until = early_deadline(self.origin.to_runtime(safe_until));
                self.start_term(lease, epoch, safe_until)
            }
            Effect::ExtendTerm { lease, safe_until } => {
                if let Some(active) = self.terms.get(&lease) {
                    active
                        .control
                        .extend(early_deadline(self.origin.to_runtime(safe_until)));
                }
            }
            Effect::EndTerm {
                lease,
                epoch,
                reason,
                confirm,
            } => self.end_term(lease, epoch, reason, confirm),
            Effect::Announce(announcement) => self.announce(announcement),
        }
    }

    /// Reads whether `lease` is given to this replica at `epoch`, for how long.
    fn read_grant(&self, lease: String, epoch: Epoch, timeout: Duration) {
        let (store, holder) = (self.store.clone(), self.holder.clone());
        let span = info_span!("read grant", lease = %lease, epoch = epoch.get(), holder = %holder, outcome = tracing::field::Empty);
        let recorder = self.recorder();
        self.call(span, async move {
            let result = within(
                timeout,
                "read grant",
                store.read_grant(&lease, holder.as_str(), epoch),
            )
            .await;
            Event::GrantRead {
                result: recorder.outcome("read grant", result),
                lease,
                epoch,
            }
        });
    }

    /// Campaigns for `leases` in one store call, each at this replica's place in its line.
    fn campaign(&self, leases: Vec<String>, timeout: Duration) {
        let timing = *self.coordinator.timing();
        let ttl = timing.ttl;
        let bids: Vec<Bid> = leases
            .iter()
            .map(|name| Bid {
                name: name.clone(),
                line: Some(InLine {
                    place: self.places.get(name).copied().unwrap_or_default(),
                    alive_for: timing.in_line_for(),
                }),
            })
            .collect();
        let (store, holder) = (self.store.clone(), self.holder.clone());
        let span = info_span!("campaign", lease = %logs::some(&leases), leases = leases.len(), holder = %holder, outcome = tracing::field::Empty);
        let recorder = self.recorder();
        let metrics = self.metrics.clone();
        self.call(span, async move {
            let result = within(
                timeout,
                "campaign",
                store.campaign_in_line(holder.as_str(), &bids, ttl),
            )
            .await;
            if let Ok(campaigned) = &result {
                metrics.count_campaign(&campaigned.gave, &campaigned.asked);
            }
            Event::CampaignDone {
                result: recorder.outcome("campaign", result),
            }
        });
    }

    /// Renews the leases of `batch` in one store call.
    fn renew(&self, batch: Vec<RenewRequest>, timeout: Duration) {
        let (store, holder) = (self.store.clone(), self.holder.clone());
        let span = info_span!("renew", holder = %holder, leases = batch.len());
        let metrics = self.metrics.clone();
        let recorder = self.recorder();
        self.call(span, async move {
            let started = seams::now();
            let result = match buggify("renew-timeout") {
                // A fault point: the renewal times out without reaching the store.
                true => {
                    tokio::time::sleep(timeout).await;
                    Err(StoreError::Timeout {
                        op: "renew",
                        after: timeout,
                    })
                }
                false => within(timeout, "renew", store.renew(holder.as_str(), &batch)).await,
            };
            let took = started.elapsed();
            logs::renewal_returned(took, result.is_ok(), false);
            gauges::renewal_took(&metrics, took);
            Event::RenewDone {
                result: recorder.outcome("renew", result),
            }
        });
    }

    /// Renews one lease alone, after the batch found its row locked.
    fn renew_one(&self, request: RenewRequest, timeout: Duration) {
        let (store, holder) = (self.store.clone(), self.holder.clone());
        let span = info_span!("renew", lease = %request.name, epoch = request.epoch.get(), holder = %holder);
        let metrics = self.metrics.clone();
        let recorder = self.recorder();
        self.call(span, async move {
            let started = seams::now();
            let result = within(
                timeout,
                "renew",
                store.renew_one(holder.as_str(), &request, timeout),
            )
            .await;
            let took = started.elapsed();
            logs::renewal_returned(took, result.is_ok(), true);
            gauges::renewal_took(&metrics, took);
            Event::RenewOneDone {
                lease: request.name,
                result: recorder.outcome("renew", result),
            }
        });
    }

    /// Starts a term of `lease`: its plugins may run until `safe_until`, which renewals extend.
    fn start_term(&mut self, lease: String, epoch: Epoch, safe_until: Instant) {
        let change = self.publishers.get_mut(&lease).map_or(0, |p| {
            p.changes += 1;
            p.changes
        });
        let (term, control) = Term::start(
            (lease.clone(), epoch, change),
            self.root.child_token(),
            safe_until,
            &self.seams,
        );
        logs::term_started(&lease, epoch);
        self.terms.insert(lease, ActiveTerm { term, control });
    }

    /// Ends the term of `lease`, and once its plugins have stopped, tells the coordinator if it
    /// asked to be told (`confirm`).
    fn end_term(&mut self, lease: String, epoch: Epoch, reason: EndReason, confirm: bool) {
        let active = self.terms.remove(&lease);
        if let Some(active) = &active {
            active.control.end_for(reason);
            if let Some(p) = self.publishers.get_mut(&lease) {
                p.changes += 1;
            }
        }
        logs::term_ended(&lease, epoch, &self.holder, reason);
        let ended_at = seams::now();
        let control = active.map(|a| a.control);
        let events = confirm.then(|| self.events_tx.clone());
        let metrics = self.metrics.clone();
        let early = planted(Planted::ReleaseBeforeStop);
        self.calls.spawn(async move {
            if early && let Some(events) = &events {
                let _ = events.send(Event::TermStopped {
                    lease: lease.clone(),
                    epoch,
                });
            }
            if let Some(control) = control {
                control.stopped().await;
                gauges::stopped_after(&metrics, ended_at.elapsed());
            }
            if let Some(events) = events.filter(|_| !early) {
                let _ = events.send(Event::TermStopped { lease, epoch });
            }
        });
    }

    /// Starts the ordered release once the lease groups' runner has left them (cancelled `left`),
    /// or after two store calls' time if it cannot: the leases go anyway.
    fn after_leaving_groups(&self, left: CancellationToken) {
        // The runner may be in a heartbeat when the shutdown comes, and leaves after it: two calls.
        let (holder, wait) = (
            self.holder.clone(),
            2 * self.coordinator.timing().store_timeout,
        );
        let span = info_span!("shutdown", holder = %holder);
        self.call(span, async move {
            if tokio::time::timeout(wait, left.cancelled()).await.is_err() {
                warn!(after = ?wait, "leaving the lease groups took too long: releasing anyway");
            }
            info!(holder = %holder, "shutting down: releasing leases in order");
            Event::Shutdown
        });
    }

    /// Runs one store call as its own task and feeds its result back as an event.
    fn call<F>(&self, span: tracing::Span, work: F)
    where
        F: Future<Output = Event> + Send + 'static,
    {
        let events = self.events_tx.clone();
        self.calls.spawn(
            async move {
                let _ = events.send(work.await);
            }
            .instrument(span),
        );
    }

    /// Where a store call's outcome is recorded.
    fn recorder(&self) -> Recorder {
        Recorder::new(self.health.clone(), self.metrics.clone())
    }

    /// Keeps the account of releases, and logs what the coordinator announced.
    fn announce(&self, announcement: Announcement) {
        if let Announcement::Released {
            lease,
            epoch,
            error,
        } = &announcement
            && let Ok(mut done) = self.done.lock()
        {
            done.push((lease.clone(), *epoch, error.clone()));
        }
        logs::announcement(&self.holder, announcement);
    }

    /// Publishes every lease's leadership that changed. Runs after every step, so it walks the
    /// coordinator's leases and the publishers side by side (both in name order) and takes a
    /// write lock or clones a term only for a lease whose role, epoch or term moved: at 10,000
    /// leases a lookup per lease per step was what held the driver's loop up.
    fn publish(&self) {
        let mut views = self.coordinator.views().peekable();
        for (name, Publisher { tx, changes }) in &self.publishers {
            while views
                .next_if(|(lease, _, _)| *lease < name.as_str())
                .is_some()
            {}
            let Some((_, role, epoch)) = views.next_if(|(lease, _, _)| *lease == name.as_str())
            else {
                continue;
            };
            let active = self.terms.get(name);
            let (was_role, was_epoch, same_term, was_changes) = {
                let current = tx.borrow();
                let same_term = match (&current.term, active) {
                    (None, None) => true,
                    (Some(a), Some(b)) => a.epoch == b.term.epoch && !a.is_cancelled(),
                    _ => false,
                };
                (current.role, current.epoch, same_term, current.changes)
            };
            if was_role == role && was_epoch == epoch && same_term && was_changes == *changes {
                continue;
            }
            gauges::leadership_moved(&self.metrics, name, (was_role, was_epoch), (role, epoch));
            tx.send_replace(Leadership {
                role,
                epoch,
                term: active.map(|a| a.term.clone()),
                changes: *changes,
            });
        }
    }
}

async fn next_notice(notices: &mut Option<mpsc::Receiver<ReleaseNotice>>) -> Option<ReleaseNotice> {
    match notices {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests;

/// `safe_until`, or, at a fault point of the simulator, an earlier deadline: a term may always
/// end sooner than its lease allows, and the work must stop by its clock then too.
fn early_deadline(safe_until: Instant) -> Instant {
    match buggify("early-deadline") {
        true => {
            let now = seams::now();
            now + safe_until.saturating_duration_since(now) / 2
        }
        false => safe_until,
    }
}
