//! Host capabilities granted to plugins by their manifest (docs/ARCHITECTURE.md §4, §8):
//!
//! - [`kv`]: a key-value store scoped to the plugin, kept in the lease database;
//! - [`sql`]: statements on a PostgreSQL database named in the grant;
//! - [`events`]: PostgreSQL notifications delivered to the lease holder;
//! - [`fence`]: the check every write to the lease database makes, so that a write from a stale
//!   epoch can never commit after a newer epoch exists.
//!
//! [`Capabilities`] is what the process offers (the lease database); [`Grants`] is what one
//! plugin file was granted.

pub mod events;
pub mod fence;
pub mod kv;
pub mod sql;
pub mod variables;

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::OnceCell;

use crate::lease::DatabaseUrl;
use crate::manifest::Manifest;

pub use fence::Fence;
pub use variables::UrlVariables;

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
        epoch: i64,
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

/// Where grants read the variables they name (`[grants.sql] database_url_env`): the process's
/// environment, or a fixed set for a host started in-process (a test cannot set its own process
/// environment safely while other threads run).
#[derive(Clone, Default)]
pub enum Environment {
    /// `std::env::var`.
    #[default]
    Process,
    /// These variables and no others.
    Fixed(Arc<std::collections::BTreeMap<String, String>>),
}

impl Environment {
    /// The value of `key`, if set.
    pub fn get(&self, key: &str) -> Option<String> {
        match self {
            Environment::Process => std::env::var(key).ok(),
            Environment::Fixed(vars) => vars.get(key).cloned(),
        }
    }
}

/// Names only: the values are database URLs with passwords.
impl std::fmt::Debug for Environment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Environment::Process => f.write_str("Process"),
            Environment::Fixed(vars) => f.debug_tuple("Fixed").field(&vars.keys()).finish(),
        }
    }
}

/// What this process offers plugins: the lease database, for `kv`, for fencing, and for `events`
/// of plugins without a sql grant. Connections are opened on first use.
#[derive(Debug)]
pub struct Capabilities {
    /// The lease database.
    lease_url: DatabaseUrl,
    /// The key-value store, connected on first use.
    kv: OnceCell<kv::Kv>,
    /// Where the lease database keeps its tables and its id (PostgreSQL), read on first use;
    /// `None` for SQLite.
    lease_database: OnceCell<Option<sql::identity::LeaseDatabase>>,
    /// The longest a fenced sql transaction's check may wait for the lease row: the lease
    /// store's own server budget, so a fence never queues longer than a campaign or renewal.
    fence_wait: Duration,
    /// Where grants read the variables they name.
    environment: Environment,
    /// Which variables they may name.
    url_variables: UrlVariables,
}

impl Capabilities {
    /// Capabilities backed by the lease database at `lease_url`, whose lease store gives up on a
    /// call after `store_timeout` (the timing's).
    pub fn new(lease_url: DatabaseUrl, store_timeout: Duration) -> Arc<Self> {
        Self::with_environment(
            lease_url,
            store_timeout,
            Environment::Process,
            UrlVariables::default(),
        )
    }

    /// [`Capabilities::new`], with grants reading the variables `url_variables` allows from
    /// `environment`.
    pub fn with_environment(
        lease_url: DatabaseUrl,
        store_timeout: Duration,
        environment: Environment,
        url_variables: UrlVariables,
    ) -> Arc<Self> {
        Arc::new(Capabilities {
            lease_url,
            kv: OnceCell::new(),
            lease_database: OnceCell::new(),
            fence_wait: crate::lease::server_budget(store_timeout),
            environment,
            url_variables,
        })
    }

    /// Which variables grants may name.
    pub fn url_variables(&self) -> &UrlVariables {
        &self.url_variables
    }

    /// Where grants read the variables they name.
    pub fn environment(&self) -> &Environment {
        &self.environment
    }

    /// How long a fence check may wait for the lease row (see [`Capabilities::new`]).
    pub fn fence_wait(&self) -> Duration {
        self.fence_wait
    }

    /// The lease database.
    pub fn lease_url(&self) -> &DatabaseUrl {
        &self.lease_url
    }

    /// The key-value store in the lease database.
    pub async fn kv(&self) -> Result<&kv::Kv, CapabilityError> {
        self.kv
            .get_or_try_init(|| async { kv::Kv::connect_lazy(&self.lease_url) })
            .await
    }

    /// The lease database as this host's lease store sees it (the schema of its tables and the
    /// id in `leasehold_database`), so that a sql grant can tell whether it reaches the same
    /// database whatever its role sees; `None` when the lease database is SQLite. Read on the
    /// host's own connection; a failure is not remembered.
    pub async fn lease_database(
        &self,
    ) -> Result<Option<&sql::identity::LeaseDatabase>, CapabilityError> {
        let db = self
            .lease_database
            .get_or_try_init(|| async {
                match self.kv().await? {
                    kv::Kv::Postgres(pool) => {
                        sql::identity::LeaseDatabase::read(pool).await.map(Some)
                    }
                    kv::Kv::Sqlite(_) => Ok(None),
                }
            })
            .await?;
        Ok(db.as_ref())
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

/// What one plugin file was granted by its manifest.
#[derive(Debug, Clone, Default)]
pub struct Grants {
    /// `[grants] kv = true`.
    pub kv: bool,
    /// What the plugin may keep in kv.
    pub kv_quota: crate::manifest::KvQuota,
    /// `[grants.sql]`, resolved: its pool is shared by every term of this file.
    pub sql: Option<Arc<sql::SqlGrant>>,
    /// `[events] channels`, with the database they are listened on.
    pub events: Option<Arc<events::EventSource>>,
}

impl Grants {
    /// Resolves what `manifest` grants plugin `plugin`: reads the sql grant's URL from `env` and
    /// picks the database events are listened on. Errors name the manifest key at fault.
    pub fn resolve(
        plugin: &str,
        manifest: &Manifest,
        host: &Capabilities,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Grants, GrantError> {
        let sql = match &manifest.grants.sql {
            None => None,
            Some(spec) => {
                if !host.url_variables().allows(&spec.database_url_env) {
                    return Err(GrantError::UrlVariableNotAllowed {
                        env: spec.database_url_env.clone(),
                        allowed: host.url_variables().patterns().to_vec(),
                    });
                }
                Some(Arc::new(sql::SqlGrant::resolve(plugin, spec, env)?))
            }
        };
        let events = if manifest.events.is_empty() {
            None
        } else {
            let (options, database) = match (&sql, host.lease_url()) {
                (Some(grant), _) => (
                    grant.connect_options().clone(),
                    format!("the database of {}", grant.spec().database_url_env),
                ),
                (None, DatabaseUrl::Postgres(raw)) => (
                    crate::lease::pg_options(raw)
                        .map_err(|reason| GrantError::EventsOptions { reason })?,
                    "the lease database".to_string(),
                ),
                (None, DatabaseUrl::Sqlite { .. }) => {
                    return Err(GrantError::EventsNeedPostgres);
                }
            };
            Some(Arc::new(events::EventSource::new(
                manifest.events.clone(),
                options,
                database,
            )))
        };
        Ok(Grants {
            kv: manifest.grants.kv,
            kv_quota: manifest.grants.kv_quota,
            sql,
            events,
        })
    }
}

/// The capabilities one store (one term of one plugin) may use.
#[derive(Debug, Clone)]
pub struct PluginCapabilities {
    /// The plugin, which scopes its kv keys.
    pub plugin: Arc<str>,
    /// The process's capabilities.
    pub host: Arc<Capabilities>,
    /// The plugin's grants.
    pub grants: Grants,
}
