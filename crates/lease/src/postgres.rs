//! The PostgreSQL [`LeaseStore`]: the store for replicas on several machines. Every statement
//! judges expiry by `now()` of the database; releases `NOTIFY` standbys, which `LISTEN` through
//! [`listen`], the host's one `LISTEN` loop (plugin events use it too).
//!
//! The lease loop's statements have connections nobody else takes: reads for display and
//! operators' statements go to a small pool of their own, and the release listener to a
//! connection of its own, so that no number of watchers makes a renewal wait for a connection.

mod gate;
mod line;
pub mod listen;
mod migration_lock;
mod nodelay;
mod pooler;
pub mod schema;
mod statements;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use sqlx::Connection;
use sqlx::postgres::{PgConnectOptions, PgConnection, PgPool, PgPoolOptions};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use super::history::{PRUNE_EVERY, TERMS_KEPT, TermRecord};
use super::protocol;
use super::store::{
    Bid, CampaignedMany, DbMillis, Epoch, GrantSeen, GroupView, LeaseRecord, LeaseStore,
    ReleaseNotice, Released, RenewRequest, Renewed, RenewedOne, StoreError, ttl_ms,
};
use super::store::{TermRow, is_permission_denied, shard_count, to_term};
use super::url::DatabaseUrl;
use listen::{Logs, Received, Subscription};

/// The advisory lock key the schema's migrators take in database `name` (sqlx's, so that every
/// release excludes every other): for operators and tests that look for it in `pg_locks`.
pub fn migration_lock_key(name: &str) -> i64 {
    migration_lock::key(name)
}

/// The channel releases are announced on; the payload is the lease name.
pub const RELEASE_CHANNEL: &str = "leasehold_released";

/// The channel handoff requests are announced on ([`LeaseStore::request_handoff`]); the payload
/// is the epoch whose holder is asked and the lease name, separated by a space.
pub const HANDOFF_CHANNEL: &str = "leasehold_handoff";

/// The channel grants are announced on (a release, or a campaign that found the lease free,
/// gave it to the head of its line); the payload is the epoch, the lease name and the holder id
/// it was given to, separated by spaces.
pub const GRANT_CHANNEL: &str = "leasehold_granted";

/// What every channel of leasehold's own starts with ([`RELEASE_CHANNEL`]): a plugin's
/// `[events]` may name none of them, so it cannot listen on the host's channels with the
/// host's connection, whatever channels are added later.
pub const OWN_CHANNEL_PREFIX: &str = "leasehold_";

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/postgres");

/// Server-side bounds on every session of the lease store, so that the database itself gives up on
/// work the host has given up on: each is the [`super::server_budget`] of the store's call timeout
/// (docs/ARCHITECTURE.md §5.3). They override the URL's `options`: a longer value there would let a
/// campaign that timed out on the host commit later and hand this replica a lease it believes it
/// lost.
fn session_settings(
    call_timeout: Duration,
    plans: Plans,
    path: &str,
) -> [(&'static str, String); 8] {
    let ms = super::server_budget(call_timeout).as_millis().to_string();
    [
        // The lease schema alone (`schema`): no schema another role created, one named after the
        // hosts' role say, can put a look-alike of a leasehold table in front of the real one.
        ("search_path", path.to_string()),
        // A statement the host stopped waiting for must not commit afterwards.
        ("statement_timeout", ms.clone()),
        // A campaign or renewal queued behind a lock (a fenced write, a stuck admin session)
        // fails and is retried rather than waiting past its usefulness.
        ("lock_timeout", ms.clone()),
        // The host never idles inside a transaction; a session that does is frozen or broken,
        // and must not keep lease rows locked.
        ("idle_in_transaction_session_timeout", ms),
        // A campaign or renewal the host acts on must survive a crash of the server: with `off`, an
        // immediate restart could forget an epoch it already handed out
        // (docs/ARCHITECTURE.md §9.2).
        ("synchronous_commit", "on".to_string()),
        ("plan_cache_mode", plans.setting().to_string()),
        // A campaign for 1,000 leases is estimated costly enough for the server's default JIT,
        // which then spent 440 ms compiling a statement that runs in 4.
        ("jit", "off".to_string()),
        // The protocol this binary speaks: the schema's trigger refuses a campaign from a session
        // that announces less than the database requires (`super::protocol`).
        ("leasehold.protocol", super::protocol::PROTOCOL.to_string()),
    ]
}

/// How a pool's sessions plan the lease statements, which all take arrays of names.
#[derive(Debug, Clone, Copy)]
enum Plans {
    /// Planned for each execution, with the arrays' real lengths: a generic plan cannot see
    /// them and joined 1,000 renewals in a nested loop, 135 ms instead of 8. (PostgreSQL's own
    /// choice switches to the generic plan after five executions, when its estimate of a
    /// hundred rows per array makes it look cheaper.)
    EachTime,
    /// Planned once per session. For a few names any join order is cheap, and a campaign then
    /// costs ~0.3 ms less in PostgreSQL (0.53 → 0.28 ms measured alone, more on a busy server):
    /// the planning, on the handoff's path.
    Once,
}

impl Plans {
    fn setting(self) -> &'static str {
        match self {
            Plans::EachTime => "force_custom_plan",
            Plans::Once => "force_generic_plan",
        }
    }
}

/// At most this many leases in one statement go to [`PostgresStore::few`]: a join of a few rows
/// stays cheap whatever plan it got, and a handoff's release and campaign are for one lease.
const FEW: usize = 16;

/// Connections to the lease database.
#[derive(Debug, Clone)]
pub struct PostgresStore {
    /// The lease statements for many leases (more than [`FEW`]) and group heartbeats. Its
    /// sessions plan each execution ([`Plans::EachTime`]).
    pool: PgPool,
    /// The lease statements for [`FEW`] leases or fewer, the handoff's path: planned once per
    /// session ([`Plans::Once`]), and each connection warmed up as it opens.
    few: PgPool,
    /// Everything that is not the lease loop's: reads for display (`/status`, `leases list`),
    /// `ping`, `show` and `force_release`. Connected on first use, at most [`OBSERVERS`].
    observers: PgPool,
    /// The release listener's one connection, connected when it first listens.
    listener: PgPool,
    /// While the server cannot be reached, one connection attempt per call (see [`gate`]).
    gate: Arc<gate::Gate>,
}

/// Connections for reads and operators' statements: `/status` reads through one refresh at a
/// time, and a second lets an operator's listing run beside it.
const OBSERVERS: u32 = 2;

impl PostgresStore {
    /// The pool for a lease statement on `leases` leases.
    fn pool_for(&self, leases: usize) -> &PgPool {
        if leases <= FEW { &self.few } else { &self.pool }
    }

    /// The value of a setting in the store's sessions (`SHOW name`), for diagnostics.
    pub async fn show(&self, setting: &str) -> Result<String, StoreError> {
        if !setting
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_')
        {
            return Err(StoreError::Invalid {
                what: "setting name",
                reason: format!("{setting:?} is not a plain identifier"),
            });
        }
        sqlx::query_scalar(sqlx::AssertSqlSafe(format!("SHOW {setting}")))
            .fetch_one(&self.observers)
            .await
            .map_err(StoreError::query("show"))
    }

    /// Connects (the first connection within `connect_timeout`) and migrates the schema. Safe
    /// when many replicas start at once: the migrator holds an advisory lock. Every statement of
    /// the store is bounded on the server by `call_timeout` (see `session_settings`).
    pub async fn connect(
        url: &DatabaseUrl,
        connect_timeout: Duration,
        call_timeout: Duration,
    ) -> Result<Self, StoreError> {
        let DatabaseUrl::Postgres(raw) = url else {
            return Err(StoreError::Invalid {
                what: "database URL",
                reason: format!("{url} is not a PostgreSQL URL"),
            });
        };
        let redacted = url.to_string();
        let connect_err = |source| StoreError::Connect {
            url: redacted.clone(),
            source,
        };
        let base = super::url::pg_options(raw)
            .map_err(|e| StoreError::Invalid {
                what: "database URL",
                reason: e.from_origin("the lease store's settings").to_string(),
            })?
            .application_name("leasehold");
        // The pooler check runs on the session's own path: which schema to pin is found after it.
        let unpinned = base.clone().options(
            session_settings(call_timeout, Plans::EachTime, "")
                .iter()
                .filter(|(k, _)| *k != "search_path")
                .map(|(k, v)| (*k, v.as_str())),
        );
        // Two connections first, at once: what is between the host and the server must give
        // each a session of its own (`pooler`), and a pool would hide "connection refused" or a
        // bad password behind a generic acquire timeout.
        let sessions = match pooler::check(
            &unpinned,
            connect_timeout,
            &protocol::PROTOCOL.to_string(),
        )
        .await
        {
            Ok(sessions) => sessions,
            Err(pooler::CheckError::Driver(source)) => return Err(connect_err(source)),
            Err(pooler::CheckError::Stalled(what)) => {
                return Err(StoreError::Waited {
                    url: redacted.clone(),
                    what: format!(
                        "{what}: leasehold needs several sessions at once (a few per host), so a pooler in front of PostgreSQL needs a pool of more sessions than hosts times {PER_HOST}"
                    ),
                    after: connect_timeout,
                });
            }
        };
        let by_hand = match sessions {
            pooler::Sessions::Shared(evidence) => {
                return Err(StoreError::TransactionPooling {
                    url: redacted.clone(),
                    evidence: evidence.to_string(),
                });
            }
            pooler::Sessions::OwnEach { settings_arrived } => !settings_arrived,
        };
        if by_hand {
            debug!(
                "the session settings sent at connect did not arrive (a pooler ignores them): set on each connection"
            );
        }
        let lease_schema = find_schema(&base, connect_timeout, &redacted).await?;
        let path = schema::path_of(&lease_schema);
        debug!(schema = %lease_schema, "the lease schema, the store's search_path");
        let with_plans = |plans| {
            let settings = session_settings(call_timeout, plans, &path);
            base.clone()
                .options(settings.iter().map(|(k, v)| (*k, v.as_str())))
        };
        let options = with_plans(Plans::EachTime);
        // What a connection of plans `plans` runs as it opens when the settings did not arrive.
        let set_by_hand = |plans| {
            by_hand.then(|| {
                Arc::<str>::from(set_statements(&session_settings(
                    call_timeout,
                    plans,
                    &path,
                )))
            })
        };
        // One connection for the migration, kept for the first batch of many leases.
        let pool = open_pool(&options, 1, connect_timeout, set_by_hand(Plans::EachTime))
            .await
            .map_err(connect_err)?;
        migrate(&pool, &redacted, connect_timeout).await?;
        // A schema that needs a newer binary is refused here, before anything is taken; the
        // schema's trigger refuses each campaign after a raise while this replica runs. It waits
        // for nothing but a lock on the protocol table (a migration under way elsewhere, or a
        // session that kept one): said after a while, and bounded like the connection.
        let read = sqlx::query_as(protocol::READ_POSTGRES).fetch_optional(&pool);
        let found = migration_lock::said_and_bounded(
            read,
            connect_timeout,
            "the protocol check to read leasehold_protocol (a lock on the lease schema held by another session: a migration under way, or a transaction left open)",
        )
        .await
        .map_err(|after| StoreError::Waited {
            url: redacted.clone(),
            what: "the protocol check to read leasehold_protocol, which another session keeps locked (see pg_locks): end that session or wait for its migration, then start again".to_string(),
            after,
        })?
        .map_err(StoreError::query("protocol check"))?;
        protocol::Requirement::check(found.map(protocol::from_row))?;
        warn_of_others(&pool, &lease_schema).await;
        // Opened after the migration, so that every connection finds the tables to warm up on.
        // A campaign and a renewal find a warm connection each.
        let few = open_pool(
            &with_plans(Plans::Once),
            2,
            connect_timeout,
            set_by_hand(Plans::Once),
        )
        .await
        .map_err(connect_err)?;
        // Neither prepares the lease statements: they run none. A replica nobody watches never
        // connects `observers`.
        let lazy = |max| {
            let set = set_by_hand(Plans::EachTime);
            PgPoolOptions::new()
                .max_connections(max)
                .acquire_timeout(connect_timeout)
                .after_connect(move |conn, _| {
                    let set = set.clone();
                    Box::pin(async move { set_settings(conn, set.as_deref()).await })
                })
                .connect_lazy_with(options.clone())
        };
        let observers = lazy(OBSERVERS);
        let pools = vec![few.clone(), pool.clone(), observers.clone()];
        Ok(PostgresStore {
            pool,
            few,
            observers,
            listener: lazy(1),
            gate: Arc::new(gate::Gate::new(options, pools)),
        })
    }
}

/// The lease schema ([`schema`]), found on a connection of the URL's own settings within
/// `bound`; several schemas holding a `leasehold_leases` are refused.
async fn find_schema(
    base: &PgConnectOptions,
    bound: Duration,
    url: &str,
) -> Result<String, StoreError> {
    let connect_err = |source| StoreError::Connect {
        url: url.to_string(),
        source,
    };
    let look = async {
        let mut conn = PgConnection::connect_with(base).await?;
        let found = schema::find(&mut conn).await;
        let _ = conn.close().await;
        found
    };
    let found = tokio::time::timeout(bound, look)
        .await
        .map_err(|_| StoreError::ConnectTimeout {
            url: url.to_string(),
            after: bound,
        })?
        .map_err(connect_err)?;
    match found {
        schema::Found::One(schema) => Ok(schema),
        schema::Found::NoSchema => Err(StoreError::LeaseSchema {
            url: url.to_string(),
            why: "the search_path of the hosts' sessions names no schema that exists, so there is nowhere to find or create the lease tables".into(),
        }),
        schema::Found::Several(schemas) => Err(StoreError::LeaseSchema {
            url: url.to_string(),
            why: format!(
                "a table named leasehold_leases is in each of the schemas {} of the hosts' search_path: the first would hide the next, and leasehold cannot tell which its migrations made (a schema named after the hosts' role that another role created?)",
                schemas
                    .iter()
                    .map(|s| format!("{s:?}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }),
    }
}

/// Warns of what could stand in for the process fence on its callers' paths ([`schema::others`]).
/// Only a warning: the callers' sessions are not the host's, and the fix is the operator's.
async fn warn_of_others(pool: &PgPool, lease_schema: &str) {
    let found = async {
        let mut conn = pool.acquire().await?;
        schema::others(&mut conn, lease_schema).await
    };
    match found.await {
        Ok(others) => {
            if !others.functions.is_empty() {
                warn!(schema = %lease_schema, functions = ?others.functions, "functions named leasehold_fence* that leasehold's migrations did not make (in another schema, or of another owner than the lease tables): a caller whose search_path reaches them first, or whose untyped call they match better, runs them instead of the fence; drop them, and call the fence qualified and typed ({lease_schema}.leasehold_fence($1::text, $2::bigint))");
            }
            if others.public_may_create {
                warn!(schema = %lease_schema, "every role may create objects in the lease schema {lease_schema:?} (PUBLIC has CREATE, the default for public up to PostgreSQL 14): any role could add a function that an unqualified call of the fence resolves to; run REVOKE CREATE ON SCHEMA {} FROM PUBLIC", schema::path_of(lease_schema));
            }
        }
        Err(error) => debug!(%error, "could not look for look-alikes of the fence"),
    }
}

/// A pool of at least `min` connections; each sets the session settings when `set_by_hand` has
/// them (they did not arrive at connect), prepares the lease statements and warms up as it opens
/// ([`statements::prepare_and_warm_up`]).
async fn open_pool(
    options: &PgConnectOptions,
    min: u32,
    connect_timeout: Duration,
    set_by_hand: Option<Arc<str>>,
) -> Result<PgPool, sqlx::Error> {
    PgPoolOptions::new()
        // Campaigns for several leases may run at once; renewals are one statement.
        .max_connections(8)
        // No ping before each statement: it was a round trip on the handoff's path, and a
        // statement on a broken connection fails (and is retried) like any other.
        .test_before_acquire(false)
        .min_connections(min)
        .after_connect(move |conn, _| {
            let set = set_by_hand.clone();
            Box::pin(async move {
                set_settings(conn, set.as_deref()).await?;
                let sockets = nodelay::set_on_every_tcp_socket();
                debug!(sockets, "TCP_NODELAY set on the process's TCP sockets");
                // Only a warm-up: before the first migration the tables are missing, and a
                // statement that was not prepared here is prepared on first use.
                if let Err(error) = statements::prepare_and_warm_up(conn).await {
                    debug!(%error, "lease statements not prepared on connect");
                }
                Ok(())
            })
        })
        .acquire_timeout(connect_timeout)
        .connect_with(options.clone())
        .await
}

/// About how many sessions one host keeps open: the lease pools' few, the listener's and the
/// observers', for the message that asks a pooler for enough of them.
const PER_HOST: u32 = 6;

/// The `SET` statements that give a session `settings`, for a connection they did not arrive
/// with: a pooler that ignores the startup packet's `options` (PgBouncer with
/// `ignore_startup_parameters = options`) would otherwise leave the session without its bounds.
fn set_statements(settings: &[(&'static str, String)]) -> String {
    settings
        .iter()
        .map(|(name, value)| match *name {
            // A list of identifiers, already quoted as such (`schema::path_of`): a string
            // literal here would make the whole quoted list one schema's name.
            "search_path" => format!("SET {name} = {value};"),
            _ => format!("SET {name} = '{}';", value.replace('\'', "''")),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Runs `set` (from [`set_statements`]) on a new connection, when there is one.
async fn set_settings(conn: &mut PgConnection, set: Option<&str>) -> Result<(), sqlx::Error> {
    if let Some(set) = set {
        sqlx::raw_sql(sqlx::AssertSqlSafe(set.to_string()))
            .execute(conn)
            .await?;
    }
    Ok(())
}

/// Whether every embedded migration is already applied (with the same checksum). A role with DML
/// rights only can then run the host: the migrator itself needs to create its bookkeeping table.
async fn schema_is_current(pool: &PgPool) -> Result<bool, sqlx::Error> {
    let exists: bool = sqlx::query_scalar("SELECT to_regclass('_sqlx_migrations') IS NOT NULL")
        .fetch_one(pool)
        .await?;
    if !exists {
        return Ok(false);
    }
    let applied: Vec<(i64, Vec<u8>)> =
        sqlx::query_as("SELECT version, checksum FROM _sqlx_migrations WHERE success")
            .fetch_all(pool)
            .await?;
    Ok(MIGRATOR
        .iter()
        .filter(|m| m.migration_type.is_up_migration())
        .all(|m| {
            applied
                .iter()
                .any(|(v, c)| *v == m.version && **c == *m.checksum)
        }))
}

/// Migrates the schema unless it is current. Waiting for another session's migration lock, or
/// for a lock another session keeps on a table a migration changes, is bounded by `lock_wait`.
async fn migrate(pool: &PgPool, url: &str, lock_wait: Duration) -> Result<(), StoreError> {
    // A current schema needs nothing, and the check needs only SELECT: the least-privileged role
    // the host may run as (the schema owner migrates, with `leasehold migrate`).
    match schema_is_current(pool).await {
        Ok(true) => return Ok(()),
        // The bookkeeping table is there (the check found it by name) but may not be read: the
        // owner migrated and the grants are missing. Migrating again would fix nothing.
        Err(sqlx::Error::Database(db)) if db.code().as_deref() == Some("42501") => {
            return Err(StoreError::Grants {
                url: url.to_string(),
                source: sqlx::Error::Database(db),
            });
        }
        _ => {}
    }
    let failed = |source| StoreError::Migrate {
        url: url.to_string(),
        source,
    };
    // The advisory lock serialises concurrent migrators; a retry covers the rare race on creating
    // the bookkeeping table itself.
    let deadline = crate::seams::now() + lock_wait;
    let mut attempt = 0;
    loop {
        // On a connection of its own, closed after a failure: the advisory lock is held by the
        // session, and a pooled connection would keep it after an error, making every later
        // migrator (ours or another replica's) wait for it.
        let mut conn = pool
            .acquire()
            .await
            .map_err(|e| failed(sqlx::migrate::MigrateError::Execute(e)))?
            .detach();
        // A migration of a large table may take longer than any lease call: no statement
        // timeout. But a lock another session keeps on a table is waited for only as long as
        // the migrators' lock is.
        let unbounded = sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "SET statement_timeout = 0; SET lock_timeout = {}",
            lock_wait.as_millis().max(1)
        )))
        .execute(&mut conn)
        .await;
        if let Err(e) = unbounded {
            return Err(failed(sqlx::migrate::MigrateError::Execute(e)));
        }
        let key = match migration_lock::lock(&mut conn, deadline).await {
            Ok(key) => key,
            Err(migration_lock::LockError::Driver(e)) => {
                return Err(failed(sqlx::migrate::MigrateError::Execute(e)));
            }
            Err(migration_lock::LockError::HeldElsewhere(what)) => {
                return Err(StoreError::Waited {
                    url: url.to_string(),
                    what,
                    after: lock_wait,
                });
            }
        };
        // A schema migrated by a newer release is accepted: rolling a replica back to the
        // previous release must work, and what a newer schema requires of this binary is the
        // protocol's to say (checked after), not the list of migrations'. The lock is this
        // function's, taken above.
        let mut migrator = sqlx::migrate!("./migrations/postgres");
        migrator.set_ignore_missing(true).set_locking(false);
        let run = migrator.run_direct(None, &mut conn, false);
        // Not bounded: a migration that works (a large table's) is not given up on; what it
        // waits for another session to let go of is, by the lock timeout above.
        let outcome =
            migration_lock::said(run, "the lease schema's migrations to finish", None).await;
        let outcome = match outcome {
            Ok(()) => migration_lock::unlock(&mut conn, key)
                .await
                .map_err(sqlx::migrate::MigrateError::Execute),
            Err(e) => Err(e),
        };
        if outcome.is_ok() {
            let _ = conn.close().await;
        }
        match outcome {
            Ok(()) => return Ok(()),
            Err(e) if attempt < 5 && !is_permission_denied(&e) && !is_lock_timeout(&e) => {
                attempt += 1;
                debug!(error = %e, attempt, "migration raced another replica; retrying");
                tokio::time::sleep(Duration::from_millis(50 * attempt)).await;
            }
            Err(source) => return Err(failed(source)),
        }
    }
}

/// SQLSTATE 55P03: a migration waited for a lock another session keeps, past its bound; waiting
/// again would only double it.
fn is_lock_timeout(error: &sqlx::migrate::MigrateError) -> bool {
    match error {
        sqlx::migrate::MigrateError::Execute(sqlx::Error::Database(db))
        | sqlx::migrate::MigrateError::ExecuteMigration(sqlx::Error::Database(db), _) => {
            db.code().as_deref() == Some("55P03")
        }
        _ => false,
    }
}

const RECORD_COLUMNS: &str = "name, holder, epoch, ttl_ms, \
    (extract(epoch FROM (expires_at - now())) * 1000)::bigint AS expires_in_ms";

type RecordRow = (String, String, i64, i64, i64);

/// A row of [`statements::CAMPAIGN`]: name, epoch won, wait and hold-off in ms, the clock, and
/// for a free lease whose row was locked, the server processes holding it.
type CampaignRow = (
    String,
    Option<i64>,
    Option<i64>,
    Option<i64>,
    DbMillis,
    Option<Vec<i32>>,
    Option<i64>,
    Option<i64>,
    bool,
);

/// What a campaign found, from [`statements::CAMPAIGN`]'s rows and [`line::PREEMPT`]'s. See the
/// statements for how the campaign decides; per lease not won, `wait_ms` says how long until a
/// campaign can win it (or how long a grant to another waiter lasts), `held_off_ms` the
/// failover's hold-off alone, and a lease whose holder this waiter may preempt is campaigned
/// for again when it may, if that comes first.
fn campaigned(rows: Vec<CampaignRow>, preempt: Vec<(String, i64, bool)>) -> CampaignedMany {
    let mut out = CampaignedMany {
        asked: preempt
            .iter()
            .filter(|(_, _, asked)| *asked)
            .map(|(name, _, _)| name.clone())
            .collect(),
        ..CampaignedMany::default()
    };
    let soonest: std::collections::BTreeMap<String, i64> = preempt
        .into_iter()
        .map(|(name, in_ms, _)| (name, in_ms.max(0)))
        .collect();
    for (name, epoch, wait_ms, held_off_ms, db_now, locked_by, granted, left_ms, gave) in rows {
        if gave {
            out.gave.push(name.clone());
        }
        out.db_now = Some(out.db_now.map_or(db_now, |t: DbMillis| t.max(db_now)));
        if let (Some(granted), Some(left)) = (granted, super::store::wait_ms(left_ms)) {
            out.granted.push((name, Epoch::new(granted), left));
            continue;
        }
        if let Some(held_off) = super::store::wait_ms(held_off_ms) {
            out.held_off_for = Some(out.held_off_for.map_or(held_off, |h| h.max(held_off)));
        }
        if let Some(pids) = locked_by {
            out.locked.push((name.clone(), pids));
        }
        match epoch {
            Some(epoch) => out.won.push((name, Epoch::new(epoch))),
            None => {
                let wait = match (wait_ms, soonest.get(&name)) {
                    (Some(w), Some(p)) => Some(w.min(*p)),
                    (w, p) => w.or(p.copied()),
                };
                out.lost.push((name, super::store::wait_ms(wait)))
            }
        }
    }
    out
}

fn to_record((name, holder, epoch, ttl_ms, expires_in_ms): RecordRow) -> LeaseRecord {
    LeaseRecord {
        name,
        holder,
        epoch: Epoch::new(epoch),
        ttl_ms,
        expires_in_ms,
    }
}

#[async_trait]
impl LeaseStore for PostgresStore {
    fn backend(&self) -> &'static str {
        "postgres"
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
        let names: Vec<&str> = bids.iter().map(|b| b.name.as_str()).collect();
        let in_line: Vec<&Bid> = bids.iter().filter(|b| b.line.is_some()).collect();
        let preempting = bids
            .iter()
            .any(|b| b.line.is_some_and(|l| l.place.preempt_after.is_some()));
        let pool = self.pool_for(bids.len());
        let campaign = |names| {
            sqlx::query_as(statements::CAMPAIGN)
                .bind(holder)
                .bind(names)
                .bind(ttl_ms)
                .bind(i64::from(TERMS_KEPT))
                .bind(i64::from(PRUNE_EVERY))
                .bind(GRANT_CHANNEL)
        };
        // A campaign outside the line is the one statement alone.
        if in_line.is_empty() {
            let rows: Vec<CampaignRow> = self
                .gate
                .call("campaign", campaign(&names).fetch_all(pool))
                .await?;
            return Ok(campaigned(rows, Vec::new()));
        }
        // In line, one transaction: this holder's place in each line (so that the campaign sees
        // it), the campaign, and the preemptions it may ask for.
        let run = async {
            let mut tx = pool.begin().await?;
            if !in_line.is_empty() {
                let (lined, (priorities, alive)): (Vec<&str>, (Vec<i64>, Vec<i64>)) = in_line
                    .iter()
                    .filter_map(|b| b.line.map(|l| (b, l)))
                    .map(|(b, l)| {
                        let alive = i64::try_from(l.alive_for.as_millis()).unwrap_or(i64::MAX);
                        (b.name.as_str(), (l.place.priority, alive.max(1)))
                    })
                    .unzip();
                sqlx::query(line::JOIN)
                    .bind(holder)
                    .bind(&lined)
                    .bind(&priorities)
                    .bind(&alive)
                    .bind(ttl_ms)
                    .execute(&mut *tx)
                    .await?;
            }
            let rows: Vec<CampaignRow> = campaign(&names).fetch_all(&mut *tx).await?;
            let preempt: Vec<(String, i64, bool)> = if preempting {
                let after: Vec<Option<i64>> = bids
                    .iter()
                    .map(|b| {
                        b.line
                            .and_then(|l| l.place.preempt_after)
                            .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
                    })
                    .collect();
                sqlx::query_as(line::PREEMPT)
                    .bind(holder)
                    .bind(&names)
                    .bind(&after)
                    .bind(HANDOFF_CHANNEL)
                    .fetch_all(&mut *tx)
                    .await?
            } else {
                Vec::new()
            };
            tx.commit().await?;
            Ok((rows, preempt))
        };
        let (rows, preempt) = self.gate.call("campaign", run).await?;
        Ok(campaigned(rows, preempt))
    }

    async fn read_grant(
        &self,
        name: &str,
        holder: &str,
        epoch: Epoch,
    ) -> Result<GrantSeen, StoreError> {
        // On the standbys' own pool, which is warm: the one read between a grant and a term.
        let (left_ms, db_now): (Option<i64>, DbMillis) = self
            .gate
            .call(
                "read grant",
                sqlx::query_as(line::READ_GRANT)
                    .bind(name)
                    .bind(holder)
                    .bind(epoch.get())
                    .fetch_one(self.pool_for(1)),
            )
            .await?;
        Ok(GrantSeen {
            left: super::store::wait_ms(left_ms.filter(|ms| *ms > 0)),
            db_now: Some(db_now),
        })
    }

    async fn renew(&self, holder: &str, leases: &[RenewRequest]) -> Result<Renewed, StoreError> {
        if leases.is_empty() {
            return Ok(Renewed::default());
        }
        let names: Vec<&str> = leases.iter().map(|r| r.name.as_str()).collect();
        let epochs: Vec<i64> = leases.iter().map(|r| r.epoch.get()).collect();
        let ttls = leases
            .iter()
            .map(|r| ttl_ms(r.ttl))
            .collect::<Result<Vec<_>, _>>()?;
        // Rows are locked SKIP LOCKED: a row another session holds (a fenced write's FOR SHARE, an
        // operator's lock) is left out instead of making every other lease of the batch wait
        // (docs/ARCHITECTURE.md §5.3). Those still ours by the statement's snapshot come back as
        // busy, for a renewal of their own. Expiry is judged by clock_timestamp() once the row is
        // locked. The last row (no name) carries the clock's reading when nothing landed.
        let rows: Vec<(Option<String>, bool, bool, DbMillis)> = self
            .gate
            .call(
                "renew",
                sqlx::query_as(statements::RENEW)
                    .bind(holder)
                    .bind(&names)
                    .bind(&epochs)
                    .bind(&ttls)
                    .fetch_all(self.pool_for(leases.len())),
            )
            .await?;
        let mut renewed = Renewed::default();
        for (name, landed, handoff, db_now) in rows {
            renewed.db_now = Some(renewed.db_now.map_or(db_now, |t| t.max(db_now)));
            match (name, landed) {
                (Some(name), true) => {
                    if handoff {
                        renewed.handoffs.push(name.clone());
                    }
                    renewed.landed.push(name)
                }
                (Some(name), false) => renewed.busy.push(name),
                (None, _) => {}
            }
        }
        Ok(renewed)
    }

    async fn renew_one(
        &self,
        holder: &str,
        lease: &RenewRequest,
        timeout: Duration,
    ) -> Result<RenewedOne, StoreError> {
        let ttl_ms = ttl_ms(lease.ttl)?;
        let err = StoreError::query("renew");
        let mut tx = self.gate.call("renew", self.few.begin()).await?;
        // This one waits for the row lock, but on the server too no longer than its caller.
        let budget = super::server_budget(timeout).as_millis().to_string();
        sqlx::query(
            "SELECT set_config('lock_timeout', $1, true), set_config('statement_timeout', $1, true)",
        )
        .bind(&budget)
        .execute(&mut *tx)
        .await
        .map_err(err)?;
        let (landed, handoff, db_now): (bool, bool, DbMillis) =
            sqlx::query_as(statements::RENEW_ONE)
                .bind(&lease.name)
                .bind(holder)
                .bind(lease.epoch.get())
                .bind(ttl_ms)
                .fetch_one(&mut *tx)
                .await
                .map_err(err)?;
        tx.commit().await.map_err(err)?;
        Ok(RenewedOne {
            landed,
            db_now: Some(db_now),
            handoff,
        })
    }

    async fn release_giving(
        &self,
        holder: &str,
        leases: &[(String, Epoch)],
    ) -> Result<Vec<Released>, StoreError> {
        // One statement: each lease goes to the head of its line or is expired, and the
        // notification is sent when (and only if) that commits (`line::RELEASE`).
        let (names, epochs): (Vec<&str>, Vec<i64>) =
            leases.iter().map(|(n, e)| (n.as_str(), e.get())).unzip();
        let rows: Vec<(String, Option<String>)> = self
            .gate
            .call(
                "release",
                sqlx::query_as(line::RELEASE)
                    .bind(holder)
                    .bind(names)
                    .bind(epochs)
                    .bind(RELEASE_CHANNEL)
                    .bind(GRANT_CHANNEL)
                    .fetch_all(&self.few),
            )
            .await?;
        Ok(rows
            .into_iter()
            .map(|(name, given_to)| Released { name, given_to })
            .collect())
    }

    async fn force_release(&self, name: &str) -> Result<Option<(String, Epoch)>, StoreError> {
        // A forced release ends any handoff under way: nobody is reserved the lease.
        self.gate
            .call(
                "force release",
                sqlx::query_as(
                    "WITH released AS (
                UPDATE leasehold_leases SET expires_at = clock_timestamp(),
                       handoff_epoch = NULL, handoff_to = NULL,
                       reserved_for = NULL, reserved_until = NULL
                 WHERE name = $1 AND expires_at > clock_timestamp()
                RETURNING name, holder, epoch),
             ended AS (
                UPDATE leasehold_terms AS t SET ended_at = clock_timestamp(), ended_by = 'forced'
                  FROM released AS r
                 WHERE t.name = r.name AND t.epoch = r.epoch AND t.ended_at IS NULL)
             SELECT holder, epoch FROM released, pg_notify($2, released.name) AS n",
                )
                .bind(name)
                .bind(RELEASE_CHANNEL)
                .fetch_optional(&self.observers),
            )
            .await
            .map(|row: Option<(String, i64)>| {
                row.map(|(holder, epoch)| (holder, Epoch::new(epoch)))
            })
    }

    async fn request_handoff(
        &self,
        name: &str,
        to: Option<&str>,
    ) -> Result<Option<LeaseRecord>, StoreError> {
        // An operator's statement: on the observers' connections. The notification goes out when
        // (and only if) the request commits.
        let row: Option<RecordRow> = self
            .gate
            .call(
                "request handoff",
                sqlx::query_as(sqlx::AssertSqlSafe(format!(
                    "WITH asked AS (
                UPDATE leasehold_leases SET handoff_epoch = epoch, handoff_to = $2
                 WHERE name = $1 AND expires_at > clock_timestamp()
                RETURNING {RECORD_COLUMNS})
             SELECT asked.* FROM asked, pg_notify($3, asked.epoch || ' ' || asked.name) AS n"
                )))
                .bind(name)
                .bind(to)
                .bind(HANDOFF_CHANNEL)
                .fetch_optional(&self.observers),
            )
            .await?;
        Ok(row.map(to_record))
    }

    async fn get(&self, names: &[String]) -> Result<Vec<LeaseRecord>, StoreError> {
        let rows: Vec<RecordRow> = self.gate.call("get", sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT {RECORD_COLUMNS} FROM leasehold_leases WHERE name = ANY($1) ORDER BY name"
        )))
        .bind(names)
        .fetch_all(&self.observers)
        )
        .await?;
        Ok(rows.into_iter().map(to_record).collect())
    }

    async fn list(&self, after: Option<&str>, limit: u32) -> Result<Vec<LeaseRecord>, StoreError> {
        let rows: Vec<RecordRow> = self
            .gate
            .call(
                "list",
                sqlx::query_as(sqlx::AssertSqlSafe(format!(
                    "SELECT {RECORD_COLUMNS} FROM leasehold_leases
              WHERE $1::text IS NULL OR name > $1 ORDER BY name LIMIT $2"
                )))
                .bind(after)
                .bind(i64::from(limit))
                .fetch_all(&self.observers),
            )
            .await?;
        Ok(rows.into_iter().map(to_record).collect())
    }

    async fn terms(&self, names: &[String], per_lease: u32) -> Result<Vec<TermRecord>, StoreError> {
        // Ages by one reading of the clock, so that a term's end is never after the next's start.
        // The lease row's own term, left open until a campaign closes it, has ended once the row
        // has expired: released when that was before its ttl ran out, as the campaign will say.
        let rows: Vec<TermRow> = self
            .gate
            .call(
                "terms",
                sqlx::query_as(
                    "WITH now AS (SELECT clock_timestamp() AS t),
                  ranked AS (
                    SELECT k.*, row_number() OVER (PARTITION BY k.name ORDER BY k.epoch DESC) AS n
                      FROM leasehold_terms AS k WHERE k.name = ANY($1)),
                  ended AS (
                    SELECT r.*, l.expires_at <= now.t AS lapsed, l.expires_at AS row_expired_at,
                           l.expires_at < l.renewed_at + l.ttl_ms * interval '1 millisecond'
                               AS released
                      FROM ranked AS r CROSS JOIN now
                      LEFT JOIN leasehold_leases AS l
                        ON l.name = r.name AND l.epoch = r.epoch AND r.ended_at IS NULL
                     WHERE r.n <= $2)
             SELECT e.name, e.epoch, e.holder,
                    greatest(0, (extract(epoch FROM now.t - e.started_at) * 1000)::bigint),
                    greatest(0, (extract(epoch FROM now.t - CASE WHEN e.lapsed
                        THEN e.row_expired_at ELSE e.ended_at END) * 1000)::bigint),
                    CASE WHEN e.lapsed THEN CASE WHEN e.released THEN 'released' ELSE 'expired' END
                         ELSE e.ended_by END
               FROM ended AS e, now ORDER BY e.name, e.epoch DESC",
                )
                .bind(names)
                .bind(i64::from(per_lease))
                .fetch_all(&self.observers),
            )
            .await?;
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
        let rows: Vec<super::store::GroupRow> = self
            .gate
            .call(
                "heartbeat",
                sqlx::query_as(statements::HEARTBEAT)
                    .bind(group)
                    .bind(member)
                    .bind(ttl_ms)
                    .bind(shards)
                    .bind(shard_count(shards)?)
                    .fetch_all(&self.pool),
            )
            .await?;
        Ok(super::store::group_view(rows))
    }

    async fn members(&self) -> Result<Vec<super::store::MemberRecord>, StoreError> {
        let rows: Vec<super::store::MemberRow> = self
            .gate
            .call(
                "members",
                sqlx::query_as(
                    "SELECT grp, member,
                    (extract(epoch FROM clock_timestamp() - joined_at) * 1000)::bigint,
                    ceil(extract(epoch FROM expires_at - clock_timestamp()) * 1000)::bigint,
                    shards::bigint
               FROM leasehold_members WHERE expires_at > clock_timestamp()
              ORDER BY grp, member",
                )
                .fetch_all(&self.observers),
            )
            .await?;
        Ok(rows.into_iter().map(super::store::to_member).collect())
    }

    async fn leave(&self, groups: &[String], member: &str) -> Result<(), StoreError> {
        self.gate
            .call(
                "leave",
                sqlx::query("DELETE FROM leasehold_members WHERE grp = ANY($1) AND member = $2")
                    .bind(groups)
                    .bind(member)
                    .execute(&self.few),
            )
            .await?;
        Ok(())
    }

    async fn line(&self, names: &[String]) -> Result<Vec<super::store::WaiterRecord>, StoreError> {
        let rows: Vec<super::store::WaiterRow> = self
            .gate
            .call(
                "line",
                sqlx::query_as(
                    "SELECT w.name, w.holder, w.priority,
                            (extract(epoch FROM clock_timestamp() - w.joined_at) * 1000)::bigint,
                            ceil(extract(epoch FROM w.alive_until - clock_timestamp()) * 1000)::bigint
                       FROM leasehold_waiters AS w
                       LEFT JOIN leasehold_leases AS k
                         ON k.name = w.name AND k.expires_at > clock_timestamp()
                      WHERE w.name = ANY($1) AND w.alive_until > clock_timestamp()
                        AND w.holder IS DISTINCT FROM k.holder
                      ORDER BY w.name, w.priority DESC, w.joined_at, w.holder",
                )
                .bind(names)
                .fetch_all(&self.observers),
            )
            .await?;
        Ok(rows.into_iter().map(super::store::to_waiter).collect())
    }

    async fn ping(&self) -> Result<(), StoreError> {
        self.gate
            .call("ping", sqlx::query("SELECT 1").execute(&self.observers))
            .await?;
        Ok(())
    }

    fn listen_releases(
        &self,
        shutdown: CancellationToken,
    ) -> Option<mpsc::Receiver<ReleaseNotice>> {
        let (tx, rx) = mpsc::channel(256);
        tokio::spawn(forward_releases(self.listener.clone(), tx, shutdown));
        Some(rx)
    }
}

/// A grant notification's payload (`EPOCH NAME HOLDER`) as a notice; `None` for another text.
fn grant_notice(payload: &str) -> Option<ReleaseNotice> {
    let mut words = payload.splitn(3, ' ');
    let epoch = Epoch::new(words.next()?.parse().ok()?);
    let lease = words.next().filter(|w| !w.is_empty())?.to_string();
    let holder = words.next().filter(|w| !w.is_empty())?.to_string();
    Some(ReleaseNotice::Granted {
        lease,
        holder,
        epoch,
    })
}

/// A handoff notification's payload (`EPOCH NAME`) as a notice; `None` for another text.
fn handoff_notice(payload: &str) -> Option<ReleaseNotice> {
    let (epoch, lease) = payload.split_once(' ')?;
    Some(ReleaseNotice::HandoffRequested {
        lease: lease.to_string(),
        epoch: Epoch::new(epoch.parse().ok()?),
    })
}

/// Forwards release notifications (and handoff requests) until `shutdown`, reconnecting with backoff after a lost
/// connection and reporting [`ReleaseNotice::Resubscribed`] each time it is listening again.
async fn forward_releases(
    pool: PgPool,
    tx: mpsc::Sender<ReleaseNotice>,
    shutdown: CancellationToken,
) {
    let logs = Logs {
        database: None,
        cannot_subscribe: "release listener cannot subscribe",
        lost_connection: "release listener lost its connection; resubscribing",
        listening: None,
    };
    let channels = vec![
        RELEASE_CHANNEL.to_string(),
        HANDOFF_CHANNEL.to_string(),
        GRANT_CHANNEL.to_string(),
    ];
    let mut subscription = Subscription::new(pool, channels, shutdown, logs);
    while let Some(received) = subscription.next().await {
        let notice = match received {
            Received::Notification(n) if n.channel() == HANDOFF_CHANNEL => {
                match handoff_notice(n.payload()) {
                    Some(notice) => notice,
                    // Not ours to read (sent by hand): the holder still learns of a real
                    // request from its next renewal.
                    None => continue,
                }
            }
            Received::Notification(n) if n.channel() == GRANT_CHANNEL => {
                match grant_notice(n.payload()) {
                    Some(notice) => notice,
                    // Not ours to read: a waiter still finds its grant at its next campaign.
                    None => continue,
                }
            }
            Received::Notification(n) => ReleaseNotice::Released(n.payload().to_string()),
            Received::Resubscribed => ReleaseNotice::Resubscribed,
        };
        // The driver is gone: nobody needs releases any more.
        if tx.send(notice).await.is_err() {
            return;
        }
    }
}
