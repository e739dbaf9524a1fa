//! An operator's graceful step-down, as `leasehold leases handoff` and the admin API ask for it:
//! [`request`] asks the holder of a lease to release it in order now (optionally for a named
//! replica), and [`wait`] watches the lease's row until another term has begun, or the time is up.
//! Both only read and write through the store's operators' connections
//! ([`LeaseStore::request_handoff`], [`LeaseStore::get`], [`LeaseStore::terms`]), never those the
//! lease loop renews on.

use std::time::Duration;

use super::history::TermEnd;
use super::store::is_reserved_for;
use super::{Epoch, LeaseName, LeaseStore, StoreError};
use crate::text::escape_controls;

/// The least a handoff waits by default: a replica that learns of a release by polling needs a
/// moment even at a short ttl, and an operator would rather wait than see a false timeout.
pub const MIN_WAIT: Duration = Duration::from_secs(10);

/// How often [`wait`] reads the lease's row: quick enough to report the milliseconds a handoff
/// takes, and a cheap read by primary key on the observers' connections.
pub const POLL: Duration = Duration::from_millis(10);

/// How many of the lease table's names [`request`] looks through for the names close to one
/// that has no row: the first page of `leases list`, enough for any table a person types into.
const NAMES_SEARCHED: u32 = 10_000;

/// Why a handoff could not be asked for; each variant is what failed.
#[derive(Debug, thiserror::Error)]
pub enum HandoffError {
    /// The lease table has no row of that name: no replica has ever held it.
    #[error(
        "no lease named {lease}: no replica has ever held it{}",
        did_you_mean(close)
    )]
    NoSuchLease {
        /// The name asked for.
        lease: String,
        /// Names of the table close to it, for a misspelling; possibly none.
        close: Vec<String>,
    },
    /// Nobody holds the lease now: there is nothing to hand over, and a replica that campaigns
    /// for it takes it by itself.
    #[error(
        "lease {lease} is not held by anyone: there is nothing to hand over (a replica that campaigns for it takes it by itself)"
    )]
    NotHeld {
        /// The lease.
        lease: String,
    },
    /// The replica to hand the lease to is not a replica id or holder id.
    #[error("invalid replica {:?} to hand over to: {reason}", escape_controls(to))]
    InvalidTo {
        /// The replica as given.
        to: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The replica named to take the lease holds it already.
    #[error(
        "lease {lease} is held by {} already, the replica named to take it ({})",
        escape_controls(holder),
        escape_controls(to)
    )]
    AlreadyHeldByTo {
        /// The lease.
        lease: String,
        /// Its holder id.
        holder: String,
        /// The replica named, as given.
        to: String,
    },
    /// The store could not be read or written.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// `; did you mean a or b?` for names close to a missing one, else nothing.
fn did_you_mean(close: &[String]) -> String {
    match close {
        [] => String::new(),
        close => format!("; did you mean {}?", close.join(" or ")),
    }
}

/// A handoff asked for: the term whose holder was asked to release.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Asked {
    /// The lease.
    pub lease: LeaseName,
    /// The holder id asked to release it.
    pub holder: String,
    /// The epoch of the term asked to end; a later term of the lease is not concerned.
    pub epoch: Epoch,
    /// The ttl the holder took the lease with: how long a `to` reservation lasts.
    pub ttl: Duration,
    /// The replica the lease is reserved for after the release, if one was named.
    pub to: Option<String>,
}

impl Asked {
    /// How long to wait for the lease to change hands when the operator did not say: twice its
    /// ttl, at least [`MIN_WAIT`]. The holder hears of the request at its next renewal (within
    /// ttl/3) even when the wake-up is lost, and a `to` reservation lasts one ttl.
    pub fn default_timeout(&self) -> Duration {
        (self.ttl * 2).max(MIN_WAIT)
    }
}

/// What became of a handoff asked for, as [`wait`] saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Another term has begun.
    Moved {
        /// The new holder id.
        holder: String,
        /// The new term's epoch.
        epoch: Epoch,
        /// How the asked term ended as the cluster recorded it (`released`: the ordered release,
        /// plugins stopped first); `None` when the terms could not be read.
        ended: Option<TermEnd>,
    },
    /// The holder gave the lease up, but no replica took it within the time.
    Released {
        /// How the asked term ended, as for [`Outcome::Moved`].
        ended: Option<TermEnd>,
    },
    /// The holder did not hand it over within the time: it may be gone, or cut off.
    Kept,
}

impl Outcome {
    /// Whether the lease went to another replica than the one `asked` named (the reservation
    /// lapsed before that replica campaigned).
    pub fn missed(&self, asked: &Asked) -> bool {
        match (self, &asked.to) {
            (Outcome::Moved { holder, .. }, Some(to)) => !is_reserved_for(to, holder),
            _ => false,
        }
    }
}

/// Checks the replica a lease is to be handed to: a replica id or a holder id.
pub fn check_to(to: &str) -> Result<(), HandoffError> {
    super::identity::check_replica_id(to).map_err(|reason| HandoffError::InvalidTo {
        to: to.to_string(),
        reason,
    })
}

/// Asks the holder of `lease` to release it in order now; with `to`, the release reserves it
/// for that replica for one ttl. Refuses a lease that has no row, one nobody holds, and a `to`
/// that holds it already.
pub async fn request(
    store: &dyn LeaseStore,
    lease: &LeaseName,
    to: Option<&str>,
) -> Result<Asked, HandoffError> {
    if let Some(to) = to {
        check_to(to)?;
    }
    let name = lease.to_string();
    let not_held = || HandoffError::NotHeld {
        lease: name.clone(),
    };
    let Some(row) = store
        .get(std::slice::from_ref(&name))
        .await?
        .into_iter()
        .next()
    else {
        return Err(HandoffError::NoSuchLease {
            close: close_names(store, &name).await,
            lease: name,
        });
    };
    if !row.is_held() {
        return Err(not_held());
    }
    if let Some(to) = to
        && is_reserved_for(to, &row.holder)
    {
        return Err(HandoffError::AlreadyHeldByTo {
            lease: name,
            holder: row.holder,
            to: to.to_string(),
        });
    }
    let asked = store
        .request_handoff(&name, to)
        .await?
        .ok_or_else(not_held)?;
    Ok(Asked {
        lease: lease.clone(),
        holder: asked.holder,
        epoch: asked.epoch,
        ttl: Duration::from_millis(u64::try_from(asked.ttl_ms).unwrap_or(0)),
        to: to.map(str::to_string),
    })
}

/// The names of the lease table close to `name`, for a misspelt one; none when the table
/// cannot be read (the hint is a courtesy, the error stands without it).
async fn close_names(store: &dyn LeaseStore, name: &str) -> Vec<String> {
    let names: Vec<String> = store
        .list(None, NAMES_SEARCHED)
        .await
        .map(|rows| rows.into_iter().map(|r| r.name).collect())
        .unwrap_or_default();
    crate::text::similar(name, names.iter().map(String::as_str))
        .into_iter()
        .map(str::to_string)
        .collect()
}

/// Reads the lease's row every [`POLL`] until a term after the one `asked` has begun, or
/// `timeout` has passed; then how the asked term ended.
pub async fn wait(
    store: &dyn LeaseStore,
    asked: &Asked,
    timeout: Duration,
) -> Result<Outcome, StoreError> {
    let name = asked.lease.to_string();
    let deadline = crate::seams::now() + timeout;
    let mut released = false;
    let moved = loop {
        let row = store.get(std::slice::from_ref(&name)).await?;
        match row.into_iter().next() {
            Some(row) if row.epoch > asked.epoch && row.is_held() => break Some(row),
            Some(row) if row.epoch > asked.epoch || !row.is_held() => released = true,
            _ => {}
        }
        if crate::seams::now() >= deadline {
            break None;
        }
        tokio::time::sleep(POLL).await;
    };
    if moved.is_none() && !released {
        return Ok(Outcome::Kept);
    }
    // How the old term ended, as the cluster recorded it: `released` is the ordered release.
    let ended = store
        .terms(std::slice::from_ref(&name), 4)
        .await
        .ok()
        .and_then(|terms| {
            terms
                .into_iter()
                .find(|t| t.term.epoch == asked.epoch)
                .and_then(|t| t.term.end)
        });
    Ok(match moved {
        Some(row) => Outcome::Moved {
            holder: row.holder,
            epoch: row.epoch,
            ended,
        },
        None => Outcome::Released { ended },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::MemoryStore;

    fn lease(name: &str) -> LeaseName {
        LeaseName::parse(name).unwrap()
    }

    #[tokio::test]
    async fn a_lease_without_a_row_is_no_such_lease_with_the_names_close_to_it() {
        let store = MemoryStore::new();
        store
            .campaign("leader", "a-12345678", Duration::from_secs(5))
            .await
            .unwrap();
        let e = request(&store, &lease("ledaer"), None).await.unwrap_err();
        assert!(
            matches!(&e, HandoffError::NoSuchLease { close, .. } if close == &["leader"]),
            "{e:?}"
        );
        assert!(e.to_string().contains("did you mean leader?"), "{e}");
    }

    #[tokio::test]
    async fn a_lease_nobody_holds_is_not_held_and_nothing_is_asked() {
        let store = MemoryStore::new();
        let won = store
            .campaign("leader", "a-12345678", Duration::from_secs(5))
            .await
            .unwrap();
        store
            .release("leader", "a-12345678", won.epoch.unwrap())
            .await
            .unwrap();
        let e = request(&store, &lease("leader"), None).await.unwrap_err();
        assert!(matches!(e, HandoffError::NotHeld { .. }), "{e:?}");
    }

    #[tokio::test]
    async fn a_to_that_holds_the_lease_already_or_is_no_replica_id_is_refused() {
        let store = MemoryStore::new();
        store
            .campaign("leader", "a-12345678", Duration::from_secs(5))
            .await
            .unwrap();
        for to in ["a", "a-12345678"] {
            let e = request(&store, &lease("leader"), Some(to))
                .await
                .unwrap_err();
            assert!(
                matches!(e, HandoffError::AlreadyHeldByTo { .. }),
                "{to}: {e:?}"
            );
        }
        let e = request(&store, &lease("leader"), Some("b c"))
            .await
            .unwrap_err();
        assert!(matches!(e, HandoffError::InvalidTo { .. }), "{e:?}");
        assert!(e.to_string().contains("\"b c\""), "{e}");
    }

    #[tokio::test]
    async fn a_handoff_asked_of_a_holder_that_releases_is_moved_to_the_next_term() {
        let store = MemoryStore::new();
        let ttl = Duration::from_secs(5);
        let epoch = store
            .campaign("leader", "a-12345678", ttl)
            .await
            .unwrap()
            .epoch
            .unwrap();
        let asked = request(&store, &lease("leader"), Some("b")).await.unwrap();
        assert_eq!((asked.holder.as_str(), asked.epoch), ("a-12345678", epoch));
        assert_eq!(asked.ttl, ttl);
        assert_eq!(asked.default_timeout(), MIN_WAIT);
        // Nobody moves: the holder kept it.
        let kept = wait(&store, &asked, Duration::from_millis(30))
            .await
            .unwrap();
        assert_eq!(kept, Outcome::Kept);
        // The holder releases: released, and nobody has taken it yet.
        store.release("leader", "a-12345678", epoch).await.unwrap();
        let released = wait(&store, &asked, Duration::ZERO).await.unwrap();
        assert_eq!(
            released,
            Outcome::Released {
                ended: Some(TermEnd::Released)
            }
        );
        store.campaign("leader", "b-87654321", ttl).await.unwrap();
        let moved = wait(&store, &asked, Duration::from_secs(1)).await.unwrap();
        assert_eq!(
            moved,
            Outcome::Moved {
                holder: "b-87654321".into(),
                epoch: epoch.next(),
                ended: Some(TermEnd::Released)
            }
        );
        assert!(!moved.missed(&asked));
        let elsewhere = Outcome::Moved {
            holder: "c-87654321".into(),
            epoch: epoch.next(),
            ended: None,
        };
        assert!(elsewhere.missed(&asked));
    }
}
