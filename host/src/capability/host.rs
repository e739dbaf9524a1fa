//! What this process offers plugins ([`Capabilities`]): the lease database, for `kv`, for
//! fencing and for `events`; and where grants read the variables they name ([`Environment`]).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::OnceCell;

use super::error::CapabilityError;
use super::identity::LeaseDatabase;
use super::kv;
use super::variables::UrlVariables;
use crate::lease::DatabaseUrl;

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
    lease_database: OnceCell<Option<LeaseDatabase>>,
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
    pub(crate) async fn lease_database(&self) -> Result<Option<&LeaseDatabase>, CapabilityError> {
        let db = self
            .lease_database
            .get_or_try_init(|| async {
                match self.kv().await? {
                    kv::Kv::Postgres(pool) => LeaseDatabase::read(pool).await.map(Some),
                    kv::Kv::Sqlite(_) => Ok(None),
                }
            })
            .await?;
        Ok(db.as_ref())
    }
}
