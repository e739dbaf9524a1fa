//! Why the configuration was refused.

use std::path::PathBuf;

use super::process;
use crate::capability::variables::PatternError;
use crate::http::admin::AdminTokenError;
use crate::http::guard::HostNameError;
use crate::lease::{LeaseNameError, TimingError, UrlFromError};

/// Why the configuration was refused; each variant names the file or value at fault.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The config file could not be read.
    #[error("cannot read config file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The config file is not valid TOML for leasehold (unknown keys are rejected).
    #[error("invalid config file {path}: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// The parser's message, with line and column.
        message: String,
    },
    /// The database URL is not one leasehold can use; the error names where it was set, never
    /// its value.
    #[error(transparent)]
    DatabaseUrl(#[from] UrlFromError),
    /// The timing breaks a safety relation: the key, its value, where the value came from and
    /// the rule.
    #[error("invalid timing.{} = {:?} ({origin}): {}", .error.field, .error.value, .error.reason)]
    Timing {
        /// The broken rule, with the field (`margin`, as in `[timing] margin`) and its value.
        error: TimingError,
        /// Where the value was set: the config file, `--ttl`, or derived from the ttl.
        origin: &'static str,
    },
    /// A lease name is unusable.
    #[error(transparent)]
    LeaseName(#[from] LeaseNameError),
    /// A lease is listed twice.
    #[error("invalid lease name {0:?}: listed twice")]
    DuplicateLease(String),
    /// A place in a lease's line that cannot work: a `[lease.NAME]` table for a lease this
    /// replica does not campaign for, or a `preempt_after` shorter than the ttl.
    #[error("invalid {what}: {reason}")]
    Line {
        /// The setting, as written (e.g. `[lease.orders]`, `preempt_after of lease orders`).
        what: String,
        /// Why it cannot work.
        reason: String,
    },
    /// The lease list is empty and there is no group: the replica would have nothing to do.
    #[error("leases is empty and there are no groups: list at least one lease to campaign for")]
    NoLeases,
    /// A lease group is unusable: its name, shard count, or a name it shares.
    #[error("invalid group {name:?}: {reason}")]
    Group {
        /// The group as given.
        name: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A `grant_url_variables` pattern is unusable.
    #[error(transparent)]
    GrantUrlVariables(#[from] PatternError),
    /// A replica id is unusable: the id (shown escaped), where it came from, and why.
    #[error("invalid replica id {id:?} ({origin}): {reason}")]
    ReplicaId {
        /// The id as given.
        id: String,
        /// Where it was set: the flag or variable, the config file, or the default's source.
        origin: &'static str,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// An `http_allowed_hosts` entry is not a host name.
    #[error(transparent)]
    HttpAllowedHost(#[from] HostNameError),
    /// The admin token file cannot be used: the file, and what to do about it.
    #[error(transparent)]
    AdminToken(#[from] AdminTokenError),
    /// A `[[process]]` table cannot run: which, and why.
    #[error(transparent)]
    Process(#[from] process::ProcessError),
}
