//! What the driver's log says: a line for each announcement of the coordinator, for a term's end
//! and for a renewal's return. The lines keep the driver's own target
//! (`leasehold::lease::driver`): operators filter on it (`RUST_LOG`), and the tests and
//! benchmarks that read the log find them by it and by these words.

use std::time::Duration;

use tracing::{debug, error, info, warn};

use super::LOG_TARGET;
use crate::coordinator::{Announcement, EndReason};
use crate::epoch::Epoch;
use crate::identity::HolderId;

/// Logs the release of `lease` at `epoch` the moment the store answered it (`Ok(true)`: it was
/// ours; `Ok(false)`: the row had moved on already). A failed release is the coordinator's to
/// announce.
pub(super) fn released(holder: &HolderId, lease: &str, epoch: Epoch, ours: bool) {
    match ours {
        true => {
            info!(target: LOG_TARGET, lease = %lease, epoch = epoch.get(), holder = %holder, "lease released")
        }
        false => {
            info!(target: LOG_TARGET, lease = %lease, epoch = epoch.get(), holder = %holder, "lease released: its row had moved on already")
        }
    }
}

/// Logs what the coordinator announced.
pub(super) fn announcement(holder: &HolderId, announcement: Announcement) {
    match announcement {
        Announcement::Acquired { lease, epoch } => {
            info!(target: LOG_TARGET, lease = %lease, epoch = epoch.get(), holder = %holder, "lease acquired")
        }
        Announcement::Granted { lease, epoch } => {
            info!(target: LOG_TARGET, lease = %lease, epoch = epoch.get(), holder = %holder, granted = true, "lease acquired")
        }
        Announcement::RenewFailing { leases, error } => {
            for (lease, epoch) in leases {
                warn!(target: LOG_TARGET, lease = %lease, epoch = epoch.get(), holder = %holder, error = %error, "renewal failing: lease uncertain");
            }
        }
        Announcement::Recovered { lease, epoch } => {
            info!(target: LOG_TARGET, lease = %lease, epoch = epoch.get(), holder = %holder, "renewal landed again: lease recovered")
        }
        Announcement::SafeUntilReached { lease, epoch } => {
            warn!(target: LOG_TARGET, lease = %lease, epoch = epoch.get(), holder = %holder, "no renewal landed before safe_until: plugins stopped")
        }
        Announcement::Lost {
            lease,
            epoch,
            rejected,
        } => {
            let how = if rejected {
                "renewal rejected"
            } else {
                "expired while renewals failed"
            };
            warn!(target: LOG_TARGET, lease = %lease, epoch = epoch.get(), holder = %holder, reason = how, "lease lost")
        }
        // Written by the release's own call as its answer comes (`released`), not here: this
        // step may come milliseconds later on a host busy stopping its plugins, and the line
        // is when the lease went to a successor.
        Announcement::Released { error: None, .. } => {}
        Announcement::Released {
            lease,
            epoch,
            error: Some(error),
        } => {
            error!(target: LOG_TARGET, lease = %lease, epoch = epoch.get(), holder = %holder, error = %error, "release failed: the lease will expire by its ttl")
        }
        Announcement::ClockStepped { ahead, quiet } => {
            error!(target: LOG_TARGET, holder = %holder, ahead = ?ahead, quiet_for = ?quiet, "the database clock stepped forward: every term ended; no campaign or term until the leases that trusted the old clock have run out")
        }
        Announcement::HeldOff { remaining } => {
            warn!(target: LOG_TARGET, holder = %holder, remaining = ?remaining, "the lease database changed incarnation (a promoted standby, or a restored backup): no lease is taken over until every holder that trusted a renewal it lost has stopped")
        }
        Announcement::HandoffRequested { lease, epoch } => {
            info!(target: LOG_TARGET, lease = %lease, epoch = epoch.get(), holder = %holder, "handoff requested (by an operator, or a waiter of higher priority): stopping the lease's plugins and releasing it")
        }
        Announcement::CampaignBlocked {
            lease,
            locked_by,
            since,
        } => {
            let pids: Vec<String> = locked_by.iter().map(i32::to_string).collect();
            let who = match pids.as_slice() {
                [] => "another session".to_string(),
                [one] => format!("server process {one}"),
                several => format!("one of server processes {}", several.join(", ")),
            };
            warn!(target: LOG_TARGET, lease = %lease, holder = %holder, locked_by = ?locked_by, since = ?since, "campaign blocked: lease {lease} is free but {who} keeps its row locked (for {} so far; a fenced transaction left open?): retrying it alone, the other leases go on", crate::text::duration(since))
        }
        Announcement::CampaignFailed { leases, error } => {
            // Told once per run of failures, and summed up, by the store calls' account
            // (`lease::health`): a campaign retried through an outage is not a line each.
            debug!(target: LOG_TARGET, lease = %some(&leases), leases = leases.len(), holder = %holder, error = %error, "campaign failed")
        }
    }
}

/// Logs that a term has ended, and why: its plugins are being stopped.
pub(super) fn term_ended(lease: &str, epoch: Epoch, holder: &HolderId, reason: EndReason) {
    let why = match reason {
        EndReason::SafeUntil => "safe_until reached without a landed renewal",
        EndReason::Lost => "lease lost",
        EndReason::Releasing => "releasing",
        EndReason::ClockStep => "the database clock stepped forward",
    };
    info!(target: LOG_TARGET, lease = %lease, epoch = epoch.get(), holder = %holder, reason = why, "term ended: plugins stopped");
}

/// Logs that a term has started.
pub(super) fn term_started(lease: &str, epoch: Epoch) {
    debug!(target: LOG_TARGET, lease = %lease, epoch = epoch.get(), "term started");
}

/// Logs a renewal's return: of the batch, or of one lease alone (`alone`) after the batch found
/// its row locked.
pub(super) fn renewal_returned(took: Duration, ok: bool, alone: bool) {
    if alone {
        debug!(target: LOG_TARGET, elapsed = ?took, ok, "renewal alone returned (the batch found its row locked)");
    } else {
        debug!(target: LOG_TARGET, elapsed = ?took, ok, "renewal returned");
    }
}

/// A few of `leases` for a log line: "a", "a, b, c", or "a, b, c and 997 more".
pub(super) fn some(leases: &[String]) -> String {
    const SHOWN: usize = 3;
    let mut text = leases
        .iter()
        .take(SHOWN)
        .map(String::as_str)
        .collect::<Vec<_>>()
        .join(", ");
    if leases.len() > SHOWN {
        text.push_str(&format!(" and {} more", leases.len() - SHOWN));
    }
    text
}
