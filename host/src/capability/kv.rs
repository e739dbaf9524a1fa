//! `kv`: a key-value store scoped to the plugin, kept in the lease database (table
//! `leasehold_kv`). Writes are fenced ([`super::fence`]); reads are not, since a stale read cannot
//! harm anything a fenced write does not also check.
//!
//! Each plugin has a quota of keys and bytes (keys plus values, [`KvQuota`]), so a put loop
//! cannot fill the disk the leases live on. Triggers keep each plugin's usage exact in
//! `leasehold_kv_usage`, and a put checks its outcome against the quota in the same fenced
//! statement (PostgreSQL) or transaction (SQLite) that writes it. On PostgreSQL the usage row is
//! read `FOR UPDATE`, so concurrent puts of one plugin (a stale holder's beside the new one's)
//! see each other's committed usage; only a concurrent put or delete of the very same key can make a put miscount
//! its own entry, by one key at most.

use std::time::Duration;

use futures::TryStreamExt;
use sqlx::postgres::{PgPool, PgPoolOptions};
use sqlx::sqlite::{SqliteConnectOptions, SqlitePool, SqlitePoolOptions};

use super::error::CapabilityError;
use super::fence::{self, Fence};
use crate::lease::DatabaseUrl;
use crate::lease::sqlite::MachineClock;
use crate::manifest::KvQuota;

/// The longest key in bytes: room for paths and ids, small enough to keep the index compact.
pub(crate) const MAX_KEY: usize = 1024;
/// The largest value in bytes: kv is for state and checkpoints, not blobs.
pub(crate) const MAX_VALUE: usize = 1 << 20;
/// The most entries one `list` call returns.
pub(crate) const MAX_PAGE: u32 = 1000;
/// The most value bytes one `list` page carries; a page stops early (with a `next`) beyond it.
pub(crate) const MAX_PAGE_BYTES: usize = 4 << 20;
/// Server-side bound on one kv statement. A write may wait for the lease row while a campaign or
/// renewal holds it, which takes milliseconds; anything longer means the database is in trouble.
const STATEMENT_TIMEOUT: Duration = Duration::from_secs(2);

/// One page of a listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page {
    /// Keys and values, in byte order of the keys.
    pub entries: Vec<(String, Vec<u8>)>,
    /// The key to pass as `after` for the next page, when there is one.
    pub next: Option<String>,
}

/// The store, on the lease database's backend.
#[derive(Debug, Clone)]
pub enum Kv {
    /// PostgreSQL: each write is one statement that locks the lease row first.
    Postgres(PgPool),
    /// SQLite: each write is an immediate transaction that checks the lease row first.
    Sqlite(SqlitePool),
}

fn unavailable(what: &str) -> impl FnOnce(sqlx::Error) -> CapabilityError + '_ {
    move |e| CapabilityError::from_driver(what, &e)
}

impl Kv {
    /// A pool on the lease database that connects on first use (the schema is already migrated
    /// by the lease store). Must be called within the async runtime.
    pub fn connect_lazy(url: &DatabaseUrl) -> Result<Kv, CapabilityError> {
        match url {
            DatabaseUrl::Postgres(raw) => {
                let ms = STATEMENT_TIMEOUT.as_millis().to_string();
                let options = crate::lease::pg_options(raw)
                    .map_err(|e| {
                        CapabilityError::Unavailable(format!(
                            "kv: {}",
                            e.from_origin("the lease database's URL")
                        ))
                    })?
                    .application_name("leasehold-kv")
                    .options([
                        ("statement_timeout", ms.as_str()),
                        // A holder frozen between statements must not keep the lease row locked.
                        ("idle_in_transaction_session_timeout", "1000"),
                    ]);
                Ok(Kv::Postgres(
                    PgPoolOptions::new()
                        .max_connections(4)
                        .acquire_timeout(STATEMENT_TIMEOUT)
                        // On the lease store's schema, as the store finds it: its writes lock
                        // the rows the store campaigns on, never a look-alike's.
                        .after_connect(|conn, _| {
                            Box::pin(crate::lease::postgres::schema::pin(conn))
                        })
                        .connect_lazy_with(options),
                ))
            }
            DatabaseUrl::Sqlite { path } => {
                let options = SqliteConnectOptions::new()
                    .filename(path)
                    .busy_timeout(STATEMENT_TIMEOUT);
                Ok(Kv::Sqlite(
                    SqlitePoolOptions::new()
                        .max_connections(2)
                        .acquire_timeout(STATEMENT_TIMEOUT)
                        .connect_lazy_with(options),
                ))
            }
        }
    }

    /// The value of `key` of `plugin`.
    pub async fn get(&self, plugin: &str, key: &str) -> Result<Option<Vec<u8>>, CapabilityError> {
        check_key(key)?;
        match self {
            Kv::Postgres(pool) => {
                sqlx::query_scalar("SELECT value FROM leasehold_kv WHERE plugin = $1 AND key = $2")
                    .bind(plugin)
                    .bind(key)
                    .fetch_optional(pool)
                    .await
            }
            Kv::Sqlite(pool) => {
                sqlx::query_scalar("SELECT value FROM leasehold_kv WHERE plugin = ?1 AND key = ?2")
                    .bind(plugin)
                    .bind(key)
                    .fetch_optional(pool)
                    .await
            }
        }
        .map_err(unavailable("kv get"))
    }

    /// Sets `key` of `plugin` to `value`, fenced, within the default quota.
    pub async fn put(
        &self,
        fence: &Fence,
        plugin: &str,
        key: &str,
        value: &[u8],
    ) -> Result<(), CapabilityError> {
        self.put_within(fence, plugin, key, value, &KvQuota::default())
            .await
    }

    /// Sets `key` of `plugin` to `value`, fenced, unless the plugin's entries would then exceed
    /// `quota`.
    pub async fn put_within(
        &self,
        fence: &Fence,
        plugin: &str,
        key: &str,
        value: &[u8],
        quota: &KvQuota,
    ) -> Result<(), CapabilityError> {
        check_key(key)?;
        if value.len() > MAX_VALUE {
            return Err(CapabilityError::TooLarge(format!(
                "kv value of {} bytes: the limit is {MAX_VALUE}",
                value.len()
            )));
        }
        fence.check_local()?;
        let put = Put {
            plugin,
            key,
            value,
            quota,
        };
        match self {
            Kv::Postgres(pool) => postgres_put(pool, fence, &put).await,
            Kv::Sqlite(pool) => sqlite_put(pool, fence, &put).await,
        }
    }

    /// Removes `key` of `plugin`, fenced; true when it existed.
    pub async fn delete(
        &self,
        fence: &Fence,
        plugin: &str,
        key: &str,
    ) -> Result<bool, CapabilityError> {
        check_key(key)?;
        fence.check_local()?;
        match self {
            Kv::Postgres(pool) => {
                let sql = format!(
                    "WITH fence AS ({check}),
                          gone AS (DELETE FROM leasehold_kv
                                    WHERE plugin = $4 AND key = $5 AND EXISTS (SELECT 1 FROM fence)
                                   RETURNING 1)
                     SELECT (SELECT count(*) FROM fence), (SELECT count(*) FROM gone)",
                    check = fence::POSTGRES_CHECK
                );
                let (held, gone): (i64, i64) = sqlx::query_as(sqlx::AssertSqlSafe(sql))
                    .bind(&fence.lease)
                    .bind(&fence.holder)
                    .bind(fence.epoch().get())
                    .bind(plugin)
                    .bind(key)
                    .fetch_one(pool)
                    .await
                    .map_err(|e| fence.failed_before_commit("kv delete", &e))?;
                if held == 0 {
                    return Err(fence.lost());
                }
                Ok(gone > 0)
            }
            Kv::Sqlite(pool) => {
                let mut tx = pool
                    .begin_with("BEGIN IMMEDIATE")
                    .await
                    .map_err(unavailable("kv delete"))?;
                if !sqlite_fence(&mut tx, fence).await? {
                    return Err(fence.lost());
                }
                let gone = sqlx::query("DELETE FROM leasehold_kv WHERE plugin = ?1 AND key = ?2")
                    .bind(plugin)
                    .bind(key)
                    .execute(&mut *tx)
                    .await
                    .map_err(unavailable("kv delete"))?
                    .rows_affected();
                tx.commit()
                    .await
                    .map_err(unavailable("kv delete: commit"))?;
                Ok(gone > 0)
            }
        }
    }

    /// Up to `limit` entries of `plugin` whose keys start with `prefix` and sort after `after`.
    pub async fn list(
        &self,
        plugin: &str,
        prefix: &str,
        after: Option<&str>,
        limit: u32,
    ) -> Result<Page, CapabilityError> {
        if prefix.len() > MAX_KEY {
            return Err(CapabilityError::Invalid(format!(
                "kv prefix of {} bytes: keys are at most {MAX_KEY}",
                prefix.len()
            )));
        }
        let limit = limit.clamp(1, MAX_PAGE);
        // One row more than asked tells whether another page follows.
        let fetch = i64::from(limit) + 1;
        let mut rows = match self {
            Kv::Postgres(pool) => sqlx::query_as::<_, (String, Vec<u8>)>(
                "SELECT key, value FROM leasehold_kv
                  WHERE plugin = $1 AND key >= $2 AND starts_with(key, $2)
                    AND ($3::text IS NULL OR key > $3)
                  ORDER BY key LIMIT $4",
            )
            .bind(plugin)
            .bind(prefix)
            .bind(after)
            .bind(fetch)
            .fetch(pool),
            Kv::Sqlite(pool) => sqlx::query_as::<_, (String, Vec<u8>)>(
                "SELECT key, value FROM leasehold_kv
                  WHERE plugin = ?1 AND key >= ?2 AND substr(key, 1, length(?2)) = ?2
                    AND (?3 IS NULL OR key > ?3)
                  ORDER BY key LIMIT ?4",
            )
            .bind(plugin)
            .bind(prefix)
            .bind(after)
            .bind(fetch)
            .fetch(pool),
        };
        let mut page = Page {
            entries: Vec::new(),
            next: None,
        };
        let mut bytes = 0usize;
        while let Some((key, value)) = rows.try_next().await.map_err(unavailable("kv list"))? {
            let full = page.entries.len() >= limit as usize
                || (!page.entries.is_empty() && bytes + value.len() > MAX_PAGE_BYTES);
            if full {
                page.next = page.entries.last().map(|(k, _)| k.clone());
                break;
            }
            bytes += value.len();
            page.entries.push((key, value));
        }
        Ok(page)
    }
}

/// One put, checked against the limits of one key and value, on its way to the database.
struct Put<'a> {
    plugin: &'a str,
    key: &'a str,
    value: &'a [u8],
    quota: &'a KvQuota,
}

impl Put<'_> {
    /// What the entry adds to its plugin's bytes, and the quota's bounds, as the statements bind
    /// them.
    fn bounds(&self) -> (i64, i64, i64) {
        // At most MAX_KEY + MAX_VALUE, so it fits.
        let entry = i64::try_from(self.key.len() + self.value.len()).unwrap_or(i64::MAX);
        let max_keys = i64::try_from(self.quota.max_keys).unwrap_or(i64::MAX);
        let max_bytes = i64::try_from(self.quota.max_bytes).unwrap_or(i64::MAX);
        (entry, max_keys, max_bytes)
    }

    /// The refusal of this put, which would leave its plugin with `keys` keys and `bytes` bytes.
    fn over_quota(&self, keys: i64, bytes: i64) -> CapabilityError {
        over_quota(self.plugin, keys, bytes, self.quota)
    }
}

/// A put on PostgreSQL: the fence, the quota check and the upsert in one statement, whose
/// answer tells a lost lease from a full quota.
async fn postgres_put(pool: &PgPool, fence: &Fence, put: &Put<'_>) -> Result<(), CapabilityError> {
    let (entry, max_keys, max_bytes) = put.bounds();
    let (held, written, keys, bytes): (i64, i64, i64, i64) =
        sqlx::query_as(sqlx::AssertSqlSafe(postgres_put_statement()))
            .bind(&fence.lease)
            .bind(&fence.holder)
            .bind(fence.epoch().get())
            .bind(put.plugin)
            .bind(put.key)
            .bind(put.value)
            .bind(entry)
            .bind(max_keys)
            .bind(max_bytes)
            .fetch_one(pool)
            .await
            .map_err(|e| fence.failed_before_commit("kv put", &e))?;
    if held == 0 {
        return Err(fence.lost());
    }
    if written == 0 {
        return Err(put.over_quota(keys, bytes));
    }
    Ok(())
}

/// The statement of a PostgreSQL put. It returns whether the fence held, whether the entry was
/// written, and the plugin's keys and bytes as the put would leave them.
fn postgres_put_statement() -> String {
    // One statement, one transaction: the CTE locks the lease row before the upsert, and no row
    // comes out of it unless the lease is still ours and the plugin's entries stay within its
    // quota afterwards.
    format!(
        "WITH fence AS ({check}),
                          usage AS (SELECT keys, bytes FROM leasehold_kv_usage
                                     WHERE plugin = $4 FOR UPDATE),
                          old AS (SELECT octet_length(key) + octet_length(value) AS bytes
                                    FROM leasehold_kv WHERE plugin = $4 AND key = $5),
                          after AS (SELECT coalesce((SELECT keys FROM usage), 0)
                                             + CASE WHEN EXISTS (SELECT 1 FROM old) THEN 0 ELSE 1 END
                                             AS keys,
                                           coalesce((SELECT bytes FROM usage), 0)
                                             - coalesce((SELECT bytes FROM old), 0) + $7 AS bytes),
                          put AS (
                     INSERT INTO leasehold_kv AS kv (plugin, key, value, lease, epoch, updated_at)
                     SELECT $4, $5, $6, $1, $3, now() FROM fence, after
                      WHERE after.keys <= $8 AND after.bytes <= $9
                     ON CONFLICT (plugin, key) DO UPDATE
                        SET value = EXCLUDED.value, lease = EXCLUDED.lease,
                            epoch = EXCLUDED.epoch, updated_at = EXCLUDED.updated_at
                     RETURNING 1)
                     SELECT (SELECT count(*) FROM fence), (SELECT count(*) FROM put), keys, bytes
                       FROM after",
        check = fence::POSTGRES_CHECK
    )
}

/// A put on SQLite: an immediate transaction that checks the fence, then the quota, then
/// upserts.
async fn sqlite_put(
    pool: &SqlitePool,
    fence: &Fence,
    put: &Put<'_>,
) -> Result<(), CapabilityError> {
    let (entry, max_keys, max_bytes) = put.bounds();
    let mut tx = pool
        .begin_with("BEGIN IMMEDIATE")
        .await
        .map_err(unavailable("kv put"))?;
    if !sqlite_fence(&mut tx, fence).await? {
        return Err(fence.lost());
    }
    // The immediate transaction holds the database's write lock: no other put can change the
    // usage between this check and the upsert.
    let (keys, bytes) = sqlite_usage_after(&mut tx, put, entry).await?;
    if keys > max_keys || bytes > max_bytes {
        return Err(put.over_quota(keys, bytes));
    }
    sqlite_upsert(&mut tx, fence, put).await?;
    tx.commit().await.map_err(unavailable("kv put: commit"))?;
    Ok(())
}

/// The keys and bytes the put's plugin would keep once its key holds an entry of `entry` bytes,
/// in SQLite.
async fn sqlite_usage_after(
    tx: &mut sqlx::Transaction<'_, sqlx::Sqlite>,
    put: &Put<'_>,
    entry: i64,
) -> Result<(i64, i64), CapabilityError> {
    sqlx::query_as(
        "SELECT coalesce((SELECT keys FROM leasehold_kv_usage WHERE plugin = ?1), 0)
                              + NOT EXISTS (SELECT 1 FROM leasehold_kv
                                             WHERE plugin = ?1 AND key = ?2),
                            coalesce((SELECT bytes FROM leasehold_kv_usage WHERE plugin = ?1), 0)
                              - coalesce((SELECT length(CAST(key AS BLOB)) + length(value)
                                            FROM leasehold_kv WHERE plugin = ?1 AND key = ?2), 0)
                              + ?3",
    )
    .bind(put.plugin)
    .bind(put.key)
    .bind(entry)
    .fetch_one(&mut **tx)
    .await
    .map_err(unavailable("kv put: quota"))
}

/// Writes the put's entry in SQLite, stamped with the fence's lease and epoch.
async fn sqlite_upsert(
    tx: &mut sqlx::Transaction<'_, sqlx::Sqlite>,
    fence: &Fence,
    put: &Put<'_>,
) -> Result<(), CapabilityError> {
    sqlx::query(
        "INSERT INTO leasehold_kv (plugin, key, value, lease, epoch, updated_at_ms)
                     VALUES (?1, ?2, ?3, ?4, ?5, CAST(unixepoch('subsec') * 1000 AS INTEGER))
                     ON CONFLICT (plugin, key) DO UPDATE
                        SET value = excluded.value, lease = excluded.lease,
                            epoch = excluded.epoch, updated_at_ms = excluded.updated_at_ms",
    )
    .bind(put.plugin)
    .bind(put.key)
    .bind(put.value)
    .bind(&fence.lease)
    .bind(fence.epoch().get())
    .execute(&mut **tx)
    .await
    .map_err(unavailable("kv put"))?;
    Ok(())
}

/// Runs the fence check inside an immediate SQLite transaction; true when the lease is ours.
async fn sqlite_fence(
    tx: &mut sqlx::Transaction<'_, sqlx::Sqlite>,
    fence: &Fence,
) -> Result<bool, CapabilityError> {
    let clock = MachineClock::read().map_err(|e| CapabilityError::Unavailable(e.to_string()))?;
    let held: Option<i64> = sqlx::query_scalar(fence::SQLITE_CHECK)
        .bind(&fence.lease)
        .bind(&fence.holder)
        .bind(fence.epoch().get())
        .bind(clock.now_ms())
        .bind(clock.boot_id())
        .fetch_optional(&mut **tx)
        .await
        .map_err(unavailable("kv fence"))?;
    Ok(held.is_some())
}

/// The refusal of a put that would leave `plugin` with `keys` keys and `bytes` bytes.
fn over_quota(plugin: &str, keys: i64, bytes: i64, quota: &KvQuota) -> CapabilityError {
    CapabilityError::QuotaExceeded(format!(
        "plugin {plugin}: kv quota exceeded: the put would leave {keys} keys and {bytes} bytes, over the quota of {} keys and {} bytes ([grants] kv_max_keys, kv_max_bytes); nothing was written",
        quota.max_keys, quota.max_bytes
    ))
}

fn check_key(key: &str) -> Result<(), CapabilityError> {
    if key.is_empty() {
        return Err(CapabilityError::Invalid("kv key is empty".into()));
    }
    if key.len() > MAX_KEY {
        return Err(CapabilityError::Invalid(format!(
            "kv key of {} bytes: the limit is {MAX_KEY}",
            key.len()
        )));
    }
    if key.contains('\0') {
        return Err(CapabilityError::Invalid(
            "kv key contains a NUL character".into(),
        ));
    }
    Ok(())
}
