//! The SQLite [`LeaseStore`]: the embedded default. Replicas on one machine share the file; the
//! "database clock" is SQLite's `unixepoch('subsec')`, the one clock of that machine. There are no
//! notifications, so standbys rely on polling.

use std::time::Duration;

use async_trait::async_trait;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::debug;

use super::store::{
    Epoch, LeaseRecord, LeaseStore, ReleaseNotice, RenewRequest, StoreError, ttl_ms,
};
use super::url::DatabaseUrl;

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/sqlite");

/// The database's now in integer milliseconds.
const NOW_MS: &str = "CAST(unixepoch('subsec') * 1000 AS INTEGER)";

/// A pool of connections to the lease file.
#[derive(Debug, Clone)]
pub struct SqliteStore {
    pool: SqlitePool,
}

impl SqliteStore {
    /// Opens (creating if missing) and migrates the lease file.
    pub async fn open(url: &DatabaseUrl, connect_timeout: Duration) -> Result<Self, StoreError> {
        let DatabaseUrl::Sqlite { path } = url else {
            return Err(StoreError::Invalid {
                what: "database URL",
                reason: format!("{url} is not a SQLite URL"),
            });
        };
        let options = SqliteConnectOptions::new()
            .filename(path)
            .create_if_missing(true)
            // WAL lets readers (status, admin) run beside the writer.
            .journal_mode(SqliteJournalMode::Wal)
            // FULL: an acquisition that committed must survive a power cut, or its epoch could be reused.
            .synchronous(SqliteSynchronous::Full)
            // Writers from several processes queue for the lock; the driver's own timeouts bound the wait.
            .busy_timeout(Duration::from_secs(5));
        // Several processes opening a new file at once race to switch it to WAL and to migrate it.
        // SQLite has no advisory lock for that, so the losers retry until `connect_timeout`; errors
        // that no retry can fix (a missing directory, a corrupt file) are reported at once.
        let deadline = tokio::time::Instant::now() + connect_timeout;
        let mut attempt = 0u64;
        loop {
            attempt += 1;
            let opened = SqlitePoolOptions::new()
                .max_connections(4)
                .acquire_timeout(connect_timeout)
                .connect_with(options.clone())
                .await;
            let error = match opened {
                Ok(pool) => match MIGRATOR.run(&pool).await {
                    Ok(()) => return Ok(SqliteStore { pool }),
                    Err(source) => StoreError::Migrate {
                        url: url.to_string(),
                        source,
                    },
                },
                Err(source) => StoreError::Connect {
                    url: url.to_string(),
                    source,
                },
            };
            if tokio::time::Instant::now() >= deadline || !is_contention(&error) {
                return Err(error);
            }
            debug!(error = %error, attempt, "opening the lease file raced another process; retrying");
            tokio::time::sleep(Duration::from_millis(20 * attempt.min(10))).await;
        }
    }
}

/// Lock contention (SQLITE_BUSY, SQLITE_LOCKED) and the migration race (another process recorded
/// the migration first) pass with a retry.
fn is_contention(error: &StoreError) -> bool {
    let db = match error {
        StoreError::Connect {
            source: sqlx::Error::Database(d),
            ..
        } => d,
        StoreError::Migrate {
            source: sqlx::migrate::MigrateError::Execute(sqlx::Error::Database(d)),
            ..
        } => d,
        StoreError::Migrate {
            source: sqlx::migrate::MigrateError::ExecuteMigration(sqlx::Error::Database(d), _),
            ..
        } => d,
        _ => return false,
    };
    let code: i64 = db.code().and_then(|c| c.parse().ok()).unwrap_or_default();
    // Extended result codes keep the primary code in the low byte.
    matches!(code & 0xff, 5 | 6) || db.is_unique_violation()
}

type RecordRow = (String, String, i64, i64, i64);

fn to_record((name, holder, epoch, ttl_ms, expires_in_ms): RecordRow) -> LeaseRecord {
    LeaseRecord {
        name,
        holder,
        epoch,
        ttl_ms,
        expires_in_ms,
    }
}

#[async_trait]
impl LeaseStore for SqliteStore {
    fn backend(&self) -> &'static str {
        "sqlite"
    }

    async fn campaign(
        &self,
        name: &str,
        holder: &str,
        ttl: Duration,
    ) -> Result<Option<Epoch>, StoreError> {
        let ttl_ms = ttl_ms(ttl)?;
        sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "INSERT INTO leasehold_leases (name, holder, epoch, acquired_at_ms, renewed_at_ms, expires_at_ms, ttl_ms)
             SELECT ?1, ?2, 1, now, now, now + ?3, ?3 FROM (SELECT {NOW_MS} AS now) WHERE true
             ON CONFLICT (name) DO UPDATE
                SET holder = excluded.holder, epoch = leasehold_leases.epoch + 1,
                    acquired_at_ms = excluded.acquired_at_ms, renewed_at_ms = excluded.renewed_at_ms,
                    expires_at_ms = excluded.expires_at_ms, ttl_ms = excluded.ttl_ms
                WHERE leasehold_leases.expires_at_ms <= excluded.acquired_at_ms
             RETURNING epoch"
        )))
        .bind(name)
        .bind(holder)
        .bind(ttl_ms)
        .fetch_optional(&self.pool)
        .await
        .map_err(StoreError::query("campaign"))
    }

    async fn renew(
        &self,
        holder: &str,
        leases: &[RenewRequest],
    ) -> Result<Vec<String>, StoreError> {
        if leases.is_empty() {
            return Ok(Vec::new());
        }
        let batch = leases
            .iter()
            .map(|r| Ok(serde_json::json!({ "name": r.name, "epoch": r.epoch, "ttl_ms": ttl_ms(r.ttl)? })))
            .collect::<Result<Vec<_>, StoreError>>()?;
        sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "UPDATE leasehold_leases
                SET renewed_at_ms = n.now, expires_at_ms = n.now + r.ttl_ms, ttl_ms = r.ttl_ms
               FROM (SELECT value ->> '$.name' AS name, value ->> '$.epoch' AS epoch,
                            value ->> '$.ttl_ms' AS ttl_ms FROM json_each(?2)) AS r,
                    (SELECT {NOW_MS} AS now) AS n
              WHERE leasehold_leases.name = r.name AND leasehold_leases.holder = ?1
                AND leasehold_leases.epoch = r.epoch AND leasehold_leases.expires_at_ms > n.now
             RETURNING name"
        )))
        .bind(holder)
        .bind(serde_json::Value::Array(batch).to_string())
        .fetch_all(&self.pool)
        .await
        .map_err(StoreError::query("renew"))
    }

    async fn release(&self, name: &str, holder: &str, epoch: Epoch) -> Result<bool, StoreError> {
        let done = sqlx::query(sqlx::AssertSqlSafe(format!(
            "UPDATE leasehold_leases SET expires_at_ms = {NOW_MS}
              WHERE name = ?1 AND holder = ?2 AND epoch = ?3 AND expires_at_ms > {NOW_MS}"
        )))
        .bind(name)
        .bind(holder)
        .bind(epoch)
        .execute(&self.pool)
        .await
        .map_err(StoreError::query("release"))?;
        Ok(done.rows_affected() == 1)
    }

    async fn force_release(&self, name: &str) -> Result<Option<(String, Epoch)>, StoreError> {
        sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "UPDATE leasehold_leases SET expires_at_ms = {NOW_MS}
              WHERE name = ?1 AND expires_at_ms > {NOW_MS}
             RETURNING holder, epoch"
        )))
        .bind(name)
        .fetch_optional(&self.pool)
        .await
        .map_err(StoreError::query("force release"))
    }

    async fn get(&self, names: &[String]) -> Result<Vec<LeaseRecord>, StoreError> {
        let rows: Vec<RecordRow> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT name, holder, epoch, ttl_ms, expires_at_ms - {NOW_MS}
               FROM leasehold_leases WHERE name IN (SELECT value FROM json_each(?1)) ORDER BY name"
        )))
        .bind(serde_json::to_string(names).unwrap_or_default())
        .fetch_all(&self.pool)
        .await
        .map_err(StoreError::query("get"))?;
        Ok(rows.into_iter().map(to_record).collect())
    }

    async fn list(&self, after: Option<&str>, limit: u32) -> Result<Vec<LeaseRecord>, StoreError> {
        let rows: Vec<RecordRow> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT name, holder, epoch, ttl_ms, expires_at_ms - {NOW_MS}
               FROM leasehold_leases WHERE ?1 IS NULL OR name > ?1 ORDER BY name LIMIT ?2"
        )))
        .bind(after)
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await
        .map_err(StoreError::query("list"))?;
        Ok(rows.into_iter().map(to_record).collect())
    }

    async fn ping(&self) -> Result<(), StoreError> {
        sqlx::query("SELECT 1")
            .execute(&self.pool)
            .await
            .map_err(StoreError::query("ping"))?;
        Ok(())
    }

    fn listen_releases(
        &self,
        _shutdown: CancellationToken,
    ) -> Option<mpsc::Receiver<ReleaseNotice>> {
        None
    }
}
