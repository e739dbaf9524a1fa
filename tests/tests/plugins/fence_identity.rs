//! Whether a sql grant reaches the lease database (so its writes are fenced) is decided by what no
//! role can change: the schema the host's own lease store uses and the id stored there. Real
//! processes, a real PostgreSQL and the `fenced-writer` guest writing through a grant whose role
//! is set up the way an operator might: its own `search_path`, a table of the same name on it, no
//! right to read the leasehold schema. Each test creates cluster-wide roles, so each is ignored
//! where `DATABASE_URL` names a server.

#![allow(clippy::unwrap_used, missing_docs)]

use leasehold_tests::log::Logged;
use std::time::Duration;

use leasehold_tests::host::{HostBuilder, plugin_dir};
use leasehold_tests::in_process::InProcessHost;
use sqlx::PgPool;

/// The writer makes one fenced sql insert (into `fence_history` as the role's path resolves it,
/// unless `table` says otherwise) every 20 ms.
fn writer_manifest(table: &str) -> String {
    format!(
        "lease = \"leader\"
[schedule]
interval = \"1s\"
[limits]
call_timeout = \"2s\"
[grants.sql]
database_url_env = \"TEST_APP_DATABASE_URL\"
[config]
mode = \"sql\"
table = \"{table}\"
requeue_ms = \"20\"
"
    )
}

/// A fresh lease database (migrated) and a pool on it as the superuser.
async fn lease_database() -> (String, PgPool) {
    leasehold_tests::pg::needs_own_server("creates cluster-wide roles");
    let url = leasehold_tests::pg::server()
        .fresh_lease_database()
        .await
        .unwrap();
    let admin = PgPool::connect(&url).await.unwrap();
    (url, admin)
}

/// A login role unique to this test process, with a schema `appschema` of its own holding the
/// writer's table; its URL on the database at `url`.
async fn app_role(admin: &PgPool, url: &str, tag: &str) -> (String, String) {
    let role = format!("fence_{tag}_{}", std::process::id());
    run_sql(
        admin,
        format!(
            "CREATE ROLE {role} LOGIN;
         CREATE SCHEMA appschema AUTHORIZATION {role};
         CREATE TABLE appschema.fence_history (
             id         bigserial PRIMARY KEY,
             lease      text   NOT NULL,
             epoch      bigint NOT NULL,
             tick       bigint NOT NULL,
             holder     text   NOT NULL,
             written_at timestamptz NOT NULL DEFAULT clock_timestamp());
         ALTER TABLE appschema.fence_history OWNER TO {role};"
        ),
    )
    .await;
    let role_url = url.replacen("postgres://postgres@", &format!("postgres://{role}@"), 1);
    assert_ne!(role_url, url);
    (role, role_url)
}

/// All a fenced grant needs of the leasehold schema: to use it (the fence and the database's id
/// are functions of its owner; the role holds nothing on the leasehold_* tables).
async fn grant_fence_privileges(admin: &PgPool, role: &str) {
    run_sql(admin, format!("GRANT USAGE ON SCHEMA public TO {role};")).await;
}

async fn start_writer(
    url: &str,
    role_url: &str,
    table: &str,
) -> (InProcessHost, tempfile::TempDir) {
    let manifest = writer_manifest(table);
    let dir = plugin_dir(&[("fenced-writer", manifest.as_str())]).unwrap();
    // A long ttl: the holder's next renewal is seconds away, so it keeps writing after the lease
    // is expired behind its back.
    let host = HostBuilder::new("a")
        .database_url(url)
        .ttl(Duration::from_secs(30))
        .plugins(dir.path())
        .env("TEST_APP_DATABASE_URL", role_url)
        .start_in_process_leading()
        .await
        .unwrap();
    (host, dir)
}

async fn wait_for_log(host: &InProcessHost, needle: &str, timeout: Duration) -> String {
    host.wait_for_log(needle, timeout).await.unwrap()
}

async fn epoch_one_rows(admin: &PgPool) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM appschema.fence_history WHERE epoch = 1")
        .fetch_one(admin)
        .await
        .unwrap()
}

/// The writer runs as `role_url` and has written at epoch 1; the lease is expired behind the
/// holder's back. Every epoch-1 write from then on must be refused by the fence: returns how
/// many were accepted anyway (0 when the grant is fenced) and the holder's log.
async fn stale_writes_accepted(url: &str, admin: &PgPool, role_url: &str) -> (i64, String) {
    let (host, _dir) = start_writer(url, role_url, "fence_history").await;
    wait_for_log(&host, "sql-txn ok epoch=1", Duration::from_secs(15)).await;
    // Once this returns, no epoch-1 transaction can still pass the fence: one that passed it
    // holds the lease row until its commit, which this update waits for.
    sqlx::query("UPDATE leasehold_leases SET expires_at = now() WHERE name = 'leader'")
        .execute(admin)
        .await
        .unwrap();
    let before = epoch_one_rows(admin).await;
    // About fifty attempts at 20 ms.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let after = epoch_one_rows(admin).await;
    (after - before, host.log_text())
}

/// [`stale_writes_accepted`], asserting the grant was recognised as the lease database and no
/// stale write was accepted; returns the holder's log.
async fn assert_stale_writes_fenced(url: &str, admin: &PgPool, role_url: &str) -> String {
    let (accepted, log) = stale_writes_accepted(url, admin, role_url).await;
    println!("epoch-1 writes accepted after the lease expired: {accepted}");
    assert!(
        log.contains("the lease database; writes are fenced"),
        "the grant was not recognised as the lease database:\n{log}"
    );
    assert_eq!(accepted, 0, "stale writes were accepted:\n{log}");
    log
}

/// Runs `sql` as the superuser.
async fn run_sql(admin: &PgPool, sql: String) {
    sqlx::raw_sql(sqlx::AssertSqlSafe(sql))
        .execute(admin)
        .await
        .unwrap();
}

/// A role with `ALTER ROLE … SET search_path = appschema` does not see the leasehold tables by
/// their bare names; its grant still reaches the lease database, so its writes are fenced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    given_server,
    ignore = "DATABASE_URL is set, and this test creates cluster-wide roles: it needs the server the harness starts itself"
)]
async fn a_grant_role_with_its_own_search_path_is_still_fenced() {
    let (url, admin) = lease_database().await;
    let (role, role_url) = app_role(&admin, &url, "path").await;
    grant_fence_privileges(&admin, &role).await;
    run_sql(
        &admin,
        format!("ALTER ROLE {role} SET search_path = appschema"),
    )
    .await;
    let log = assert_stale_writes_fenced(&url, &admin, &role_url).await;
    assert!(log.contains("sql-txn err=lease-lost epoch=1"), "{log}");
}

/// A table named `leasehold_database` (with another id) in a schema on the role's path, before
/// the real one, does not make the grant take the lease database for another database.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    given_server,
    ignore = "DATABASE_URL is set, and this test creates cluster-wide roles: it needs the server the harness starts itself"
)]
async fn a_leasehold_database_table_on_the_grant_role_s_path_does_not_unfence_it() {
    let (url, admin) = lease_database().await;
    let (role, role_url) = app_role(&admin, &url, "decoy").await;
    grant_fence_privileges(&admin, &role).await;
    run_sql(
        &admin,
        format!(
            "CREATE TABLE appschema.leasehold_database (id text NOT NULL);
             INSERT INTO appschema.leasehold_database VALUES ('somewhere-else');
             ALTER TABLE appschema.leasehold_database OWNER TO {role};
             ALTER ROLE {role} SET search_path = appschema, public;"
        ),
    )
    .await;
    assert_stale_writes_fenced(&url, &admin, &role_url).await;
}

/// A role that may not read the leasehold schema cannot tell whether its database is the lease
/// database: its writes are refused (naming the grant's variable and what to grant) rather than
/// run unfenced. Once the role is granted what it needs, the same running host fences its writes:
/// the refusal was not remembered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    given_server,
    ignore = "DATABASE_URL is set, and this test creates cluster-wide roles: it needs the server the harness starts itself"
)]
async fn a_grant_that_cannot_identify_its_database_refuses_writes_until_it_can() {
    let (url, admin) = lease_database().await;
    let (role, role_url) = app_role(&admin, &url, "blind").await;
    // Only its own schema: PostgreSQL lets every role use `public` unless told otherwise.
    sqlx::query("REVOKE ALL ON SCHEMA public FROM PUBLIC")
        .execute(&admin)
        .await
        .unwrap();
    let (host, _dir) = start_writer(&url, &role_url, "appschema.fence_history").await;
    let first = wait_for_log(&host, "sql-txn ", Duration::from_secs(15)).await;
    // A dozen more attempts.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let written: i64 = sqlx::query_scalar("SELECT count(*) FROM appschema.fence_history")
        .fetch_one(&admin)
        .await
        .unwrap();
    println!("first write: {first}");
    println!("writes accepted: {written}");
    let log = host.log_text();
    assert_eq!(written, 0, "writes ran unfenced:\n{log}");
    assert!(!log.contains("sql-txn ok"), "{log}");
    let refused = first;
    for needle in ["TEST_APP_DATABASE_URL", "GRANT USAGE ON SCHEMA"] {
        assert!(refused.contains(needle), "{needle} missing: {refused}");
    }

    grant_fence_privileges(&admin, &role).await;
    wait_for_log(&host, "sql-txn ok epoch=1", Duration::from_secs(15)).await;
    assert!(
        host.log_text()
            .contains("the lease database; writes are fenced"),
        "{}",
        host.log_text()
    );
}
