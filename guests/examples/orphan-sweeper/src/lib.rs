//! Sweeps orphaned sandboxes out of an application's database.
//!
//! The application keeps one row per sandbox (see `schema.sql`) and each backend heartbeats the
//! sandboxes it runs, every few seconds, in one statement:
//!
//! ```sql
//! UPDATE sandboxes SET last_heartbeat = now() WHERE backend = $1;
//! ```
//!
//! When a backend dies, its sandboxes stop being heartbeaten. The sweeper, run by the one
//! replica that holds the lease `sweeper`, then does three things in **one** `sql::transaction`
//! per sweep:
//!
//! 1. **revive**: orphaned rows whose heartbeat came back (`last_heartbeat > orphaned_at`)
//!    become active again (`orphaned_at` cleared);
//! 2. **mark**: active rows without a heartbeat for `orphan_after` become orphaned
//!    (`orphaned_at = now()`), at most `batch` of them, locked with `FOR UPDATE SKIP LOCKED` so
//!    that a row the application is busy with is left for the next sweep;
//! 3. **delete**: rows orphaned for `delete_after` (and still without a heartbeat) are deleted,
//!    at most `batch` of them.
//!
//! Every row it changes gets `swept_epoch` = the sweep's fencing epoch. A sweep is idempotent:
//! all its decisions are made by the database on current data with the database's clock, so
//! running it again changes nothing more. It runs on the schedule (every 5 s in the shipped
//! manifest), at once again while the mark or delete step fills a batch, and whenever the
//! application notifies the channel listed in `[events]`, e.g. right after a backend went away:
//!
//! ```sql
//! NOTIFY sandbox_events;          -- or SELECT pg_notify('sandbox_events', 'backend-7 down');
//! ```
//!
//! Notifications only cut latency: one sent while no replica listens is lost, and the next
//! scheduled sweep does the work.
//!
//! # Why every step is fenced
//!
//! The lease promises one sweeper at a time, but a replica can lose the lease without knowing
//! it yet (a long pause, a partition) and then wake up mid-sweep while another replica already
//! sweeps under a newer epoch, possibly with another configuration. When the `[grants.sql]`
//! database is the lease database, the host fences `sql::transaction`: it commits only if this
//! replica still holds the lease at its epoch, else it returns `lease-lost` and keeps nothing.
//! The three steps share one transaction so the fence covers them as one: a sweep lands whole,
//! under the current epoch, or not at all.
//!
//! - *delete* is irreversible: a stale sweeper must never remove a sandbox the current one has
//!   just revived or has not given up on;
//! - *mark* starts the delete clock (`orphaned_at`): a stale sweeper with an older, shorter
//!   `orphan_after` would orphan sandboxes the current configuration still considers alive;
//! - *revive* resets that clock and claims the row (`swept_epoch`): mixed with another term's
//!   mark and delete, a row's history would no longer be the work of one sweeper.
//!
//! When the application's database is not the lease database, the host cannot fence it; then
//! the epoch itself fences: every step leaves alone rows whose `swept_epoch` is newer than the
//! sweep's, so once the current sweeper has touched a row, a stale one cannot change it.
//! (Epochs never go back, unless the lease database itself is replaced by a new one: then clear
//! the stamps, `UPDATE sandboxes SET swept_epoch = NULL`, or the new epochs leave those rows be.)
//!
//! When a sweep is refused with `lease-lost`, the sweeper logs a warning and returns: the
//! replica that holds the lease now does the work.
//!
//! # Config
//!
//! - `table` (default `sandboxes`): the table, a plain identifier (`[a-z_][a-z0-9_]*`, at most
//!   63 characters), since it is written into the SQL;
//! - `orphan_after` (default `30s`), `delete_after` (default `5m`): durations, handed to the
//!   database as whole milliseconds;
//! - `batch` (default `500`): the most rows one sweep marks, and the most it deletes.
//!
//! # Statistics
//!
//! With `[grants] kv = true`, the sweeper keeps running totals in its kv store: `stats/orphaned`
//! and `stats/deleted` (decimal text) and `stats/last_sweep` (`EPOCH:TICK` of the latest sweep;
//! the tick of the latest reconcile for a sweep started by a notification). They are updated
//! after the sweep commits, so a failure in between loses a count; without the grant they are
//! skipped.

use std::time::Duration;

use leasehold_guest::sql::{self, Statement};
use leasehold_guest::{
    CapabilityError, Config, Context, Error, ErrorContext, EventHandler, Outcome, Reconciler, bail,
    debug, ensure, info, kv, lease, params, warn,
};

struct Sweeper {
    revive: String,
    mark: String,
    delete: String,
    orphan_after_ms: i64,
    delete_after_ms: i64,
    batch: u32,
    /// Whether to keep statistics in kv; off once kv turns out not to be granted.
    stats: bool,
    /// The tick of the latest reconcile of this term.
    tick: u64,
}

/// What one sweep changed.
#[derive(Debug, Clone, Copy, Default)]
struct Swept {
    revived: u64,
    orphaned: u64,
    deleted: u64,
}

impl Swept {
    fn changed(&self) -> bool {
        self.revived + self.orphaned + self.deleted > 0
    }
}

impl Reconciler for Sweeper {
    fn init(config: Config) -> Result<Self, Error> {
        config.deny_unknown(&["table", "orphan_after", "delete_after", "batch"])?;
        let table = config.get_or("table", "sandboxes");
        check_identifier(table)?;
        let orphan_after = config.duration_or("orphan_after", Duration::from_secs(30))?;
        let delete_after = config.duration_or("delete_after", Duration::from_secs(300))?;
        let batch: u32 = config.parse_or("batch", 500)?;
        ensure!(batch > 0, "config key \"batch\": must be at least 1");
        let millis = |key: &str, d: Duration| {
            i64::try_from(d.as_millis()).map_err(|_| format!("config key {key:?}: too long"))
        };
        // $1 is the sweep's epoch in every statement. A row last changed by a newer epoch is
        // left alone: that protects rows from a stale sweeper even where the host cannot fence.
        let sweeper = Sweeper {
            revive: format!(
                "UPDATE {table}
                    SET state = 'active', orphaned_at = NULL, swept_epoch = $1
                  WHERE state = 'orphaned' AND last_heartbeat > orphaned_at
                    AND (swept_epoch IS NULL OR swept_epoch <= $1)"
            ),
            mark: format!(
                "UPDATE {table}
                    SET state = 'orphaned', orphaned_at = now(), swept_epoch = $1
                  WHERE id IN (SELECT id FROM {table}
                                WHERE state = 'active'
                                  AND last_heartbeat < now() - $2::bigint * interval '1 millisecond'
                                  AND (swept_epoch IS NULL OR swept_epoch <= $1)
                                ORDER BY id LIMIT $3
                                FOR UPDATE SKIP LOCKED)"
            ),
            // `last_heartbeat <= orphaned_at`: a heartbeat that landed after the revive step
            // (each statement sees the latest commits) still saves the row.
            delete: format!(
                "DELETE FROM {table}
                  WHERE id IN (SELECT id FROM {table}
                                WHERE state = 'orphaned'
                                  AND orphaned_at < now() - $2::bigint * interval '1 millisecond'
                                  AND last_heartbeat <= orphaned_at
                                  AND (swept_epoch IS NULL OR swept_epoch <= $1)
                                ORDER BY id LIMIT $3
                                FOR UPDATE SKIP LOCKED)"
            ),
            orphan_after_ms: millis("orphan_after", orphan_after)?,
            delete_after_ms: millis("delete_after", delete_after)?,
            batch,
            stats: true,
            tick: 0,
        };
        info!(
            "orphan-sweeper: table {table}, orphan after {orphan_after:?}, delete after {delete_after:?}, batch {batch}"
        );
        Ok(sweeper)
    }

    fn reconcile(&mut self, ctx: Context) -> Result<Outcome, Error> {
        self.tick = ctx.tick();
        match self.sweep(ctx.epoch())? {
            // The batch was full: there may be more, so come back at once.
            Some(swept) if self.filled_batch(swept) => Ok(Outcome::requeue_after(Duration::ZERO)),
            _ => Ok(Outcome::default()),
        }
    }
}

impl EventHandler for Sweeper {
    fn handle_event(&mut self, channel: &str, payload: &str) -> Result<(), Error> {
        debug!("notification on {channel} ({payload:?}): sweeping");
        let Some(epoch) = lease::epoch() else {
            debug!("not sweeping: this replica does not hold the lease");
            return Ok(());
        };
        if let Some(swept) = self.sweep(epoch)? {
            if self.filled_batch(swept) {
                debug!("the batch was full: the next reconcile continues");
            }
        }
        Ok(())
    }
}

impl Sweeper {
    /// One sweep under `epoch`: what it changed, or `None` when it was refused because the lease
    /// is lost (nothing was changed). Other errors fail the call.
    fn sweep(&mut self, epoch: u64) -> Result<Option<Swept>, Error> {
        let e = i64::try_from(epoch).map_err(|_| format!("epoch {epoch} exceeds bigint"))?;
        let batch = i64::from(self.batch);
        let statements = [
            Statement::new(self.revive.as_str(), params![e]),
            Statement::new(self.mark.as_str(), params![e, self.orphan_after_ms, batch]),
            Statement::new(
                self.delete.as_str(),
                params![e, self.delete_after_ms, batch],
            ),
        ];
        let counts = match sql::transaction(&statements) {
            Err(CapabilityError::LeaseLost) => {
                warn!(
                    "sweep refused at epoch {epoch}: another replica holds the lease now; nothing was changed"
                );
                return Ok(None);
            }
            other => other.with_context(|| format!("sweep at epoch {epoch} failed"))?,
        };
        let [revived, orphaned, deleted] = counts[..] else {
            bail!("sweep at epoch {epoch}: expected 3 counts from the transaction, got {counts:?}");
        };
        let swept = Swept {
            revived,
            orphaned,
            deleted,
        };
        let line = format!(
            "sweep epoch={epoch} revived={} orphaned={} deleted={}",
            swept.revived, swept.orphaned, swept.deleted
        );
        if swept.changed() {
            info!("{line}");
        } else {
            debug!("{line}");
        }
        self.record(epoch, swept);
        Ok(Some(swept))
    }

    fn filled_batch(&self, swept: Swept) -> bool {
        let batch = u64::from(self.batch);
        swept.orphaned >= batch || swept.deleted >= batch
    }

    /// Adds the sweep to the statistics in kv, if kv is granted. Never fails the call.
    fn record(&mut self, epoch: u64, swept: Swept) {
        if !self.stats {
            return;
        }
        let recorded = (|| {
            add("stats/orphaned", swept.orphaned)?;
            add("stats/deleted", swept.deleted)?;
            kv::put("stats/last_sweep", format!("{epoch}:{}", self.tick))
        })();
        match recorded {
            Ok(()) => {}
            Err(CapabilityError::NotGranted(why)) => {
                self.stats = false;
                debug!("no statistics: {why}");
            }
            Err(CapabilityError::LeaseLost) => {
                warn!("statistics not updated: the lease was lost after the sweep committed")
            }
            Err(other) => warn!("statistics not updated: {other}"),
        }
    }
}

/// Adds `n` to the decimal counter at `key` (absent or unreadable counts as 0).
fn add(key: &str, n: u64) -> Result<(), CapabilityError> {
    if n == 0 {
        return Ok(());
    }
    let current = match kv::get_string(key)? {
        None => 0,
        Some(text) => text.trim().parse::<u64>().unwrap_or_else(|_| {
            warn!("kv {key} holds {text:?}, not a count: starting again from 0");
            0
        }),
    };
    kv::put(key, current.saturating_add(n).to_string())
}

/// The table name is written into the SQL: only a plain identifier is accepted.
fn check_identifier(name: &str) -> Result<(), String> {
    let mut chars = name.chars();
    let plain = matches!(chars.next(), Some('a'..='z' | '_'))
        && chars.all(|c| matches!(c, 'a'..='z' | '0'..='9' | '_'))
        && name.len() <= 63;
    if plain {
        Ok(())
    } else {
        Err(format!(
            "config key \"table\": {name:?} is not a plain identifier ([a-z_][a-z0-9_]*, at most 63 characters)"
        ))
    }
}

leasehold_guest::export_event_reconciler!(Sweeper);

#[cfg(test)]
mod tests {
    use super::*;
    use leasehold_guest::log::Level;
    use leasehold_guest::testing::{self, Fake, SqlOp};

    fn sweeper(batch: &str) -> Sweeper {
        Sweeper::init(testing::config([("batch", batch)])).unwrap()
    }

    #[test]
    fn a_sweep_is_one_transaction_and_is_counted_in_kv() {
        let fake = Fake::new().holding("sweeper", 7);
        fake.sql_answer(vec![1, 2, 0]);
        let outcome = sweeper("2").reconcile(fake.context(3)).unwrap();
        // The mark step filled the batch: come back at once.
        assert_eq!(outcome, Outcome::requeue_after(Duration::ZERO));
        let calls = fake.sql_calls();
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0].op, SqlOp::Transaction);
        assert_eq!(calls[0].statements.len(), 3);
        assert_eq!(calls[0].statements[1].params(), params![7, 30_000, 2]);
        assert_eq!(fake.kv_get_string("stats/orphaned").as_deref(), Some("2"));
        assert_eq!(fake.kv_get_string("stats/deleted"), None);
        assert_eq!(
            fake.kv_get_string("stats/last_sweep").as_deref(),
            Some("7:3")
        );
        assert_eq!(
            fake.logs_at(Level::Info).last().unwrap(),
            "sweep epoch=7 revived=1 orphaned=2 deleted=0"
        );
    }

    #[test]
    fn a_sweep_refused_with_lease_lost_is_a_warning_not_a_failure() {
        let fake = Fake::new().holding("sweeper", 7);
        fake.lose_lease();
        let outcome = sweeper("500").reconcile(fake.context(0)).unwrap();
        assert_eq!(outcome, Outcome::default());
        assert!(fake.logs_at(Level::Warn)[0].starts_with("sweep refused at epoch 7"));
        assert!(fake.kv_entries().is_empty());
    }

    #[test]
    fn other_sql_errors_fail_the_call_with_what_was_done() {
        let fake = Fake::new().holding("sweeper", 7);
        fake.sql_answer(CapabilityError::Database(
            "relation \"sandboxes\" does not exist (SQLSTATE 42P01)".into(),
        ));
        let e = sweeper("500").reconcile(fake.context(0)).unwrap_err();
        assert_eq!(
            e.to_string(),
            "sweep at epoch 7 failed: database error: relation \"sandboxes\" does not exist (SQLSTATE 42P01)"
        );
    }

    #[test]
    fn without_kv_the_statistics_are_skipped() {
        let fake = Fake::new().holding("sweeper", 7).without_kv();
        fake.sql_answer(vec![0, 1, 0]);
        sweeper("500").reconcile(fake.context(0)).unwrap();
        let debug = fake.logs_at(Level::Debug);
        assert!(
            debug
                .iter()
                .any(|l| l.starts_with("no statistics: kv is not granted")),
            "{debug:?}"
        );
    }

    #[test]
    fn a_table_name_must_be_a_plain_identifier() {
        let _fake = Fake::new();
        let e = Sweeper::init(testing::config([("table", "t; DROP TABLE x")]))
            .err()
            .unwrap();
        assert!(e.to_string().contains("is not a plain identifier"), "{e}");
    }
}
