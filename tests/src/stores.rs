//! Fresh lease databases of every backend, for the conformance suite.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use leasehold::lease::memory::MemoryStore;
use leasehold::lease::{DatabaseUrl, LeaseStore, open_store};

/// The store backends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// The in-memory store (one process).
    Memory,
    /// The in-memory store behind the simulator's fault layer, its faults off.
    MemoryFaultsOff,
    /// A SQLite file in a temporary directory.
    Sqlite,
    /// A fresh database on the test PostgreSQL server.
    Postgres,
}

/// One fresh, empty lease database.
#[derive(Debug)]
pub struct Db {
    /// The backend.
    pub backend: Backend,
    memory: Arc<MemoryStore>,
    url: Option<DatabaseUrl>,
    _dir: Option<tempfile::TempDir>,
}

impl Db {
    /// Creates an empty database of `backend`.
    pub async fn new(backend: Backend) -> anyhow::Result<Db> {
        let (url, dir) = match backend {
            Backend::Memory | Backend::MemoryFaultsOff => (None, None),
            Backend::Sqlite => {
                let dir = tempfile::tempdir()?;
                let path: PathBuf = dir.path().join("leases.db");
                (Some(DatabaseUrl::Sqlite { path }), Some(dir))
            }
            Backend::Postgres => {
                let url = crate::pg::server().fresh_database().await?;
                (Some(DatabaseUrl::parse(&url)?), None)
            }
        };
        Ok(Db {
            backend,
            memory: Arc::new(MemoryStore::new()),
            url,
            _dir: dir,
        })
    }

    /// A new handle on the database: its own connection pool for the SQL backends, as a separate
    /// replica would have; the shared store for memory.
    pub async fn open(&self) -> anyhow::Result<Arc<dyn LeaseStore>> {
        match &self.url {
            None if self.backend == Backend::MemoryFaultsOff => Ok(Arc::new(
                leasehold::lease::memory::faults::FaultyStore::quiet(self.memory.clone()),
            )),
            None => Ok(self.memory.clone()),
            Some(url) => {
                Ok(open_store(url, Duration::from_secs(10), Duration::from_secs(10)).await?)
            }
        }
    }

    /// The URL to give a `leasehold` process (none for memory).
    pub fn url(&self) -> Option<String> {
        self.url.as_ref().map(|u| match u {
            DatabaseUrl::Postgres(raw) => raw.clone(),
            DatabaseUrl::Sqlite { path } => format!("sqlite:{}", path.display()),
        })
    }
}
