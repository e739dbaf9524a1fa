//! A reconciler that makes one fenced write of each kind per tick, for the host's stale-write
//! tests: whatever the host does to the lease, a write from an epoch that is no longer current
//! must come back as `lease-lost` and leave nothing behind.
//!
//! Each reconcile, with the context's epoch `E`, tick `T`, lease `L` and this replica's holder
//! id `H` (from `lease::holder()`):
//!
//! - `sql` (modes `both` and `sql`): `sql::transaction([INSERT INTO {table} (lease, epoch,
//!   tick, holder) VALUES (L, E, T, H)])`, then logs at info `sql-txn ok epoch=E tick=T` or
//!   `sql-txn err=KIND epoch=E tick=T: MESSAGE`;
//! - `kv` (modes `both` and `kv`): `kv::put("last", "E:T")`, then logs `kv-put ok epoch=E
//!   tick=T` or `kv-put err=KIND epoch=E tick=T: MESSAGE`;
//!
//! and returns `Ok`, asking for the next call after `requeue_ms`. A capability error never
//! fails the call: the test reads the log and the tables.
//!
//! Config: `table` (default `fence_history`, a plain identifier, optionally schema-qualified),
//! `mode` = `both` (default) | `sql` | `kv`, `requeue_ms` (default 0: come back at once).

use std::time::Duration;

use leasehold_guest::sql::{self, Statement};
use leasehold_guest::{Config, Context, Error, Outcome, Reconciler, info, kv, lease, params};

struct FencedWriter {
    insert: String,
    sql: bool,
    kv: bool,
    requeue: Duration,
}

impl Reconciler for FencedWriter {
    fn init(config: Config) -> Result<Self, Error> {
        config.deny_unknown(&["table", "mode", "requeue_ms"])?;
        let table = config.get_or("table", "fence_history");
        check_table(table)?;
        let mode = config.choice("mode", &["both", "sql", "kv"], "both")?;
        let requeue_ms: u64 = config.parse_or("requeue_ms", 0)?;
        Ok(FencedWriter {
            insert: format!(
                "INSERT INTO {table} (lease, epoch, tick, holder) VALUES ($1, $2, $3, $4)"
            ),
            sql: mode != "kv",
            kv: mode != "sql",
            requeue: Duration::from_millis(requeue_ms),
        })
    }

    fn reconcile(&mut self, ctx: Context) -> Result<Outcome, Error> {
        let (epoch, tick) = (ctx.epoch(), ctx.tick());
        if self.sql {
            let epoch_param =
                i64::try_from(epoch).map_err(|_| format!("epoch {epoch} exceeds bigint"))?;
            let tick_param =
                i64::try_from(tick).map_err(|_| format!("tick {tick} exceeds bigint"))?;
            let holder = lease::holder();
            let insert = Statement::new(
                self.insert.as_str(),
                params![ctx.lease(), epoch_param, tick_param, holder],
            );
            match sql::transaction(&[insert]) {
                Ok(_) => info!("sql-txn ok epoch={epoch} tick={tick}"),
                Err(e) => info!("sql-txn err={} epoch={epoch} tick={tick}: {e}", e.kind()),
            }
        }
        if self.kv {
            match kv::put("last", format!("{epoch}:{tick}")) {
                Ok(()) => info!("kv-put ok epoch={epoch} tick={tick}"),
                Err(e) => info!("kv-put err={} epoch={epoch} tick={tick}: {e}", e.kind()),
            }
        }
        Ok(Outcome::requeue_after(self.requeue))
    }
}

/// The table name is put into the SQL text: only plain (optionally schema-qualified)
/// identifiers are accepted.
fn check_table(table: &str) -> Result<(), String> {
    let plain = |part: &str| {
        let mut chars = part.chars();
        matches!(chars.next(), Some('a'..='z' | '_'))
            && chars.all(|c| matches!(c, 'a'..='z' | '0'..='9' | '_'))
            && part.len() <= 63
    };
    if table.split('.').count() <= 2 && table.split('.').all(plain) {
        Ok(())
    } else {
        Err(format!(
            "config key \"table\": {table:?} is not a plain identifier ([a-z_][a-z0-9_]*, at most 63 characters, optionally schema.table)"
        ))
    }
}

leasehold_guest::export_reconciler!(FencedWriter);
