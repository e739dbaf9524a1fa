//! `GET /v1/leases/NAME/watch`: this replica's view of one lease as Server-Sent Events, for an
//! app beside the host that does leader-only work.
//!
//! The stream opens with a `state` event (the lease as it is, and whether the client missed
//! anything since the `Last-Event-ID` it sent), then sends each change as it happens: `started`
//! (a term of the lease began here), `ended` (it ended, and why), `renewed` (a renewal moved
//! the deadline) and `heartbeat` (at least every [`heartbeat_every`], and at once when the role
//! changes without a term changing). Every event carries the same fields: the lease, this
//! replica's role, the epoch, `stop_within_ms` and the host's wall-clock `at_ms`. When terms
//! began or ended faster than the stream looked, a fresh `state` (with the count missed) stands
//! in for the `started` and `ended` it cannot tell one by one.
//!
//! `started`, `ended` and `state` carry an `id:` of `CHANGES@HOLDER`: how many times a term of
//! the lease has started or ended in this host process, and the process's holder id. A client
//! that reconnects with `Last-Event-ID` is told in the `state` event whether it missed a change
//! (and how many), or that it cannot be known (another process answers now).
//!
//! The rule for the client: its leader-only work may run until the `at` it received the last
//! event plus that event's `stop_within_ms`, and not a moment longer without news. A healthy stream
//! refreshes that at every renewal and heartbeat, so it never runs out while the term lasts.
//!
//! Nothing is queued per watcher: each is a few watch receivers and a timer, and an event is made
//! only when the connection can take it. How many watch at once, and how long a client that does
//! not read is kept, is the connection layer's business ([`super::guard`]).

use std::collections::VecDeque;
use std::convert::Infallible;
use std::time::{Duration, SystemTime};

use axum::http::HeaderMap;
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use tokio::sync::watch;
use tokio::time::{Instant, Interval, MissedTickBehavior};

use super::AppState;
use super::api::{accepts, not_acceptable, role_at, time_left};
use crate::lease::{Epoch, Leadership, Role, Term, Timing};

/// The longest between two events of a stream: a client learns within this that its stream is
/// gone even while nothing happens, and a proxy's idle timeout (often 30–60 s) never cuts it.
pub(crate) const MAX_HEARTBEAT: Duration = Duration::from_secs(2);

/// How often a stream sends a heartbeat: half the renewal interval (so a leader's client hears
/// of its deadline at least twice between renewals), at most [`MAX_HEARTBEAT`].
pub(crate) fn heartbeat_every(timing: &Timing) -> Duration {
    (timing.renew_interval / 2).min(MAX_HEARTBEAT)
}

/// The data of every event, the same shape for each (a contract: `docs/api/openapi.yaml`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub(crate) struct WatchData {
    /// The lease.
    pub lease: String,
    /// This replica's role at the event.
    pub role: Role,
    /// The epoch of this replica's term: the one that started, runs or ended; `null` when no
    /// term of the lease runs here (in `state` and `heartbeat`).
    pub epoch: Option<Epoch>,
    /// How long, in ms from the event, this replica's leader-only work may go on without
    /// further news; 0 when no term runs here.
    pub stop_within_ms: u64,
    /// When the host made the event (for `started` and `ended`: when the term started or
    /// ended), in ms since the Unix epoch by its wall clock.
    pub at_ms: u64,
    /// `ended` only: why the term ended (`released`, `lost`, `deadline`, `clock-step`, or
    /// `stopped` when the host stopped without a reason).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// `state` only, after a `Last-Event-ID` or mid-stream: whether a change happened since the
    /// last id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub missed: Option<bool>,
    /// `state` only, after a `Last-Event-ID` or mid-stream: how many changes were missed; absent
    /// when that cannot be known (the id is another host process's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub missed_changes: Option<u64>,
}

/// Answers a watch of `lease` (which exists): 406 unless the client takes event streams.
pub async fn serve(state: AppState, lease: String, headers: HeaderMap) -> Response {
    if !accepts(&headers, "text/event-stream") {
        return not_acceptable(&headers, "text/event-stream");
    }
    let Some(leadership) = state.leases.subscribe(&lease) else {
        return super::api::unknown_lease(&state, &lease);
    };
    let last_id = headers
        .get("last-event-id")
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
    let every = heartbeat_every(state.leases.timing());
    let mut watcher = Watcher::new(lease, state.leases.holder().to_string(), leadership, every);
    watcher.open(last_id.as_deref());
    let events = futures::stream::unfold(watcher, |mut w| async move {
        let event = w.next().await?;
        Some((Ok::<_, Infallible>(event), w))
    });
    Sse::new(events).into_response()
}

/// An event made and not yet sent: its kind, its id when it carries one, and its data.
#[derive(Debug)]
struct Told {
    kind: &'static str,
    id: Option<String>,
    data: WatchData,
}

impl Told {
    fn event(self) -> Event {
        let mut event = Event::default().event(self.kind);
        if let Some(id) = self.id {
            event = event.id(id);
        }
        // `WatchData` always serialises; an event without data would still tell its kind.
        match serde_json::to_string(&self.data) {
            Ok(json) => event.data(json),
            Err(_) => event,
        }
    }
}

/// One client's stream.
struct Watcher {
    /// The lease watched.
    lease: String,
    /// This process's holder id, in every id.
    holder: String,
    /// The lease's leadership as the driver publishes it.
    leadership: watch::Receiver<Leadership>,
    /// The term last reported running, until its end is reported.
    reported: Option<Term>,
    /// That term's deadline, moved by renewals.
    deadlines: Option<watch::Receiver<Instant>>,
    /// The change count of the last id sent.
    seen: u64,
    /// The role last reported.
    role: Role,
    /// Events made and not yet taken (at most a few: one look makes at most three).
    pending: VecDeque<Told>,
    /// When the next heartbeat is due.
    heartbeat: Interval,
}

impl Watcher {
    /// A stream of `lease` as `leadership` publishes it, with a heartbeat `every`; nothing is
    /// told before [`Watcher::open`].
    fn new(
        lease: String,
        holder: String,
        leadership: watch::Receiver<Leadership>,
        every: Duration,
    ) -> Self {
        let mut heartbeat = tokio::time::interval_at(Instant::now() + every, every);
        heartbeat.set_missed_tick_behavior(MissedTickBehavior::Delay);
        Watcher {
            lease,
            holder,
            leadership,
            reported: None,
            deadlines: None,
            seen: 0,
            role: Role::Standby,
            pending: VecDeque::new(),
            heartbeat,
        }
    }

    /// The opening `state` event, told against `last_id` when the client sent one.
    fn open(&mut self, last_id: Option<&str>) {
        let now = self.leadership.borrow_and_update().clone();
        let (missed, missed_changes) = match last_id {
            None => (None, None),
            Some(id) => match id.split_once('@') {
                Some((n, holder)) if holder == self.holder => match n.parse::<u64>() {
                    Ok(n) if n <= now.changes => (Some(n < now.changes), Some(now.changes - n)),
                    _ => (Some(true), None),
                },
                _ => (Some(true), None),
            },
        };
        self.state(&now, missed, missed_changes);
    }

    /// Pushes a `state` event of `now`, and takes its term as the one reported.
    fn state(&mut self, now: &Leadership, missed: Option<bool>, missed_changes: Option<u64>) {
        let live = now.term.clone().filter(|t| !t.is_cancelled());
        self.seen = now.changes;
        self.role = now.role;
        self.deadlines = live.as_ref().map(|t| {
            let mut d = t.deadlines();
            d.borrow_and_update();
            d
        });
        self.reported = live;
        let mut data = self.current(now.role);
        data.missed = missed;
        data.missed_changes = missed_changes;
        self.push("state", data, true);
    }

    /// The next event: one made already, else the next change, renewal or heartbeat. `None`
    /// once the lease's driver is gone (the host is stopping).
    async fn next(&mut self) -> Option<Event> {
        loop {
            if let Some(told) = self.pending.pop_front() {
                return Some(told.event());
            }
            tokio::select! {
                biased;
                changed = self.leadership.changed() => {
                    changed.ok()?;
                    self.look();
                }
                _ = term_ended(self.reported.as_ref().filter(|t| !t.is_cancelled())) => self.look(),
                moved = deadline_moved(self.deadlines.as_mut()) => {
                    if moved {
                        self.renewed();
                    } else {
                        self.deadlines = None;
                    }
                }
                _ = self.heartbeat.tick() => {
                    let role = self.leadership.borrow().role;
                    let data = self.current(role);
                    self.push("heartbeat", data, false);
                }
            }
        }
    }

    /// Looks at the leadership as it is now and makes the events that tell the change.
    fn look(&mut self) {
        let now = self.leadership.borrow_and_update().clone();
        if let Some(term) = self.reported.clone()
            && (term.is_cancelled() || now.term.as_ref().map(|t| t.change) != Some(term.change))
        {
            let published = now.term.as_ref().map(|t| t.change) != Some(term.change);
            if term.ended().is_none() && !published {
                // Cancelled from above (the host is stopping): the driver says why when it
                // publishes the end, within its step. Told then.
                return;
            }
            let end = term.ended();
            let mut data = self.data(now.role, Some(term.epoch));
            data.stop_within_ms = 0;
            data.reason = Some(end.map_or("stopped", |e| e.reason.as_str()).to_string());
            if let Some(end) = end {
                data.at_ms = unix_ms(end.at);
            }
            self.seen = term.change + 1;
            self.reported = None;
            self.deadlines = None;
            self.role = now.role;
            self.push("ended", data, true);
        }
        let live = now.term.clone().filter(|t| !t.is_cancelled());
        match live {
            Some(term) if self.reported.is_none() => {
                if term.change != self.seen + 1 {
                    // Terms came and went between two looks (a client that reads slowly).
                    let missed = now.changes.saturating_sub(self.seen);
                    return self.state(&now, Some(true), Some(missed));
                }
                let (epoch, began) = (term.epoch, term.began);
                self.seen = term.change;
                self.role = now.role;
                let mut deadlines = term.deadlines();
                deadlines.borrow_and_update();
                self.deadlines = Some(deadlines);
                self.reported = Some(term);
                let mut data = self.data(now.role, Some(epoch));
                data.at_ms = unix_ms(began);
                self.push("started", data, true);
            }
            None if now.changes > self.seen => {
                let missed = now.changes - self.seen;
                self.state(&now, Some(true), Some(missed));
            }
            _ if now.role != self.role => {
                // Held, but renewals fail (uncertain), or recovered: said at once.
                self.role = now.role;
                let data = self.current(now.role);
                self.push("heartbeat", data, false);
            }
            _ => {}
        }
    }

    /// A renewal moved the reported term's deadline.
    fn renewed(&mut self) {
        let role = self.leadership.borrow().role;
        if let Some(epoch) = self
            .reported
            .as_ref()
            .filter(|t| !t.is_cancelled())
            .map(|t| t.epoch)
        {
            let data = self.data(role, Some(epoch));
            self.push("renewed", data, false);
        }
    }

    /// The fields of a `state` or `heartbeat` in `role`: the reported term's epoch while it runs
    /// with time left (past its deadline, as in a host just resumed from a freeze, no work may
    /// run on it, whatever the lease loop has yet to publish).
    fn current(&self, role: Role) -> WatchData {
        let epoch = self
            .reported
            .as_ref()
            .filter(|t| !t.is_cancelled())
            .map(|t| t.epoch);
        let mut data = self.data(role, epoch);
        if data.stop_within_ms == 0 {
            data.epoch = None;
        }
        data
    }

    /// The fields every event has, as of now; `stop_within_ms` from the reported term when it
    /// is of `epoch`.
    fn data(&self, role: Role, epoch: Option<Epoch>) -> WatchData {
        let term = self.reported.as_ref().filter(|t| Some(t.epoch) == epoch);
        let left = time_left(term, Instant::now());
        WatchData {
            lease: self.lease.clone(),
            role: role_at(role, left),
            epoch,
            stop_within_ms: left,
            at_ms: unix_ms(SystemTime::now()),
            reason: None,
            missed: None,
            missed_changes: None,
        }
    }

    /// Queues an event named `kind`; with `id`, tagged with the change count last seen.
    fn push(&mut self, kind: &'static str, data: WatchData, id: bool) {
        let id = id.then(|| format!("{}@{}", self.seen, self.holder));
        self.pending.push_back(Told { kind, id, data });
        // Any event tells the client the stream lives: the next heartbeat is a full period on.
        self.heartbeat.reset();
    }
}

/// Resolves when `term` ends; never without one.
async fn term_ended(term: Option<&Term>) {
    match term {
        Some(term) => term.cancelled().await,
        None => std::future::pending().await,
    }
}

/// Resolves when a renewal moves the deadline (true) or the term's control is gone (false);
/// never without a term.
async fn deadline_moved(deadlines: Option<&mut watch::Receiver<Instant>>) -> bool {
    match deadlines {
        Some(d) => d.changed().await.is_ok(),
        None => std::future::pending().await,
    }
}

/// `at` in ms since the Unix epoch (0 for a clock before it).
fn unix_ms(at: SystemTime) -> u64 {
    at.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lease::coordinator::EndReason;
    use tokio_util::sync::CancellationToken;

    /// Publishes a term of `orders` at `epoch` as the driver does: its start is change `change`.
    fn leading(epoch: Epoch, change: u64) -> (Leadership, crate::lease::TermControl) {
        let (term, control) = Term::start(
            ("orders".to_string(), epoch, change),
            CancellationToken::new(),
            Instant::now() + Duration::from_secs(60),
            &crate::lease::seams::Seams::system(),
        );
        let leadership = Leadership {
            role: Role::Leader,
            epoch: Some(epoch),
            term: Some(term),
            changes: change,
        };
        (leadership, control)
    }

    fn standby(changes: u64) -> Leadership {
        Leadership {
            changes,
            ..Leadership::standby()
        }
    }

    fn told(watcher: &mut Watcher) -> Vec<(&'static str, Option<String>, WatchData)> {
        watcher
            .pending
            .drain(..)
            .map(|t| (t.kind, t.id, t.data))
            .collect()
    }

    #[tokio::test]
    async fn terms_that_came_and_went_between_two_looks_are_told_by_a_state_mid_stream() {
        let (tx, rx) = watch::channel(Leadership::standby());
        let mut watcher = Watcher::new("orders".into(), "h".into(), rx, Duration::from_secs(1));
        watcher.open(None);
        let opening = told(&mut watcher);
        assert_eq!(opening.len(), 1, "{opening:?}");
        assert_eq!(opening[0].0, "state");

        // Epoch 1 starts and ends, and epoch 2 starts, before the stream looks again: it tells
        // the lease as it is now, in a `state` that says three changes were missed.
        let (one, first) = leading(Epoch::new(1), 1);
        tx.send_replace(one);
        first.end_for(EndReason::Releasing);
        tx.send_replace(standby(2));
        let (two, second) = leading(Epoch::new(2), 3);
        tx.send_replace(two);
        watcher.look();
        let events = told(&mut watcher);
        assert_eq!(events.len(), 1, "{events:?}");
        let (kind, id, data) = &events[0];
        assert_eq!(*kind, "state");
        assert_eq!(id.as_deref(), Some("3@h"));
        assert_eq!((data.role, data.epoch), (Role::Leader, Some(Epoch::new(2))));
        assert!(data.stop_within_ms > 0, "{data:?}");
        assert_eq!((data.missed, data.missed_changes), (Some(true), Some(3)));

        // Epoch 2 ends (told by its `ended`), then epoch 3 comes and goes unseen: a `state`
        // again, standby, two changes missed.
        second.end_for(EndReason::Lost);
        tx.send_replace(standby(4));
        let (three, third) = leading(Epoch::new(3), 5);
        tx.send_replace(three);
        third.end_for(EndReason::SafeUntil);
        tx.send_replace(standby(6));
        watcher.look();
        let events = told(&mut watcher);
        let kinds: Vec<&str> = events.iter().map(|e| e.0).collect();
        assert_eq!(kinds, ["ended", "state"], "{events:?}");
        assert_eq!(events[0].2.reason.as_deref(), Some("lost"));
        assert_eq!(events[0].2.epoch, Some(Epoch::new(2)));
        let (_, id, data) = &events[1];
        assert_eq!(id.as_deref(), Some("6@h"));
        assert_eq!(
            (data.role, data.epoch, data.stop_within_ms),
            (Role::Standby, None, 0)
        );
        assert_eq!((data.missed, data.missed_changes), (Some(true), Some(2)));
    }
}
