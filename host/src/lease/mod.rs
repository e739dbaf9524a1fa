//! Leases: the rows replicas compete for, the stores that keep them, and the coordinator that
//! campaigns, renews and releases them (docs/ARCHITECTURE.md §2–§6).
//!
//! # Order
//!
//! Each module may use the modules listed before it and never one listed after it, as the
//! crate's layers do (`host/tests/layers.rs` checks both):
//!
//! 1. [`epoch`]: the fencing token;
//! 2. [`name`]: lease names;
//! 3. [`url`]: the database URL, redacted and parsed;
//! 4. [`timing`]: the ttl and the intervals derived from it, and how they must relate;
//! 5. [`identity`]: the holder id, and the replica id it starts with;
//! 6. [`history`]: the terms of each lease as the cluster recorded them, and its last handoff,
//!    for display;
//! 7. [`protocol`]: the safety rules this binary follows, as a number the schema may require;
//! 8. [`store`]: the [`LeaseStore`] trait every backend implements, what its calls return, and
//!    its error type;
//! 9. [`memory`]: the in-memory store, for tests, with injected faults;
//! 10. [`sqlite`]: the SQLite store, its boot clock and its event file;
//! 11. [`postgres`]: the PostgreSQL store; [`postgres::listen`] is the host's one `LISTEN` loop,
//!     for release notifications and plugin events alike;
//! 12. [`clock`]: watching the database's clock for steps, pure;
//! 13. [`leadership`]: what the rest of the host sees of a lease: its role, epoch and live term;
//! 14. [`coordinator`]: the pure state machine, one `step(state, event, now)` for all leases;
//! 15. [`groups`]: lease groups' fair shares and who hands which shard to whom, pure;
//! 16. [`health`]: whether the lease loop's store calls land, and why they fail;
//! 17. [`handle`]: the [`Leases`] handle, what the rest of the host sees of this replica's leases
//!     and asks of them;
//! 18. [`driver`]: the thin async loop that runs the coordinator against a store;
//! 19. [`handoff`]: an operator's graceful step-down, asked for and waited on;
//! 20. [`group_runner`]: the thin async loop that heartbeats each lease group and hands its
//!     decisions to the driver.
//!
//! This file opens a store from its URL ([`open_store`]); the stores use [`server_budget`].

pub mod clock;
pub mod coordinator;
pub mod driver;
pub mod epoch;
pub mod group_runner;
pub mod groups;
pub mod handle;
pub mod handoff;
pub mod health;
pub mod history;
pub mod identity;
pub mod leadership;
pub mod memory;
pub mod name;
pub mod postgres;
pub mod protocol;
pub mod sqlite;
pub mod store;
pub mod timing;
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
