//! The SQLite [`LeaseStore`]: the embedded default. Replicas on one machine share the file; the
//! "database clock" is the machine's boot clock ([`MachineClock`]), which every process and
//! container on the machine shares and which no `date -s` or NTP step can move. Each statement
//! reads it after taking SQLite's write lock (`BEGIN IMMEDIATE`), so a statement that queued for
//! the lock judges expiry by the time it runs. SQLite has no notifications: a release wakes the
//! standbys through the event file beside the lease file ([`events`]), which every replica
//! watches, so a handoff takes milliseconds here too; polling covers a wake-up missed. The lease
//! loop's statements have connections nobody else takes: reads for display and operators'
//! statements go to a pool of their own (WAL readers never block the writer).

pub mod events;
mod line;

use std::path::Path;
use std::time::Duration;

use async_trait::async_trait;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use super::history::{PRUNE_EVERY, TERMS_KEPT, TermEnd, TermRecord};
use super::store::{
    Bid, CampaignedMany, Epoch, GrantSeen, GroupView, LeaseRecord, LeaseStore, ReleaseNotice,
    Released, RenewRequest, Renewed, StoreError, is_reserved_for, ttl_ms,
};
use super::store::{TermRow, to_term};
use super::url::DatabaseUrl;
use events::{EventFile, Wakeup};
use leasehold_lease_core::queue::Preempt;

/// The embedded migrations, accepting a file migrated by a newer release: rolling a replica back
/// to the previous release must work, and what a newer schema requires of this binary is the
/// protocol's to say ([`check_protocol`]), not the list of migrations'.
fn migrator() -> sqlx::migrate::Migrator {
    let mut migrator = sqlx::migrate!("./migrations/sqlite");
    migrator.set_ignore_missing(true);
    migrator
}

/// Refuses when the file needs a newer binary ([`super::protocol`]).
async fn check_protocol<'c, E>(on: E) -> Result<(), StoreError>
where
    E: sqlx::Executor<'c, Database = sqlx::Sqlite>,
{
    let found = sqlx::query_as(super::protocol::READ_SQLITE)
        .fetch_optional(on)
        .await
        .map_err(StoreError::query("protocol check"))?;
    super::protocol::Requirement::check(found.map(super::protocol::from_row))?;
    Ok(())
}

/// The clock SQLite leases expire by: `CLOCK_BOOTTIME` in milliseconds, and the boot it counts
/// from. The boot clock runs through suspend and cannot be set; the wall clock can be stepped, and
/// a forward step would shorten every lease while holders keep running on their monotonic deadlines
/// (docs/ARCHITECTURE.md §3.5). It restarts at zero with the machine, so rows carry the boot id and
/// a time from another boot counts as expired.
#[derive(Debug, Clone)]
pub struct MachineClock {
    /// `/proc/sys/kernel/random/boot_id`: which boot the readings count from.
    boot: String,
}

impl MachineClock {
    /// The clock of this machine's current boot (read once per process: the boot cannot change
    /// under it).
    pub fn read() -> Result<&'static Self, StoreError> {
        static CLOCK: std::sync::OnceLock<MachineClock> = std::sync::OnceLock::new();
        if let Some(clock) = CLOCK.get() {
            return Ok(clock);
        }
        let clock = Self::boot()?;
        Ok(CLOCK.get_or_init(|| clock))
    }

    fn boot() -> Result<Self, StoreError> {
        #[cfg(target_os = "linux")]
        {
            const BOOT_ID: &str = "/proc/sys/kernel/random/boot_id";
            let boot = std::fs::read_to_string(BOOT_ID).map_err(|e| StoreError::Invalid {
                what: "machine clock",
                reason: format!(
                    "cannot read {BOOT_ID} ({e}): SQLite leases expire by the boot clock, which needs /proc"
                ),
            })?;
            Ok(MachineClock {
                boot: boot.trim().to_string(),
            })
        }
        #[cfg(not(target_os = "linux"))]
        {
            tracing::warn!(
                "this system has no boot clock leasehold can read: SQLite leases expire by the wall clock, which a clock step can shorten"
            );
            Ok(MachineClock {
                boot: "wall-clock".to_string(),
            })
        }
    }

    /// The boot the readings belong to.
    pub fn boot_id(&self) -> &str {
        &self.boot
    }

    /// Milliseconds since the machine booted.
    pub fn now_ms(&self) -> i64 {
        #[cfg(target_os = "linux")]
        {
            let t = rustix::time::clock_gettime(rustix::time::ClockId::Boottime);
            t.tv_sec * 1000 + t.tv_nsec / 1_000_000
        }
        #[cfg(not(target_os = "linux"))]
        #[allow(clippy::disallowed_methods)]
        // the database's clock: SQLite has none of its own
        {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        }
    }
}

/// Pools of connections to the lease file.
#[derive(Debug, Clone)]
pub struct SqliteStore {
    /// The lease loop's connections: campaigns, renewals, releases, heartbeats.
    pool: SqlitePool,
    /// Everything else: reads for display (`/status`, `leases list`), `ping` and
    /// `force_release`. Connected on first use, at most [`OBSERVERS`].
    observers: SqlitePool,
    /// The clock expiry is judged by.
    clock: &'static MachineClock,
    /// Where releases and handoff requests are announced to the other replicas of the file.
    events: EventFile,
}

/// Connections for reads and operators' statements: `/status` reads through one refresh at a
/// time, and a second lets an operator's listing run beside it.
const OBSERVERS: u32 = 2;

impl SqliteStore {
    /// Opens (creating if missing) and migrates the lease file. A statement waits for the file's
    /// write lock no longer than the server budget of `call_timeout`: SQLite runs a statement on
    /// its own thread, which goes on after its caller gave up, and must not commit after that.
    pub async fn open(
        url: &DatabaseUrl,
        connect_timeout: Duration,
        call_timeout: Duration,
    ) -> Result<Self, StoreError> {
        let clock = MachineClock::read()?;
        let DatabaseUrl::Sqlite { path } = url else {
            return Err(StoreError::Invalid {
                what: "database URL",
                reason: format!("{url} is not a SQLite URL"),
            });
        };
        create_private(path);
        let events = EventFile::beside(path);
        let options = SqliteConnectOptions::new()
            .filename(path)
            .create_if_missing(true)
            // WAL lets readers (status, admin) run beside the writer.
            .journal_mode(SqliteJournalMode::Wal)
            // FULL: an acquisition that committed must survive a power cut, or its epoch could be reused.
            .synchronous(SqliteSynchronous::Full)
            // Writers from several processes queue for the lock, each no longer than its caller.
            .busy_timeout(super::server_budget(call_timeout));
        // Several processes opening a new file at once race to switch it to WAL and to migrate it.
        // SQLite has no advisory lock for that, so the losers retry until `connect_timeout`; errors
        // that no retry can fix (a missing directory, a corrupt file) are reported at once.
        let deadline = crate::seams::now() + connect_timeout;
        let mut attempt = 0u64;
        loop {
            attempt += 1;
            let opened = SqlitePoolOptions::new()
                .max_connections(4)
                .acquire_timeout(connect_timeout)
                .connect_with(options.clone())
                .await;
            let error = match opened {
                Ok(pool) => match migrator().run(&pool).await {
                    Ok(()) => {
                        // A file that needs a newer binary is refused here, before anything is
                        // taken; each campaign checks again (`campaign_many`).
                        check_protocol(&pool).await?;
                        let observers = SqlitePoolOptions::new()
                            .max_connections(OBSERVERS)
                            .acquire_timeout(connect_timeout)
                            .connect_lazy_with(options.clone());
                        // After the lease file: it takes that file's permissions. Without it
                        // standbys poll, so a failure is reported and not fatal.
                        if let Err(error) = events.create() {
                            warn!(%error, "release wake-ups are off: standbys of this SQLite file will take a released lease at its old expiry");
                        }
                        return Ok(SqliteStore {
                            pool,
                            observers,
                            clock,
                            events,
                        });
                    }
                    Err(source) => StoreError::Migrate {
                        url: url.to_string(),
                        source,
                    },
                },
                Err(source) => cannot_create(path).unwrap_or(StoreError::Connect {
                    url: url.to_string(),
                    source,
                }),
            };
            if crate::seams::now() >= deadline || !is_contention(&error) {
                return Err(error);
            }
            debug!(error = %error, attempt, "opening the lease file raced another process; retrying");
            tokio::time::sleep(Duration::from_millis(20 * attempt.min(10))).await;
        }
    }
}

/// Why a missing lease file cannot be created, said in the filesystem's words ("Read-only file
/// system", "Permission denied", "No such file or directory") rather than SQLite's "unable to
/// open database file"; `None` when the file exists or its directory would take it. It asks
/// without creating anything: a probe file made and removed here could be the one another
/// replica is opening at that moment.
fn cannot_create(path: &Path) -> Option<StoreError> {
    if path.exists() {
        return None;
    }
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let access = rustix::fs::Access::WRITE_OK | rustix::fs::Access::EXEC_OK;
    let refused = rustix::fs::access(dir, access).err()?;
    Some(StoreError::CreateFile {
        path: path.to_path_buf(),
        source: refused.into(),
    })
}

/// Creates the lease file 0600 when it is missing, before SQLite would with the umask (0644): it
/// holds the plugins' kv values, and SQLite gives its `-wal` and `-shm` files the mode of the
/// database file. An empty file is a new database to SQLite. A file that exists keeps its mode,
/// with a warning when others may read or write it: replicas of several users may share a file
/// through its group, and tightening it would lock them out. Failing to create it is left to
/// SQLite's open, which [`cannot_create`] explains.
fn create_private(path: &Path) {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let created = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path);
    if created.is_ok() {
        return;
    }
    let Ok(meta) = std::fs::metadata(path) else {
        return;
    };
    let mode = meta.permissions().mode() & 0o777;
    if meta.is_file() && mode & 0o007 != 0 {
        warn!(
            path = %path.display(),
            mode = format!("{mode:04o}"),
            "the lease file is open to every user of this machine, and it holds the plugins' kv values; chmod 600 it (and its -wal and -shm files)"
        );
    }
}

/// Lock contention (SQLITE_BUSY, SQLITE_LOCKED) and the migration race (another process recorded
/// or applied the migration first) pass with a retry.
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
    // Extended result codes keep the primary code in the low byte. A duplicate column is the same
    // race on an `ALTER TABLE … ADD COLUMN` migration, which SQLite cannot write `IF NOT EXISTS`:
    // another process applied it between our reading the applied list and running it.
    matches!(code & 0xff, 5 | 6)
        || db.is_unique_violation()
        || db.message().starts_with("duplicate column name")
}

/// The machine's wall clock in milliseconds since the Unix epoch: what terms are recorded with.
/// Only shown, never judged, so a step of it only skews the history.
#[allow(clippy::disallowed_methods)] // the database's wall clock: SQLite has none of its own
fn wall_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// How the term of row `l` ended: see [`TERM_ENDED`].
macro_rules! term_ended {
    () => {
        "CASE WHEN l.boot = ?3 AND l.expires_at_ms < l.renewed_at_ms + l.ttl_ms AND l.granted = 0
              THEN 'released' ELSE 'expired' END"
    };
}
/// When the term of row `l` ended: see [`TERM_ENDED`].
macro_rules! term_ended_at {
    () => {
        "CASE WHEN l.boot = ?3 THEN min(?4, ?4 - (?2 - l.expires_at_ms)) ELSE ?4 - ?2 END"
    };
}
/// How a term ended whose lease row `l` has expired (or is of an earlier boot), as the SET of
/// an update of the term: released when the row expired before its ttl ran out (a release sets
/// the expiry to the moment it ran; nothing else shortens one), expired otherwise; at the row's
/// expiry on the wall clock, that many ms before now, or for a row of an earlier boot at that
/// boot's end, before this boot began. `?2` is the boot clock's now, `?3` the boot, `?4` the
/// wall clock's now.
const TERM_ENDED: &str = concat!(
    "ended_by = ",
    term_ended!(),
    ", ended_at_ms = ",
    term_ended_at!()
);

/// Opens a term for each lease `won` by `holder`, and for those whose epoch is a multiple of
/// [`PRUNE_EVERY`] prunes the lease's oldest, keeping [`TERMS_KEPT`] with the new one.
async fn open_terms(
    tx: &mut sqlx::SqliteConnection,
    holder: &str,
    won: &[(String, Epoch)],
    wall: i64,
) -> Result<(), sqlx::Error> {
    let won_leases = won;
    let won = serde_json::to_string(won).unwrap_or_default();
    sqlx::query(
        "INSERT INTO leasehold_terms (name, epoch, holder, started_at_ms)
         SELECT value ->> '$[0]', value ->> '$[1]', ?2, ?3 FROM json_each(?1) WHERE true
         ON CONFLICT (name, epoch) DO NOTHING",
    )
    .bind(&won)
    .bind(holder)
    .bind(wall)
    .execute(&mut *tx)
    .await?;
    let due: Vec<&(String, Epoch)> = won_leases
        .iter()
        .filter(|(_, epoch)| epoch.get() % i64::from(PRUNE_EVERY) == 0)
        .collect();
    if due.is_empty() {
        return Ok(());
    }
    sqlx::query(
        "DELETE FROM leasehold_terms
          WHERE name IN (SELECT value ->> '$[0]' FROM json_each(?1))
            AND epoch <= (SELECT k.epoch FROM leasehold_terms AS k
                           WHERE k.name = leasehold_terms.name
                           ORDER BY k.epoch DESC LIMIT 1 OFFSET ?2)",
    )
    .bind(serde_json::to_string(&due).unwrap_or_default())
    .bind(i64::from(TERMS_KEPT))
    .execute(&mut *tx)
    .await?;
    Ok(())
}

/// Closes the open term `epoch` of lease `name`, ended as `end` now.
async fn close_term(
    tx: &mut sqlx::SqliteConnection,
    name: &str,
    epoch: Epoch,
    end: TermEnd,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "UPDATE leasehold_terms SET ended_at_ms = ?3, ended_by = ?4
          WHERE name = ?1 AND epoch = ?2 AND ended_by IS NULL",
    )
    .bind(name)
    .bind(epoch.get())
    .bind(wall_ms())
    .bind(end.as_str())
    .execute(&mut *tx)
    .await?;
    Ok(())
}

/// The columns of a [`LeaseRecord`]; `?2` is the clock's now, `?3` its boot (a row of another
/// boot has expired).
const RECORD_COLUMNS: &str = "name, holder, epoch, ttl_ms,
    CASE WHEN boot = ?3 THEN expires_at_ms - ?2 ELSE 0 END";

type RecordRow = (String, String, i64, i64, i64);

fn to_record((name, holder, epoch, ttl_ms, expires_in_ms): RecordRow) -> LeaseRecord {
    LeaseRecord {
        name,
        holder,
        epoch: Epoch::new(epoch),
        ttl_ms,
        expires_in_ms,
    }
}

impl SqliteStore {
    /// A transaction holding the file's write lock, so that the clock read after it is the time
    /// the statement runs, not the time it was queued.
    async fn write(&self) -> Result<sqlx::Transaction<'static, sqlx::Sqlite>, sqlx::Error> {
        self.pool.begin_with("BEGIN IMMEDIATE").await
    }

    /// Tells the other replicas of the file, once the statement that made `wakeups` committed. A
    /// failure costs them only the wait for the holder's old expiry (or a poll): it is logged.
    fn announce(&self, wakeups: &[Wakeup]) {
        if let Err(error) = self.events.announce(wakeups) {
            debug!(%error, "announcing to the other replicas failed; they will poll");
        }
    }
}

#[async_trait]
impl LeaseStore for SqliteStore {
    fn backend(&self) -> &'static str {
        "sqlite"
    }

    async fn campaign_in_line(
        &self,
        holder: &str,
        bids: &[Bid],
        ttl: Duration,
    ) -> Result<CampaignedMany, StoreError> {
        if bids.is_empty() {
            return Ok(CampaignedMany::default());
        }
        let ttl_ms = ttl_ms(ttl)?;
        let mut seen = std::collections::BTreeSet::new();
        let bids: Vec<&Bid> = bids.iter().filter(|b| seen.insert(&b.name)).collect();
        let json = |names: &[&str]| {
            serde_json::to_string(names).map_err(|e| StoreError::Invalid {
                what: "lease names",
                reason: e.to_string(),
            })
        };
        let names: Vec<&str> = bids.iter().map(|b| b.name.as_str()).collect();
        let names_json = json(&names)?;
        let err = StoreError::query("campaign");
        let mut tx = self.write().await.map_err(err)?;
        // Under the write lock: a binary that raised the protocol since this one opened the file
        // has committed its raise before this campaign can.
        check_protocol(&mut *tx).await?;
        let now = self.clock.now_ms();
        let wall = wall_ms();
        let boot = self.clock.boot_id();
        let mut out = CampaignedMany {
            db_now: Some(now),
            ..CampaignedMany::default()
        };
        let mut wakeups = Vec::new();
        // The line (`line`): leases this holder holds already (given to it and not taken up,
        // or won by a campaign whose answer it missed) are reported, and out of its line; for
        // the rest it keeps its place. Every lease found free goes to the head of its line,
        // unless a handoff reserved it for this holder.
        let rows = line::rows(&mut tx, &names_json).await.map_err(err)?;
        let mut rest: Vec<&Bid> = Vec::new();
        for bid in bids {
            match rows.get(&bid.name) {
                Some(row)
                    if row.holder == holder && row.boot == boot && row.expires_at_ms > now =>
                {
                    let left =
                        Duration::from_millis(u64::try_from(row.expires_at_ms - now).unwrap_or(0));
                    out.granted
                        .push((bid.name.clone(), Epoch::new(row.epoch), left));
                    line::leave(&mut tx, &bid.name, holder).await.map_err(err)?;
                }
                _ => rest.push(bid),
            }
        }
        line::join(&mut tx, holder, &rest, ttl_ms, now, boot)
            .await
            .map_err(err)?;
        let rest_names: Vec<&str> = rest.iter().map(|b| b.name.as_str()).collect();
        let lines = line::live(&mut tx, &json(&rest_names)?, now, boot)
            .await
            .map_err(err)?;
        let mut to_win: Vec<&str> = Vec::new();
        let mut gives: Vec<(&str, line::Waiting)> = Vec::new();
        for bid in &rest {
            let row = rows.get(&bid.name);
            let free = row.is_none_or(|r| r.boot != boot || r.expires_at_ms <= now);
            if !free {
                continue;
            }
            let reserved = row
                .filter(|r| r.boot == boot)
                .and_then(|r| r.reserved.as_ref())
                .filter(|(_, until)| *until > now);
            match reserved {
                // Reserved for another replica: the upsert below refuses, the wait says so.
                Some((to, _)) if !is_reserved_for(to, holder) => continue,
                Some(_) => to_win.push(&bid.name),
                None => {
                    let last = row.map_or("", |r| r.holder.as_str());
                    let waiting = lines.get(&bid.name).map_or(&[][..], Vec::as_slice);
                    match line::head(waiting, now, last, None) {
                        Some(head) if head.waiter.holder != holder => {
                            gives.push((&bid.name, head.clone()))
                        }
                        _ => to_win.push(&bid.name),
                    }
                }
            }
        }
        // The terms of the leases this campaign can win or give (expired, or of another boot)
        // ended when their rows expired ([`TERM_ENDED`]).
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "UPDATE leasehold_terms AS t SET {TERM_ENDED}
               FROM leasehold_leases AS l
              WHERE l.name IN (SELECT value FROM json_each(?1))
                AND (l.expires_at_ms <= ?2 OR l.boot <> ?3)
                AND t.name = l.name AND t.epoch <= l.epoch AND t.ended_by IS NULL"
        )))
        .bind(&names_json)
        .bind(now)
        .bind(boot)
        .bind(wall)
        .execute(&mut *tx)
        .await
        .map_err(err)?;
        // The insert part carries the existing epoch + 1 (1 for a new name): the schema refuses
        // an insert at or below a row's epoch, and BEFORE INSERT fires before the conflict sends
        // the statement to DO UPDATE. (`WHERE true` lets SQLite parse an upsert from a SELECT.)
        let won: Vec<(String, i64)> = sqlx::query_as(
            "INSERT INTO leasehold_leases (name, holder, epoch, acquired_at_ms, renewed_at_ms, expires_at_ms, ttl_ms, boot, granted)
             SELECT j.value, ?2,
                    COALESCE((SELECT epoch FROM leasehold_leases WHERE name = j.value), 0) + 1,
                    ?4, ?4, ?4 + ?3, ?3, ?5, 0
               FROM (SELECT DISTINCT value FROM json_each(?1)) AS j WHERE true
             ON CONFLICT (name) DO UPDATE
                SET holder = excluded.holder, epoch = leasehold_leases.epoch + 1,
                    acquired_at_ms = excluded.acquired_at_ms, renewed_at_ms = excluded.renewed_at_ms,
                    expires_at_ms = excluded.expires_at_ms, ttl_ms = excluded.ttl_ms,
                    boot = excluded.boot, granted = 0,
                    handoff_epoch = NULL, handoff_to = NULL,
                    reserved_for = NULL, reserved_until_ms = NULL
                WHERE (leasehold_leases.expires_at_ms <= excluded.acquired_at_ms
                       OR leasehold_leases.boot <> excluded.boot)
                  AND (leasehold_leases.boot <> excluded.boot
                       OR leasehold_leases.reserved_for IS NULL
                       OR leasehold_leases.reserved_until_ms <= excluded.acquired_at_ms
                       OR leasehold_leases.reserved_for = ?2
                       OR (length(?2) > 9
                           AND substr(?2, 1, length(?2) - 9) = leasehold_leases.reserved_for))
             RETURNING name, epoch",
        )
        .bind(json(&to_win)?)
        .bind(holder)
        .bind(ttl_ms)
        .bind(now)
        .bind(boot)
        .fetch_all(&mut *tx)
        .await
        .map_err(err)?;
        let won: Vec<(String, Epoch)> = won.into_iter().map(|(n, e)| (n, Epoch::new(e))).collect();
        if !won.is_empty() {
            open_terms(&mut tx, holder, &won, wall).await.map_err(err)?;
        }
        for (name, _) in &won {
            let priority = rest
                .iter()
                .find(|b| &b.name == name)
                .and_then(|b| b.line)
                .map_or(0, |l| l.place.priority);
            sqlx::query("UPDATE leasehold_leases SET priority = ?2 WHERE name = ?1")
                .bind(name)
                .bind(priority)
                .execute(&mut *tx)
                .await
                .map_err(err)?;
            line::leave(&mut tx, name, holder).await.map_err(err)?;
        }
        let mut given = std::collections::BTreeMap::new();
        for (name, head) in &gives {
            let epoch = line::grant(&mut tx, name, head, now, boot, wall, "expired")
                .await
                .map_err(err)?;
            wakeups.push(Wakeup::Granted {
                lease: name.to_string(),
                holder: head.waiter.holder.clone(),
                epoch,
            });
            given.insert(name.to_string(), head.alive_ms);
            out.gave.push(name.to_string());
        }
        // Every lease not won is held (by this boot's clock) until its expiry, or reserved for
        // another replica by a handoff until the reservation ends (`?4` is the holder: a
        // reservation of ours is no wait, see `is_reserved_for`).
        let held: Vec<(String, i64)> = sqlx::query_as(
            "SELECT name, max(expires_at_ms, CASE WHEN reserved_for IS NOT NULL
                          AND reserved_for <> ?4
                          AND NOT (length(?4) > 9 AND substr(?4, 1, length(?4) - 9) = reserved_for)
                         THEN coalesce(reserved_until_ms, 0) ELSE 0 END) - ?2 AS wait
               FROM leasehold_leases
              WHERE name IN (SELECT value FROM json_each(?1)) AND boot = ?3 AND wait > 0",
        )
        .bind(&names_json)
        .bind(now)
        .bind(boot)
        .bind(holder)
        .fetch_all(&mut *tx)
        .await
        .map_err(err)?;
        let held: std::collections::BTreeMap<String, i64> = held.into_iter().collect();
        let won_names: std::collections::BTreeSet<&str> =
            won.iter().map(|(n, _)| n.as_str()).collect();
        for bid in &rest {
            let name = bid.name.as_str();
            if won_names.contains(name) {
                continue;
            }
            let mut wait = given.get(name).or(held.get(name)).copied();
            // A waiter that may ask a holder of lower priority to step aside.
            if let (Some(line), Some(row), false) =
                (bid.line, rows.get(name), given.contains_key(name))
            {
                let waiting = lines.get(name).map_or(&[][..], Vec::as_slice);
                match line::preempt(&mut tx, name, holder, line.place, row, waiting, now, boot)
                    .await
                    .map_err(err)?
                {
                    Preempt::Now => {
                        out.asked.push(name.to_string());
                        wakeups.push(Wakeup::Handoff {
                            lease: name.to_string(),
                            epoch: Epoch::new(row.epoch),
                        })
                    }
                    Preempt::At(at) => wait = Some(wait.map_or(at - now, |w| w.min(at - now))),
                    Preempt::Never => {}
                }
            }
            out.lost
                .push((name.to_string(), super::store::wait_ms(wait)));
        }
        tx.commit().await.map_err(err)?;
        out.won = won;
        self.announce(&wakeups);
        Ok(out)
    }

    async fn read_grant(
        &self,
        name: &str,
        holder: &str,
        epoch: Epoch,
    ) -> Result<GrantSeen, StoreError> {
        // A read: WAL readers never wait for the writer.
        let now = self.clock.now_ms();
        let left: Option<i64> = sqlx::query_scalar(
            "SELECT expires_at_ms - ?5 FROM leasehold_leases
              WHERE name = ?1 AND holder = ?2 AND epoch = ?3 AND boot = ?4 AND expires_at_ms > ?5",
        )
        .bind(name)
        .bind(holder)
        .bind(epoch.get())
        .bind(self.clock.boot_id())
        .bind(now)
        .fetch_optional(&self.pool)
        .await
        .map_err(StoreError::query("read grant"))?;
        Ok(GrantSeen {
            left: super::store::wait_ms(left),
            db_now: Some(now),
        })
    }

    async fn renew(&self, holder: &str, leases: &[RenewRequest]) -> Result<Renewed, StoreError> {
        if leases.is_empty() {
            return Ok(Renewed::default());
        }
        let batch = leases
            .iter()
            .map(|r| Ok(serde_json::json!({ "name": r.name, "epoch": r.epoch, "ttl_ms": ttl_ms(r.ttl)? })))
            .collect::<Result<Vec<_>, StoreError>>()?;
        let err = StoreError::query("renew");
        let mut tx = self.write().await.map_err(err)?;
        let now = self.clock.now_ms();
        // SQLite locks the whole file, never a row: nothing is ever busy.
        let landed: Vec<(String, bool)> = sqlx::query_as(
            "UPDATE leasehold_leases
                SET renewed_at_ms = ?3, expires_at_ms = ?3 + r.ttl_ms, ttl_ms = r.ttl_ms,
                    granted = 0
               FROM (SELECT value ->> '$.name' AS name, value ->> '$.epoch' AS epoch,
                            value ->> '$.ttl_ms' AS ttl_ms FROM json_each(?2)) AS r
              WHERE leasehold_leases.name = r.name AND leasehold_leases.holder = ?1
                AND leasehold_leases.epoch = r.epoch AND leasehold_leases.expires_at_ms > ?3
                AND leasehold_leases.boot = ?4
             RETURNING name, coalesce(handoff_epoch = epoch, 0)",
        )
        .bind(holder)
        .bind(serde_json::Value::Array(batch).to_string())
        .bind(now)
        .bind(self.clock.boot_id())
        .fetch_all(&mut *tx)
        .await
        .map_err(err)?;
        tx.commit().await.map_err(err)?;
        let handoffs = landed
            .iter()
            .filter(|(_, handoff)| *handoff)
            .map(|(name, _)| name.clone())
            .collect();
        Ok(Renewed {
            landed: landed.into_iter().map(|(name, _)| name).collect(),
            busy: Vec::new(),
            db_now: Some(now),
            handoffs,
        })
    }

    async fn release_giving(
        &self,
        holder: &str,
        leases: &[(String, Epoch)],
    ) -> Result<Vec<Released>, StoreError> {
        // One transaction: one write lock and one commit for the lot.
        let err = StoreError::query("release");
        let mut tx = self.write().await.map_err(err)?;
        let now = self.clock.now_ms();
        let (wall, boot) = (wall_ms(), self.clock.boot_id());
        let names: Vec<&str> = leases.iter().map(|(n, _)| n.as_str()).collect();
        let names_json = serde_json::to_string(&names).unwrap_or_default();
        let lines = line::live(&mut tx, &names_json, now, boot)
            .await
            .map_err(err)?;
        let mut released = Vec::new();
        let mut wakeups = Vec::new();
        for (name, epoch) in leases {
            // Ours at this epoch, and what a handoff request of this term named, if anything.
            let ours: Option<Option<String>> = sqlx::query_scalar(
                "SELECT CASE WHEN handoff_epoch = epoch THEN handoff_to END FROM leasehold_leases
                  WHERE name = ?1 AND holder = ?2 AND epoch = ?3 AND expires_at_ms > ?4 AND boot = ?5",
            )
            .bind(name)
            .bind(holder)
            .bind(epoch.get())
            .bind(now)
            .bind(boot)
            .fetch_optional(&mut *tx)
            .await
            .map_err(err)?;
            let Some(named) = ours else { continue };
            // To the head of the line (the replica the request named, if it waits in line).
            let waiting = lines.get(name).map_or(&[][..], Vec::as_slice);
            if let Some(head) = line::head(waiting, now, holder, named.as_deref()) {
                let given = line::grant(&mut tx, name, head, now, boot, wall, "released")
                    .await
                    .map_err(err)?;
                wakeups.push(Wakeup::Granted {
                    lease: name.clone(),
                    holder: head.waiter.holder.clone(),
                    epoch: given,
                });
                released.push(Released {
                    name: name.clone(),
                    given_to: Some(head.waiter.holder.clone()),
                });
                continue;
            }
            // Nobody in line: expired now. A handoff request of this term that named a
            // replica reserves the lease for it for one ttl; any request is done with.
            sqlx::query(
                "UPDATE leasehold_leases SET expires_at_ms = ?4,
                        reserved_for = CASE WHEN handoff_epoch = epoch THEN handoff_to END,
                        reserved_until_ms = CASE WHEN handoff_epoch = epoch
                            AND handoff_to IS NOT NULL THEN ?4 + ttl_ms END,
                        handoff_epoch = NULL, handoff_to = NULL
                  WHERE name = ?1 AND holder = ?2 AND epoch = ?3 AND expires_at_ms > ?4 AND boot = ?5",
            )
            .bind(name)
            .bind(holder)
            .bind(epoch.get())
            .bind(now)
            .bind(boot)
            .execute(&mut *tx)
            .await
            .map_err(err)?;
            wakeups.push(Wakeup::Released(name.clone()));
            released.push(Released {
                name: name.clone(),
                given_to: None,
            });
        }
        tx.commit().await.map_err(err)?;
        self.announce(&wakeups);
        Ok(released)
    }

    async fn force_release(&self, name: &str) -> Result<Option<(String, Epoch)>, StoreError> {
        let err = StoreError::query("force release");
        // An operator's statement: on the observers' connections, never the lease loop's.
        let mut tx = self
            .observers
            .begin_with("BEGIN IMMEDIATE")
            .await
            .map_err(err)?;
        // A forced release ends any handoff under way: nobody is reserved the lease.
        let released: Option<(String, i64)> = sqlx::query_as(
            "UPDATE leasehold_leases SET expires_at_ms = ?2, handoff_epoch = NULL,
                    handoff_to = NULL, reserved_for = NULL, reserved_until_ms = NULL
              WHERE name = ?1 AND expires_at_ms > ?2 AND boot = ?3
             RETURNING holder, epoch",
        )
        .bind(name)
        .bind(self.clock.now_ms())
        .bind(self.clock.boot_id())
        .fetch_optional(&mut *tx)
        .await
        .map_err(err)?;
        let released = released.map(|(holder, epoch)| (holder, Epoch::new(epoch)));
        if let Some((_, epoch)) = &released {
            close_term(&mut tx, name, *epoch, TermEnd::Forced)
                .await
                .map_err(err)?;
        }
        tx.commit().await.map_err(err)?;
        if released.is_some() {
            self.announce(&[Wakeup::Released(name.to_string())]);
        }
        Ok(released)
    }

    async fn request_handoff(
        &self,
        name: &str,
        to: Option<&str>,
    ) -> Result<Option<LeaseRecord>, StoreError> {
        let err = StoreError::query("request handoff");
        // An operator's statement: on the observers' connections, never the lease loop's.
        let mut tx = self
            .observers
            .begin_with("BEGIN IMMEDIATE")
            .await
            .map_err(err)?;
        let asked: Option<RecordRow> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "UPDATE leasehold_leases SET handoff_epoch = epoch, handoff_to = ?4
              WHERE name = ?1 AND expires_at_ms > ?2 AND boot = ?3
             RETURNING {RECORD_COLUMNS}"
        )))
        .bind(name)
        .bind(self.clock.now_ms())
        .bind(self.clock.boot_id())
        .bind(to)
        .fetch_optional(&mut *tx)
        .await
        .map_err(err)?;
        tx.commit().await.map_err(err)?;
        let asked = asked.map(to_record);
        if let Some(record) = &asked {
            self.announce(&[Wakeup::Handoff {
                lease: name.to_string(),
                epoch: record.epoch,
            }]);
        }
        Ok(asked)
    }

    async fn get(&self, names: &[String]) -> Result<Vec<LeaseRecord>, StoreError> {
        let rows: Vec<RecordRow> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT {RECORD_COLUMNS}
               FROM leasehold_leases WHERE name IN (SELECT value FROM json_each(?1)) ORDER BY name"
        )))
        .bind(serde_json::to_string(names).unwrap_or_default())
        .bind(self.clock.now_ms())
        .bind(self.clock.boot_id())
        .fetch_all(&self.observers)
        .await
        .map_err(StoreError::query("get"))?;
        Ok(rows.into_iter().map(to_record).collect())
    }

    async fn list(&self, after: Option<&str>, limit: u32) -> Result<Vec<LeaseRecord>, StoreError> {
        let rows: Vec<RecordRow> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT {RECORD_COLUMNS}
               FROM leasehold_leases WHERE ?1 IS NULL OR name > ?1 ORDER BY name LIMIT ?4"
        )))
        .bind(after)
        .bind(self.clock.now_ms())
        .bind(self.clock.boot_id())
        .bind(i64::from(limit))
        .fetch_all(&self.observers)
        .await
        .map_err(StoreError::query("list"))?;
        Ok(rows.into_iter().map(to_record).collect())
    }

    async fn terms(&self, names: &[String], per_lease: u32) -> Result<Vec<TermRecord>, StoreError> {
        // The lease row's own term, left open until a campaign closes it, has ended once the row
        // has expired, as that campaign will say ([`TERM_ENDED`], evaluated on the row here).
        let rows: Vec<TermRow> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "WITH ranked AS (
                SELECT *, row_number() OVER (PARTITION BY name ORDER BY epoch DESC) AS n
                  FROM leasehold_terms WHERE name IN (SELECT value FROM json_each(?1))),
             ended AS (
                SELECT r.name, r.epoch, r.holder, r.started_at_ms,
                       coalesce(r.ended_at_ms, x.ended_at_ms) AS ended_at_ms,
                       coalesce(r.ended_by, x.ended_by) AS ended_by
                  FROM ranked AS r
                  LEFT JOIN (SELECT l.name, l.epoch, {} AS ended_by, {} AS ended_at_ms
                               FROM leasehold_leases AS l
                              WHERE l.expires_at_ms <= ?2 OR l.boot <> ?3) AS x
                    ON x.name = r.name AND x.epoch = r.epoch
                 WHERE r.n <= ?5)
             SELECT name, epoch, holder, max(0, ?4 - started_at_ms),
                    CASE WHEN ended_at_ms IS NOT NULL THEN max(0, ?4 - ended_at_ms) END, ended_by
               FROM ended ORDER BY name, epoch DESC",
            term_ended!(),
            term_ended_at!()
        )))
        .bind(serde_json::to_string(names).unwrap_or_default())
        .bind(self.clock.now_ms())
        .bind(self.clock.boot_id())
        .bind(wall_ms())
        .bind(i64::from(per_lease))
        .fetch_all(&self.observers)
        .await
        .map_err(StoreError::query("terms"))?;
        rows.into_iter().map(to_term).collect()
    }

    async fn heartbeat(
        &self,
        group: &str,
        member: &str,
        shards: &[String],
        ttl: Duration,
    ) -> Result<GroupView, StoreError> {
        let ttl_ms = ttl_ms(ttl)?;
        let count = super::store::shard_count(shards)?;
        let shards = serde_json::to_string(shards).map_err(|e| StoreError::Invalid {
            what: "lease names",
            reason: e.to_string(),
        })?;
        let err = StoreError::query("heartbeat");
        let boot = self.clock.boot_id();
        let mut tx = self.write().await.map_err(err)?;
        let now = self.clock.now_ms();
        // A row of another boot, or lapsed, is swept; ours is kept with its join time while live.
        sqlx::query(
            "DELETE FROM leasehold_members
              WHERE grp = ?1 AND member <> ?2 AND (boot <> ?3 OR expires_at_ms <= ?4)",
        )
        .bind(group)
        .bind(member)
        .bind(boot)
        .bind(now)
        .execute(&mut *tx)
        .await
        .map_err(err)?;
        sqlx::query(
            "INSERT INTO leasehold_members (grp, member, joined_at_ms, expires_at_ms, boot, shards)
             VALUES (?1, ?2, ?4, ?4 + ?5, ?3, ?6)
             ON CONFLICT (grp, member) DO UPDATE
                SET expires_at_ms = excluded.expires_at_ms, boot = excluded.boot,
                    shards = excluded.shards,
                    joined_at_ms = CASE WHEN leasehold_members.boot = excluded.boot
                                         AND leasehold_members.expires_at_ms > ?4
                                        THEN leasehold_members.joined_at_ms
                                        ELSE excluded.joined_at_ms END",
        )
        .bind(group)
        .bind(member)
        .bind(boot)
        .bind(now)
        .bind(ttl_ms)
        .bind(count)
        .execute(&mut *tx)
        .await
        .map_err(err)?;
        let rows: Vec<super::store::GroupRow> = sqlx::query_as(
            "SELECT member, NULL, ?3 - joined_at_ms, expires_at_ms - ?3, ?3, shards
               FROM leasehold_members
              WHERE grp = ?1 AND boot = ?2 AND expires_at_ms > ?3
             UNION ALL
             SELECT name, holder, NULL, NULL, ?3, NULL FROM leasehold_leases
              WHERE name IN (SELECT value FROM json_each(?4)) AND boot = ?2 AND expires_at_ms > ?3",
        )
        .bind(group)
        .bind(boot)
        .bind(now)
        .bind(&shards)
        .fetch_all(&mut *tx)
        .await
        .map_err(err)?;
        tx.commit().await.map_err(err)?;
        Ok(super::store::group_view(rows))
    }

    async fn members(&self) -> Result<Vec<super::store::MemberRecord>, StoreError> {
        let rows: Vec<super::store::MemberRow> = sqlx::query_as(
            "SELECT grp, member, ?1 - joined_at_ms, expires_at_ms - ?1, shards
               FROM leasehold_members WHERE boot = ?2 AND expires_at_ms > ?1
              ORDER BY grp, member",
        )
        .bind(self.clock.now_ms())
        .bind(self.clock.boot_id())
        .fetch_all(&self.observers)
        .await
        .map_err(StoreError::query("members"))?;
        Ok(rows.into_iter().map(super::store::to_member).collect())
    }

    async fn leave(&self, groups: &[String], member: &str) -> Result<(), StoreError> {
        let groups = serde_json::to_string(groups).map_err(|e| StoreError::Invalid {
            what: "group names",
            reason: e.to_string(),
        })?;
        sqlx::query(
            "DELETE FROM leasehold_members
              WHERE grp IN (SELECT value FROM json_each(?1)) AND member = ?2",
        )
        .bind(groups)
        .bind(member)
        .execute(&self.pool)
        .await
        .map_err(StoreError::query("leave"))?;
        Ok(())
    }

    async fn line(&self, names: &[String]) -> Result<Vec<super::store::WaiterRecord>, StoreError> {
        let rows: Vec<super::store::WaiterRow> = sqlx::query_as(
            "SELECT w.name, w.holder, w.priority, ?2 - w.joined_at_ms, w.alive_until_ms - ?2
               FROM leasehold_waiters AS w
               LEFT JOIN leasehold_leases AS k
                 ON k.name = w.name AND k.boot = ?3 AND k.expires_at_ms > ?2
              WHERE w.name IN (SELECT value FROM json_each(?1))
                AND w.boot = ?3 AND w.alive_until_ms > ?2
                AND (k.holder IS NULL OR w.holder <> k.holder)
              ORDER BY w.name, w.priority DESC, w.joined_at_ms, w.holder",
        )
        .bind(serde_json::to_string(names).unwrap_or_default())
        .bind(self.clock.now_ms())
        .bind(self.clock.boot_id())
        .fetch_all(&self.observers)
        .await
        .map_err(StoreError::query("line"))?;
        Ok(rows.into_iter().map(super::store::to_waiter).collect())
    }

    async fn ping(&self) -> Result<(), StoreError> {
        sqlx::query("SELECT 1")
            .execute(&self.observers)
            .await
            .map_err(StoreError::query("ping"))?;
        Ok(())
    }

    fn listen_releases(
        &self,
        shutdown: CancellationToken,
    ) -> Option<mpsc::Receiver<ReleaseNotice>> {
        match self.events.listen(shutdown) {
            Ok(rx) => Some(rx),
            Err(error) => {
                warn!(%error, "release wake-ups are off: a released lease is taken at its old expiry, or at the next poll");
                None
            }
        }
    }
}
