//! The documented least-privilege setup (`examples/postgres/`): an owner role migrates, the hosts
//! run as a role with DML on the leasehold tables only.

#![allow(clippy::unwrap_used, missing_docs)]

use std::path::Path;
use std::time::Duration;

use leasehold_tests::host::{HostBuilder, run_to_exit};

fn example(name: &str) -> String {
    std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../examples/postgres")
            .join(name),
    )
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hosts_run_as_a_dml_only_role_after_the_owner_migrates() {
    if leasehold_tests::pg::skip_on_a_given_server("creates cluster-wide roles") {
        return;
    }
    let url = leasehold_tests::pg::server()
        .fresh_database()
        .await
        .unwrap();
    let admin = sqlx::PgPool::connect(&url).await.unwrap();
    sqlx::raw_sql(sqlx::AssertSqlSafe(example("roles.sql")))
        .execute(&admin)
        .await
        .unwrap();
    let as_role =
        |role: &str| url.replacen("postgres://postgres@", &format!("postgres://{role}@"), 1);
    let (owner, app) = (as_role("leasehold_owner"), as_role("leasehold"));
    assert_ne!(owner, url);

    // Before the migration the host role cannot create the schema, and says what to do.
    let (status, stderr) = run_to_exit(&["run", "--database-url", &app], Duration::from_secs(30))
        .await
        .unwrap();
    assert!(!status.success());
    assert!(stderr.contains("leasehold migrate"), "{stderr}");

    let (status, stderr) = run_to_exit(
        &["migrate", "--database-url", &owner],
        Duration::from_secs(30),
    )
    .await
    .unwrap();
    assert!(status.success(), "{stderr}");
    sqlx::raw_sql(sqlx::AssertSqlSafe(example("grants.sql")))
        .execute(&admin)
        .await
        .unwrap();

    // The host role's kv writes pass the fence and the quota (the usage trigger runs as it).
    {
        use leasehold::capability::{Capabilities, Fence};
        let url = leasehold::lease::DatabaseUrl::parse(&app).unwrap();
        let holding =
            leasehold_tests::leader::Holding::acquire(&url, "kv", Duration::from_secs(60))
                .await
                .unwrap();
        let caps = Capabilities::new(url, Duration::from_secs(1));
        let kv = caps.kv().await.unwrap();
        let f = Fence::new("kv".into(), holding.holder(), Some(holding.term.clone()));
        kv.put(&f, "p", "k", b"v").await.unwrap();
        assert!(kv.delete(&f, "p", "k").await.unwrap());
    }

    // The host runs in-process: what is tested is its database role, not its process.
    // Held (not dropped) while the lease is force-released under it.
    let _host = HostBuilder::new("app")
        .database_url(&app)
        .ttl(Duration::from_secs(2))
        .start_in_process_leading()
        .await
        .unwrap();
    // A handoff request, and the holder's release and its next campaign, with DML alone (the
    // lone replica takes the lease back after its hold-off, at the next epoch).
    let (status, stderr) = run_to_exit(
        &["leases", "handoff", "leader", "--database-url", &app],
        Duration::from_secs(30),
    )
    .await
    .unwrap();
    assert!(status.success(), "{stderr}");
    let (status, stderr) = run_to_exit(
        &[
            "leases",
            "release",
            "leader",
            "--force",
            "--database-url",
            &app,
        ],
        Duration::from_secs(30),
    )
    .await
    .unwrap();
    assert!(status.success(), "{stderr}");
    // The host role has no DDL rights and cannot delete lease rows.
    let app_pool = sqlx::PgPool::connect(&app).await.unwrap();
    for sql in [
        "CREATE TABLE intruder (id int)",
        "DROP TABLE leasehold_kv",
        "DELETE FROM leasehold_leases",
        "DELETE FROM _sqlx_migrations",
    ] {
        let refused = sqlx::query(sql).execute(&app_pool).await;
        assert!(refused.is_err(), "{sql} was allowed");
    }
}
