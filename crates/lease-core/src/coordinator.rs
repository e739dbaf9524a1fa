//! The coordinator: one pure state machine for every lease this replica campaigns for
//! (docs/ARCHITECTURE.md §3, §5).
//!
//! [`Coordinator::step`] takes an [`Event`] and the monotonic `now` and returns the [`Effect`]s to
//! carry out; [`Coordinator::next_deadline`] says when to step again with [`Event::Tick`]. Nothing
//! here does I/O or reads a clock, so every transition is tested without a database or a runtime.
//!
//! Per lease: `Standby` → (campaign won) `Held` → (renewal rejected, or expired while failing)
//! `Standby`; `Held` → (shutdown or step-down) `Stopping` → (term drained) `Releasing` → `Done` or
//! `Standby`. While `Held`, the term runs until `safe_until = sent + ttl − margin`, measured from
//! the moment the last landed renewal (or the campaign) was *sent*; reaching it ends the term
//! whatever the store is doing.
//!
//! Held leases renew in one batch that never waits for a row lock; a lease whose row was locked is
//! renewed alone, with its own time left as timeout (docs/ARCHITECTURE.md §5.3). Every answer that
//! carries a reading of the database's clock goes through [`ClockWatch`]: a forward step beyond the
//! margin ends every term and keeps this replica quiet (no campaign, no new term) for a ttl, by
//! which time every holder that trusted the old clock has stopped. Those answers are handled in
//! `coordinator/renewal.rs`; what falls due as time passes, in `coordinator/due.rs`.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use crate::instant::Instant;
use rand::SeedableRng;
use rand::rngs::SmallRng;

use super::clock::ClockWatch;
use super::timing::Timing;
use crate::backoff::{Backoff, JITTER, spread};
use crate::buggify::{Planted, planted};
use crate::record::{CampaignedMany, Epoch, GrantSeen, RenewRequest, Renewed, RenewedOne};
pub use crate::role::EndReason;
use crate::role::Role;

/// How long after the database said a lease can be won a standby campaigns for it. The wait is
/// measured from the answer's arrival, after the database computed it, so the campaign is never
/// early by the database's clock; the slack only absorbs the timer's whole milliseconds.
pub const CAMPAIGN_SLACK: Duration = Duration::from_millis(1);

/// Something that happened, fed to [`Coordinator::step`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// Time passed; deadlines up to `now` are due.
    Tick,
    /// The campaign in flight finished: the leases won and lost, or the error.
    CampaignDone {
        /// The outcome.
        result: Result<CampaignedMany, String>,
    },
    /// The batched renewal finished: the names that landed and those found busy, or the error.
    RenewDone {
        /// The outcome.
        result: Result<Renewed, String>,
    },
    /// The renewal of `lease` alone (after the batch found it busy) finished.
    RenewOneDone {
        /// The lease.
        lease: String,
        /// The outcome.
        result: Result<RenewedOne, String>,
    },
    /// The release of `lease` finished.
    ReleaseDone {
        /// The lease.
        lease: String,
        /// The outcome (`Ok(false)`: the row was no longer ours).
        result: Result<bool, String>,
    },
    /// Every task of the term of `lease` at `epoch` has finished.
    TermStopped {
        /// The lease.
        lease: String,
        /// The epoch of the term.
        epoch: Epoch,
    },
    /// Another replica released `lease`: campaign now.
    ReleasedElsewhere {
        /// The lease.
        lease: String,
    },
    /// The release listener reconnected; notifications may have been lost, so campaign now.
    Resubscribed,
    /// A notice says `lease` was given to this replica at `epoch` by a release or another
    /// standby's campaign ([`crate::queue`]): read the row, and start the term if it says so.
    GrantNoticed {
        /// The lease.
        lease: String,
        /// The epoch it was given at.
        epoch: Epoch,
    },
    /// The read of a grant ([`Effect::ReadGrant`]) finished: how long the grant lasts by the
    /// database's clock (none when the row does not give `lease` to this holder at `epoch`: a
    /// forged notice, or a grant that lapsed) and the clock, or the error.
    GrantRead {
        /// The lease.
        lease: String,
        /// The epoch read for.
        epoch: Epoch,
        /// The outcome.
        result: Result<GrantSeen, String>,
    },
    /// `source` allows or forbids campaigning for `lease` (a standby whose health check fails
    /// must not take the lease). Campaigns are allowed only while no source forbids them, so one
    /// check that passes never overrides another that fails; the last source to allow them again
    /// campaigns at once.
    CampaignGate {
        /// The lease.
        lease: String,
        /// Who speaks.
        source: GateSource,
        /// Whether this source allows campaigns.
        open: bool,
    },
    /// Whether a lease group's plan gives `lease` (a shard) to this replica: only shards given to
    /// it are campaigned for (a second gate, beside the health check's). Giving one campaigns at
    /// once. Leases outside groups are always this replica's to campaign for.
    Assign {
        /// The shard's lease.
        lease: String,
        /// Whether the plan gives it to this replica.
        yours: bool,
    },
    /// Campaign for `lease` now, if it is a standby allowed to (a lease group saw its shard free
    /// and its plan gives it to this replica), even within the hold-off after a step-down.
    CampaignNow {
        /// The lease.
        lease: String,
    },
    /// A notice that an operator asked the holder of `lease` at `epoch` to hand it over
    /// (`leases handoff`): if this replica holds it at that epoch, renew now (or, after another
    /// renewal for a notice, once the retry interval since it has passed). The notice is only
    /// a hint to look: on PostgreSQL any role that may connect can send one, so the lease is
    /// given up only when the renewal's answer, read from the row the request wrote, reports it.
    /// A notice for another epoch (an earlier holder's, heard late) changes nothing.
    HandoffNoticed {
        /// The lease.
        lease: String,
        /// The epoch whose holder is asked.
        epoch: Epoch,
    },
    /// Give up `lease` in order (stop plugins, release) and campaign again later.
    StepDown {
        /// The lease.
        lease: String,
    },
    /// The work bound to `lease` keeps ending soon after it is taken: after this replica's next
    /// release of it, wait `wait` longer than a step-down's poll before campaigning again, so a
    /// broken command does not take (and spend) an epoch at every poll. Another replica, where
    /// the work may run, can take the lease meanwhile.
    BackOff {
        /// The lease.
        lease: String,
        /// The wait added to the step-down's hold-off.
        wait: Duration,
    },
    /// Release every lease in order and finish.
    Shutdown,
}

/// Who shuts or opens a lease's campaign gate ([`Event::CampaignGate`]): each health check
/// bound to the lease speaks for itself.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum GateSource {
    /// A health-check plugin, by its name.
    HealthCheck(String),
    /// A `[[service]]`'s health script or probe, by the service's name.
    Service(String),
}

/// Something the driver must do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Effect {
    /// Campaign for these leases in one statement, giving up after `timeout`; report
    /// [`Event::CampaignDone`].
    Campaign {
        /// The leases, in name order.
        leases: Vec<String>,
        /// The call's timeout.
        timeout: Duration,
    },
    /// Renew these leases in one statement; report [`Event::RenewDone`].
    Renew {
        /// The leases, each with its epoch and ttl.
        batch: Vec<RenewRequest>,
        /// The call's timeout (the store timeout: the batch never waits for a row lock, and each
        /// lease's own deadline is kept by ticks, not by this call).
        timeout: Duration,
    },
    /// Renew one lease alone, waiting for its row lock; report [`Event::RenewOneDone`].
    RenewOne {
        /// The lease, its epoch and ttl.
        request: RenewRequest,
        /// The call's timeout: the time left on this lease.
        timeout: Duration,
    },
    /// Read whether `lease` is given to this holder at `epoch`, and for how long; report
    /// [`Event::GrantRead`].
    ReadGrant {
        /// The lease.
        lease: String,
        /// The epoch of the grant.
        epoch: Epoch,
        /// The call's timeout.
        timeout: Duration,
    },
    /// Release `lease` at `epoch`; report [`Event::ReleaseDone`].
    Release {
        /// The lease.
        lease: String,
        /// The epoch held.
        epoch: Epoch,
        /// The call's timeout.
        timeout: Duration,
    },
    /// Start a term for `lease` at `epoch`, to end no later than `safe_until`.
    StartTerm {
        /// The lease.
        lease: String,
        /// The epoch.
        epoch: Epoch,
        /// The term's deadline.
        safe_until: Instant,
    },
    /// A renewal landed: the running term of `lease` may run until `safe_until`.
    ExtendTerm {
        /// The lease.
        lease: String,
        /// The new deadline.
        safe_until: Instant,
    },
    /// End the term of `lease` now; when `confirm` is set, report [`Event::TermStopped`] once its
    /// tasks are gone.
    EndTerm {
        /// The lease.
        lease: String,
        /// The epoch of the term.
        epoch: Epoch,
        /// Why the term ends.
        reason: EndReason,
        /// Whether the coordinator waits for [`Event::TermStopped`].
        confirm: bool,
    },
    /// A transition worth logging.
    Announce(Announcement),
}

/// A transition, for the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Announcement {
    /// `lease` acquired at `epoch`.
    Acquired {
        /// The lease.
        lease: String,
        /// The new epoch.
        epoch: Epoch,
    },
    /// `lease` taken up at `epoch`, which a release or another standby's campaign gave this
    /// replica as the head of the lease's line.
    Granted {
        /// The lease.
        lease: String,
        /// The epoch given.
        epoch: Epoch,
    },
    /// A renewal failed; the leases are uncertain until one lands or they expire.
    RenewFailing {
        /// The leases and epochs that were in the batch.
        leases: Vec<(String, Epoch)>,
        /// The store's error.
        error: String,
    },
    /// A renewal landed again after failures.
    Recovered {
        /// The lease.
        lease: String,
        /// The epoch, unchanged.
        epoch: Epoch,
    },
    /// `safe_until` passed without a landed renewal: the term was ended.
    SafeUntilReached {
        /// The lease.
        lease: String,
        /// The epoch.
        epoch: Epoch,
    },
    /// The lease is no longer ours.
    Lost {
        /// The lease.
        lease: String,
        /// The epoch we had.
        epoch: Epoch,
        /// `true` when a renewal was rejected, `false` when it expired while renewals failed.
        rejected: bool,
    },
    /// The lease was released (or found no longer ours when releasing).
    Released {
        /// The lease.
        lease: String,
        /// The epoch released.
        epoch: Epoch,
        /// The error if the release statement failed; the lease then expires by its ttl.
        error: Option<String>,
    },
    /// The database's clock ran ahead of the monotonic clock: every term was ended, and no
    /// campaign or term starts for `quiet`.
    ClockStepped {
        /// At least this much.
        ahead: Duration,
        /// How long this replica stays quiet.
        quiet: Duration,
    },
    /// The database holds campaigns off after a change of its incarnation (a promoted standby,
    /// docs/ARCHITECTURE.md §9.2): announced once per hold-off, not per campaign or lease.
    HeldOff {
        /// How much longer, as the database said (the longest over the leases).
        remaining: Duration,
    },
    /// An operator asked this holder to hand `lease` over: its ordered release has begun.
    HandoffRequested {
        /// The lease.
        lease: String,
        /// The epoch held.
        epoch: Epoch,
    },
    /// Campaigns for `lease`, free, keep finding its row locked by another session (a fenced
    /// transaction checked early and left open, an operator's session): it is retried on its own
    /// cadence, and the other leases are not held up.
    CampaignBlocked {
        /// The lease.
        lease: String,
        /// The server processes holding the row's lock, as far as the store can tell.
        locked_by: Vec<i32>,
        /// Found locked for at least this long.
        since: Duration,
    },
    /// A campaign failed with a store error (not merely lost to another holder).
    CampaignFailed {
        /// The leases of the failed statement.
        leases: Vec<String>,
        /// The store's error.
        error: String,
    },
}

/// Where a lease goes once its release is done.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum After {
    Standby,
    Done,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Phase {
    /// Not held; campaign at `next_campaign` (unless one is in flight).
    Standby { next_campaign: Instant },
    /// Held at `epoch`.
    Held {
        epoch: Epoch,
        /// The term's local deadline.
        safe_until: Instant,
        /// By this local time the database has expired the lease unless a renewal landed.
        expires_by: Instant,
        /// Whether a term is running.
        term: bool,
        /// Whether the last renewal failed.
        failing: bool,
    },
    /// The term was ended for a release; waiting for its tasks to finish.
    Stopping {
        epoch: Epoch,
        expires_by: Instant,
        then: After,
    },
    /// The release statement is in flight.
    Releasing { epoch: Epoch, then: After },
    /// Released at shutdown; nothing more to do.
    Done,
}

#[derive(Debug, Clone)]
struct LeaseState {
    phase: Phase,
    /// After a step-down, no campaign before this, whatever release notifications say: our own
    /// release is announced to our own listener too, and would otherwise make us take straight
    /// back the lease we just gave up.
    hold_off: Option<Instant>,
    /// The sources that forbid campaigns (failing standby health checks): the gate is shut
    /// while any does.
    shut_by: BTreeSet<GateSource>,
    /// Added to the hold-off after this replica's next release ([`Event::BackOff`]).
    back_off: Duration,
    /// A lease group's plan gives this shard to another replica: no campaign for it. Always
    /// `false` outside groups.
    unassigned: bool,
    /// The renewal of this lease alone (its row was busy in the batch): when it was sent, and
    /// for which epoch.
    solo: Option<(Instant, Epoch)>,
    /// Since when campaigns have found this lease free but its row locked by another session,
    /// and whether that was announced: only once it is seen again on the retry, since two
    /// standbys campaigning at once also find each other's row lock, for a moment.
    locked_since: Option<(Instant, bool)>,
    /// A term of this epoch was ended before its deadline (a clock step) and its work may still
    /// be draining: a release must wait for [`Event::TermStopped`], or another replica could
    /// start while the drain still lands writes.
    draining: Option<Epoch>,
    /// A grant of this epoch is being read ([`Effect::ReadGrant`]), sent at that instant: the
    /// term it starts is measured from then.
    claiming: Option<(Epoch, Instant)>,
    /// The latest epoch this replica held the lease at: a grant is taken up only above it, so
    /// that a notice heard late, or the row of a term that ended here, never starts a second
    /// term of one epoch.
    last_epoch: Option<Epoch>,
}

impl LeaseState {
    /// Whether a health check keeps this lease from being campaigned for.
    fn gated(&self) -> bool {
        !self.shut_by.is_empty()
    }

    /// The role and held epoch, as `/status` and subscribers see them.
    fn view(&self) -> (Role, Option<Epoch>) {
        match self.phase {
            Phase::Standby { .. } | Phase::Done => (Role::Standby, None),
            Phase::Held {
                epoch,
                term: true,
                failing: false,
                ..
            } => (Role::Leader, Some(epoch)),
            Phase::Held { epoch, .. }
            | Phase::Stopping { epoch, .. }
            | Phase::Releasing { epoch, .. } => (Role::Uncertain, Some(epoch)),
        }
    }

    /// Holds `lease` at `epoch` until `safe_until` (the database has expired it by `expires_by`
    /// unless a renewal lands), starting its term unless held back (`term` false: a clock step's
    /// quiet).
    fn hold(
        &mut self,
        lease: &str,
        epoch: Epoch,
        safe_until: Instant,
        expires_by: Instant,
        term: bool,
        fx: &mut Vec<Effect>,
    ) {
        self.phase = Phase::Held {
            epoch,
            safe_until,
            expires_by,
            term,
            failing: false,
        };
        if term {
            fx.push(Effect::StartTerm {
                lease: lease.to_string(),
                epoch,
                safe_until,
            });
        }
    }

    /// Releases `lease` at `epoch` now (the statement; its answer moves the lease to `then`).
    fn release(
        &mut self,
        lease: &str,
        epoch: Epoch,
        then: After,
        timeout: Duration,
        fx: &mut Vec<Effect>,
    ) {
        self.phase = Phase::Releasing { epoch, then };
        fx.push(Effect::Release {
            lease: lease.to_string(),
            epoch,
            timeout,
        });
    }

    /// A release was announced (or notifications may have been lost): a standby campaigns now,
    /// unless it is holding off after its own step-down.
    fn campaign_now(&mut self, now: Instant) {
        if self.hold_off.is_some_and(|until| now < until) {
            return;
        }
        if let Phase::Standby { next_campaign } = &mut self.phase {
            *next_campaign = now;
        }
    }
}

/// The campaign cadence, shared by all standby leases so that one statement campaigns for every
/// lease that is due (docs/ARCHITECTURE.md §5.1).
#[derive(Debug, Clone, Default)]
struct Campaigning {
    /// The batch in flight: when it was sent and which leases it carries.
    in_flight: Option<(Instant, Vec<String>)>,
    /// The last answer said the database holds campaigns off after a change of its incarnation:
    /// announced once when it starts.
    held_off: bool,
    /// Campaigns that failed with a store error since the last that was answered: each waits
    /// twice as long as the one before ([`Coordinator::campaign_backoff`]).
    failed_in_a_row: u32,
}

impl Campaigning {
    /// Whether the campaign in flight carries `lease` (its batch is in name order).
    fn carries(&self, lease: &str) -> bool {
        self.in_flight
            .as_ref()
            .is_some_and(|(_, batch)| batch.binary_search_by(|n| n.as_str().cmp(lease)).is_ok())
    }
}

/// The renewal cadence, shared by all held leases so that one statement renews them all.
#[derive(Debug, Clone, Default)]
struct Renewal {
    /// When the next batch is due.
    next_at: Option<Instant>,
    /// The batch in flight: when it was sent and which leases at which epochs it carries.
    in_flight: Option<(Instant, Vec<(String, Epoch)>)>,
    /// A handoff notice came while a batch was in flight, which may have read the row before
    /// the request was written: renew again as soon as it returns.
    again: bool,
    /// When the last renewal a notice brought forward was due: the next comes no sooner than
    /// [`Timing::retry_interval`] after it ([`Coordinator::notice_renewal`]).
    for_notice: Option<Instant>,
}

/// The state of every lease this replica campaigns for. See the module docs.
#[derive(Debug, Clone)]
pub struct Coordinator {
    timing: Timing,
    leases: BTreeMap<String, LeaseState>,
    campaigning: Campaigning,
    renewal: Renewal,
    shutting_down: bool,
    /// The database clock's last reading, to see it step.
    clock: ClockWatch,
    /// After a clock step: no campaign and no new term before this.
    quiet_until: Option<Instant>,
    /// Jitter for standby polls, seeded so that a test replays exactly.
    rng: SmallRng,
}

impl Coordinator {
    /// A coordinator for `leases`, all in standby and due to campaign at `now`.
    pub fn new(
        timing: Timing,
        leases: impl IntoIterator<Item = String>,
        now: Instant,
        seed: u64,
    ) -> Self {
        Self::with_shards(timing, leases, [], now, seed)
    }

    /// [`Coordinator::new`], with `shards` too: leases of lease groups, in standby but campaigned
    /// for only once [`Event::Assign`] gives them to this replica.
    pub fn with_shards(
        timing: Timing,
        leases: impl IntoIterator<Item = String>,
        shards: impl IntoIterator<Item = String>,
        now: Instant,
        seed: u64,
    ) -> Self {
        let shards = shards.into_iter().map(|name| (name, true));
        let leases = leases
            .into_iter()
            .map(|name| (name, false))
            .chain(shards)
            .map(|(name, unassigned)| {
                let state = LeaseState {
                    phase: Phase::Standby { next_campaign: now },
                    hold_off: None,
                    shut_by: BTreeSet::new(),
                    back_off: Duration::ZERO,
                    unassigned,
                    solo: None,
                    draining: None,
                    locked_since: None,
                    claiming: None,
                    last_epoch: None,
                };
                (name, state)
            })
            .collect();
        Coordinator {
            timing,
            leases,
            campaigning: Campaigning::default(),
            renewal: Renewal::default(),
            shutting_down: false,
            clock: ClockWatch::default(),
            quiet_until: None,
            rng: SmallRng::seed_from_u64(seed),
        }
    }

    /// The timing in force.
    pub fn timing(&self) -> &Timing {
        &self.timing
    }

    /// The role and held epoch of `lease`, as `/status` and subscribers see it.
    pub fn view(&self, lease: &str) -> Option<(Role, Option<Epoch>)> {
        self.leases.get(lease).map(LeaseState::view)
    }

    /// [`Coordinator::view`] of every lease, in name order.
    pub fn views(&self) -> impl Iterator<Item = (&str, Role, Option<Epoch>)> {
        self.leases.iter().map(|(name, state)| {
            let (role, epoch) = state.view();
            (name.as_str(), role, epoch)
        })
    }

    /// True once a shutdown has released (or given up) every lease.
    pub fn is_finished(&self) -> bool {
        self.shutting_down
            && self.campaigning.in_flight.is_none()
            && self.leases.values().all(|l| l.phase == Phase::Done)
    }

    /// When to step with [`Event::Tick`] next, if any deadline is pending.
    pub fn next_deadline(&self) -> Option<Instant> {
        let mut next: Option<Instant> = None;
        let mut consider = |t: Instant| next = Some(next.map_or(t, |n| n.min(t)));
        // Whether the next batch would carry any lease: one renewed alone stays out of it until
        // its answer, and with no other, the batch's time is no deadline (waking then would find
        // nothing to send, and wake again at once until that answer came).
        let mut batched = false;
        let quiet_until = self.quiet_until;
        // One campaign at a time: what falls due meanwhile goes with the next batch.
        let may_campaign = self.campaigning.in_flight.is_none() && !self.shutting_down;
        for state in self.leases.values() {
            match state.phase {
                Phase::Standby { next_campaign } => {
                    if may_campaign
                        && !state.gated()
                        && !state.unassigned
                        && state.claiming.is_none()
                    {
                        consider(quiet_until.map_or(next_campaign, |q| q.max(next_campaign)));
                    }
                }
                Phase::Held {
                    safe_until,
                    expires_by,
                    term,
                    ..
                } => {
                    batched |= state.solo.is_none();
                    consider(if term { safe_until } else { expires_by });
                    // A term held back by a clock step starts when the quiet ends.
                    if let Some(q) = quiet_until
                        && !term
                        && safe_until > q
                    {
                        consider(q);
                    }
                }
                Phase::Stopping { expires_by, .. } => {
                    batched |= state.solo.is_none();
                    consider(expires_by);
                }
                Phase::Releasing { .. } | Phase::Done => {}
            }
        }
        if batched
            && self.renewal.in_flight.is_none()
            && let Some(at) = self.renewal.next_at
        {
            consider(at);
        }
        next
    }

    /// Applies `event` at monotonic time `now`; returns what to do.
    pub fn step(&mut self, event: Event, now: Instant) -> Vec<Effect> {
        self.step_all([event], now)
    }

    /// Applies `events` in order at monotonic time `now`, then does what has fallen due once;
    /// returns what to do. What is due (a look at every lease) is worked out once rather than
    /// after each event, so the driver can hand over everything queued at once and keep up with
    /// a group runner that assigns or gives up thousands of shards in one look. Campaigns come
    /// in fewer, larger batches than stepping each event in turn would make; nothing else differs.
    pub fn step_all(
        &mut self,
        events: impl IntoIterator<Item = Event>,
        now: Instant,
    ) -> Vec<Effect> {
        let mut fx = Vec::new();
        for event in events {
            self.apply(event, now, &mut fx);
        }
        self.run_due(now, &mut fx);
        fx
    }

    /// Applies one event, without doing what has fallen due.
    fn apply(&mut self, event: Event, now: Instant, fx: &mut Vec<Effect>) {
        match event {
            Event::Tick => {}
            Event::CampaignDone { result } => self.on_campaign(result, now, fx),
            Event::RenewDone { result } => self.on_renew(result, now, fx),
            Event::RenewOneDone { lease, result } => self.on_renew_one(&lease, result, now, fx),
            Event::ReleaseDone { lease, result } => self.on_release(&lease, result, now, fx),
            Event::TermStopped { lease, epoch } => self.on_term_stopped(&lease, epoch, fx),
            Event::ReleasedElsewhere { lease } => {
                if let Some(state) = self.leases.get_mut(&lease) {
                    state.campaign_now(now);
                }
            }
            Event::Resubscribed => {
                for state in self.leases.values_mut() {
                    state.campaign_now(now);
                }
            }
            Event::CampaignGate {
                lease,
                source,
                open,
            } => {
                if let Some(state) = self.leases.get_mut(&lease) {
                    let was_gated = state.gated();
                    if open {
                        state.shut_by.remove(&source);
                    } else {
                        state.shut_by.insert(source);
                    }
                    if was_gated && !state.gated() {
                        state.campaign_now(now);
                    }
                }
            }
            // The group's plan decides for shards: a hold-off after our own step-down (kept so
            // our own release notice does not bring the lease straight back) has done its work
            // once the plan gives the shard back to us; the plan itself keeps it from us before.
            Event::Assign { lease, yours } => {
                if let Some(state) = self.leases.get_mut(&lease) {
                    let was_unassigned = std::mem::replace(&mut state.unassigned, !yours);
                    if was_unassigned && yours {
                        state.hold_off = None;
                        state.campaign_now(now);
                    }
                }
            }
            Event::CampaignNow { lease } => {
                if let Some(state) = self.leases.get_mut(&lease)
                    && !state.unassigned
                {
                    state.hold_off = None;
                    state.campaign_now(now);
                }
            }
            Event::HandoffNoticed { lease, epoch } => self.renew_for_notice(&lease, epoch, now),
            Event::GrantNoticed { lease, epoch } => self.read_grant(&lease, epoch, now, fx),
            Event::GrantRead {
                lease,
                epoch,
                result,
            } => self.on_grant_read(&lease, epoch, result, now, fx),
            Event::StepDown { lease } => self.give_up(&lease, After::Standby, fx),
            Event::BackOff { lease, wait } => {
                if let Some(state) = self.leases.get_mut(&lease) {
                    state.back_off = wait;
                }
            }
            Event::Shutdown => {
                self.shutting_down = true;
                let names: Vec<String> = self.leases.keys().cloned().collect();
                for name in names {
                    self.give_up(&name, After::Done, fx);
                }
            }
        }
    }

    fn jittered_poll(&mut self, now: Instant) -> Instant {
        self.jittered(now, self.timing.poll_interval)
    }

    /// `now + interval`, plus up to 20% jitter so that standbys started together do not
    /// campaign in lockstep.
    fn jittered(&mut self, now: Instant, interval: Duration) -> Instant {
        now + spread(interval, JITTER, &mut self.rng)
    }

    /// How long to wait after the latest of [`Campaigning::failed_in_a_row`] failed campaigns:
    /// the retry interval at first (the database may be back in a moment, as after a dropped
    /// connection), twice as long after each further failure, at most a quarter of the poll
    /// interval. Through an outage a replica then tries a few times a second at most, not every
    /// retry interval, and still notices the database is back within a fraction of a poll; a
    /// release notification, or the listener subscribing again, campaigns at once whatever the wait.
    fn campaign_backoff(&self) -> Duration {
        let first = self.timing.retry_interval;
        let cap = (self.timing.poll_interval / 4).max(first);
        Backoff::new(first, cap).delay(self.campaigning.failed_in_a_row)
    }

    /// When a standby that lost a lease campaigns for it again: just after the database said it
    /// can be won (its holder's expiry, or the end of a hold-off), measured from the answer's
    /// arrival, so never early by the database's clock; at the latest after a poll, the fallback
    /// for a release notification that never came.
    fn after_loss(&mut self, wait: Option<Duration>, now: Instant) -> Instant {
        // The poll, or sooner to keep this replica's place in the lease's line alive.
        let poll = self.jittered(now, self.timing.in_line_every());
        match wait {
            Some(wait) => poll.min(now + wait + CAMPAIGN_SLACK),
            None => poll,
        }
    }

    fn on_campaign(
        &mut self,
        result: Result<CampaignedMany, String>,
        now: Instant,
        fx: &mut Vec<Effect>,
    ) {
        let Some((sent, batch)) = self.campaigning.in_flight.take() else {
            return;
        };
        let campaigned = match result {
            Ok(campaigned) => campaigned,
            Err(error) => {
                fx.push(Effect::Announce(Announcement::CampaignFailed {
                    leases: batch.clone(),
                    error,
                }));
                self.campaigning.failed_in_a_row =
                    self.campaigning.failed_in_a_row.saturating_add(1);
                let wait = self.campaign_backoff();
                for name in batch {
                    let retry = self.jittered(now, wait);
                    self.campaign_again(&name, retry);
                }
                return;
            }
        };
        self.campaigning.failed_in_a_row = 0;
        // The clock first: a campaign won across a clock step must not start a term.
        self.observe_clock(sent, now, campaigned.db_now, fx);
        let was_held_off = std::mem::replace(
            &mut self.campaigning.held_off,
            campaigned.held_off_for.is_some(),
        );
        if let Some(remaining) = campaigned.held_off_for
            && !was_held_off
            && !self.shutting_down
        {
            fx.push(Effect::Announce(Announcement::HeldOff { remaining }));
        }
        let won: std::collections::BTreeMap<String, Epoch> = campaigned.won.into_iter().collect();
        let lost: std::collections::BTreeMap<String, Option<Duration>> =
            campaigned.lost.into_iter().collect();
        let locked: std::collections::BTreeMap<String, Vec<i32>> =
            campaigned.locked.into_iter().collect();
        let granted: std::collections::BTreeMap<String, (Epoch, Duration)> = campaigned
            .granted
            .into_iter()
            .map(|(name, epoch, left)| (name, (epoch, left)))
            .collect();
        for name in batch {
            // Taken up meanwhile by the read of a grant (or declined, and being released): the
            // read's answer decided, not this campaign's.
            let standby = self
                .leases
                .get(&name)
                .is_some_and(|s| matches!(s.phase, Phase::Standby { .. }));
            if !standby {
                continue;
            }
            if let Some(&(epoch, left)) = granted.get(&name) {
                self.take_grant(&name, epoch, sent, left, now, fx);
                // Not taken up (an epoch this replica held before: the row of a term of its own
                // that a failover brought back, or a renewal that landed after the term ended):
                // it lapses by itself, and the lease can be campaigned for then; campaigning
                // again at once would find the same row.
                let taken = self
                    .leases
                    .get(&name)
                    .is_none_or(|s| !matches!(s.phase, Phase::Standby { .. }));
                if !taken {
                    let next_campaign = self.after_loss(Some(left), now);
                    self.campaign_again(&name, next_campaign);
                }
                continue;
            }
            if let Some(locked_by) = locked.get(&name) {
                // Free, but its row was locked: soon again, not after a poll; the lock of a
                // fenced commit under way lasts microseconds.
                let retry = self.jittered(now, self.timing.retry_interval);
                self.campaign_again(&name, retry);
                self.note_locked(&name, locked_by, now, fx);
                continue;
            }
            if let Some(state) = self.leases.get_mut(&name) {
                state.locked_since = None;
            }
            match won.get(&name) {
                Some(&epoch) => self.campaign_won(&name, epoch, sent, now, fx),
                // A lease the answer does not mention counts as lost, its wait unknown.
                None => {
                    let wait = lost.get(&name).copied().flatten();
                    let next_campaign = self.after_loss(wait, now);
                    self.campaign_again(&name, next_campaign);
                }
            }
        }
    }

    /// A campaign sent at `sent` won `lease` at `epoch`.
    fn campaign_won(
        &mut self,
        lease: &str,
        epoch: Epoch,
        sent: Instant,
        now: Instant,
        fx: &mut Vec<Effect>,
    ) {
        let timing = self.timing;
        let shutting_down = self.shutting_down;
        let quiet = self.quiet_until.is_some();
        let Some(state) = self.leases.get_mut(lease) else {
            return;
        };
        state.last_epoch = Some(epoch);
        fx.push(Effect::Announce(Announcement::Acquired {
            lease: lease.to_string(),
            epoch,
        }));
        if shutting_down {
            // Won a campaign sent before the shutdown: hand it straight back.
            state.release(lease, epoch, After::Done, timing.store_timeout, fx);
            return;
        }
        let from = match planted(Planted::DeadlineFromReply) {
            true => now,
            false => sent,
        };
        let safe_until = from + timing.ttl - timing.margin;
        let term = safe_until > now && !quiet;
        let expires_by = now + timing.ttl + timing.margin;
        state.hold(lease, epoch, safe_until, expires_by, term, fx);
        let due = sent + timing.renew_interval;
        self.renewal.next_at = Some(self.renewal.next_at.map_or(due, |n| n.min(due)));
    }

    /// A grant notice for `lease` at `epoch` ([`Event::GrantNoticed`]): read the row, if this
    /// replica stands by for it and has not held that epoch or a later one. A campaign in flight
    /// may have read the row before the grant was written, so it does not stand in for the read.
    fn read_grant(&mut self, lease: &str, epoch: Epoch, now: Instant, fx: &mut Vec<Effect>) {
        let timeout = self.timing.store_timeout;
        let Some(state) = self.leases.get_mut(lease) else {
            return;
        };
        let standby = matches!(state.phase, Phase::Standby { .. });
        if !standby || state.claiming.is_some() || state.last_epoch.is_some_and(|e| e >= epoch) {
            return;
        }
        state.claiming = Some((epoch, now));
        fx.push(Effect::ReadGrant {
            lease: lease.to_string(),
            epoch,
            timeout,
        });
    }

    /// The read of a grant finished ([`Event::GrantRead`]).
    fn on_grant_read(
        &mut self,
        lease: &str,
        epoch: Epoch,
        result: Result<GrantSeen, String>,
        now: Instant,
        fx: &mut Vec<Effect>,
    ) {
        let retry = self.jittered(now, self.timing.retry_interval);
        let Some(state) = self.leases.get_mut(lease) else {
            return;
        };
        let Some((reading, sent)) = state.claiming else {
            return;
        };
        if reading != epoch {
            return;
        }
        if let Ok(seen) = &result {
            // The clock first, as for a campaign: a grant read across a clock step (or a
            // suspend of this machine) must not start a term.
            self.observe_clock(sent, now, seen.db_now, fx);
        }
        let Some(state) = self.leases.get_mut(lease) else {
            return;
        };
        match result {
            Ok(GrantSeen {
                left: Some(left), ..
            }) => self.take_grant(lease, epoch, sent, left, now, fx),
            // Not given to us (a forged notice, or a grant that lapsed): the campaigns go on.
            Ok(GrantSeen { left: None, .. }) => state.claiming = None,
            // The campaign reads grants too: the next one, soon, decides.
            Err(_) => {
                state.claiming = None;
                if let Phase::Standby { next_campaign } = &mut state.phase {
                    *next_campaign = (*next_campaign).min(retry);
                }
            }
        }
        // A shutdown that came while the read was out waited for it.
        if self.shutting_down
            && let Some(state) = self.leases.get_mut(lease)
            && state.claiming.is_none()
            && matches!(state.phase, Phase::Standby { .. })
        {
            state.phase = Phase::Done;
        }
    }

    /// `lease` is given to this replica at `epoch` for `left` by the database's clock, as read
    /// by a statement sent at `sent` (a campaign, or the read of a grant): a term until
    /// `sent + left − margin`, never later than the grant by the database's clock, and a renewal
    /// at once, which makes it a ttl. A replica that may not hold the lease now (shutting down,
    /// its health gate shut, a group's plan giving the shard to another, a grant about to lapse)
    /// releases it at once instead, which gives it to the next in line.
    fn take_grant(
        &mut self,
        lease: &str,
        epoch: Epoch,
        sent: Instant,
        left: Duration,
        now: Instant,
        fx: &mut Vec<Effect>,
    ) {
        let timing = self.timing;
        let shutting_down = self.shutting_down;
        let quiet = self.quiet_until.is_some();
        let Some(state) = self.leases.get_mut(lease) else {
            return;
        };
        state.claiming = None;
        let standby = matches!(state.phase, Phase::Standby { .. });
        if !standby || state.last_epoch.is_some_and(|e| e >= epoch) {
            return;
        }
        state.last_epoch = Some(epoch);
        let from = match planted(Planted::DeadlineFromReply) {
            true => now,
            false => sent,
        };
        let safe_until = (from + left).checked_sub(timing.margin);
        let usable = safe_until.is_some_and(|t| t > now);
        if shutting_down || state.gated() || state.unassigned || !usable {
            let then = if shutting_down {
                After::Done
            } else {
                After::Standby
            };
            state.release(lease, epoch, then, timing.store_timeout, fx);
            return;
        }
        let safe_until = safe_until.unwrap_or(now);
        fx.push(Effect::Announce(Announcement::Granted {
            lease: lease.to_string(),
            epoch,
        }));
        state.hold(
            lease,
            epoch,
            safe_until,
            now + left + timing.margin,
            !quiet,
            fx,
        );
        self.renewal.next_at = Some(now);
    }

    /// A campaign found `lease` free but its row locked by `locked_by`: announced the second
    /// time in a row, once per run.
    fn note_locked(&mut self, lease: &str, locked_by: &[i32], now: Instant, fx: &mut Vec<Effect>) {
        let Some(state) = self.leases.get_mut(lease) else {
            return;
        };
        match state.locked_since {
            None => state.locked_since = Some((now, false)),
            Some((since, false)) => {
                state.locked_since = Some((since, true));
                fx.push(Effect::Announce(Announcement::CampaignBlocked {
                    lease: lease.to_string(),
                    locked_by: locked_by.to_vec(),
                    since: now.duration_since(since),
                }));
            }
            Some((_, true)) => {}
        }
    }

    /// A campaign did not win `lease`: campaign again at `next_campaign`, unless shutting down.
    fn campaign_again(&mut self, lease: &str, next_campaign: Instant) {
        let shutting_down = self.shutting_down;
        if let Some(state) = self.leases.get_mut(lease) {
            state.phase = if shutting_down {
                Phase::Done
            } else {
                Phase::Standby { next_campaign }
            };
        }
    }

    fn on_release(
        &mut self,
        lease: &str,
        result: Result<bool, String>,
        now: Instant,
        fx: &mut Vec<Effect>,
    ) {
        let next_campaign = self.jittered_poll(now);
        let Some(state) = self.leases.get_mut(lease) else {
            return;
        };
        let Phase::Releasing { epoch, then } = state.phase else {
            return;
        };
        fx.push(Effect::Announce(Announcement::Released {
            lease: lease.to_string(),
            epoch,
            error: result.err(),
        }));
        state.phase = match then {
            After::Done => Phase::Done,
            // After a step-down, wait a poll before campaigning so another replica gets a chance
            // (longer when the work bound to it keeps ending soon after it is taken).
            After::Standby => {
                let next_campaign = next_campaign + std::mem::take(&mut state.back_off);
                state.hold_off = Some(next_campaign);
                Phase::Standby { next_campaign }
            }
        };
    }

    fn on_term_stopped(&mut self, lease: &str, epoch: Epoch, fx: &mut Vec<Effect>) {
        let timeout = self.timing.store_timeout;
        let Some(state) = self.leases.get_mut(lease) else {
            return;
        };
        if state.draining == Some(epoch) {
            state.draining = None;
        }
        if let Phase::Stopping {
            epoch: held, then, ..
        } = state.phase
            && held == epoch
        {
            state.release(lease, epoch, then, timeout, fx);
        }
    }

    /// A handoff notice for `lease` at `epoch` ([`Event::HandoffNoticed`]): renew now if this
    /// replica holds it at that epoch, and let the answer decide. A flood of forged notices costs
    /// one renewal per retry interval at most ([`Coordinator::notice_renewal`]), never the lease.
    fn renew_for_notice(&mut self, lease: &str, epoch: Epoch, now: Instant) {
        let held = self.leases.get(lease).is_some_and(
            |state| matches!(state.phase, Phase::Held { epoch: held, .. } if held == epoch),
        );
        if !held || self.shutting_down {
            return;
        }
        if self.renewal.in_flight.is_some() {
            self.renewal.again = true;
        } else {
            let due = self.renewal.next_at;
            self.renewal.next_at = Some(self.notice_renewal(now, due));
        }
    }

    /// When to renew for a notice heard by `now`, given the renewal otherwise `due`: at once,
    /// unless a renewal a notice brought forward was due within [`Timing::retry_interval`]
    /// before, and then that long after it. A notice is only a hint, and anyone who may append
    /// to a SQLite event file or `NOTIFY` on the lease database can send one: without the bound,
    /// a flood of them renewed back to back (a write each, competing with the other replicas').
    /// With it they cost one renewal per retry interval, the pace at which a failing renewal is
    /// retried, and a real request in the flood is read that much later at most. One renewal
    /// reads every lease's request, so the bound is the replica's, not a lease's.
    pub(super) fn notice_renewal(&mut self, now: Instant, due: Option<Instant>) -> Instant {
        let at = self
            .renewal
            .for_notice
            .map_or(now, |last| now.max(last + self.timing.retry_interval));
        match due {
            // A renewal comes by then anyway, and reads the request.
            Some(due) if due <= at => due,
            _ => {
                self.renewal.for_notice = Some(at);
                at
            }
        }
    }

    /// An operator's handoff request for `lease` at `epoch`, as a renewal read it from the lease's
    /// row: the ordered release, if this replica
    /// holds it at that epoch and is not giving it up already; then a standby that holds off a
    /// poll, so that another replica takes it.
    pub(super) fn hand_over(&mut self, lease: &str, epoch: Epoch, fx: &mut Vec<Effect>) {
        let held = self.leases.get(lease).is_some_and(
            |state| matches!(state.phase, Phase::Held { epoch: held, .. } if held == epoch),
        );
        if !held || self.shutting_down {
            return;
        }
        fx.push(Effect::Announce(Announcement::HandoffRequested {
            lease: lease.to_string(),
            epoch,
        }));
        self.give_up(lease, After::Standby, fx);
    }

    /// Begins the ordered release of `lease` (docs/ARCHITECTURE.md §5.5): end the term and wait for
    /// it, then release. A lease not held goes straight to `then`.
    fn give_up(&mut self, lease: &str, then: After, fx: &mut Vec<Effect>) {
        let timeout = self.timing.store_timeout;
        let campaigning = self.campaigning.carries(lease);
        let Some(state) = self.leases.get_mut(lease) else {
            return;
        };
        match state.phase {
            Phase::Held {
                epoch,
                term: true,
                expires_by,
                ..
            } => {
                fx.push(Effect::EndTerm {
                    lease: lease.to_string(),
                    epoch,
                    reason: EndReason::Releasing,
                    confirm: true,
                });
                state.phase = Phase::Stopping {
                    epoch,
                    expires_by,
                    then,
                };
            }
            // Its term ended early and still drains: wait for it as for a running term.
            Phase::Held {
                epoch,
                term: false,
                expires_by,
                ..
            } if state.draining == Some(epoch) => {
                state.phase = Phase::Stopping {
                    epoch,
                    expires_by,
                    then,
                };
            }
            Phase::Held {
                epoch, term: false, ..
            } => {
                state.release(lease, epoch, then, timeout, fx);
            }
            // A grant being read is taken up or declined by its answer (`take_grant`).
            Phase::Standby { .. }
                if then == After::Done && !campaigning && state.claiming.is_none() =>
            {
                state.phase = Phase::Done;
            }
            // A step-down of a lease not held, a campaign in flight (its result decides), or a
            // release already under way: nothing to add.
            _ => {
                if let Phase::Stopping { then: t, .. } | Phase::Releasing { then: t, .. } =
                    &mut state.phase
                    && then == After::Done
                {
                    *t = After::Done;
                }
            }
        }
    }
}

fn after(then: After, now: Instant) -> Phase {
    match then {
        After::Done => Phase::Done,
        After::Standby => Phase::Standby { next_campaign: now },
    }
}

mod due;
mod renewal;
#[cfg(test)]
mod tests;
