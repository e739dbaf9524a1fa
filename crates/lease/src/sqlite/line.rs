//! The line of standbys in a SQLite lease file (docs/ARCHITECTURE.md §5.8, `leasehold_waiters`):
//! every step runs inside the caller's write transaction, which holds the file's write lock, so
//! reading the line and deciding in Rust, with the rules of [`leasehold_lease_core::queue`], is
//! as safe as one statement: nobody writes between the two. Times are the machine's boot clock
//! of the caller's boot; a row of another boot has lapsed.

use std::collections::BTreeMap;
use std::time::Duration;

use leasehold_lease_core::queue::{self, Place, Preempt, Waiter};
use sqlx::SqliteConnection;

use crate::store::{Bid, Epoch};

/// A waiter as the file keeps it.
#[derive(Debug, Clone)]
pub(super) struct Waiting {
    /// Its place: holder, priority, joined, alive until.
    pub(super) waiter: Waiter<i64>,
    /// How long a grant to it lasts, in ms.
    pub(super) alive_ms: i64,
    /// Its ttl in ms, which a grant records as the lease's.
    pub(super) ttl_ms: i64,
}

/// What a lease row says that the line needs.
#[derive(Debug, Clone)]
pub(super) struct Row {
    pub(super) holder: String,
    pub(super) reserved: Option<(String, i64)>,
    pub(super) epoch: i64,
    pub(super) expires_at_ms: i64,
    pub(super) boot: String,
    pub(super) priority: i64,
    pub(super) preempted_at_ms: Option<i64>,
    pub(super) handoff_epoch: Option<i64>,
}

/// Milliseconds of `d`, at least 1.
pub(super) fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX).max(1)
}

/// Joins `holder` to the line of each bid that has a place, or keeps its place alive (a place
/// that lapsed, or of another boot, joins at the end again), with its priority as given now.
pub(super) async fn join(
    tx: &mut SqliteConnection,
    holder: &str,
    bids: &[&Bid],
    ttl_ms: i64,
    now: i64,
    boot: &str,
) -> Result<(), sqlx::Error> {
    for bid in bids {
        let Some(line) = bid.line else { continue };
        sqlx::query(
            "INSERT INTO leasehold_waiters
                    (name, holder, priority, joined_at_ms, alive_until_ms, alive_ms, ttl_ms, boot)
             VALUES (?1, ?2, ?3, ?4, ?4 + ?5, ?5, ?6, ?7)
             ON CONFLICT (name, holder) DO UPDATE
                SET priority = excluded.priority, alive_ms = excluded.alive_ms,
                    ttl_ms = excluded.ttl_ms,
                    joined_at_ms = CASE WHEN leasehold_waiters.boot = excluded.boot
                                         AND leasehold_waiters.alive_until_ms > ?4
                                        THEN leasehold_waiters.joined_at_ms
                                        ELSE excluded.joined_at_ms END,
                    alive_until_ms = excluded.alive_until_ms, boot = excluded.boot",
        )
        .bind(&bid.name)
        .bind(holder)
        .bind(line.place.priority)
        .bind(now)
        .bind(ms(line.alive_for))
        .bind(ttl_ms)
        .bind(boot)
        .execute(&mut *tx)
        .await?;
    }
    Ok(())
}

/// The live places in the lines of `names` (lapsed ones are swept), by lease.
pub(super) async fn live(
    tx: &mut SqliteConnection,
    names_json: &str,
    now: i64,
    boot: &str,
) -> Result<BTreeMap<String, Vec<Waiting>>, sqlx::Error> {
    sqlx::query(
        "DELETE FROM leasehold_waiters
          WHERE name IN (SELECT value FROM json_each(?1)) AND (boot <> ?3 OR alive_until_ms <= ?2)",
    )
    .bind(names_json)
    .bind(now)
    .bind(boot)
    .execute(&mut *tx)
    .await?;
    let rows: Vec<(String, String, i64, i64, i64, i64, i64)> = sqlx::query_as(
        "SELECT name, holder, priority, joined_at_ms, alive_until_ms, alive_ms, ttl_ms
           FROM leasehold_waiters WHERE name IN (SELECT value FROM json_each(?1))",
    )
    .bind(names_json)
    .fetch_all(&mut *tx)
    .await?;
    let mut lines: BTreeMap<String, Vec<Waiting>> = BTreeMap::new();
    for (name, holder, priority, joined, alive_until, alive_ms, ttl_ms) in rows {
        lines.entry(name).or_default().push(Waiting {
            waiter: Waiter {
                holder,
                priority,
                joined,
                alive_until,
            },
            alive_ms,
            ttl_ms,
        });
    }
    Ok(lines)
}

/// The head of `line` at `now`, other than `except`; with `named`, the first of the waiters that
/// handoff request names.
pub(super) fn head<'a>(
    line: &'a [Waiting],
    now: i64,
    except: &str,
    named: Option<&str>,
) -> Option<&'a Waiting> {
    let named_ok =
        |p: &&Waiting| named.is_none_or(|to| crate::store::is_reserved_for(to, &p.waiter.holder));
    let candidates: Vec<&Waiting> = line.iter().filter(named_ok).collect();
    let head = queue::head(candidates.iter().map(|p| &p.waiter), now, except)?;
    line.iter().find(|p| p.waiter.holder == head.holder)
}

/// The rows of `names` that exist.
pub(super) async fn rows(
    tx: &mut SqliteConnection,
    names_json: &str,
) -> Result<BTreeMap<String, Row>, sqlx::Error> {
    type Read = (
        String,
        String,
        i64,
        i64,
        String,
        i64,
        Option<i64>,
        Option<i64>,
        Option<String>,
        Option<i64>,
    );
    let rows: Vec<Read> = sqlx::query_as(
        "SELECT name, holder, epoch, expires_at_ms, boot, priority, preempted_at_ms,
                handoff_epoch, reserved_for, reserved_until_ms
           FROM leasehold_leases WHERE name IN (SELECT value FROM json_each(?1))",
    )
    .bind(names_json)
    .fetch_all(&mut *tx)
    .await?;
    Ok(rows
        .into_iter()
        .map(|read| {
            let (name, holder, epoch, expires_at_ms, boot, priority, preempted, handoff) = (
                read.0, read.1, read.2, read.3, read.4, read.5, read.6, read.7,
            );
            let reserved = read.8.zip(read.9);
            let row = Row {
                holder,
                reserved,
                epoch,
                expires_at_ms,
                boot,
                priority,
                preempted_at_ms: preempted,
                handoff_epoch: handoff,
            };
            (name, row)
        })
        .collect())
}

/// Gives `name` to `to` at `now`: the row's epoch + 1 (1 for a new row), an expiry of its
/// place's time, `granted`; the term before is closed as `ended_by` if still open, the waiter's
/// opened, and its place leaves the line. Returns the epoch given.
#[allow(clippy::too_many_arguments)] // one grant, written in one place
pub(super) async fn grant(
    tx: &mut SqliteConnection,
    name: &str,
    to: &Waiting,
    now: i64,
    boot: &str,
    wall: i64,
    ended_by: &str,
) -> Result<Epoch, sqlx::Error> {
    sqlx::query(
        "UPDATE leasehold_terms SET ended_at_ms = ?2, ended_by = ?3
          WHERE name = ?1 AND ended_by IS NULL",
    )
    .bind(name)
    .bind(wall)
    .bind(ended_by)
    .execute(&mut *tx)
    .await?;
    let (epoch,): (i64,) = sqlx::query_as(
        "INSERT INTO leasehold_leases
                (name, holder, epoch, acquired_at_ms, renewed_at_ms, expires_at_ms, ttl_ms, boot,
                 granted, priority)
         VALUES (?1, ?2, COALESCE((SELECT epoch FROM leasehold_leases WHERE name = ?1), 0) + 1,
                 ?3, ?3, ?3 + ?4, ?5, ?6, 1, ?7)
         ON CONFLICT (name) DO UPDATE
            SET holder = excluded.holder, epoch = leasehold_leases.epoch + 1,
                acquired_at_ms = excluded.acquired_at_ms, renewed_at_ms = excluded.renewed_at_ms,
                expires_at_ms = excluded.expires_at_ms, ttl_ms = excluded.ttl_ms,
                boot = excluded.boot, granted = 1, priority = excluded.priority,
                handoff_epoch = NULL, handoff_to = NULL,
                reserved_for = NULL, reserved_until_ms = NULL
         RETURNING epoch",
    )
    .bind(name)
    .bind(&to.waiter.holder)
    .bind(now)
    .bind(to.alive_ms)
    .bind(to.ttl_ms)
    .bind(boot)
    .bind(to.waiter.priority)
    .fetch_one(&mut *tx)
    .await?;
    sqlx::query(
        "INSERT INTO leasehold_terms (name, epoch, holder, started_at_ms) VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT (name, epoch) DO NOTHING",
    )
    .bind(name)
    .bind(epoch)
    .bind(&to.waiter.holder)
    .bind(wall)
    .execute(&mut *tx)
    .await?;
    leave(tx, name, &to.waiter.holder).await?;
    Ok(Epoch::new(epoch))
}

/// Takes `holder` out of the line of `name`.
pub(super) async fn leave(
    tx: &mut SqliteConnection,
    name: &str,
    holder: &str,
) -> Result<(), sqlx::Error> {
    sqlx::query("DELETE FROM leasehold_waiters WHERE name = ?1 AND holder = ?2")
        .bind(name)
        .bind(holder)
        .execute(&mut *tx)
        .await?;
    Ok(())
}

/// What a waiter of `place` in `line` may do about the holder of `row` at `now`; when it may ask
/// now, asks (the row's handoff request, and the time of this preemption). Returns the decision.
#[allow(clippy::too_many_arguments)] // one decision, made in one place
pub(super) async fn preempt(
    tx: &mut SqliteConnection,
    name: &str,
    holder: &str,
    place: Place,
    row: &Row,
    line: &[Waiting],
    now: i64,
    boot: &str,
) -> Result<Preempt<i64>, sqlx::Error> {
    let Some(mine) = line.iter().find(|p| p.waiter.holder == holder) else {
        return Ok(Preempt::Never);
    };
    let held = row.boot == boot && row.expires_at_ms > now && row.holder != holder;
    // A request of this term already (an operator's, maybe naming a replica): not replaced.
    if !held || row.handoff_epoch == Some(row.epoch) {
        return Ok(Preempt::Never);
    }
    let decision = queue::may_preempt(
        &place,
        MsTime(mine.waiter.joined),
        row.priority,
        row.preempted_at_ms.map(MsTime),
        MsTime(now),
    );
    let decision = match decision {
        Preempt::Now => Preempt::Now,
        Preempt::At(at) => Preempt::At(at.0),
        Preempt::Never => Preempt::Never,
    };
    if decision == Preempt::Now {
        sqlx::query(
            "UPDATE leasehold_leases SET handoff_epoch = epoch, handoff_to = NULL,
                    preempted_at_ms = ?2
              WHERE name = ?1",
        )
        .bind(name)
        .bind(now)
        .execute(&mut *tx)
        .await?;
    }
    Ok(decision)
}

/// A time of the boot clock in ms, to add durations to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct MsTime(i64);

impl std::ops::Add<Duration> for MsTime {
    type Output = MsTime;
    fn add(self, d: Duration) -> MsTime {
        MsTime(self.0.saturating_add(ms(d)))
    }
}
