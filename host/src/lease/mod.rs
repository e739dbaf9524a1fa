//! Leases: the rows replicas compete for, the stores that keep them, and the coordinator that
//! campaigns, renews and releases them (DESIGN §1).
//!
//! - [`store`]: the [`LeaseStore`] trait every backend implements and its error type;
//! - [`postgres`], [`sqlite`], [`memory`]: the backends;
//! - [`coordinator`]: the pure state machine, one `step(state, event, now)` for all leases;
//! - [`driver`]: the thin async loop that runs the coordinator against a store;
//! - [`leadership`]: what the rest of the host sees of a lease (role, epoch, term);
//! - [`identity`] and [`url`]: the holder id and the database URL.

pub mod coordinator;
pub mod driver;
pub mod identity;
pub mod leadership;
pub mod memory;
pub mod postgres;
pub mod sqlite;
pub mod store;
pub mod timing;
pub mod url;

pub use coordinator::Coordinator;
pub use driver::{Driver, LeaseEngine};
pub use identity::HolderId;
pub use leadership::{Leadership, Role, Term, TermControl};
pub use store::{Epoch, LeaseRecord, LeaseStore, ReleaseNotice, RenewRequest, StoreError};
pub use timing::{Timing, TimingError};
pub use url::{DatabaseUrl, RawUrl, UrlError};

use std::sync::Arc;

/// Opens the store named by `url`, creating or migrating its schema.
///
/// `connect_timeout` bounds the first connection so that an unreachable database is reported at
/// start-up instead of hanging.
pub async fn open_store(
    url: &DatabaseUrl,
    connect_timeout: std::time::Duration,
) -> Result<Arc<dyn LeaseStore>, StoreError> {
    match url {
        DatabaseUrl::Postgres(_) => Ok(Arc::new(
            postgres::PostgresStore::connect(url, connect_timeout).await?,
        )),
        DatabaseUrl::Sqlite { .. } => Ok(Arc::new(
            sqlite::SqliteStore::open(url, connect_timeout).await?,
        )),
    }
}
