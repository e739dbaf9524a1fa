//! `/status` in the host's types: who this replica is and what it knows of each lease, read
//! from the store (roles from the coordinator), or from this replica alone when the store does
//! not answer. The JSON field names are a contract for other tooling: keep them.

use std::time::Duration;

use serde::Serialize;

use crate::lease::groups::GroupStatus;
use crate::lease::health::CallsFailing;
use crate::lease::history::{self, Handoff, RecordedTerm};
use crate::lease::{Epoch, Leases, Role};
use crate::supervisor::{PluginStatus, ProcessStatus};

/// `/status`: who this replica is and what it knows of each lease.
#[derive(Debug, Serialize, serde::Deserialize)]
pub struct Status {
    /// How long ago, in ms, the store was read for this answer (and the roles with it): at most
    /// [`MAX_AGE`](super::snapshot::MAX_AGE) while the store answers, more while a read is slow. Groups and
    /// plugins are as they are at the answer. First, because a snapshot is served as bytes
    /// serialised once, with this in front ([`snapshot`](super::snapshot)).
    #[serde(default)]
    pub snapshot_age_ms: u64,
    /// This process's holder id.
    pub replica: String,
    /// The store backend (`postgres`, `sqlite`).
    pub store: String,
    /// Set when the store could not be read; holder and expiry then come from local knowledge.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub store_error: Option<String>,
    /// One entry per lease this replica campaigns for, the shards of its groups among them.
    pub leases: Vec<LeaseStatus>,
    /// One entry per lease group this replica takes part in.
    #[serde(default)]
    pub groups: Vec<GroupStatus>,
    /// One entry per plugin file.
    pub plugins: Vec<PluginStatus>,
    /// One entry per OS process bound to a lease, and lease it runs under.
    #[serde(default)]
    pub processes: Vec<ProcessStatus>,
    /// Set while the lease loop's own store calls fail (the last campaign, renewal, release or
    /// group heartbeat did): this replica cannot campaign, and `/readyz` is 503. As it is at the
    /// answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_calls_failing: Option<CallsFailing>,
}

/// One lease in `/status`.
#[derive(Debug, Serialize, serde::Deserialize)]
pub struct LeaseStatus {
    /// The lease name.
    pub name: String,
    /// This replica's role.
    pub role: Role,
    /// The current holder by the database, or `null` when nobody holds it.
    pub holder: Option<String>,
    /// The current holder's epoch.
    pub epoch: Option<Epoch>,
    /// Milliseconds until the lease expires by the database clock.
    pub expires_in_ms: Option<i64>,
    /// This replica's ttl in milliseconds: the most `expires_in_ms` can be after a renewal.
    #[serde(default)]
    pub ttl_ms: u64,
    /// The lease's recent terms as the cluster recorded them, newest first, at most
    /// [`TERMS_SHOWN`] (two past [`MANY_LEASES`] leases); empty when the store could not be read.
    #[serde(default)]
    pub terms: Vec<RecordedTerm>,
    /// The newest change of holder among `terms`, and why the term before it ended.
    #[serde(default)]
    pub last_handoff: Option<Handoff>,
    /// The live standbys waiting in the lease's line, the next holder first; empty when none
    /// waits or the store could not be read.
    #[serde(default)]
    pub line: Vec<Waiting>,
}

/// One standby in a lease's line, as `/status` and the lease API show it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Waiting {
    /// Its holder id.
    pub holder: String,
    /// Its priority: higher goes first, then who waited longest.
    pub priority: i64,
    /// How long it has waited in line, in ms by the database's clock.
    pub waited_ms: i64,
}

/// How many terms of each lease `/status` shows: a page's timeline, and the last few handoffs
/// for someone asking why a lease keeps moving. The stores keep more (`TERMS_KEPT`).
pub(crate) const TERMS_SHOWN: u32 = 10;

/// Above this many leases `/status` shows two terms of each, enough for the last handoff: a page
/// polls twice a second, and ten terms of a thousand leases would make every poll read and send
/// ten thousand rows where the lease rows themselves are a thousand.
pub(crate) const MANY_LEASES: usize = 100;

/// How many terms of each lease `/status` shows for a replica of `leases` leases.
fn terms_shown(leases: usize) -> u32 {
    if leases <= MANY_LEASES {
        TERMS_SHOWN
    } else {
        2
    }
}

/// Builds the status: roles from the coordinator, holders and expiry from the database.
pub(crate) async fn status_of(replica: &Leases) -> Status {
    let names: Vec<String> = replica.lease_names().map(str::to_string).collect();
    // A status page must answer even when the store hangs: bound the read well below a scrape timeout.
    let timeout = replica.timing().store_timeout.min(Duration::from_secs(1));
    let store = replica.store();
    let read = async {
        tokio::try_join!(
            store.get(&names),
            store.terms(&names, terms_shown(names.len())),
            store.line(&names)
        )
    };
    let (rows, terms, line) = match tokio::time::timeout(timeout, read).await {
        Ok(Ok((rows, terms, line))) => (Ok(rows), terms, line),
        Ok(Err(e)) => (Err(e.to_string()), Vec::new(), Vec::new()),
        Err(_) => (
            Err(format!(
                "reading the lease table timed out after {timeout:?}"
            )),
            Vec::new(),
            Vec::new(),
        ),
    };
    status_from(replica, &names, rows, terms, line)
}

/// The status from this replica's own knowledge alone, `why` the store was not read: roles,
/// and the holder and epoch of the leases this replica holds.
pub(crate) fn local_status(replica: &Leases, why: String) -> Status {
    let names: Vec<String> = replica.lease_names().map(str::to_string).collect();
    status_from(replica, &names, Err(why), Vec::new(), Vec::new())
}

/// The status of `names` from what the store read (`rows`, or why it could not) and `terms`;
/// roles from the coordinator, read now.
fn status_from(
    replica: &Leases,
    names: &[String],
    rows: Result<Vec<crate::lease::LeaseRecord>, String>,
    terms: Vec<history::TermRecord>,
    line: Vec<crate::lease::store::WaiterRecord>,
) -> Status {
    let mut terms_of: std::collections::HashMap<String, Vec<RecordedTerm>> = Default::default();
    for record in terms {
        terms_of.entry(record.lease).or_default().push(record.term);
    }
    // In the line's order, as the store listed them.
    let mut line_of: std::collections::HashMap<String, Vec<Waiting>> = Default::default();
    for w in line {
        line_of.entry(w.lease).or_default().push(Waiting {
            holder: w.holder,
            priority: w.priority,
            waited_ms: w.waited_ms,
        });
    }
    let me = replica.holder().to_string();
    let ttl_ms = u64::try_from(replica.timing().ttl.as_millis()).unwrap_or(u64::MAX);
    let leases = names
        .iter()
        .map(|name| {
            let leadership = replica.leadership(name);
            let role = leadership.as_ref().map_or(Role::Standby, |l| l.role);
            let (holder, epoch, expires_in_ms) = match &rows {
                Ok(rows) => match rows.iter().find(|r| &r.name == name) {
                    Some(r) if r.is_held() => {
                        (Some(r.holder.clone()), Some(r.epoch), Some(r.expires_in_ms))
                    }
                    _ => (None, None, None),
                },
                Err(_) => match leadership.and_then(|l| l.epoch) {
                    Some(epoch) => (Some(me.clone()), Some(epoch), None),
                    None => (None, None, None),
                },
            };
            let terms = history::complete(terms_of.remove(name).unwrap_or_default());
            LeaseStatus {
                name: name.clone(),
                role,
                holder,
                epoch,
                expires_in_ms,
                ttl_ms,
                last_handoff: history::last_handoff(&terms),
                terms,
                line: line_of.remove(name).unwrap_or_default(),
            }
        })
        .collect();
    Status {
        snapshot_age_ms: 0,
        replica: me,
        store: replica.store().backend().to_string(),
        store_error: rows.err(),
        leases,
        groups: replica.groups(),
        plugins: Vec::new(),
        processes: Vec::new(),
        lease_calls_failing: None,
    }
}
