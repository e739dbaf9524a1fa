//! A plugin's sql grant: its pool, its caps, and its statements, fenced when the granted database
//! is the lease database; each call a task of the plugin's term.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::TryStreamExt;
use sqlx::postgres::{PgConnectOptions, PgConnection, PgPool, PgPoolOptions, PgTypeInfo, Postgres};
use sqlx::{Connection, Executor, SqlSafeStr, Statement as _};
use tokio::sync::OnceCell;
use tokio_util::sync::CancellationToken;

use super::guard;
use super::value::{self, Rows, SqlValue, Statement};
use crate::capability::error::{CapabilityError, GrantError};
use crate::capability::fence::{self, Fence};
use crate::capability::host::Capabilities;
use crate::capability::identity;
use crate::lease::{DatabaseUrl, Term};
use crate::manifest::SqlGrantSpec;
use identity::{Identity, LeaseDatabase, Unidentified};

/// A plugin's sql grant: where it points, its caps, and its pool (opened on first use and kept
/// across terms while the plugin file is unchanged).
pub struct SqlGrant {
    /// The plugin, for messages (the sessions' application name does not carry it: see
    /// [`session_name`]).
    plugin: String,
    /// The environment variable the URL came from: how errors name the database.
    env: String,
    /// Connect options, holding the credentials; never printed.
    options: PgConnectOptions,
    /// The sessions' `application_name`, unique to this grant in this process, so that what it
    /// leaves running on the server can be found and cancelled.
    session_name: String,
    /// Caps and timeouts from the manifest.
    spec: SqlGrantSpec,
    /// The pool.
    pool: OnceCell<PgPool>,
    /// The fence check to run when the database is the lease database, `None` when it is
    /// another one: decided on first use, and only once it could be.
    fence_check: OnceCell<Option<FenceCheck>>,
    /// Whether it was logged that the database could not be identified (once per grant).
    warned_unidentified: AtomicBool,
    /// Whether it was logged that the grant's role is too privileged (once per grant).
    warned_privileged: AtomicBool,
}

/// The last statement of a fenced transaction, and the key it passes.
struct FenceCheck {
    /// `SELECT "schema".leasehold_fence(…)` ([`fence::postgres_check_in`]).
    sql: String,
    /// The host's fence key; never logged.
    key: String,
}

impl std::fmt::Debug for SqlGrant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqlGrant")
            .field("plugin", &self.plugin)
            .field("database_url_env", &self.env)
            .field("spec", &self.spec)
            .finish_non_exhaustive()
    }
}

/// What a plugin may leave on a session that would outlive its call on a pooled connection, and
/// so reach its next call (or, for an advisory lock, hold up others), undone in one round trip
/// when the connection goes back to its pool: cursors `WITH HOLD`, settings made with
/// `set_config(…, false)` or in a `DO` block (the role among them; `RESET` goes back to what the
/// connection was opened with, the host's timeouts included), session advisory locks, `LISTEN`,
/// temporary tables and sequences' cached values. The host's own prepared statements are kept.
pub(crate) const CLEAN_SESSION: &str = "CLOSE ALL; RESET ALL; SELECT pg_catalog.pg_advisory_unlock_all(); UNLISTEN *; DISCARD TEMP; DISCARD SEQUENCES";

/// How long a fenced session may sit inside a transaction without sending anything. The host's
/// own transactions never pause between statements, so only a frozen holder (SIGSTOP, a paused
/// VM) reaches it; the server then ends the session, which releases the lease row for the next
/// holder's campaign.
pub(crate) const IDLE_IN_TRANSACTION_TIMEOUT: Duration = Duration::from_secs(1);

impl SqlGrant {
    /// Resolves `spec` for `plugin`, reading the URL with `env_lookup` (the process environment in
    /// production). Errors name the variable, never its value.
    pub fn resolve(
        plugin: &str,
        spec: &SqlGrantSpec,
        env_lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, GrantError> {
        let env = &spec.database_url_env;
        let raw = env_lookup(env).ok_or_else(|| GrantError::MissingEnv { env: env.clone() })?;
        let refused = |reason| GrantError::Url {
            env: env.clone(),
            reason,
        };
        let url = DatabaseUrl::parse(&raw).map_err(refused)?;
        let DatabaseUrl::Postgres(raw) = &url else {
            return Err(GrantError::NotPostgres { env: env.clone() });
        };
        let options = crate::lease::pg_options(raw).map_err(refused)?;
        let timeout = spec.statement_timeout.as_millis().to_string();
        let idle = IDLE_IN_TRANSACTION_TIMEOUT.as_millis().to_string();
        let session_name = session_name();
        tracing::info!(
            plugin, database_url_env = %env, application_name = %session_name,
            "sql grant opened: its sessions carry this application_name on the server"
        );
        let what = format!("[grants.sql] database_url_env = {env} of plugin {plugin}");
        if let Some(warning) = url.plaintext_warning(&what, &env_lookup) {
            tracing::warn!(plugin, database_url_env = %env, "{warning}");
        }
        let options = options.application_name(&session_name).options([
            ("statement_timeout", timeout.as_str()),
            ("idle_in_transaction_session_timeout", idle.as_str()),
        ]);
        Ok(SqlGrant {
            plugin: plugin.to_string(),
            env: env.clone(),
            options,
            session_name,
            spec: spec.clone(),
            pool: OnceCell::new(),
            fence_check: OnceCell::new(),
            warned_unidentified: AtomicBool::new(false),
            warned_privileged: AtomicBool::new(false),
        })
    }

    /// Runs `work`, one call of this grant, as a task of `term`. If the caller goes away before it
    /// ends (its guest call was dropped), the task drops `work` (nothing more is sent), cancels
    /// what the grant still runs on the server and waits until nothing does; the term's tracker
    /// makes the release wait for that.
    pub async fn in_term<T, W>(
        self: &Arc<Self>,
        term: Option<&Term>,
        work: W,
    ) -> Result<T, CapabilityError>
    where
        T: Send + 'static,
        W: Future<Output = Result<T, CapabilityError>> + Send + 'static,
    {
        let abandoned = CancellationToken::new();
        let _abandon_on_drop = abandoned.clone().drop_guard();
        let grant = self.clone();
        let task = async move {
            tokio::select! {
                biased;
                result = work => return Some(result),
                _ = abandoned.cancelled() => {}
            }
            grant.cancel_on_server().await;
            None
        };
        let handle = match term {
            Some(term) => term.spawn(task),
            None => tokio::spawn(task),
        };
        match handle.await {
            Ok(Some(result)) => result,
            _ => Err(CapabilityError::Unavailable(format!(
                "the call on the database of {} was abandoned",
                self.env
            ))),
        }
    }

    /// Ends every session of this grant on the server (`pg_terminate_backend`: a statement
    /// running there is cancelled and rolled back, and one still on its way is never read),
    /// then waits, within the statement timeout, until the server lists none of them. The pool
    /// opens new sessions when the plugin next runs. Logs what it did.
    async fn cancel_on_server(&self) {
        const TERMINATE: &str = "SELECT count(*) FROM (SELECT pg_terminate_backend(pid)
             FROM pg_stat_activity
             WHERE application_name = $1 AND pid <> pg_backend_pid()) t";
        const LEFT: &str = "SELECT count(*) FROM pg_stat_activity
             WHERE application_name = $1 AND pid <> pg_backend_pid()";
        let started = tokio::time::Instant::now();
        let give_up = started + self.spec.statement_timeout + Duration::from_secs(1);
        let outcome = async {
            // A session of its own: the pool may be full of the very sessions being ended.
            let mut conn = PgConnection::connect_with(&self.options).await?;
            let ended: i64 = sqlx::query_scalar(TERMINATE)
                .bind(&self.session_name)
                .fetch_one(&mut conn)
                .await?;
            loop {
                let left: i64 = sqlx::query_scalar(LEFT)
                    .bind(&self.session_name)
                    .fetch_one(&mut conn)
                    .await?;
                if left == 0 {
                    let _ = conn.close().await;
                    return Ok::<_, sqlx::Error>(ended);
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        };
        match tokio::time::timeout_at(give_up, outcome).await {
            Ok(Ok(ended)) => tracing::info!(
                plugin = %self.plugin, database_url_env = %self.env, sessions = ended,
                took = ?started.elapsed(),
                "statement cancelled on the server: the call was dropped"
            ),
            Ok(Err(e)) => tracing::warn!(
                plugin = %self.plugin, database_url_env = %self.env,
                "cannot cancel a dropped call's statement on the server: {}",
                CapabilityError::from_driver("cancel", &e)
            ),
            Err(_) => tracing::warn!(
                plugin = %self.plugin, database_url_env = %self.env,
                "a dropped call's session is still on the server after the statement timeout"
            ),
        }
    }

    /// The grant's settings.
    pub fn spec(&self) -> &SqlGrantSpec {
        &self.spec
    }

    /// The `application_name` of this grant's sessions on the server.
    pub fn application_name(&self) -> &str {
        &self.session_name
    }

    /// The connect options (for listening on the same database).
    pub fn connect_options(&self) -> &PgConnectOptions {
        &self.options
    }

    async fn pool(&self) -> &PgPool {
        self.pool
            .get_or_init(|| async {
                PgPoolOptions::new()
                    .max_connections(self.spec.max_connections)
                    .acquire_timeout(self.spec.statement_timeout.max(Duration::from_secs(2)))
                    // Every connection goes back clean, whatever the plugin left on it; one
                    // that cannot be cleaned is closed instead.
                    .after_release(|conn, _| {
                        Box::pin(async move {
                            sqlx::raw_sql(CLEAN_SESSION).execute(&mut *conn).await?;
                            Ok(true)
                        })
                    })
                    .connect_lazy_with(self.options.clone())
            })
            .await
    }

    fn driver_error(&self, what: &str) -> impl Fn(sqlx::Error) -> CapabilityError + '_ {
        let what = format!("{what} on the database of {}", self.env);
        move |e| CapabilityError::from_driver(&what, &e)
    }

    /// Whether writes must be fenced: the granted database is the lease database. An error when
    /// that cannot be told, which refuses the write.
    pub async fn is_fenced(&self, host: &Capabilities) -> Result<bool, CapabilityError> {
        Ok(self.fence_check(host).await?.is_some())
    }

    /// The fence check of this grant's writes, or `None` when the database is not the lease
    /// database. A grant on the lease database whose role holds any privilege on its
    /// `leasehold_*` tables is refused ([`CapabilityError::GrantRefused`]), reads included.
    async fn fence_check(
        &self,
        host: &Capabilities,
    ) -> Result<Option<&FenceCheck>, CapabilityError> {
        let check = self
            .fence_check
            .get_or_try_init(|| async {
                let Some(lease_db) = host.lease_database().await? else {
                    // SQLite: no PostgreSQL database is the lease database.
                    return Ok(None);
                };
                let identity = self.identify(lease_db).await.inspect_err(|e| {
                    if !self.warned_unidentified.swap(true, Ordering::Relaxed) {
                        tracing::warn!(
                            plugin = %self.plugin, database_url_env = %self.env,
                            "sql grant: writes refused: {e}"
                        );
                    }
                })?;
                match identity {
                    Identity::LeaseDatabase => {
                        self.refuse_privileged_role(lease_db).await?;
                        tracing::info!(
                            plugin = %self.plugin, database_url_env = %self.env, fenced = true,
                            "sql grant: the lease database; writes are fenced"
                        );
                        Ok(Some(FenceCheck {
                            sql: fence::postgres_check_in(&identity::qualified(
                                &lease_db.schema,
                                fence::POSTGRES_FUNCTION,
                            )),
                            key: lease_db.fence_key.clone(),
                        }))
                    }
                    Identity::Other(why) => {
                        tracing::info!(
                            plugin = %self.plugin, database_url_env = %self.env, fenced = false,
                            "sql grant: an application database ({why}); writes are not fenced (pass the epoch along)"
                        );
                        Ok::<_, CapabilityError>(None)
                    }
                }
            })
            .await?;
        Ok(check.as_ref())
    }

    /// Refuses this grant when its role holds any privilege on the lease database's
    /// `leasehold_*` tables (see [`LeaseDatabase::privileges_of`]), naming the plugin, the grant,
    /// the role and the tables.
    async fn refuse_privileged_role(
        &self,
        lease_db: &LeaseDatabase,
    ) -> Result<(), CapabilityError> {
        let mut conn = self
            .pool()
            .await
            .acquire()
            .await
            .map_err(self.driver_error("checking the role's privileges"))?;
        let tables = lease_db
            .privileges_of(&mut conn)
            .await
            .map_err(self.driver_error("checking the role's privileges"))?;
        if tables.is_empty() {
            return Ok(());
        }
        let role = self.options.get_username();
        let schema = identity::quoted(&lease_db.schema);
        let listed = tables
            .iter()
            .map(|t| format!("{schema}.{t}"))
            .collect::<Vec<_>>()
            .join(", ");
        let refused = CapabilityError::GrantRefused(format!(
            "the sql grant of plugin {plugin} ([grants.sql] database_url_env = {env}) is refused: its role {role} holds privileges on {listed} of the lease database, with which a plugin could rewrite any lease or read other plugins' entries; give the plugin a role of its own with none (REVOKE ALL ON {listed} FROM {role}; a superuser, an owner of these tables or a member of their owner cannot be used)",
            plugin = self.plugin,
            env = self.env,
        ));
        if !self.warned_privileged.swap(true, Ordering::Relaxed) {
            tracing::error!(plugin = %self.plugin, database_url_env = %self.env, "{refused}");
        }
        Err(refused)
    }

    /// Compares the granted database with the lease database; an error that says what to do
    /// when they cannot be told apart.
    async fn identify(&self, lease_db: &LeaseDatabase) -> Result<Identity, CapabilityError> {
        let table = identity::qualified(&lease_db.schema, "leasehold_database");
        let cannot_tell = format!(
            "cannot tell whether the database of {} is the lease database, so its writes are refused rather than run unfenced",
            self.env
        );
        let role = self.options.get_username();
        let remedy = format!(
            "if it is, let its role use the schema: GRANT USAGE ON SCHEMA {schema} TO {role} (it needs nothing on the leasehold_* tables; {id}() reads the id)",
            schema = identity::quoted(&lease_db.schema),
            id = identity::qualified(&lease_db.schema, "leasehold_database_id"),
        );
        let mut conn = self
            .pool()
            .await
            .acquire()
            .await
            .map_err(|e| CapabilityError::Unavailable(format!("{cannot_tell}: {e}")))?;
        lease_db.identify(&mut conn).await.map_err(|why| match why {
            Unidentified::Driver(sqlx::Error::Database(db)) => {
                let code = db
                    .code()
                    .map(|c| format!(" (SQLSTATE {c})"))
                    .unwrap_or_default();
                CapabilityError::Database(format!(
                    "{cannot_tell}: {}{code}; {remedy}",
                    db.message()
                ))
            }
            Unidentified::Driver(other) => {
                CapabilityError::Unavailable(format!("{cannot_tell}: {other}"))
            }
            Unidentified::NoRow => {
                CapabilityError::Database(format!("{cannot_tell}: {table} has no row"))
            }
        })
    }

    /// Runs one read-only statement and returns its rows, within the grant's caps. Runs when the
    /// database cannot be told apart from the lease database (a read changes nothing), but not
    /// when the grant is refused for its role's privileges.
    pub async fn query(
        &self,
        host: &Capabilities,
        sql: &str,
        params: &[SqlValue],
    ) -> Result<Rows, CapabilityError> {
        value::check_call(std::iter::once((sql, params)))?;
        guard::check(sql).map_err(CapabilityError::Invalid)?;
        if let Err(refused @ CapabilityError::GrantRefused(_)) = self.fence_check(host).await {
            return Err(refused);
        }
        let args = value::arguments(params)?;
        let err = self.driver_error("query");
        let mut tx = self
            .pool()
            .await
            .begin_with("BEGIN READ ONLY")
            .await
            .map_err(&err)?;
        let statement = (&mut *tx)
            .prepare_with(
                sqlx::AssertSqlSafe(sql.to_string()).into_sql_str(),
                &param_types(params),
            )
            .await
            .map_err(&err)?;
        let columns: Vec<String> = statement
            .columns()
            .iter()
            .map(|c| sqlx::Column::name(c).to_string())
            .collect();
        let mut rows = Vec::new();
        let mut bytes = 0usize;
        {
            let mut stream = statement.query_with(args).fetch(&mut *tx);
            while let Some(row) = stream.try_next().await.map_err(&err)? {
                if rows.len() >= self.spec.max_rows as usize {
                    return Err(CapabilityError::TooLarge(format!(
                        "the result has more than {} rows (max_rows of [grants.sql]); page with LIMIT",
                        self.spec.max_rows
                    )));
                }
                let values = value::decode_row(&row)?;
                bytes += value::row_size(&values);
                if bytes > self.spec.max_bytes {
                    return Err(CapabilityError::TooLarge(format!(
                        "the result is larger than {} bytes (max_bytes of [grants.sql])",
                        self.spec.max_bytes
                    )));
                }
                rows.push(values);
            }
        }
        tx.rollback().await.map_err(&err)?;
        Ok(Rows { columns, rows })
    }

    /// Runs one statement, fenced when the database is the lease database; returns the rows it
    /// affected.
    pub async fn execute(
        &self,
        host: &Capabilities,
        fence: &Fence,
        sql: &str,
        params: &[SqlValue],
    ) -> Result<u64, CapabilityError> {
        value::check_call(std::iter::once((sql, params)))?;
        // The clock first, before any round trip (docs/ARCHITECTURE.md §3.4).
        fence.check_local()?;
        let statement = Statement {
            sql: sql.to_string(),
            params: params.to_vec(),
        };
        if self.is_fenced(host).await? {
            let counts = self
                .transaction(host, fence, std::slice::from_ref(&statement))
                .await?;
            return Ok(counts.first().copied().unwrap_or_default());
        }
        guard::check(sql).map_err(CapabilityError::Invalid)?;
        let args = value::arguments(params)?;
        let done = sqlx::query_with(sqlx::AssertSqlSafe(sql.to_string()), args)
            .execute(self.pool().await)
            .await
            .map_err(self.driver_error("execute"))?;
        Ok(done.rows_affected())
    }

    /// Runs `statements` in one transaction, all or nothing; fenced when the database is the lease
    /// database. Returns each statement's count of affected rows.
    pub async fn transaction(
        &self,
        host: &Capabilities,
        fence: &Fence,
        statements: &[Statement],
    ) -> Result<Vec<u64>, CapabilityError> {
        value::check_call(statements.iter().map(|s| (s.sql.as_str(), &s.params[..])))?;
        for (i, s) in statements.iter().enumerate() {
            guard::check(&s.sql)
                .map_err(|why| CapabilityError::Invalid(format!("statement {}: {why}", i + 1)))?;
        }
        // The clock first, before any round trip (docs/ARCHITECTURE.md §3.4).
        fence.check_local()?;
        let check = self.fence_check(host).await?;
        let fenced = check.is_some();
        let err = self.driver_error("transaction");
        // Past the local deadline, a failure before the commit is a lost lease (see Fence).
        let before_commit = |e: sqlx::Error| {
            if fenced {
                fence.failed_before_commit(
                    &format!("transaction on the database of {}", self.env),
                    &e,
                )
            } else {
                err(e)
            }
        };
        let mut tx = self.pool().await.begin().await.map_err(before_commit)?;
        let mut counts = Vec::with_capacity(statements.len());
        for (i, s) in statements.iter().enumerate() {
            let args = value::arguments(&s.params)?;
            let done = sqlx::query_with(sqlx::AssertSqlSafe(s.sql.clone()), args)
                .execute(&mut *tx)
                .await
                .map_err(|e| match before_commit(e) {
                    CapabilityError::Database(m) => {
                        CapabilityError::Database(format!("statement {}: {m}", i + 1))
                    }
                    other => other,
                })?;
            counts.push(done.rows_affected());
        }
        // The fence last, just before the commit: the lease row stays locked for the commit
        // only, not for the length of the plugin's statements, which would hold up renewals.
        if let Some(check) = check {
            // The function sets its own lock_timeout, after the plugin's statements: whatever
            // SET LOCAL they ran, the check waits for the lease row no longer than the lease
            // store's own statements do, and a row held by a stuck session fails the write
            // instead of holding the plugin's call.
            let wait = i32::try_from(host.fence_wait().as_millis()).unwrap_or(i32::MAX);
            let held: Option<bool> = sqlx::query_scalar(sqlx::AssertSqlSafe(check.sql.clone()))
                .bind(&fence.lease)
                .bind(&fence.holder)
                .bind(fence.epoch().get())
                .bind(&check.key)
                .bind(wait)
                .fetch_one(&mut *tx)
                .await
                .map_err(before_commit)?;
            if held != Some(true) {
                // Now rather than when the connection goes back to the pool: the statements'
                // own locks go with it, and nothing of them is kept.
                let _ = tx.rollback().await;
                return Err(fence.lost());
            }
        }
        tx.commit().await.map_err(|e| {
            // Once the commit is sent its outcome may be unknown: never claim nothing was kept.
            CapabilityError::Unavailable(format!(
                "commit on the database of {}: {e} (the outcome is unknown)",
                self.env
            ))
        })?;
        Ok(counts)
    }
}

/// A fresh `application_name` for one grant's sessions: `leasehold:` and 16 random hex digits,
/// 26 ASCII bytes whatever the plugin's name. PostgreSQL keeps 63 bytes of it and turns anything
/// but printable ASCII into `?`, so a name built from the plugin's would not be found by
/// [`SqlGrant::cancel_on_server`] for a long or non-ASCII plugin; the grant logs which plugin a
/// name stands for when it opens.
fn session_name() -> String {
    format!("leasehold:{:016x}", rand::random::<u64>())
}

/// The parameter types sent with a prepared statement, matching what [`value::arguments`] binds.
fn param_types(params: &[SqlValue]) -> Vec<PgTypeInfo> {
    use sqlx::Type;
    params
        .iter()
        .map(|p| match p {
            SqlValue::Null => PgTypeInfo::with_oid(sqlx::postgres::types::Oid(0)),
            SqlValue::Bool(_) => <bool as Type<Postgres>>::type_info(),
            SqlValue::Int(_) => <i64 as Type<Postgres>>::type_info(),
            SqlValue::Float(_) => <f64 as Type<Postgres>>::type_info(),
            SqlValue::Text(_) => <String as Type<Postgres>>::type_info(),
            SqlValue::Bytes(_) => <Vec<u8> as Type<Postgres>>::type_info(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> SqlGrantSpec {
        SqlGrantSpec {
            database_url_env: "APP_DATABASE_URL".into(),
            statement_timeout: crate::manifest::DEFAULT_STATEMENT_TIMEOUT,
            max_rows: 10,
            max_bytes: 1 << 20,
            max_connections: 1,
        }
    }

    #[test]
    fn a_long_or_non_ascii_plugin_name_yields_an_application_name_postgres_keeps_whole() {
        let url = |_: &str| Some("postgres://app:secret@127.0.0.1:5432/app".to_string());
        let mut seen = std::collections::BTreeSet::new();
        for plugin in [
            "p".to_string(),
            "a".repeat(64),
            "x".repeat(300),
            "planificación-de-órdenes-日本語-🦀".to_string(),
        ] {
            for _ in 0..2 {
                let grant = SqlGrant::resolve(&plugin, &spec(), url).unwrap();
                let name = grant.application_name();
                assert!(name.len() <= 63, "{plugin}: {name} is {} bytes", name.len());
                assert!(
                    name.bytes().all(|b| b.is_ascii_graphic()),
                    "{plugin}: {name} is not printable ASCII"
                );
                assert_eq!(
                    grant.connect_options().get_application_name(),
                    Some(name),
                    "{plugin}: the sessions carry another name"
                );
                assert!(seen.insert(name.to_string()), "{name} given to two grants");
            }
        }
    }
}
