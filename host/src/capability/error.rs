//! Why a capability failed: a call (each variant one case of the WIT `capability-error`), or
//! the resolution of a manifest's grants at load.

use crate::lease::Epoch;

/// Why a capability call failed; each variant maps to one case of the WIT `capability-error`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CapabilityError {
    /// The manifest does not grant the capability.
    #[error("{capability} is not granted: add {key} to the plugin's manifest")]
    NotGranted {
        /// The capability (`kv`, `sql`).
        capability: &'static str,
        /// The manifest entry that would grant it.
        key: &'static str,
    },
    /// The write was refused, or rolled back, because this replica no longer holds the lease at
    /// the plugin's epoch.
    #[error(
        "lease {lease} is no longer held at epoch {epoch}: the write was refused and nothing of it was kept"
    )]
    LeaseLost {
        /// The lease.
        lease: String,
        /// The epoch the plugin runs under.
        epoch: Epoch,
    },
    /// The grant cannot be used as configured (e.g. its database role could rewrite leases);
    /// the text names the plugin, the grant and what to change.
    #[error("{0}")]
    GrantRefused(String),
    /// The arguments were refused.
    #[error("{0}")]
    Invalid(String),
    /// A cap was reached.
    #[error("{0}")]
    TooLarge(String),
    /// A write would take the plugin past its kv quota; nothing of it was kept.
    #[error("{0}")]
    QuotaExceeded(String),
    /// The database refused the statement.
    #[error("{0}")]
    Database(String),
    /// The database could not be reached or did not answer in time.
    #[error("{0}")]
    Unavailable(String),
}

impl CapabilityError {
    /// The WIT case name, for logs and metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            CapabilityError::NotGranted { .. } | CapabilityError::GrantRefused(_) => "not-granted",
            CapabilityError::LeaseLost { .. } => "lease-lost",
            CapabilityError::Invalid(_) => "invalid",
            CapabilityError::TooLarge(_) | CapabilityError::QuotaExceeded(_) => "too-large",
            CapabilityError::Database(_) => "database",
            CapabilityError::Unavailable(_) => "unavailable",
        }
    }

    /// A driver error as the plugin sees it: the database's own message (with its SQLSTATE) when
    /// it refused the statement, else "unavailable". Driver errors never contain the password.
    pub fn from_driver(what: &str, error: &sqlx::Error) -> Self {
        match error {
            sqlx::Error::Database(db) => {
                let code = db
                    .code()
                    .map(|c| format!(" (SQLSTATE {c})"))
                    .unwrap_or_default();
                // 57014: canceled by statement_timeout; 55P03: lock_timeout. Both mean "not now".
                if matches!(db.code().as_deref(), Some("57014" | "55P03")) {
                    CapabilityError::Unavailable(format!("{what}: {}{code}", db.message()))
                } else {
                    CapabilityError::Database(format!("{what}: {}{code}", db.message()))
                }
            }
            other => CapabilityError::Unavailable(format!("{what}: {other}")),
        }
    }
}

/// Why a manifest's grants could not be resolved; each variant names the manifest key at fault
/// and never the value of a secret.
#[derive(Debug, thiserror::Error)]
pub enum GrantError {
    /// The variable the sql grant names is not one the operator lets manifests name.
    #[error(
        "[grants.sql] database_url_env = {env:?}: not a variable plugins may name; the host's [grants] url_variables allows {allowed:?}, and never its own LEASEHOLD_* settings"
    )]
    UrlVariableNotAllowed {
        /// The variable.
        env: String,
        /// The patterns the operator allows.
        allowed: Vec<String>,
    },
    /// The variable the sql grant names is not set.
    #[error("[grants.sql] database_url_env = {env:?}: the host's environment has no {env}")]
    MissingEnv {
        /// The variable.
        env: String,
    },
    /// The variable's value is not a database URL leasehold can use. The variable may be another
    /// service's, chosen by whoever wrote the manifest: nothing of its value is shown.
    #[error("[grants.sql] database_url_env = {env:?}: the database URL in {env} {reason}")]
    Url {
        /// The variable.
        env: String,
        /// Why the URL was refused (it never holds the URL).
        reason: crate::lease::UrlError,
    },
    /// The variable names a database other than PostgreSQL.
    #[error(
        "[grants.sql] database_url_env = {env:?}: the database URL in {env} is not a PostgreSQL URL; the sql capability needs PostgreSQL"
    )]
    NotPostgres {
        /// The variable.
        env: String,
    },
    /// The lease database's URL could not be used to listen for events.
    #[error("[events]: the lease database's URL {reason}")]
    EventsOptions {
        /// Why the driver refused it (it never holds the URL).
        reason: crate::lease::UrlError,
    },
    /// Events were asked for on a SQLite lease database with no sql grant to listen on.
    #[error(
        "[events] needs PostgreSQL: the lease database is SQLite and the plugin has no [grants.sql] to listen on"
    )]
    EventsNeedPostgres,
}
