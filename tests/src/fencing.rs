//! Stale-write trials with real processes: two `leasehold` hosts run the `fenced-writer` guest,
//! which writes continuously through fenced sql transactions and kv puts, each recording its epoch.
//! Each trial freezes the holder (SIGSTOP) past the ttl, waits for the other host to take over and
//! write, then resumes the frozen one. The database records the commit order of every accepted
//! write, so a write from an old epoch committed after a newer epoch's shows up as "stale".

use crate::log::Logged;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::Context;
use sqlx::PgPool;

use crate::eventually::{eventually, when};
use crate::host::{Host, plugin_dir, wait_for_single_leader};
use crate::status::Role;

/// The app table the guest writes to, and a commit-order log for it and for `leasehold_kv`: a
/// deferred constraint trigger runs as its transaction commits, so `seq` follows commit order.
pub const HISTORY_SCHEMA: &str = "
CREATE TABLE fence_history (
    id     bigserial PRIMARY KEY,
    lease  text   NOT NULL,
    epoch  bigint NOT NULL,
    tick   bigint NOT NULL,
    holder text   NOT NULL
);
CREATE SEQUENCE fence_commit_seq;
CREATE TABLE fence_commits (
    seq    bigint PRIMARY KEY,
    source text   NOT NULL,
    epoch  bigint NOT NULL
);
CREATE FUNCTION fence_record_commit() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER AS $$
BEGIN
    INSERT INTO fence_commits VALUES (nextval('fence_commit_seq'), TG_TABLE_NAME, NEW.epoch);
    RETURN NULL;
END $$;
CREATE CONSTRAINT TRIGGER fence_history_commit AFTER INSERT ON fence_history
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION fence_record_commit();
CREATE CONSTRAINT TRIGGER fence_kv_commit AFTER INSERT OR UPDATE ON leasehold_kv
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION fence_record_commit();
";

/// The role the writer's sql grant uses on the database at `url` (which holds
/// [`HISTORY_SCHEMA`]): nothing on the leasehold tables, as the README asks, and what the writer
/// needs on `fence_history`. Its URL.
pub async fn writer_role(url: &str) -> anyhow::Result<String> {
    let role_url = crate::pg::server().plugin_role(url, "writer").await?;
    let role = crate::pg::user_of(&role_url);
    let pool = PgPool::connect(url).await?;
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "GRANT SELECT, INSERT ON fence_history TO {role};
         GRANT USAGE ON SEQUENCE fence_history_id_seq TO {role};"
    )))
    .execute(&pool)
    .await?;
    pool.close().await;
    Ok(role_url)
}

/// The manifest of the `fenced-writer` guest bound to `leader`: kv granted, its sql grant on the
/// database in `database_url_env`, and `config` (TOML lines) as its `[config]`.
pub fn writer_manifest(database_url_env: &str, config: &str) -> String {
    format!(
        "lease = \"leader\"
[schedule]
interval = \"1s\"
[limits]
call_timeout = \"2s\"
[grants]
kv = true
[grants.sql]
database_url_env = \"{database_url_env}\"
[config]
{config}"
    )
}

/// The writer of the pause trials: both capabilities on the lease database, writing every 2 ms.
pub fn pause_writer_manifest() -> String {
    writer_manifest("TEST_APP_DATABASE_URL", "requeue_ms = \"2\"\n")
}

/// What the commit log says.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct History {
    /// Accepted writes per source table and epoch.
    pub accepted: BTreeMap<(String, i64), u64>,
    /// Writes committed after a write of a newer epoch to the same table: must be zero.
    pub stale: u64,
}

/// Reads the commit log.
pub async fn history(pool: &PgPool) -> anyhow::Result<History> {
    let rows: Vec<(String, i64)> =
        sqlx::query_as("SELECT source, epoch FROM fence_commits ORDER BY seq")
            .fetch_all(pool)
            .await?;
    let mut h = History::default();
    let mut newest: BTreeMap<String, i64> = BTreeMap::new();
    for (source, epoch) in rows {
        let max = newest.entry(source.clone()).or_insert(epoch);
        if epoch < *max {
            h.stale += 1;
        }
        *max = (*max).max(epoch);
        *h.accepted.entry((source, epoch)).or_default() += 1;
    }
    Ok(h)
}

/// The outcome of a run of pause trials.
#[derive(Debug, Default)]
pub struct PauseTrials {
    /// Trials run.
    pub trials: usize,
    /// The commit log at the end.
    pub history: History,
    /// Seconds from freezing the holder to the first write of the next epoch.
    pub takeover_s: Vec<f64>,
    /// Writes the frozen holders' logs show refused with lease-lost after resuming (the guest's
    /// own report, or the host's "fenced write refused").
    pub refused_seen: usize,
}

/// The newest epoch with an accepted sql write.
async fn newest_epoch(pool: &PgPool) -> anyhow::Result<Option<i64>> {
    Ok(sqlx::query_scalar("SELECT max(epoch) FROM fence_history")
        .fetch_one(pool)
        .await?)
}

/// Runs `trials` pause trials on a fresh database with two hosts (ttl `ttl`).
pub async fn run_pause_trials(trials: usize, ttl: &str) -> anyhow::Result<PauseTrials> {
    // The lease schema first (the hosts would create it), so the commit-order triggers can go on
    // leasehold_kv before anything writes.
    let url = crate::pg::server().fresh_lease_database().await?;
    let pool = PgPool::connect(&url).await?;
    sqlx::raw_sql(HISTORY_SCHEMA).execute(&pool).await?;
    let dir = plugin_dir(&[("fenced-writer", &pause_writer_manifest())])?;
    let args = [
        "--database-url",
        &url,
        "--ttl",
        ttl,
        "--plugins",
        dir.path().to_str().context("temp path")?,
    ];
    let role_url = writer_role(&url).await?;
    let env = [("TEST_APP_DATABASE_URL", role_url.as_str())];
    let hosts = Host::start_each(&["a", "b"], &args, &env).await?;
    let mut leader = wait_for_single_leader(&hosts, "leader", Duration::from_secs(20)).await?;
    let mut out = PauseTrials::default();
    for trial in 0..trials {
        // The holder is writing at its epoch. Usually the host that took over in the last trial,
        // but with a short ttl the resumed one may have won the lease back: ask both for their
        // own view (the epoch in /status is the database's, the role is the host's).
        let epoch = eventually(
            format!("trial {trial}: the holder writing at its epoch"),
            Duration::from_secs(20),
            async || {
                let Some(e) = newest_epoch(&pool).await.map_err(|e| e.to_string())? else {
                    return Err("no write yet".to_string());
                };
                for i in [leader, 1 - leader] {
                    let Ok(status) = hosts[i].status().await else {
                        continue;
                    };
                    let lease = &status.leases[0];
                    if lease.role == Role::Leader && lease.epoch.map(|e| e.get()) == Some(e) {
                        leader = i;
                        return Ok(e);
                    }
                }
                Err(format!("newest epoch {e}, written by no leader"))
            },
        )
        .await?;
        // Freeze it mid-work for longer than the ttl; wait for the other host's first write.
        tokio::time::sleep(Duration::from_millis(rand_ms(trial))).await;
        let frozen_at = Instant::now();
        hosts[leader].signal("STOP")?;
        let takeover = eventually(
            format!("trial {trial}: a takeover while the holder is frozen"),
            Duration::from_secs(30),
            async || {
                let newest = newest_epoch(&pool).await.map_err(|e| e.to_string())?;
                when(newest, |n| n.unwrap_or_default() > epoch).map_err(|n| format!("{n:?}"))
            },
        )
        .await;
        if let Err(e) = takeover {
            hosts[leader].signal("CONT")?;
            return Err(e);
        }
        out.takeover_s.push(frozen_at.elapsed().as_secs_f64());
        hosts[leader].signal("CONT")?;
        // Give the resumed host time to run whatever it had pending, and to notice the loss.
        tokio::time::sleep(Duration::from_millis(500)).await;
        leader = 1 - leader;
        out.trials += 1;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    out.history = history(&pool).await?;
    out.refused_seen = hosts
        .iter()
        .map(|h| {
            h.log_text()
                .lines()
                .filter(|l| l.contains("err=lease-lost") || l.contains("fenced write refused"))
                .count()
        })
        .sum();
    Ok(out)
}

/// A pause offset of 0-29 ms, varied per trial so freezes land at different points of a write.
fn rand_ms(trial: usize) -> u64 {
    (trial as u64 * 7919) % 30
}
