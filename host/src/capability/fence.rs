//! The fence (docs/ARCHITECTURE.md §4): a write to the lease database commits only inside a
//! transaction that locks this lease's row `FOR SHARE` and finds `holder = me AND epoch = mine AND
//! expires_at > now`. The share lock makes a campaign (which must update the row) wait until the
//! write commits or rolls back, so a newer epoch cannot come into existence between a passed check
//! and the commit; a write whose check fails (a newer epoch exists, or the lease expired) is rolled
//! back and changes nothing.
//!
//! The check is the transaction's last statement before `COMMIT` (docs/ARCHITECTURE.md §4):
//! checking first would keep the lease row locked for as long as the plugin's statements run, and
//! the holder's renewal of every lease, batched in one statement, would wait for them. Checking
//! last is as safe, since whatever ran before it is kept only if the check passes. A kv write is
//! one statement with the check in a CTE, so its lock too lasts only to its commit.

use super::error::CapabilityError;
use crate::lease::{Epoch, Term};

/// PostgreSQL: locks the lease row for the rest of the transaction and returns it only when this
/// replica holds the lease at this epoch. Parameters: name, holder, epoch.
pub(crate) const POSTGRES_CHECK: &str = "SELECT 1 FROM leasehold_leases
     WHERE name = $1 AND holder = $2 AND epoch = $3 AND expires_at > clock_timestamp()
     FOR SHARE";

/// [`POSTGRES_CHECK`] for a plugin's session, on the lease store's table, through `function`:
/// [`POSTGRES_FUNCTION`] qualified with the lease store's schema (see [`super::identity`]),
/// a function of the schema's owner that runs with its rights, so the plugin's role needs no
/// privilege on the lease table, and that asks for the host's fence key, so the plugin cannot
/// take the lock itself. With the name qualified and the parameters typed by the driver, neither
/// the role's `search_path` nor a `SET LOCAL search_path` among the plugin's statements can put
/// a look-alike in front of it.
/// Parameters: name, holder, epoch, the fence key, and how long to wait for the row (ms).
pub(crate) fn postgres_check_in(function: &str) -> String {
    format!("SELECT {function}($1, $2, $3, $4, $5)")
}

/// The fence function's name, to be qualified with the lease store's schema for
/// [`postgres_check_in`].
pub(crate) const POSTGRES_FUNCTION: &str = "leasehold_fence";

/// SQLite, inside a `BEGIN IMMEDIATE` transaction (which already holds the only write lock).
/// Parameters: name, holder, epoch, and the machine clock's now and boot
/// ([`crate::lease::sqlite::MachineClock`], read after the lock was taken).
pub(crate) const SQLITE_CHECK: &str = "SELECT 1 FROM leasehold_leases
     WHERE name = ?1 AND holder = ?2 AND epoch = ?3 AND expires_at_ms > ?4 AND boot = ?5";

/// Who writes: the lease, this replica's holder id and the term the plugin runs under.
#[derive(Debug, Clone)]
pub struct Fence {
    /// The lease name.
    pub lease: String,
    /// This replica's holder id.
    pub holder: String,
    /// The term, or `None` on a standby (which may not write).
    term: Option<Term>,
}

impl Fence {
    /// The fence of `holder` writing under `term` of `lease`.
    pub fn new(lease: String, holder: String, term: Option<Term>) -> Self {
        Fence {
            lease,
            holder,
            term,
        }
    }

    /// The epoch the plugin runs under (0 on a standby, which no lease row has).
    pub fn epoch(&self) -> Epoch {
        self.term.as_ref().map(|t| t.epoch).unwrap_or_default()
    }

    /// The error of a write refused by the fence.
    pub fn lost(&self) -> CapabilityError {
        CapabilityError::LeaseLost {
            lease: self.lease.clone(),
            epoch: self.epoch(),
        }
    }

    /// True once the term has ended or reached its local deadline: the lease may be another
    /// replica's by now.
    pub fn expired_locally(&self) -> bool {
        match &self.term {
            None => true,
            Some(term) => !term.is_live(),
        }
    }

    /// Refuses at once, without a round trip, when the term is over by the local clock.
    pub fn check_local(&self) -> Result<(), CapabilityError> {
        if self.expired_locally() {
            Err(self.lost())
        } else {
            Ok(())
        }
    }

    /// A failure of a fenced write before its commit was sent: past the local deadline it is a
    /// lost lease (the server rolled the transaction back, e.g. when it ended the session of a
    /// holder frozen mid-transaction); before it, the driver's own error.
    pub fn failed_before_commit(&self, what: &str, error: &sqlx::Error) -> CapabilityError {
        if self.expired_locally() {
            self.lost()
        } else {
            CapabilityError::from_driver(what, error)
        }
    }
}
