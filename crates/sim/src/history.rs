//! What a run did, in true simulated time: the event log a seed's hash is taken of, and what the
//! oracle judges: each epoch won and by whom, how long the database let each term live, and
//! every side effect of a term's work. Replicas never read any of it.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use leasehold_lease::memory::faults::Witness;
use leasehold_lease_core::Epoch;
use sha2::{Digest, Sha256};

/// The one true clock of a run, in nanoseconds since it began: what the world loop advances and
/// what every record is stamped with. No replica reads it; the memory store's clock derives from
/// it (with the database's drift and steps).
#[derive(Debug, Clone, Default)]
pub struct TrueClock(Arc<AtomicU64>);

impl TrueClock {
    /// Now, since the run began.
    pub fn now(&self) -> Duration {
        Duration::from_nanos(self.0.load(Ordering::SeqCst))
    }

    /// Moves the clock to `to` (never back).
    pub fn set(&self, to: Duration) {
        let nanos = u64::try_from(to.as_nanos()).unwrap_or(u64::MAX);
        self.0.fetch_max(nanos, Ordering::SeqCst);
    }
}

/// A point of the run: true time, and the order of execution within one instant (the world
/// loop runs one replica at a time, so this order is a serialisation consistent with what
/// each saw of the others through the store).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct At {
    /// True time.
    pub t: Duration,
    /// Execution order.
    pub seq: u64,
}

/// One side effect of a term's work.
#[derive(Debug, Clone)]
pub struct Effect {
    /// When.
    pub at: At,
    /// The replica that ran it.
    pub replica: String,
    /// The lease.
    pub lease: String,
    /// The term's epoch.
    pub epoch: Epoch,
}

/// An epoch handed out.
#[derive(Debug, Clone)]
pub struct Win {
    /// When the store applied the campaign.
    pub at: At,
    /// The lease.
    pub lease: String,
    /// The epoch.
    pub epoch: Epoch,
    /// The holder id that won it.
    pub holder: String,
}

/// A replica's machine suspended: its monotonic clock stopped while true time ran on.
#[derive(Debug, Clone)]
pub struct Suspend {
    /// The replica.
    pub replica: String,
    /// Since when.
    pub since: Duration,
    /// For how long.
    pub for_: Duration,
    /// The terms it ran then.
    pub terms: Vec<(String, Epoch)>,
    /// When the first answer the database gave after it reached the replica.
    pub answer: Option<Duration>,
}

/// A broken promise, found while the run went on or by the oracle after it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// Which promise.
    pub rule: &'static str,
    /// What happened, with times.
    pub detail: String,
}

/// The record itself; shared by the world, the fault layers of every replica and the work of
/// every term.
#[derive(Debug, Default)]
pub struct Record {
    seq: u64,
    /// Every line of the event log.
    pub log: Vec<String>,
    /// Epochs won, in execution order.
    pub wins: Vec<Win>,
    /// The newest epoch handed out of each lease.
    pub newest: BTreeMap<String, Epoch>,
    /// Until when (true time) the database lets each term live, by the statements that
    /// applied: the apply time plus the ttl on the database's clock, steps left out.
    pub expiries: BTreeMap<(String, Epoch), Duration>,
    /// Every side effect.
    pub effects: Vec<Effect>,
    /// Promises found broken while the run went on.
    pub violations: Vec<Violation>,
    /// Releases the store applied: lease, epoch, when.
    pub releases: Vec<(String, Epoch, Duration)>,
    /// Handoffs an operator asked for: lease, epoch asked, the replica named if any, and when
    /// the request was answered.
    pub handoffs: Vec<(String, Epoch, Option<String>, Duration)>,
    /// Shut health gates: (replica, lease) -> since when, counting from the later of the shut
    /// and the replica's last resume (a frozen replica cannot act on it).
    pub gated: BTreeMap<(String, String), Duration>,
    /// How long a campaign sent before a gate shut may still land: the store timeout, and two
    /// world steps.
    pub gate_slack: Duration,
    /// How long after its health gate shut a standby may still be given a lease by a release
    /// or another's campaign: its place in line lasts that long (`Timing::in_line_for`) beyond
    /// [`Record::gate_slack`]. It may not run work of it: it declines the grant.
    pub grant_slack: Duration,
    /// Replicas whose monotonic clock stopped (a suspended machine), and until when their work
    /// is outside the model: from the suspend to shortly after the first answer their
    /// coordinator gets (`None` until then), when the clock watch must have ended its terms.
    pub unbound: BTreeMap<String, (Duration, Option<Duration>)>,
    /// Terms that were running on a replica when its machine was suspended, or began before its
    /// clock watch could read the lost time: their deadline no longer protects, by design.
    pub unbound_terms: BTreeSet<(String, Epoch)>,
    /// Each suspend: the replica, since when, for how long, the terms it ran, and when the first
    /// answer the database gave after it reached the replica.
    pub suspends: Vec<Suspend>,
    /// When the work of each term stopped: (lease, epoch) -> true time.
    pub stops: BTreeMap<(String, Epoch), Duration>,
    /// When the database's clock stepped or the store failed over: a reservation (kept by the
    /// database's clock, in a commit a failover can lose) may end early across one.
    pub store_events: Vec<Duration>,
    /// Whether to print each log line as it is written (`make sim SEED=…`).
    pub echo: bool,
}

/// The record, shared.
#[derive(Debug, Clone, Default)]
pub struct History {
    record: Arc<Mutex<Record>>,
    clock: TrueClock,
}

impl History {
    /// An empty history on `clock`.
    pub fn new(clock: TrueClock, echo: bool) -> History {
        let history = History {
            record: Arc::default(),
            clock,
        };
        history.lock().echo = echo;
        history
    }

    /// The true clock.
    pub fn clock(&self) -> &TrueClock {
        &self.clock
    }

    /// The record, locked. Nothing holds it across an await.
    pub fn lock(&self) -> MutexGuard<'_, Record> {
        self.record.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Now, as the next point of the run.
    pub fn at(&self) -> At {
        let mut record = self.lock();
        record.seq += 1;
        At {
            t: self.clock.now(),
            seq: record.seq,
        }
    }

    /// Writes a line of the event log.
    pub fn note(&self, text: impl AsRef<str>) {
        let t = self.clock.now();
        let mut record = self.lock();
        record.seq += 1;
        let line = format!("{:>10.3} {}", t.as_secs_f64() * 1000.0, text.as_ref());
        if record.echo {
            println!("{line}");
        }
        record.log.push(line);
    }

    /// Records a broken promise at once (and in the log).
    pub fn violation(&self, rule: &'static str, detail: String) {
        self.note(format!("VIOLATION {rule}: {detail}"));
        self.lock().violations.push(Violation { rule, detail });
    }

    /// Records that the store handed `epoch` of `lease` to `holder`; it lives until `until`
    /// (true time) unless renewed. Judges it at once: no replica wins a lease it has been gated
    /// from for longer than a campaign already in flight could take.
    pub fn won(&self, lease: &str, epoch: Epoch, holder: &str, until: Duration) {
        self.handed(lease, epoch, holder, until, false);
    }

    /// Records that the store gave `epoch` of `lease` to the waiter `holder` (a release's or
    /// another replica's campaign); the grant lives until `until` unless renewed. Judged as a
    /// win, except that a standby's place in line outlives its gate's shutting by a little.
    pub fn granted(&self, lease: &str, epoch: Epoch, holder: &str, until: Duration) {
        self.handed(lease, epoch, holder, until, true);
    }

    /// [`History::won`] and [`History::granted`].
    fn handed(&self, lease: &str, epoch: Epoch, holder: &str, until: Duration, grant: bool) {
        let at = self.at();
        let how = if grant { "was given" } else { "won" };
        self.note(format!("store: {holder} {how} {lease} at epoch {epoch}"));
        let replica = replica_of(holder);
        let gated = {
            let record = self.lock();
            let slack = if grant {
                record.grant_slack
            } else {
                record.gate_slack
            };
            record
                .gated
                .get(&(replica.to_string(), lease.to_string()))
                .copied()
                .filter(|&since| at.t > since + slack)
        };
        if let Some(since) = gated {
            self.violation(
                "a gated standby does not take the lease",
                format!(
                    "{holder} won {lease} at epoch {epoch} at {:.3} ms, its health gate shut since {:.3} ms",
                    ms(at.t),
                    ms(since)
                ),
            );
        }
        let mut record = self.lock();
        let newest = record.newest.entry(lease.to_string()).or_default();
        *newest = (*newest).max(epoch);
        record.wins.push(Win {
            at,
            lease: lease.to_string(),
            epoch,
            holder: holder.to_string(),
        });
        let entry = record
            .expiries
            .entry((lease.to_string(), epoch))
            .or_default();
        *entry = (*entry).max(until);
    }

    /// Records that a renewal of `epoch` of `lease` applied: the term lives until `until`.
    pub fn renewed(&self, lease: &str, epoch: Epoch, until: Duration) {
        let mut record = self.lock();
        let entry = record
            .expiries
            .entry((lease.to_string(), epoch))
            .or_default();
        *entry = (*entry).max(until);
    }

    /// Records that the database let go of `epoch` of `lease` now (a release): no work of it may
    /// come after.
    pub fn released(&self, lease: &str, epoch: Epoch) {
        let now = self.clock.now();
        let mut record = self.lock();
        if let Some(until) = record.expiries.get_mut(&(lease.to_string(), epoch)) {
            *until = (*until).min(now);
        }
        record.releases.push((lease.to_string(), epoch, now));
    }

    /// `replica`'s machine was suspended: its work is outside the model until its clock watch
    /// has had an answer to read the lost time from.
    /// `terms` are the terms it runs now.
    pub fn suspended(&self, replica: &str, for_: Duration, terms: Vec<(String, Epoch)>) {
        let now = self.clock.now();
        let mut record = self.lock();
        record.unbound.insert(replica.to_string(), (now, None));
        record.unbound_terms.extend(terms.iter().cloned());
        record.suspends.push(Suspend {
            replica: replica.to_string(),
            since: now,
            for_,
            terms,
            answer: None,
        });
    }

    /// `replica`'s process died: the work of every term it ran stopped with it.
    pub fn crashed(&self, replica: &str) {
        let now = self.clock.now();
        let mut record = self.lock();
        let terms: Vec<(String, Epoch)> = record
            .suspends
            .iter()
            .filter(|s| s.replica == replica)
            .flat_map(|s| s.terms.iter().cloned())
            .collect();
        for term in terms {
            record.stops.entry(term).or_insert(now);
        }
    }

    /// Records that the work of `epoch` of `lease` stopped now.
    pub fn stopped(&self, lease: &str, epoch: Epoch) {
        let now = self.clock.now();
        self.lock().stops.insert((lease.to_string(), epoch), now);
    }

    /// Records one side effect of the work of `epoch` of `lease` on `replica`, and judges it
    /// at once: no work of a term after the time the database lets it live, by true time.
    pub fn effect(&self, replica: &str, lease: &str, epoch: Epoch) {
        let at = self.at();
        let unbound = {
            let mut record = self.lock();
            let term = (lease.to_string(), epoch);
            let window = match record.unbound.get(replica) {
                Some((_, None)) => true,
                Some((_, Some(until))) if at.t <= *until => true,
                Some((_, Some(_))) => {
                    record.unbound.remove(replica);
                    false
                }
                None => false,
            };
            if window {
                record.unbound_terms.insert(term.clone());
            }
            window || record.unbound_terms.contains(&term)
        };
        if unbound {
            // Outside the model (a suspended clock): recorded, not judged.
            return;
        }
        let until = self
            .lock()
            .expiries
            .get(&(lease.to_string(), epoch))
            .copied();
        match until {
            Some(until) if at.t < until => {}
            Some(until) => self.violation(
                "no work after the term's deadline",
                format!(
                    "{replica} worked for {lease} at epoch {epoch} at {:.3} ms, after the database let the term go at {:.3} ms",
                    ms(at.t),
                    ms(until)
                ),
            ),
            None => self.violation(
                "no work after the term's deadline",
                format!(
                    "{replica} worked for {lease} at epoch {epoch} at {:.3} ms, an epoch the store never handed out",
                    ms(at.t)
                ),
            ),
        }
        self.lock().effects.push(Effect {
            at,
            replica: replica.to_string(),
            lease: lease.to_string(),
            epoch,
        });
    }

    /// Records that the fence accepted a write of `epoch` of `lease` from `replica`, and judges
    /// it: no write of an epoch once a later one of the lease was handed out.
    pub fn fenced_write(&self, replica: &str, lease: &str, epoch: Epoch) {
        let newest = self.lock().newest.get(lease).copied();
        if let Some(newest) = newest.filter(|&n| n > epoch) {
            let t = self.clock.now();
            self.violation(
                "no fenced write from an old epoch",
                format!(
                    "the fence accepted {replica}'s write to {lease} at epoch {epoch} at {:.3} ms, after epoch {newest} was handed out",
                    ms(t)
                ),
            );
        }
    }

    /// The SHA-256 of the event log, in hex.
    pub fn hash(&self) -> String {
        let record = self.lock();
        let mut h = Sha256::new();
        for line in &record.log {
            h.update(line.as_bytes());
            h.update(b"\n");
        }
        let mut out = String::new();
        for b in h.finalize() {
            let _ = write!(out, "{b:02x}");
        }
        out
    }
}

impl Witness for History {
    fn now(&self) -> Duration {
        self.clock.now()
    }
    fn note(&self, text: String) {
        History::note(self, text);
    }
    fn won(&self, lease: &str, epoch: Epoch, holder: &str, until: Duration) {
        History::won(self, lease, epoch, holder, until);
    }
    fn renewed(&self, lease: &str, epoch: Epoch, until: Duration) {
        History::renewed(self, lease, epoch, until);
    }
    fn released(&self, lease: &str, epoch: Epoch) {
        History::released(self, lease, epoch);
    }
    fn granted(&self, lease: &str, epoch: Epoch, holder: &str, until: Duration) {
        History::granted(self, lease, epoch, holder, until);
    }
    fn answered(&self, holder: &str, applied_at: Duration) {
        // Only an answer the database gave after the suspend began shows the lost time (one
        // already on its way carries the old clock). Work under way may still land after it: a
        // drain of up to 20 ms, and a world step.
        let until = self.clock.now() + Duration::from_millis(45);
        let now = self.clock.now();
        let mut record = self.lock();
        if let Some((since, end @ None)) = record.unbound.get_mut(replica_of(holder))
            && applied_at > *since
        {
            *end = Some(until);
        }
        for suspend in record.suspends.iter_mut() {
            if suspend.replica == replica_of(holder)
                && suspend.answer.is_none()
                && applied_at > suspend.since
            {
                suspend.answer = Some(now);
            }
        }
    }
}

/// The replica id a holder id starts with (`r1-0176406f` is `r1`'s).
pub fn replica_of(holder: &str) -> &str {
    holder
        .rsplit_once('-')
        .map_or(holder, |(replica, _)| replica)
}

/// Milliseconds, for reports.
pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
