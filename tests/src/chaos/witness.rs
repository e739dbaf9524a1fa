//! The history of a fault trial, from two places.
//!
//! The witness: a PostgreSQL server of its own, which no fault touches, holding an application
//! table the `fenced-writer` guest inserts into through its sql grant. That database is not the
//! lease database, so those writes are not fenced: each row shows that work of a term ran, and
//! when, by the witness's clock (`at`). Fault injection and healing are timestamped with the same
//! clock ([`Witness::now`]).
//!
//! The lease database: the guest's kv puts are fenced by the host. A deferred constraint trigger
//! on `leasehold_kv` appends each accepted write to `chaos_commits` as its transaction commits,
//! so `seq` follows commit order ([`install_commit_log`], [`fenced_commits`]).

use std::sync::OnceLock;

use anyhow::Context;
use sqlx::{Connection, PgPool};

use crate::pg::Postgres;

/// The witness table the guest writes to (its `table` config value).
pub const TABLE: &str = "chaos_witness";

/// The host environment variable to put [`Witness::role_url`] in, named by the guest's manifest
/// (`database_url_env`): the host lets a grant read only variables named `*_DATABASE_URL`.
pub const URL_VARIABLE: &str = "WITNESS_DATABASE_URL";

static SERVER: OnceLock<Postgres> = OnceLock::new();

/// The witness server of this test process, started on first use: never the lease server, so
/// restarting or failing over that one leaves the witness standing.
pub fn server() -> &'static Postgres {
    SERVER.get_or_init(|| match Postgres::start_private(&[]) {
        Ok(pg) => pg,
        Err(e) => panic!("cannot start the witness PostgreSQL server: {e:#}"),
    })
}

/// One row of the witness table: work of the term (`lease`, `epoch`) of `holder` ran at `at`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WitnessRow {
    /// Insertion order (a bigserial).
    pub id: i64,
    /// The lease the guest is bound to.
    pub lease: String,
    /// The holder id of the host that ran it.
    pub holder: String,
    /// The fencing epoch of the term.
    pub epoch: i64,
    /// The guest's tick within the term.
    pub tick: i64,
    /// When the insert ran, in microseconds since the Unix epoch by the witness's clock.
    pub at: i64,
}

/// A fenced write the lease database accepted, in commit order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FencedCommit {
    /// Commit order.
    pub seq: i64,
    /// The lease whose epoch fenced the write.
    pub lease: String,
    /// The plugin whose kv scope was written.
    pub plugin: String,
    /// The key written.
    pub key: String,
    /// The epoch the write was fenced with.
    pub epoch: i64,
}

/// A witness database: the table and a plugin role allowed to insert into it.
#[derive(Debug)]
pub struct Witness {
    pool: PgPool,
    role_url: String,
}

impl Witness {
    /// A fresh database on the witness [`server`] with the [`TABLE`] and a plugin role that may
    /// insert into and read it, and nothing else.
    pub async fn create() -> anyhow::Result<Witness> {
        let server = server();
        let url = server.fresh_database().await?;
        let pool = PgPool::connect(&url)
            .await
            .context("connecting to the witness")?;
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "CREATE TABLE {TABLE} (
                id     bigserial   PRIMARY KEY,
                lease  text        NOT NULL,
                epoch  bigint      NOT NULL,
                tick   bigint      NOT NULL,
                holder text        NOT NULL,
                at     timestamptz NOT NULL DEFAULT clock_timestamp()
            );"
        )))
        .execute(&pool)
        .await?;
        let role_url = server.plugin_role(&url, "witness").await?;
        let role = crate::pg::user_of(&role_url);
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "GRANT INSERT, SELECT ON {TABLE} TO {role};
             GRANT USAGE ON SEQUENCE {TABLE}_id_seq TO {role};"
        )))
        .execute(&pool)
        .await?;
        Ok(Witness { pool, role_url })
    }

    /// The URL of the plugin role, for the host's [`URL_VARIABLE`].
    pub fn role_url(&self) -> &str {
        &self.role_url
    }

    /// The witness's clock now, in microseconds since the Unix epoch: the clock of
    /// [`WitnessRow::at`], to timestamp fault injection and healing.
    pub async fn now(&self) -> anyhow::Result<i64> {
        Ok(
            sqlx::query_scalar("SELECT (extract(epoch FROM clock_timestamp()) * 1e6)::bigint")
                .fetch_one(&self.pool)
                .await?,
        )
    }

    /// How many rows are later than `since` (µs, as [`Witness::now`]): a cheap poll for new
    /// work, where [`Witness::rows`] reads the whole history.
    pub async fn count_since(&self, since: i64) -> anyhow::Result<i64> {
        Ok(sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "SELECT count(*) FROM {TABLE} WHERE (extract(epoch FROM at) * 1e6)::bigint > $1"
        )))
        .bind(since)
        .fetch_one(&self.pool)
        .await?)
    }

    /// Every row so far, in the order of `at` (then `id`).
    pub async fn rows(&self) -> anyhow::Result<Vec<WitnessRow>> {
        let rows: Vec<(i64, String, String, i64, i64, i64)> =
            sqlx::query_as(sqlx::AssertSqlSafe(format!(
                "SELECT id, lease, holder, epoch, tick,
                        (extract(epoch FROM at) * 1e6)::bigint
                   FROM {TABLE} ORDER BY at, id"
            )))
            .fetch_all(&self.pool)
            .await?;
        Ok(rows
            .into_iter()
            .map(|(id, lease, holder, epoch, tick, at)| WitnessRow {
                id,
                lease,
                holder,
                epoch,
                tick,
                at,
            })
            .collect())
    }
}

/// The commit log of fenced kv writes: a deferred constraint trigger fires as the writing
/// transaction commits, so `seq` follows commit order. SECURITY DEFINER: the host's role writes
/// `leasehold_kv` and needs nothing on the log.
pub const COMMIT_LOG_SCHEMA: &str = "
CREATE SEQUENCE chaos_commit_seq;
CREATE TABLE chaos_commits (
    seq    bigint PRIMARY KEY,
    lease  text   NOT NULL,
    plugin text   NOT NULL,
    key    text   NOT NULL,
    epoch  bigint NOT NULL
);
CREATE FUNCTION chaos_record_commit() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER AS $$
BEGIN
    INSERT INTO chaos_commits
        VALUES (nextval('chaos_commit_seq'), NEW.lease, NEW.plugin, NEW.key, NEW.epoch);
    RETURN NULL;
END $$;
CREATE CONSTRAINT TRIGGER chaos_kv_commit AFTER INSERT OR UPDATE ON leasehold_kv
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION chaos_record_commit();
";

/// Installs [`COMMIT_LOG_SCHEMA`] on the migrated lease database at `url` (e.g.
/// `pg::server().fresh_lease_database()`), before any host writes.
pub async fn install_commit_log(url: &str) -> anyhow::Result<()> {
    let mut conn = sqlx::PgConnection::connect(url)
        .await
        .context("connecting to the lease database")?;
    sqlx::raw_sql(COMMIT_LOG_SCHEMA)
        .execute(&mut conn)
        .await
        .context("installing the commit log (is the lease schema migrated?)")?;
    conn.close().await?;
    Ok(())
}

/// The fenced writes the lease database at `url` accepted, in commit order.
pub async fn fenced_commits(url: &str) -> anyhow::Result<Vec<FencedCommit>> {
    let mut conn = sqlx::PgConnection::connect(url)
        .await
        .context("connecting to the lease database")?;
    let rows: Vec<(i64, String, String, String, i64)> =
        sqlx::query_as("SELECT seq, lease, plugin, key, epoch FROM chaos_commits ORDER BY seq")
            .fetch_all(&mut conn)
            .await?;
    conn.close().await?;
    Ok(rows
        .into_iter()
        .map(|(seq, lease, plugin, key, epoch)| FencedCommit {
            seq,
            lease,
            plugin,
            key,
            epoch,
        })
        .collect())
}
