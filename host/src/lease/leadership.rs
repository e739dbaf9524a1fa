//! What the rest of the host sees of a lease: its role, epoch and, while this replica leads, the
//! current leadership [`Term`]. Published on a `watch` channel per lease so the plugin supervisor
//! can follow leadership without polling.

use std::future::Future;

use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};
use tokio_util::task::TaskTracker;

use super::store::Epoch;

/// This replica's role for one lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Not holding the lease; campaigning when it is free.
    Standby,
    /// Holding the lease with a running term.
    Leader,
    /// Holding the lease by the last landed renewal, but renewals are failing (or the lease is
    /// being released): no term runs past `safe_until`.
    Uncertain,
}

/// One lease's leadership as published to subscribers.
#[derive(Debug, Clone)]
pub struct Leadership {
    /// The role.
    pub role: Role,
    /// The epoch held, while leader or uncertain.
    pub epoch: Option<Epoch>,
    /// The running term, while leader.
    pub term: Option<Term>,
}

impl Leadership {
    /// The state of a lease this replica does not hold.
    pub fn standby() -> Self {
        Leadership {
            role: Role::Standby,
            epoch: None,
            term: None,
        }
    }
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
    /// Cancelled when the term ends; a child of the process's root token.
    token: CancellationToken,
    /// Tracks the term's tasks so the holder can confirm they are gone before releasing.
    tracker: TaskTracker,
    /// The local deadline by which the term ends unless a renewal lands; moves forward on renewals.
    safe_until: watch::Receiver<Instant>,
}

impl Term {
    pub(crate) fn new(
        lease: String,
        epoch: Epoch,
        token: CancellationToken,
        tracker: TaskTracker,
        safe_until: watch::Receiver<Instant>,
    ) -> Self {
        Term {
            lease,
            epoch,
            token,
            tracker,
            safe_until,
        }
    }

    /// True once the term has ended.
    pub fn is_cancelled(&self) -> bool {
        self.token.is_cancelled()
    }

    /// Resolves when the term ends.
    pub fn cancelled(&self) -> WaitForCancellationFutureOwned {
        self.token.clone().cancelled_owned()
    }

    /// A child token of the term, for work that may end sooner.
    pub fn child_token(&self) -> CancellationToken {
        self.token.child_token()
    }

    /// The current local deadline of the term.
    pub fn safe_until(&self) -> Instant {
        *self.safe_until.borrow()
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
