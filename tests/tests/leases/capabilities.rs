//! The capabilities plugins are granted, exercised in-process against real databases with a real
//! lease held by a real driver: the fenced kv store on PostgreSQL and SQLite, and sql grants on the
//! lease database (fenced) and on an application database (not fenced). A lease "lost without the
//! holder knowing" is made by expiring its row behind the holder's back, as a forced release does:
//! the holder's local term still runs, so only the database-side fence stands between its writes
//! and the next holder's.

#![allow(clippy::unwrap_used, missing_docs)]

use leasehold::lease::Epoch;
use std::sync::Arc;
use std::time::Duration;

use leasehold::capability::sql::{SqlGrant, SqlValue, Statement};
use leasehold::capability::{Capabilities, CapabilityError, Fence};
use leasehold::lease::{DatabaseUrl, Term};
use leasehold::manifest::SqlGrantSpec;
use leasehold_tests::leader::Holding;
use leasehold_tests::stores::{Backend, Db};

/// Long enough that the holder never notices the forced expiry on its own during a test.
const TTL: Duration = Duration::from_secs(60);
/// The lease store's call timeout the capabilities are told of: that of a 5 s ttl.
const STORE_TIMEOUT: Duration = Duration::from_secs(1);

/// Asserts that a write was refused by the fence.
#[track_caller]
fn assert_lease_lost<T: std::fmt::Debug>(result: &Result<T, CapabilityError>) {
    assert!(
        matches!(result, Err(CapabilityError::LeaseLost { .. })),
        "{result:?}"
    );
}

fn fence(h: &Holding, lease: &str) -> Fence {
    Fence::new(lease.into(), h.holder(), Some(h.term.clone()))
}

/// Expires `lease` now, keeping its holder and epoch: the holder is not told.
async fn expire_behind_the_holders_back(url: &DatabaseUrl, lease: &str) {
    match url {
        DatabaseUrl::Postgres(raw) => {
            let pool = sqlx::PgPool::connect(raw).await.unwrap();
            sqlx::query("UPDATE leasehold_leases SET expires_at = now() WHERE name = $1")
                .bind(lease)
                .execute(&pool)
                .await
                .unwrap();
        }
        DatabaseUrl::Sqlite { path } => {
            let pool = sqlx::SqlitePool::connect(&format!("sqlite:{}", path.display()))
                .await
                .unwrap();
            sqlx::query("UPDATE leasehold_leases SET expires_at_ms = 0 WHERE name = ?1")
                .bind(lease)
                .execute(&pool)
                .await
                .unwrap();
        }
    }
}

async fn kv_round_trip_and_fencing(backend: Backend) {
    let db = Db::new(backend).await.unwrap();
    let url = DatabaseUrl::parse(&db.url().unwrap()).unwrap();
    let old = Holding::acquire(&url, "cap", TTL).await.unwrap();
    let caps = Capabilities::new(url.clone(), STORE_TIMEOUT);
    let kv = caps.kv().await.unwrap();
    let f = fence(&old, "cap");

    for (k, v) in [("a/1", "one"), ("a/2", "two"), ("b/1", "x")] {
        kv.put(&f, "p", k, v.as_bytes()).await.unwrap();
    }
    assert_eq!(kv.get("p", "a/1").await.unwrap(), Some(b"one".to_vec()));
    assert_eq!(
        kv.get("other-plugin", "a/1").await.unwrap(),
        None,
        "scoped by plugin"
    );
    let page = kv.list("p", "a/", None, 1).await.unwrap();
    assert_eq!(page.entries, vec![("a/1".to_string(), b"one".to_vec())]);
    assert_eq!(page.next.as_deref(), Some("a/1"));
    let page = kv.list("p", "a/", page.next.as_deref(), 1).await.unwrap();
    assert_eq!(page.entries, vec![("a/2".to_string(), b"two".to_vec())]);
    assert_eq!(page.next, None);
    assert!(kv.delete(&f, "p", "a/1").await.unwrap());
    assert!(!kv.delete(&f, "p", "a/1").await.unwrap());
    assert!(matches!(
        kv.put(&f, "p", "", b"x").await,
        Err(CapabilityError::Invalid(_))
    ));
    let long = "k".repeat(1025);
    assert!(matches!(
        kv.put(&f, "p", &long, b"x").await,
        Err(CapabilityError::Invalid(_))
    ));
    let big = vec![0u8; (1 << 20) + 1];
    assert!(matches!(
        kv.put(&f, "p", "big", &big).await,
        Err(CapabilityError::TooLarge(_))
    ));
    kv.put(&f, "p", "big", &big[1..]).await.unwrap();

    // The lease is lost in the database; the holder's own term still runs.
    expire_behind_the_holders_back(&url, "cap").await;
    assert!(!f.expired_locally());
    let refused = kv.put(&f, "p", "a/2", b"stale").await;
    assert_lease_lost(&refused);
    let refused = kv.delete(&f, "p", "b/1").await;
    assert_lease_lost(&refused);

    // A new holder takes over (epoch.next()) and writes; the old one still cannot.
    let new = Holding::acquire(&url, "cap", TTL).await.unwrap();
    assert_eq!(new.term.epoch, old.term.epoch.next());
    kv.put(&fence(&new, "cap"), "p", "a/2", b"new")
        .await
        .unwrap();
    let refused = kv.put(&f, "p", "a/2", b"stale").await;
    assert_lease_lost(&refused);
    assert_eq!(kv.get("p", "a/2").await.unwrap(), Some(b"new".to_vec()));
    assert_eq!(kv.get("p", "b/1").await.unwrap(), Some(b"x".to_vec()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kv_on_postgres_is_scoped_paginated_and_fenced() {
    kv_round_trip_and_fencing(Backend::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kv_on_sqlite_is_scoped_paginated_and_fenced() {
    kv_round_trip_and_fencing(Backend::Sqlite).await;
}

fn spec(env: &str) -> SqlGrantSpec {
    SqlGrantSpec {
        database_url_env: env.into(),
        // It caps every statement of the test, the set-up ones and the fence check too: room for
        // a loaded machine, and still well under the pg_sleep(3) that must be cut short.
        statement_timeout: Duration::from_secs(2),
        max_rows: 10,
        max_bytes: 1 << 20,
        max_connections: 2,
    }
}

fn grant(env: &str, url: &str, spec: &SqlGrantSpec) -> Arc<SqlGrant> {
    let url = url.to_string();
    let name = env.to_string();
    Arc::new(SqlGrant::resolve("probe", spec, move |k| (k == name).then(|| url.clone())).unwrap())
}

/// A fresh PostgreSQL lease database with lease `cap` held (ttl [`TTL`]), and the capabilities
/// backed by it.
struct LeaseDb {
    /// Keeps the database alive.
    _db: Db,
    /// Its URL as the superuser.
    raw: String,
    /// The same, parsed.
    url: DatabaseUrl,
    /// The holding of lease `cap`.
    holding: Holding,
    /// The capabilities backed by it.
    caps: Arc<Capabilities>,
}

async fn lease_db() -> LeaseDb {
    let db = Db::new(Backend::Postgres).await.unwrap();
    let raw = db.url().unwrap();
    let url = DatabaseUrl::parse(&raw).unwrap();
    let holding = Holding::acquire(&url, "cap", TTL).await.unwrap();
    let caps = Capabilities::new(url.clone(), STORE_TIMEOUT);
    LeaseDb {
        _db: db,
        raw,
        url,
        holding,
        caps,
    }
}

/// A role for a plugin's grant on the lease database at `raw`, as the README's security model
/// asks (nothing on the leasehold_* tables), that may also create schemas there; its URL.
async fn plugin_role(raw: &str) -> String {
    let role_url = leasehold_tests::pg::server()
        .plugin_role(raw, "cap")
        .await
        .unwrap();
    let role = leasehold_tests::pg::user_of(&role_url);
    let admin = sqlx::PgPool::connect(raw).await.unwrap();
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "DO $$ BEGIN EXECUTE format('GRANT CREATE ON DATABASE %I TO {role}', current_database()); END $$"
    )))
    .execute(&admin)
    .await
    .unwrap();
    admin.close().await;
    role_url
}

fn text(s: &str) -> SqlValue {
    SqlValue::Text(s.into())
}

fn stmt(sql: &str, params: Vec<SqlValue>) -> Statement {
    Statement {
        sql: sql.into(),
        params,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sql_on_the_lease_database_is_fenced_and_capped() {
    let LeaseDb {
        _db,
        raw,
        url,
        holding,
        caps,
    } = lease_db().await;
    // Another spelling of the same server: the grant still recognises the lease database.
    let other_spelling = plugin_role(&raw).await.replace("127.0.0.1", "localhost");
    assert!(other_spelling.contains("localhost"), "{other_spelling}");
    let sql = grant(
        "APP_DATABASE_URL",
        &other_spelling,
        &spec("APP_DATABASE_URL"),
    );
    assert!(sql.is_fenced(&caps).await.unwrap());
    let f = fence(&holding, "cap");

    sql.execute(
        &caps,
        &f,
        "CREATE TABLE items (id bigint PRIMARY KEY, n int, note text)",
        &[],
    )
    .await
    .unwrap();
    // A NULL parameter takes the type its place needs (here an int column).
    let n = sql
        .execute(
            &caps,
            &f,
            "INSERT INTO items VALUES ($1, $2, $3)",
            &[SqlValue::Int(1), SqlValue::Null, text("a")],
        )
        .await
        .unwrap();
    assert_eq!(n, 1);
    let counts = sql
        .transaction(
            &caps,
            &f,
            &[
                stmt("INSERT INTO items VALUES (2, 2, 'b')", vec![]),
                stmt(
                    "UPDATE items SET n = $1 WHERE id <= 2",
                    vec![SqlValue::Int(7)],
                ),
            ],
        )
        .await
        .unwrap();
    assert_eq!(counts, vec![1, 2]);

    // All or nothing.
    let failed = sql
        .transaction(
            &caps,
            &f,
            &[
                stmt("INSERT INTO items VALUES (3, 3, 'c')", vec![]),
                stmt("INSERT INTO items VALUES (1, 1, 'dup')", vec![]),
            ],
        )
        .await;
    assert!(
        matches!(&failed, Err(CapabilityError::Database(m)) if m.contains("statement 2") && m.contains("23505")),
        "{failed:?}"
    );
    let rows = sql
        .query(&caps, "SELECT count(*) AS n FROM items", &[])
        .await
        .unwrap();
    assert_eq!(rows.columns, vec!["n"]);
    assert_eq!(rows.rows, vec![vec![SqlValue::Int(2)]]);

    // Values of every kind the interface carries; column names even when no row comes back.
    let rows = sql
        .query(&caps, "SELECT $1::bigint + 1 AS n, $2::text AS t, NULL::int AS z, $3::bytea AS b, true AS flag,
                    1.5::float8 AS f, '2026-11-22 10:11:12.5+00'::timestamptz AS ts, '2024-02-29'::date AS d,
                    '00010203-0405-0607-0809-0a0b0c0d0e0f'::uuid AS u, '{\"a\": 1}'::jsonb AS j",
            &[SqlValue::Int(41), text("hi"), SqlValue::Bytes(vec![1, 2, 3])],
        )
        .await
        .unwrap();
    assert_eq!(
        rows.rows[0],
        vec![
            SqlValue::Int(42),
            text("hi"),
            SqlValue::Null,
            SqlValue::Bytes(vec![1, 2, 3]),
            SqlValue::Bool(true),
            SqlValue::Float(1.5),
            text("2026-11-22T10:11:12.500000Z"),
            text("2024-02-29"),
            text("00010203-0405-0607-0809-0a0b0c0d0e0f"),
            text("{\"a\": 1}"),
        ]
    );
    let empty = sql
        .query(&caps, "SELECT id, note FROM items WHERE false", &[])
        .await
        .unwrap();
    assert_eq!((empty.columns.len(), empty.rows.len()), (2, 0));
    let numeric = sql.query(&caps, "SELECT 1.5::numeric AS x", &[]).await;
    assert!(
        matches!(&numeric, Err(CapabilityError::Invalid(m)) if m.contains("::text")),
        "{numeric:?}"
    );

    // query is read-only; transaction and session control are refused.
    let write = sql.query(&caps, "DELETE FROM items", &[]).await;
    assert!(
        matches!(&write, Err(CapabilityError::Database(m)) if m.contains("read-only")),
        "{write:?}"
    );
    for refused in [
        "COMMIT",
        "/* x */ rollback",
        "SET statement_timeout = 0",
        "BEGIN",
    ] {
        let r = sql.execute(&caps, &f, refused, &[]).await;
        assert!(
            matches!(r, Err(CapabilityError::Invalid(_))),
            "{refused}: {r:?}"
        );
    }
    let sneaky = sql
        .transaction(
            &caps,
            &f,
            &[
                stmt("INSERT INTO items VALUES (9, 9, 'x')", vec![]),
                stmt("COMMIT", vec![]),
            ],
        )
        .await;
    assert!(
        matches!(sneaky, Err(CapabilityError::Invalid(_))),
        "{sneaky:?}"
    );

    // Caps: rows per result and the statement timeout.
    let many = sql
        .query(&caps, "SELECT g FROM generate_series(1, 20) g", &[])
        .await;
    assert!(
        matches!(&many, Err(CapabilityError::TooLarge(m)) if m.contains("max_rows")),
        "{many:?}"
    );
    let slow = sql.query(&caps, "SELECT pg_sleep(3)", &[]).await;
    assert!(
        matches!(&slow, Err(CapabilityError::Unavailable(m)) if m.contains("57014")),
        "{slow:?}"
    );

    // The lease is lost behind the holder's back: fenced writes are refused and leave nothing.
    expire_behind_the_holders_back(&url, "cap").await;
    let stale = sql
        .transaction(
            &caps,
            &f,
            &[stmt("INSERT INTO items VALUES (5, 5, 'stale')", vec![])],
        )
        .await;
    assert_lease_lost(&stale);
    let stale = sql.execute(&caps, &f, "DELETE FROM items", &[]).await;
    assert_lease_lost(&stale);
    let rows = sql
        .query(&caps, "SELECT count(*) FROM items", &[])
        .await
        .unwrap();
    assert_eq!(rows.rows, vec![vec![SqlValue::Int(2)]]);
}

/// A grant whose role may not read the lease store's schema cannot tell whether it reaches the
/// lease database: its writes are refused, saying what to grant, and nothing of them runs; its
/// reads still run. Once the role may read it, the same grant is fenced (the refusal was not
/// remembered).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    given_server,
    ignore = "DATABASE_URL is set, and this test creates cluster-wide roles: it needs the server the harness starts itself"
)]
async fn a_grant_that_cannot_identify_its_database_reads_but_never_writes() {
    leasehold_tests::pg::needs_own_server("creates cluster-wide roles");
    let LeaseDb {
        _db,
        raw,
        url,
        holding,
        caps,
    } = lease_db().await;
    let admin = sqlx::PgPool::connect(&raw).await.unwrap();
    let role = format!("cap_blind_{}", std::process::id());
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "CREATE ROLE {role} LOGIN;
         CREATE SCHEMA blind AUTHORIZATION {role};
         ALTER ROLE {role} SET search_path = blind;
         REVOKE ALL ON SCHEMA public FROM PUBLIC;"
    )))
    .execute(&admin)
    .await
    .unwrap();
    let role_url = raw.replacen("postgres://postgres@", &format!("postgres://{role}@"), 1);
    assert_ne!(role_url, raw);
    let sql = grant("APP_DATABASE_URL", &role_url, &spec("APP_DATABASE_URL"));
    let f = fence(&holding, "cap");

    let refused = [
        sql.execute(&caps, &f, "CREATE TABLE t (id int)", &[]).await,
        sql.transaction(&caps, &f, &[stmt("CREATE TABLE t (id int)", vec![])])
            .await
            .map(|counts| counts.len() as u64),
    ];
    for r in &refused {
        assert!(
            matches!(r, Err(CapabilityError::Database(m))
                if m.contains("APP_DATABASE_URL") && m.contains(&format!("GRANT USAGE ON SCHEMA \"public\" TO {role}"))),
            "{r:?}"
        );
    }
    assert!(sql.is_fenced(&caps).await.is_err());
    let rows = sql.query(&caps, "SELECT 41 + 1 AS n", &[]).await.unwrap();
    assert_eq!(rows.rows, vec![vec![SqlValue::Int(42)]]);
    let created: bool = sqlx::query_scalar("SELECT to_regclass('blind.t') IS NOT NULL")
        .fetch_one(&admin)
        .await
        .unwrap();
    assert!(!created, "a refused write ran");

    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "GRANT USAGE ON SCHEMA public TO {role};"
    )))
    .execute(&admin)
    .await
    .unwrap();
    assert!(sql.is_fenced(&caps).await.unwrap());
    sql.execute(&caps, &f, "CREATE TABLE t (id int)", &[])
        .await
        .unwrap();
    expire_behind_the_holders_back(&url, "cap").await;
    let stale = sql
        .execute(&caps, &f, "INSERT INTO t VALUES (1)", &[])
        .await;
    assert_lease_lost(&stale);
}

/// A fenced transaction's own statements run before its check, so none of them may change what
/// the check reads: not a temporary `leasehold_leases` (searched before any schema), not a
/// `SET LOCAL search_path` putting the plugin's own `=` before pg_catalog's. After a takeover,
/// both transactions are refused and leave nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_transaction_cannot_shadow_what_its_check_reads() {
    let LeaseDb {
        _db,
        raw,
        url,
        holding: old,
        caps,
    } = lease_db().await;
    let sql = grant(
        "APP_DATABASE_URL",
        &plugin_role(&raw).await,
        &spec("APP_DATABASE_URL"),
    );
    let f = fence(&old, "cap");
    for setup in [
        "CREATE TABLE items (id bigint)",
        "CREATE SCHEMA evil",
        "CREATE FUNCTION evil.yes(text, text) RETURNS boolean LANGUAGE sql AS 'SELECT true'",
        "CREATE FUNCTION evil.yes(bigint, bigint) RETURNS boolean LANGUAGE sql AS 'SELECT true'",
        "CREATE OPERATOR evil.= (LEFTARG = text, RIGHTARG = text, FUNCTION = evil.yes)",
        "CREATE OPERATOR evil.= (LEFTARG = bigint, RIGHTARG = bigint, FUNCTION = evil.yes)",
    ] {
        sql.execute(&caps, &f, setup, &[]).await.unwrap();
    }
    expire_behind_the_holders_back(&url, "cap").await;
    let new = Holding::acquire(&url, "cap", TTL).await.unwrap();
    assert_eq!(new.term.epoch, old.term.epoch.next());

    let temp_table = sql
        .transaction(
            &caps,
            &f,
            &[
                stmt(
                    "CREATE TEMP TABLE leasehold_leases (name text, holder text, epoch bigint, expires_at timestamptz)",
                    vec![],
                ),
                stmt(
                    "INSERT INTO leasehold_leases VALUES ($1, $2, $3, 'infinity')",
                    vec![text("cap"), text(&old.holder()), SqlValue::Int(old.term.epoch.get())],
                ),
                stmt("INSERT INTO items VALUES (1)", vec![]),
            ],
        )
        .await;
    assert_lease_lost(&temp_table);
    let operators = sql
        .transaction(
            &caps,
            &f,
            &[
                stmt("SET LOCAL search_path = evil, pg_catalog, public", vec![]),
                stmt("INSERT INTO public.items VALUES (2)", vec![]),
            ],
        )
        .await;
    assert_lease_lost(&operators);
    let rows = sql
        .query(&caps, "SELECT count(*) FROM items", &[])
        .await
        .unwrap();
    assert_eq!(rows.rows, vec![vec![SqlValue::Int(0)]]);
}

/// A fresh PostgreSQL lease database (kept alive by the returned `Db`, migrated as a host's store
/// would have it), its URL, a fresh application database on the same server, and the
/// capabilities backed by the lease database.
async fn lease_and_app_databases() -> (Db, DatabaseUrl, String, Arc<Capabilities>) {
    let lease_db = Db::new(Backend::Postgres).await.unwrap();
    lease_db.open().await.unwrap();
    let url = DatabaseUrl::parse(&lease_db.url().unwrap()).unwrap();
    let app = leasehold_tests::pg::server()
        .fresh_database()
        .await
        .unwrap();
    let caps = Capabilities::new(url.clone(), STORE_TIMEOUT);
    (lease_db, url, app, caps)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sql_on_an_application_database_is_not_fenced() {
    let (_lease_db, url, app, caps) = lease_and_app_databases().await;
    let holding = Holding::acquire(&url, "cap", TTL).await.unwrap();
    let sql = grant("APP_DATABASE_URL", &app, &spec("APP_DATABASE_URL"));
    assert!(!sql.is_fenced(&caps).await.unwrap());
    let f = fence(&holding, "cap");
    sql.execute(&caps, &f, "CREATE TABLE t (epoch bigint)", &[])
        .await
        .unwrap();
    // Not the lease database: no fence in the database, so the plugin passes its epoch along.
    expire_behind_the_holders_back(&url, "cap").await;
    let n = sql
        .execute(
            &caps,
            &f,
            "INSERT INTO t VALUES ($1)",
            &[SqlValue::Int(f.epoch().get())],
        )
        .await
        .unwrap();
    assert_eq!(n, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_call_s_statement_is_stopped_on_the_server_before_the_term_counts_as_stopped() {
    let (_lease_db, _, app, caps) = lease_and_app_databases().await;
    let mut long = spec("APP_DATABASE_URL");
    long.statement_timeout = Duration::from_secs(30);
    let sql = grant("APP_DATABASE_URL", &app, &long);
    let far = tokio::time::Instant::now() + TTL;
    let (term, control) = Term::standalone("cap", Epoch::new(1), far);
    let f = Fence::new("cap".into(), "me".into(), Some(term.clone()));
    sql.execute(&caps, &f, "CREATE TABLE slow (epoch bigint)", &[])
        .await
        .unwrap();
    // An unfenced write that first sleeps 3 s on the server; the guest call that issued it is
    // dropped after 300 ms, as when its term ends.
    let work = {
        let (sql, caps, f) = (sql.clone(), caps.clone(), f.clone());
        async move {
            sql.execute(&caps, &f, "INSERT INTO slow SELECT 1 FROM pg_sleep(3)", &[])
                .await
        }
    };
    let call = sql.in_term(Some(&term), work);
    assert!(
        tokio::time::timeout(Duration::from_millis(300), call)
            .await
            .is_err(),
        "the statement finished before it was dropped"
    );
    let ended = std::time::Instant::now();
    control.end();
    control.stopped().await;
    let stopped_after = ended.elapsed();
    // The term counts as stopped once the server no longer runs the statement: well before the
    // sleep would have ended and the insert committed.
    assert!(
        stopped_after < Duration::from_millis(2500),
        "stopping took {stopped_after:?}: the statement was not cancelled"
    );
    let pool = sqlx::PgPool::connect(&app).await.unwrap();
    let running: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'INSERT INTO slow%' AND state = 'active'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(running, 0, "the statement still runs on the server");
    // Past the moment the sleep would have ended: nothing of the write was kept.
    tokio::time::sleep(
        Duration::from_secs(3).saturating_sub(ended.elapsed()) + Duration::from_millis(500),
    )
    .await;
    let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM slow")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(rows, 0, "the dropped write committed");
    println!("dropped statement stopped on the server {stopped_after:?} after the term ended");
}

/// Past the term's deadline by the monotonic clock, every write is refused with `lease-lost`
/// before any database is reached: here the databases cannot be reached at all (a closed port),
/// so an answer other than `lease-lost` would mean a round trip was tried first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_deadline_writes_are_refused_without_touching_a_database() {
    let nowhere = "postgres://nobody@127.0.0.1:1/nothing";
    let caps = Capabilities::new(DatabaseUrl::parse(nowhere).unwrap(), STORE_TIMEOUT);
    let sql = grant("APP_DATABASE_URL", nowhere, &spec("APP_DATABASE_URL"));
    let (term, _control) = Term::standalone("cap", Epoch::new(1), tokio::time::Instant::now());
    let f = Fence::new("cap".into(), "me".into(), Some(term));
    let kv = caps.kv().await.unwrap();
    let put = kv.put(&f, "p", "k", b"v").await;
    assert_lease_lost(&put);
    let deleted = kv.delete(&f, "p", "k").await;
    assert_lease_lost(&deleted);
    let executed = sql
        .execute(&caps, &f, "INSERT INTO t VALUES (1)", &[])
        .await;
    assert_lease_lost(&executed);
    let batch = [stmt("INSERT INTO t VALUES (1)", vec![])];
    let txn = sql.transaction(&caps, &f, &batch).await;
    assert_lease_lost(&txn);
}

#[test]
fn a_grant_names_its_variable_and_never_its_value() {
    let secret = "postgres://app:hunter2-secret@db.example:5432/app";
    let line = |e: leasehold::capability::GrantError| leasehold::report::chain(&e);
    let missing = line(SqlGrant::resolve("p", &spec("APP_DATABASE_URL"), |_| None).unwrap_err());
    assert!(missing.contains("APP_DATABASE_URL"), "{missing}");
    let sqlite = line(
        SqlGrant::resolve("p", &spec("APP_DATABASE_URL"), |_| {
            Some("sqlite:x.db".into())
        })
        .unwrap_err(),
    );
    assert!(sqlite.contains("PostgreSQL"), "{sqlite}");
    let grant = SqlGrant::resolve("p", &spec("APP_DATABASE_URL"), |_| Some(secret.into())).unwrap();
    let shown = format!("{grant:?}");
    assert!(!shown.contains("hunter2"), "{shown}");
    let bad = line(
        SqlGrant::resolve("p", &spec("APP_DATABASE_URL"), |_| {
            Some("postgres://app:hunter2-secret@db.example:notaport/app".into())
        })
        .unwrap_err(),
    );
    assert!(!bad.contains("hunter2"), "{bad}");
}

/// A session holds the lease row (a stuck admin session, a campaign that never commits): a
/// fenced transaction's check gives up after the lease store's own budget, whatever `SET LOCAL`
/// the plugin's statements ran before it, instead of waiting for the row as long as the plugin's
/// `statement_timeout` (or forever) allows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fence_waits_for_the_lease_row_no_longer_than_the_lease_store_does() {
    let LeaseDb {
        _db,
        raw,
        url: _,
        holding,
        caps,
    } = lease_db().await;
    let mut long = spec("APP_DATABASE_URL");
    long.statement_timeout = Duration::from_secs(30);
    let sql = grant("APP_DATABASE_URL", &plugin_role(&raw).await, &long);
    let f = fence(&holding, "cap");
    sql.execute(&caps, &f, "CREATE TABLE marks (n int)", &[])
        .await
        .unwrap();
    let lock =
        leasehold_tests::pg::lock_lease_row(&raw, "cap", leasehold_tests::pg::RowLock::Update)
            .await
            .unwrap();
    let started = std::time::Instant::now();
    let written = sql
        .transaction(
            &caps,
            &f,
            &[
                stmt("SET LOCAL lock_timeout = 0", vec![]),
                stmt("SET LOCAL statement_timeout = 0", vec![]),
                stmt("INSERT INTO marks VALUES (1)", vec![]),
            ],
        )
        .await;
    let waited = started.elapsed();
    assert!(written.is_err(), "{written:?}");
    // The budget is 900 ms of the 1 s store timeout; the lock is held for as long as we like.
    assert!(
        waited < Duration::from_secs(2),
        "the fence waited {waited:?} for the row"
    );
    lock.rollback().await.unwrap();
    let rows = sql
        .query(&caps, "SELECT count(*) FROM marks", &[])
        .await
        .unwrap();
    assert_eq!(rows.rows, [[SqlValue::Int(0)]], "nothing of it was kept");
    eprintln!("fence gave up after {waited:?} (budget 900 ms)");
}

/// A grant on the lease database whose role holds anything on the leasehold_* tables could end,
/// extend or take any lease from inside its transaction, or read every plugin's kv entries: it is
/// refused, reads included, naming the plugin, the grant's variable, the role and the tables,
/// and nothing it sends runs. Each way of holding a privilege is tried: the superuser, a table
/// grant, a column grant, a grant on another leasehold table, membership of the owner.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    given_server,
    ignore = "DATABASE_URL is set, and this test creates cluster-wide roles: it needs the server the harness starts itself"
)]
async fn a_grant_whose_role_holds_privileges_on_the_lease_tables_is_refused() {
    leasehold_tests::pg::needs_own_server("creates cluster-wide roles");
    let db = Db::new(Backend::Postgres).await.unwrap();
    let raw = db.url().unwrap();
    let url = DatabaseUrl::parse(&raw).unwrap();
    let holding = Holding::acquire(&url, "cap", TTL).await.unwrap();
    let admin = sqlx::PgPool::connect(&raw).await.unwrap();
    let epoch_before: i64 = sqlx::query_scalar("SELECT epoch FROM leasehold_leases")
        .fetch_one(&admin)
        .await
        .unwrap();
    let owner = format!("lease_owner_{}", std::process::id());
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "CREATE ROLE {owner} NOLOGIN; ALTER TABLE leasehold_kv OWNER TO {owner};"
    )))
    .execute(&admin)
    .await
    .unwrap();
    let cases = [
        ("the superuser", None, "leasehold_database"),
        (
            "UPDATE on leasehold_leases",
            Some("GRANT SELECT, UPDATE ON leasehold_leases TO {role}"),
            "leasehold_leases",
        ),
        (
            "UPDATE (expires_at)",
            Some("GRANT UPDATE (expires_at) ON leasehold_leases TO {role}"),
            "leasehold_leases",
        ),
        (
            "SELECT on leasehold_kv",
            Some("GRANT SELECT ON leasehold_kv TO {role}"),
            "leasehold_kv",
        ),
        (
            "member of the kv table's owner",
            Some("GRANT {owner} TO {role}"),
            "leasehold_kv",
        ),
    ];
    for (case, privilege, table) in cases {
        let (role, role_url) = match privilege {
            None => ("postgres".to_string(), raw.clone()),
            Some(grant_sql) => {
                let role_url = plugin_role(&raw).await;
                let role = leasehold_tests::pg::user_of(&role_url).to_string();
                let grant_sql = grant_sql
                    .replace("{role}", &role)
                    .replace("{owner}", &owner);
                sqlx::raw_sql(sqlx::AssertSqlSafe(grant_sql))
                    .execute(&admin)
                    .await
                    .unwrap();
                (role, role_url)
            }
        };
        // Fresh capabilities each time: a grant is decided once per pool.
        let caps = Capabilities::new(url.clone(), STORE_TIMEOUT);
        let sql = grant("APP_DATABASE_URL", &role_url, &spec("APP_DATABASE_URL"));
        let f = fence(&holding, "cap");
        let attack = "UPDATE leasehold_leases SET expires_at = 'infinity'";
        let outcomes = [
            sql.execute(&caps, &f, attack, &[]).await,
            sql.transaction(&caps, &f, &[stmt(attack, vec![])])
                .await
                .map(|c| c.len() as u64),
            sql.query(&caps, "SELECT count(*) FROM leasehold_kv", &[])
                .await
                .map(|r| r.rows.len() as u64),
        ];
        for outcome in outcomes {
            match outcome {
                Err(CapabilityError::GrantRefused(m)) => {
                    for needle in ["plugin probe", "APP_DATABASE_URL", role.as_str(), table] {
                        assert!(m.contains(needle), "{case}: {needle:?} missing: {m}");
                    }
                }
                other => panic!("{case}: not refused: {other:?}"),
            }
        }
    }
    let (epoch, forever): (i64, bool) =
        sqlx::query_as("SELECT epoch, expires_at = 'infinity' FROM leasehold_leases")
            .fetch_one(&admin)
            .await
            .unwrap();
    assert_eq!((epoch, forever), (epoch_before, false), "the attack ran");
}

/// A plugin's role may call the fence function (it must, to be fenced) but not without the host's
/// key: it cannot take the lease row's share lock and hold it, which would hold up the renewal of
/// every lease of its replica; and it cannot read the key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    given_server,
    ignore = "DATABASE_URL is set, and this test creates cluster-wide roles: it needs the server the harness starts itself"
)]
async fn a_plugin_cannot_take_the_fence_lock_itself() {
    leasehold_tests::pg::needs_own_server("creates cluster-wide roles");
    let LeaseDb {
        _db,
        raw,
        url: _,
        holding,
        caps,
    } = lease_db().await;
    let sql = grant(
        "APP_DATABASE_URL",
        &plugin_role(&raw).await,
        &spec("APP_DATABASE_URL"),
    );
    let f = fence(&holding, "cap");
    let call = stmt(
        "SELECT public.leasehold_fence($1, $2, $3, $4, 1000)",
        vec![
            text("cap"),
            text(&holding.holder()),
            SqlValue::Int(holding.term.epoch.get()),
            text("a guess"),
        ],
    );
    let refused = sql.transaction(&caps, &f, &[call]).await;
    assert!(
        matches!(&refused, Err(CapabilityError::Database(m)) if m.contains("may only be called by the leasehold host")),
        "{refused:?}"
    );
    let key = sql
        .query(&caps, "SELECT key FROM public.leasehold_fence_key", &[])
        .await;
    assert!(
        matches!(&key, Err(CapabilityError::Database(m)) if m.contains("permission denied")),
        "{key:?}"
    );
}
