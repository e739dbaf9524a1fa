//! A service leasehold does not own, bound to a lease the way putex binds one (a `[[service]]`
//! table): `activate` when this replica takes the lease, `deactivate` before it lets the lease
//! go, and `health` with `active` or `standby`, which gates campaigning and steps down as a
//! health-check plugin does. Each script runs under a keeper and is killed at its deadline; the
//! service itself is only as safe as the deactivate script (and the fence, for its writes).

use std::ffi::OsString;
use std::time::Duration;

use crate::lease::LeaseName;

/// How often the health script runs, in either role, unless the table says: as often as the
/// health-check plugins' default, frequent enough to step down well within a default ttl.
pub const DEFAULT_HEALTH_INTERVAL: Duration = Duration::from_secs(5);

/// Failures in a row of the active health script before the lease is given up: as for a
/// health-check plugin, one slow check is not a reason to fail over.
pub const DEFAULT_FAILURE_THRESHOLD: u32 = 3;

/// One service bound to a lease, validated.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct BoundService {
    /// Its name in the log, `/status` and metrics.
    pub name: String,
    /// The lease it follows.
    pub lease: LeaseName,
    /// Run once the lease is taken; it must finish before the lease's deadline.
    #[serde(serialize_with = "lossy")]
    pub activate: Vec<OsString>,
    /// Run before the lease is let go (or as soon as renewals fail for long enough); what does
    /// not finish by the lease's deadline is killed and counted as an unconfirmed stop.
    #[serde(serialize_with = "lossy")]
    pub deactivate: Vec<OsString>,
    /// Run every `health_interval` with `active` or `standby` appended, if set.
    #[serde(serialize_with = "lossy_opt")]
    pub health: Option<Vec<OsString>>,
    /// Between two runs of `health`; also each run's time limit.
    #[serde(with = "humantime_serde")]
    pub health_interval: Duration,
    /// Failures in a row of `health active` before the lease is given up.
    pub failure_threshold: u32,
    /// The most `deactivate` may take; it starts at least this long before the lease's
    /// deadline when renewals fail.
    #[serde(with = "humantime_serde")]
    pub grace: Duration,
}

fn lossy<S: serde::Serializer>(command: &[OsString], s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(command.iter().map(|c| c.to_string_lossy()))
}

fn lossy_opt<S: serde::Serializer>(
    command: &Option<Vec<OsString>>,
    s: S,
) -> Result<S::Ok, S::Error> {
    match command {
        Some(command) => lossy(command, s),
        None => s.serialize_none(),
    }
}
