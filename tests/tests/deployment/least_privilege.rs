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
#[cfg_attr(
    given_server,
    ignore = "DATABASE_URL is set, and this test creates cluster-wide roles: it needs the server the harness starts itself"
)]
async fn hosts_run_as_a_dml_only_role_after_the_owner_migrates() {
    leasehold_tests::pg::needs_own_server("creates cluster-wide roles");
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
    // The schema is current, but the grants are missing: migrating again would change nothing,
    // and the host says which script gives them.
    let (status, stderr) = run_to_exit(&["run", "--database-url", &app], Duration::from_secs(30))
        .await
        .unwrap();
    assert!(!status.success());
    assert!(
        stderr.contains("examples/postgres/grants.sql")
            && !stderr.contains("needs the schema owner to run `leasehold migrate` first")
            && !stderr.contains(" at line "),
        "{stderr}"
    );
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

/// A host role that may read the lease table but not write it (grants.sql half applied): the
/// host starts, but it cannot campaign. It says so where an operator and an orchestrator look:
/// `/readyz` is 503 naming the cause, `/status` shows this replica's calls failing (not just an
/// unheld lease), and `leasehold_store_errors_total` counts the campaigns by cause. Granted
/// again, it is ready and leads without a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    given_server,
    ignore = "DATABASE_URL is set, and this test creates cluster-wide roles: it needs the server the harness starts itself"
)]
async fn a_role_that_cannot_write_the_lease_table_is_not_ready_and_says_why() {
    use leasehold_tests::endpoint::sample;
    use leasehold_tests::eventually::eventually;
    use leasehold_tests::log::Logged;

    leasehold_tests::pg::needs_own_server("creates cluster-wide roles");
    let url = leasehold_tests::pg::server()
        .fresh_database()
        .await
        .unwrap();
    let (status, stderr) = run_to_exit(
        &["migrate", "--database-url", &url],
        Duration::from_secs(30),
    )
    .await
    .unwrap();
    assert!(status.success(), "{stderr}");
    let admin = sqlx::PgPool::connect(&url).await.unwrap();
    let role = "leasehold_readonly_leases";
    let grants = example("grants.sql").replace(" TO leasehold;", &format!(" TO {role};"));
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "CREATE ROLE {role} LOGIN; GRANT USAGE ON SCHEMA public TO {role}; {grants}
         REVOKE INSERT, UPDATE ON leasehold_leases FROM {role};"
    )))
    .execute(&admin)
    .await
    .unwrap();
    let app = url.replacen("postgres://postgres@", &format!("postgres://{role}@"), 1);

    // A 6 s ttl: its store timeout (1.2 s) keeps a campaign slowed by the machine from failing
    // as timed out, which would show as the latest failure in place of the permission one.
    let host = HostBuilder::new("readonly")
        .database_url(&app)
        .ttl(Duration::from_secs(6))
        .spawn()
        .await
        .unwrap();
    let said = eventually(
        "/readyz says the replica cannot campaign",
        Duration::from_secs(20),
        async || {
            let (code, body) = host.get("/readyz").await?;
            anyhow::ensure!(
                code == 503 && body.contains("cannot campaign"),
                "{code} {body}"
            );
            Ok(body)
        },
    )
    .await
    .unwrap();
    assert!(
        said.contains("campaign failed") && said.contains("(permission)"),
        "{said}"
    );
    let status = host.status().await.unwrap();
    let failing = status
        .lease_calls_failing
        .as_ref()
        .unwrap_or_else(|| panic!("/status shows no failing calls: {status:?}"));
    assert_eq!(
        (failing.op.as_str(), failing.cause.as_str()),
        ("campaign", "permission")
    );
    assert!(failing.error.contains("permission denied"), "{failing:?}");
    let metrics = host.metrics().await.unwrap();
    let counted = sample(
        &metrics,
        r#"leasehold_store_errors_total{op="campaign",cause="permission"}"#,
    )
    .unwrap_or_else(|| panic!("no count of failed campaigns:\n{metrics}"));
    assert!(counted >= 1.0, "{counted}");
    let shown = tokio::process::Command::new(leasehold_tests::host::binary().unwrap())
        .args(["status", "--url", &host.addr().to_string()])
        .output()
        .await
        .unwrap();
    let shown = String::from_utf8_lossy(&shown.stdout).to_string();
    assert!(
        shown.contains("cannot campaign: campaign failed") && shown.contains("(permission)"),
        "{shown}"
    );

    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "GRANT INSERT, UPDATE ON leasehold_leases TO {role};"
    )))
    .execute(&admin)
    .await
    .unwrap();
    eventually("ready once granted", Duration::from_secs(20), async || {
        let (code, body) = host.get("/readyz").await?;
        anyhow::ensure!(code == 200, "{code} {body}");
        anyhow::ensure!(host.status().await?.lease_calls_failing.is_none());
        Ok(())
    })
    .await
    .unwrap();
    host.wait_for_log("lease acquired", Duration::from_secs(10))
        .await
        .unwrap();
}
