//! What the rest of the host sees of a lease: its role, epoch and, while this replica leads, the
//! current leadership [`Term`]. Published on a `watch` channel per lease so the plugin supervisor
//! can follow leadership without polling.

use std::future::Future;
use std::sync::{Arc, OnceLock};
use std::time::SystemTime;

use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};
use tokio_util::task::TaskTracker;

use crate::seams::{self, Seams};
use leasehold_lease_core::epoch::Epoch;
pub use leasehold_lease_core::role::{EndReason, Role};

/// One lease's leadership as published to subscribers.
#[derive(Debug, Clone)]
pub struct Leadership {
    /// The role.
    pub role: Role,
    /// The epoch held, while leader or uncertain.
    pub epoch: Option<Epoch>,
    /// The running term, while leader.
    pub term: Option<Term>,
    /// How many times a term of this lease has started or ended on this replica since the
    /// process started: a follower that saw a smaller count missed that many changes.
    pub changes: u64,
}

impl Leadership {
    /// The state of a lease this replica does not hold.
    pub fn standby() -> Self {
        Leadership {
            role: Role::Standby,
            epoch: None,
            term: None,
            changes: 0,
        }
    }
}

/// How a term ended: why, and when by the wall clock (for a follower's account of it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TermEnd {
    /// Why.
    pub reason: EndReason,
    /// When the driver ended it.
    pub at: SystemTime,
}

/// One leadership term: from acquisition (or recovery) of a lease to its loss, release or
/// `safe_until`. Everything a plugin does for the lease runs under the term's token and tracker;
/// the token is cancelled no later than `safe_until`.
#[derive(Debug, Clone)]
pub struct Term {
    /// The lease name.
    pub lease: String,
    /// The fencing epoch of this term.
    pub epoch: Epoch,
    /// [`Leadership::changes`] as this term started (its end is the next change).
    pub change: u64,
    /// When the term started, by the wall clock.
    pub began: SystemTime,
    /// Cancelled when the term ends; a child of the process's root token.
    token: CancellationToken,
    /// How it ended, once the driver ends it (unset when its control was dropped instead).
    ended: Arc<OnceLock<TermEnd>>,
    /// Tracks the term's tasks so the holder can confirm they are gone before releasing.
    tracker: TaskTracker,
    /// The local deadline by which the term ends unless a renewal lands; moves forward on renewals.
    safe_until: watch::Receiver<Instant>,
}

/// What ends a [`Term`] and moves its deadline: held by the lease driver (or by whoever made a
/// [`Term::standalone`]). Dropping it ends the term: a term nobody controls must not go on.
#[derive(Debug)]
pub struct TermControl {
    /// Ends the term.
    token: CancellationToken,
    /// The term's tasks, waited for before a release.
    tracker: TaskTracker,
    /// Moves the term's deadline.
    safe_until: watch::Sender<Instant>,
    /// Where the end is recorded, shared with the term.
    ended: Arc<OnceLock<TermEnd>>,
    /// The wall clock the end is recorded by.
    seams: Seams,
}

impl TermControl {
    /// Ends the term, as a lost lease does: its token is cancelled and its tracker closed.
    pub fn end(&self) {
        self.token.cancel();
        self.tracker.close();
    }

    /// [`TermControl::end`], recording `reason` first so that whoever sees the term end can
    /// read why.
    pub fn end_for(&self, reason: EndReason) {
        let _ = self.ended.set(TermEnd {
            reason,
            at: self.seams.wall(),
        });
        self.end();
    }

    /// Resolves once the term has ended and every task of it has finished.
    pub async fn stopped(&self) {
        self.token.cancelled().await;
        self.tracker.close();
        self.tracker.wait().await;
    }

    /// Moves the term's deadline, as a landed renewal does.
    pub fn extend(&self, safe_until: Instant) {
        self.safe_until.send_replace(safe_until);
    }
}

impl Drop for TermControl {
    fn drop(&mut self) {
        self.token.cancel();
    }
}

impl Term {
    /// Starts a term of `lease` at `epoch` under `token` (a child of the process's root), to end
    /// no later than `safe_until`; the driver keeps the [`TermControl`].
    /// `change` is the lease's [`Leadership::changes`] count with this start.
    /// Its wall-clock times (began, ended) come from `seams`.
    pub fn start(
        (lease, epoch, change): (String, Epoch, u64),
        token: CancellationToken,
        safe_until: Instant,
        seams: &Seams,
    ) -> (Term, TermControl) {
        let tracker = TaskTracker::new();
        let (tx, rx) = watch::channel(safe_until);
        let ended = Arc::new(OnceLock::new());
        let term = Term {
            lease,
            epoch,
            change,
            began: seams.wall(),
            token: token.clone(),
            ended: ended.clone(),
            tracker: tracker.clone(),
            safe_until: rx,
        };
        let control = TermControl {
            token,
            tracker,
            safe_until: tx,
            ended,
            seams: seams.clone(),
        };
        (term, control)
    }

    /// A term made outside the lease driver, with the controls the driver would hold: for
    /// benchmarks and tests of what runs under a term. It ends when `control` ends it or is
    /// dropped.
    pub fn standalone(lease: &str, epoch: Epoch, safe_until: Instant) -> (Term, TermControl) {
        Term::start(
            (lease.to_string(), epoch, 1),
            CancellationToken::new(),
            safe_until,
            &Seams::system(),
        )
    }

    /// True once the term has ended.
    pub fn is_cancelled(&self) -> bool {
        self.token.is_cancelled()
    }

    /// Resolves when the term ends.
    pub fn cancelled(&self) -> WaitForCancellationFutureOwned {
        self.token.clone().cancelled_owned()
    }

    /// How the term ended, once the driver has ended it.
    pub fn ended(&self) -> Option<TermEnd> {
        self.ended.get().copied()
    }

    /// A child token of the term, for work that may end sooner.
    pub fn child_token(&self) -> CancellationToken {
        self.token.child_token()
    }

    /// The current local deadline of the term.
    pub fn safe_until(&self) -> Instant {
        *self.safe_until.borrow()
    }

    /// The term's deadline as renewals move it, for work that must pass it on (a process's
    /// keeper keeps it apart from the host).
    pub fn deadlines(&self) -> watch::Receiver<Instant> {
        self.safe_until.clone()
    }

    /// Whether work of this term may run at `now`: the term has not ended and its local deadline
    /// is still ahead on the monotonic clock.
    ///
    /// This, not the token, is the rule (docs/ARCHITECTURE.md §3.4): after a freeze every timer is
    /// due at once and tasks run in any order, so a task may run before the driver has ended the
    /// term. The clock decides; the token only hurries things along.
    pub fn is_live_at(&self, now: Instant) -> bool {
        !self.token.is_cancelled() && now < self.safe_until()
    }

    /// [`Term::is_live_at`] now.
    pub fn is_live(&self) -> bool {
        self.is_live_at(seams::now())
    }

    /// After the deadline passed: waits until a renewal that landed in time moves it forward
    /// again (true) or the term ends (false). Resolves at once when the term is live.
    pub async fn resumed(&self) -> bool {
        let mut safe_until = self.safe_until.clone();
        loop {
            if self.token.is_cancelled() {
                return false;
            }
            if seams::now() < *safe_until.borrow_and_update() {
                return true;
            }
            tokio::select! {
                biased;
                _ = self.token.cancelled() => return false,
                changed = safe_until.changed() => if changed.is_err() { return false },
            }
        }
    }

    /// Runs `task` as part of the term: the holder waits for it to finish before releasing the lease.
    pub fn spawn<F>(&self, task: F) -> tokio::task::JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.tracker.spawn(task)
    }
}
