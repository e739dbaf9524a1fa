//! leasehold's lease layer: the stores that keep lease rows, and the driver that runs the pure
//! coordinator of `leasehold-lease-core` against them; terms, handoffs and lease groups
//! (docs/ARCHITECTURE.md §2–§6). The core's modules are re-exported here under their own names, so
//! `leasehold_lease::coordinator` is the core's coordinator.
//!
//! # Order
//!
//! Each module may use the modules listed before it and never one listed after it
//! (`host/tests/layers.rs` checks it); the core's modules come before all of them:
//!
//! 1. [`seams`]: where the lease layer reads time and draws random numbers, and nowhere else;
//! 2. [`metrics`]: the lease layer's Prometheus figures: roles, epochs, renewals, groups, store
//!    errors;
//! 3. [`url`]: the database URL, redacted and parsed;
//! 4. [`store`]: the [`LeaseStore`] trait every backend implements, and its error type;
//! 5. [`memory`]: the in-memory store, for tests, with injected faults;
//! 6. [`sqlite`]: the SQLite store, its boot clock and its event file;
//! 7. [`postgres`]: the PostgreSQL store; [`postgres::listen`] is the host's one `LISTEN` loop,
//!    for release notifications and plugin events alike;
//! 8. [`leadership`]: what the rest of the host sees of a lease: its role, epoch and live term;
//! 9. [`health`]: whether the lease loop's store calls land, and why they fail;
//! 10. [`handle`]: the [`Leases`] handle, what the rest of the host sees of this replica's leases
//!     and asks of them;
//! 11. [`driver`]: the thin async loop that runs the coordinator against a store;
//! 12. [`handoff`]: an operator's graceful step-down, asked for and waited on;
//! 13. [`group_runner`]: the thin async loop that heartbeats each lease group and hands its
//!     decisions to the driver.
//!
//! This file opens a store from its URL ([`open_store`]); the stores use [`server_budget`].

pub use leasehold_lease_core::{
    backoff, buggify, clock, coordinator, epoch, groups, history, identity, instant, name,
    protocol, record, role, text, timing,
};

pub mod driver;
pub mod group_runner;
pub mod handle;
pub mod handoff;
pub mod health;
pub mod leadership;
pub mod memory;
pub mod metrics;
pub mod postgres;
pub mod seams;
pub mod sqlite;
pub mod store;
pub mod url;

pub use coordinator::{Coordinator, GateSource};
pub use driver::Driver;
pub use handle::Leases;
pub use identity::HolderId;
pub use leadership::{Leadership, Role, Term, TermControl};
pub use name::{LeaseName, LeaseNameError};
pub use store::{
    Campaigned, CampaignedMany, DbMillis, Epoch, GroupMember, GroupView, LeaseRecord, LeaseStore,
    MemberRecord, ReleaseNotice, RenewRequest, Renewed, RenewedOne, StoreError,
};
pub use timing::{Timing, TimingError};
pub use url::{DatabaseUrl, RawUrl, UrlError, UrlFromError, pg_options};

use std::sync::Arc;

/// Opens the store named by `url`, creating or migrating its schema.
///
/// `connect_timeout` bounds the first connection so that an unreachable database is reported at
/// start-up instead of hanging. `call_timeout` is the longest any call of the lease protocol may
/// take (the timing's `store_timeout`): the database gives up on a statement before its caller
/// does, so that nothing the caller has given up on (a campaign it counts as failed) commits later.
pub async fn open_store(
    url: &DatabaseUrl,
    connect_timeout: std::time::Duration,
    call_timeout: std::time::Duration,
) -> Result<Arc<dyn LeaseStore>, StoreError> {
    match url {
        DatabaseUrl::Postgres(_) => Ok(Arc::new(
            postgres::PostgresStore::connect(url, connect_timeout, call_timeout).await?,
        )),
        DatabaseUrl::Sqlite { .. } => Ok(Arc::new(
            sqlite::SqliteStore::open(url, connect_timeout, call_timeout).await?,
        )),
    }
}

/// How long the database may work on a statement whose caller waits `call_timeout`: a tenth less,
/// so that the time a request spends in transit and in the pool does not let the server finish
/// (and commit) after its caller has counted it as failed.
pub fn server_budget(call_timeout: std::time::Duration) -> std::time::Duration {
    (call_timeout * 9 / 10).max(std::time::Duration::from_millis(1))
}

/// How many schema migrations the database at `url` records as applied; `None` when it cannot
/// tell (no database yet, no bookkeeping table, no connection). For `leasehold migrate` to say
/// what it did; it creates nothing.
pub async fn applied_migrations(url: &DatabaseUrl) -> Option<i64> {
    use sqlx::Connection;
    // The same steps on either connection type: whether the bookkeeping table exists, then its
    // count of successful migrations.
    macro_rules! count_on {
        ($connect:expr, $exists:literal) => {{
            let mut conn = $connect.await.ok()?;
            let exists: bool = sqlx::query_scalar($exists)
                .fetch_one(&mut conn)
                .await
                .ok()?;
            let count = match exists {
                true => sqlx::query_scalar("SELECT count(*) FROM _sqlx_migrations WHERE success")
                    .fetch_one(&mut conn)
                    .await
                    .ok()?,
                false => 0,
            };
            let _ = conn.close().await;
            Some(count)
        }};
    }
    match url {
        DatabaseUrl::Postgres(raw) => {
            let options = pg_options(raw).ok()?;
            count_on!(
                sqlx::PgConnection::connect_with(&options),
                "SELECT to_regclass('_sqlx_migrations') IS NOT NULL"
            )
        }
        DatabaseUrl::Sqlite { path } => {
            if !path.exists() {
                return Some(0);
            }
            let options = sqlx::sqlite::SqliteConnectOptions::new()
                .filename(path)
                .read_only(true);
            count_on!(
                sqlx::SqliteConnection::connect_with(&options),
                "SELECT count(*) > 0 FROM sqlite_master WHERE name = '_sqlx_migrations'"
            )
        }
    }
}
