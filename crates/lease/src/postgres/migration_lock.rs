//! The migrators' advisory lock, taken by the host itself so that waiting for it is said and
//! bounded.
//!
//! sqlx's migrator waits in `pg_advisory_lock` for as long as another session holds the lock, and
//! says nothing: a lock that stayed behind (a pooler in transaction mode keeps the session of a
//! migrator that disconnected, lock and all) made every later host hang at start-up, silently, for
//! ever. So the host takes the same lock (the key sqlx computes, so that older binaries and this
//! one still exclude each other) with `pg_try_advisory_lock`, says within [`SAY_AFTER`] who holds
//! it when it can see, and gives up at its bound.

use std::time::Duration;

use sqlx::postgres::PgConnection;
use tracing::warn;

/// How long a wait at start-up goes unsaid: a migration of this schema by another replica is over
/// in well under this, so a wait this long is worth a line, and an operator looking at a host
/// that does not start learns why within seconds.
pub const SAY_AFTER: Duration = Duration::from_secs(2);

/// How often the lock is tried again: a replica that waits for another's migration starts a
/// fraction of a second after it ends, at a few statements a second.
const RETRY_EVERY: Duration = Duration::from_millis(200);

/// The advisory lock key sqlx's PostgreSQL migrator takes for `database` (sqlx-postgres 0.9,
/// `generate_lock_id`): its CRC-32 times a constant.
pub fn key(database: &str) -> i64 {
    0x3d32_ad9e * i64::from(crc32(database.as_bytes()))
}

/// CRC-32 (ISO-HDLC, the polynomial of zlib and Ethernet), as sqlx computes the key with.
fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &byte in bytes {
        crc ^= u32::from(byte);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// Why the lock was not taken.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// A statement failed.
    #[error(transparent)]
    Driver(#[from] sqlx::Error),
    /// Another session held it past the bound.
    #[error("{0}")]
    HeldElsewhere(String),
}

/// Takes the migrators' advisory lock on `conn` (a session-level lock: [`unlock`] it, or end the
/// session), trying until `deadline`; says who holds it once the wait has lasted [`SAY_AFTER`].
pub async fn lock(
    conn: &mut PgConnection,
    deadline: tokio::time::Instant,
) -> Result<i64, LockError> {
    let database: String = sqlx::query_scalar("SELECT current_database()")
        .fetch_one(&mut *conn)
        .await?;
    let key = key(&database);
    let started = crate::seams::now();
    let mut said = false;
    loop {
        let taken: bool = sqlx::query_scalar("SELECT pg_try_advisory_lock($1)")
            .bind(key)
            .fetch_one(&mut *conn)
            .await?;
        if taken {
            return Ok(key);
        }
        let now = crate::seams::now();
        if !said && now.duration_since(started) >= SAY_AFTER {
            said = true;
            let holder = holder(conn, key).await;
            warn!(
                lock = key,
                holder = %holder,
                "waiting for the migrators' advisory lock, held by {holder}: another replica migrating, or a session that kept the lock; giving up in {}",
                crate::text::duration(deadline.saturating_duration_since(now))
            );
        }
        if now >= deadline {
            let holder = holder(conn, key).await;
            return Err(LockError::HeldElsewhere(format!(
                "the migrators' advisory lock (pg_advisory_lock({key})), held by {holder}: a migration still running elsewhere, or a session that kept the lock (a pooler in transaction mode keeps a disconnected migrator's session); end that session (SELECT pg_terminate_backend(PID)) or wait for its migration, then start again"
            )));
        }
        tokio::time::sleep(RETRY_EVERY.min(deadline - now)).await;
    }
}

/// Releases the lock [`lock`] took.
pub async fn unlock(conn: &mut PgConnection, key: i64) -> Result<(), sqlx::Error> {
    sqlx::query("SELECT pg_advisory_unlock($1)")
        .bind(key)
        .execute(conn)
        .await?;
    Ok(())
}

/// A lock holder's server process, `application_name`, client address and state.
type HolderRow = (i32, Option<String>, Option<String>, Option<String>);

/// Who holds advisory lock `key` in this database, as far as this role may see
/// (`pg_stat_activity` hides other roles' sessions' details from a role without
/// `pg_read_all_stats`).
async fn holder(conn: &mut PgConnection, key: i64) -> String {
    // A bigint key is held as two halves: the high in classid, the low in objid, objsubid 1.
    let found: Result<Option<HolderRow>, _> = sqlx::query_as(
        "SELECT l.pid, a.application_name, host(a.client_addr), a.state
               FROM pg_locks AS l LEFT JOIN pg_stat_activity AS a ON a.pid = l.pid
              WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
                AND l.classid = (($1 >> 32) & 4294967295)::oid
                AND l.objid = ($1 & 4294967295)::oid
                AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
              LIMIT 1",
    )
    .bind(key)
    .fetch_optional(conn)
    .await;
    match found {
        Ok(Some((pid, app, client, state))) => {
            let mut about = vec![format!("server process {pid}")];
            if let Some(app) = app.filter(|a| !a.is_empty()) {
                about.push(format!("application_name {app:?}"));
            }
            if let Some(client) = client {
                about.push(format!("client {client}"));
            }
            if let Some(state) = state {
                about.push(format!("state {state}"));
            }
            about.join(", ")
        }
        Ok(None) => "a session this role cannot see (or one that just let go)".to_string(),
        Err(error) => format!("a session that could not be looked up ({error})"),
    }
}

/// `work`, with a warning naming `what` once it has taken [`SAY_AFTER`], saying when the caller
/// gives up (`gives_up_in` from then), if it does.
pub async fn said<T>(
    work: impl Future<Output = T>,
    what: &str,
    gives_up_in: Option<Duration>,
) -> T {
    tokio::pin!(work);
    tokio::select! {
        biased;
        done = &mut work => return done,
        () = tokio::time::sleep(SAY_AFTER) => {}
    }
    match gives_up_in {
        Some(left) => warn!(
            "waiting for {what}; giving up in {}",
            crate::text::duration(left)
        ),
        None => warn!("waiting for {what}"),
    }
    work.await
}

/// [`said`], given up at `bound` (`Err` with the bound).
pub async fn said_and_bounded<T>(
    work: impl Future<Output = T>,
    bound: Duration,
    what: &str,
) -> Result<T, Duration> {
    let left = bound.saturating_sub(SAY_AFTER);
    tokio::time::timeout(bound, said(work, what, Some(left)))
        .await
        .map_err(|_| bound)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_checksum_is_crc32_iso_hdlc() {
        // The standard check value of CRC-32 (ISO-HDLC).
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
        assert_eq!(crc32(b""), 0);
    }

    #[test]
    fn the_key_is_sqlx_migrators_for_the_database() {
        // sqlx-postgres 0.9's generate_lock_id: 0x3d32ad9e * crc32(name), as an i64 (no overflow:
        // both factors are below 2^32 and the constant below 2^30).
        assert_eq!(key("123456789"), 0x3d32_ad9e * 0xCBF4_3926_i64);
        assert!(key("postgres") > 0);
    }
}
