//! A service bound to a lease the way putex binds one (a `[[service]]` table): `activate` when
//! this replica takes the lease, `deactivate` before it lets the lease go, and `health` in the
//! role `active` or `standby`, which gates campaigning and steps down as a health-check plugin
//! does. `health` is a script or an HTTP probe of the service's own address; `activate` and
//! `deactivate` may be left out for an app that follows the lease itself (through the lease API)
//! and only lends its health to it. Each script runs under a keeper and is killed at its
//! deadline; the service itself is only as safe as the deactivate script (and the fence, for its
//! writes).

use std::ffi::OsString;
use std::time::Duration;

use crate::lease::LeaseName;

/// How often the health check runs, in either role, unless the table says: as often as the
/// health-check plugins' default, frequent enough to step down well within a default ttl.
pub const DEFAULT_HEALTH_INTERVAL: Duration = Duration::from_secs(5);

/// Failures in a row of the active health check before the lease is given up: as for a
/// health-check plugin, one slow check is not a reason to fail over.
pub const DEFAULT_FAILURE_THRESHOLD: u32 = 3;

/// One service bound to a lease, validated.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct BoundService {
    /// Its name in the log, `/status` and metrics.
    pub name: String,
    /// The lease it follows.
    pub lease: LeaseName,
    /// Run once the lease is taken, if set (else a term counts as activated at once); it must
    /// finish before the lease's deadline.
    #[serde(serialize_with = "lossy_opt", skip_serializing_if = "Option::is_none")]
    pub activate: Option<Vec<OsString>>,
    /// Run before the lease is let go (or as soon as renewals fail for long enough), if set;
    /// what does not finish by the lease's deadline is killed and counted as an unconfirmed stop.
    #[serde(serialize_with = "lossy_opt", skip_serializing_if = "Option::is_none")]
    pub deactivate: Option<Vec<OsString>>,
    /// Checked every `health_interval` in the role `active` or `standby`, if set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub health: Option<Health>,
    /// Between two health checks; also each check's time limit.
    #[serde(with = "humantime_serde")]
    pub health_interval: Duration,
    /// Failures in a row of the active health check before the lease is given up.
    pub failure_threshold: u32,
    /// The most `deactivate` may take; it starts at least this long before the lease's
    /// deadline when renewals fail.
    #[serde(with = "humantime_serde")]
    pub grace: Duration,
}

/// A service's health check, as the config file writes it: a URL string or a command array.
/// Shown (`config check`, `Debug`) with a probe URL's password as `***`, as the database URL's.
#[derive(Clone, PartialEq, Eq)]
pub enum Health {
    /// `GET` this `http://` URL with the role in its query and headers; any 2xx passes.
    Probe(url::Url),
    /// Run this command with the role appended; exit 0 passes.
    Command(Vec<OsString>),
}

impl Health {
    /// What the log calls it: `probe` or `script`.
    pub fn noun(&self) -> &'static str {
        match self {
            Health::Probe(_) => "probe",
            Health::Command(_) => "script",
        }
    }
}

/// `url` as it is shown: with `***` for its password, if it has one; as it is otherwise.
pub(crate) fn shown_url(url: &url::Url) -> String {
    if url.password().is_none() {
        return url.to_string();
    }
    let mut shown = url.clone();
    // An http URL with a password has a host, so it takes another password.
    let _ = shown.set_password(Some("***"));
    shown.to_string()
}

impl serde::Serialize for Health {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Health::Probe(url) => s.serialize_str(&shown_url(url)),
            Health::Command(command) => lossy(command, s),
        }
    }
}

impl std::fmt::Debug for Health {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Health::Probe(url) => f.debug_tuple("Probe").field(&shown_url(url)).finish(),
            Health::Command(command) => f.debug_tuple("Command").field(command).finish(),
        }
    }
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
