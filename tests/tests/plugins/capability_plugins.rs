//! Capabilities seen from real guests in real processes: every kv and sql behaviour the probe
//! guest checks, grants enforced, credentials kept from the guest and the logs, notifications
//! delivered only to the holder, and the orphan-sweeper example doing its job across a failover.

#![allow(clippy::unwrap_used, missing_docs)]

use leasehold_tests::log::Logged;
use std::path::Path;
use std::time::{Duration, Instant};

use leasehold_tests::eventually::{Text, eventually_every, when};
use leasehold_tests::host::{Host, HostBuilder, guests_dist, wait_for_single_leader};

/// A plugin directory with `guest` copied under each name, with its manifest.
fn plugins(guest: &str, entries: &[(&str, String)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (name, manifest) in entries {
        std::fs::copy(
            guests_dist().join(format!("{guest}.wasm")),
            dir.path().join(format!("{name}.wasm")),
        )
        .unwrap();
        std::fs::write(dir.path().join(format!("{name}.toml")), manifest).unwrap();
    }
    dir
}

async fn wait_for_log(host: &Host, needle: &str, timeout: Duration) -> String {
    host.wait_for_log(needle, timeout).await.unwrap()
}

fn dir_arg(dir: &Path) -> &str {
    dir.to_str().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probes_pass_grants_hold_and_credentials_stay_with_the_host() {
    let server = leasehold_tests::pg::server();
    let url = server.fresh_database().await.unwrap();
    // A role with a password, for the grant's URL: the password must never reach the guest or
    // the log.
    let secret = format!("sekrit-{}", std::process::id());
    let pool = sqlx::PgPool::connect(&url).await.unwrap();
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "DO $$ BEGIN
           IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'probe_app') THEN
             CREATE ROLE probe_app LOGIN;
           END IF;
         END $$;
         ALTER ROLE probe_app PASSWORD '{secret}';
         GRANT USAGE, CREATE ON SCHEMA public TO probe_app;"
    )))
    .execute(&pool)
    .await
    .unwrap();
    let app_url = url.replacen(
        "postgres://postgres@",
        &format!("postgres://probe_app:{secret}@"),
        1,
    );
    assert_ne!(app_url, url);
    let sql_grant = "[grants.sql]\ndatabase_url_env = \"TEST_APP_DATABASE_URL\"\n";
    let manifest = |verb: &str, grants: &str| {
        format!(
            "[schedule]\ninterval = \"1s\"\n[limits]\ncall_timeout = \"4s\"\n{grants}\n[config]\nverb = \"{verb}\"\n"
        )
    };
    let dir = plugins(
        "capability-probe",
        &[
            ("probe-kv", manifest("kv", "[grants]\nkv = true")),
            ("probe-sql", manifest("sql", sql_grant)),
            (
                "probe-limits",
                manifest(
                    "limits",
                    &format!("{sql_grant}max_rows = 10\nstatement_timeout = \"500ms\"\n"),
                ),
            ),
            ("probe-denied", manifest("not-granted", "")),
            ("probe-secrets", manifest("secrets", sql_grant)),
        ],
    );
    let host = Host::start_with_env(
        "probe",
        &["--database-url", &url, "--plugins", dir_arg(dir.path())],
        &[
            ("TEST_APP_DATABASE_URL", app_url.as_str()),
            ("PROBE_HOST_SECRET", secret.as_str()),
        ],
    )
    .await
    .unwrap();
    let t = Duration::from_secs(30);
    for verb in ["kv", "sql", "not-granted"] {
        let line = wait_for_log(&host, &format!("probe {verb} "), t).await;
        assert!(line.contains(&format!("probe {verb} ok")), "{line}");
    }
    let limits = wait_for_log(&host, "probe limits ", t).await;
    assert!(
        limits.contains("too-large") && limits.contains("unavailable"),
        "{limits}"
    );
    let secrets = wait_for_log(&host, "probe secrets ", t).await;
    assert!(
        secrets.contains("env=[]"),
        "the guest sees host environment: {secrets}"
    );
    assert!(secrets.contains("no_such_table_xyz"), "{secrets}");
    let log = host.log_text();
    assert!(
        !log.contains(&secret),
        "the password reached the log:\n{log}"
    );
    // The kv probe's keys are its own.
    let others: i64 =
        sqlx::query_scalar("SELECT count(*) FROM leasehold_kv WHERE plugin <> 'probe-kv'")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(others, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notifications_reach_only_the_holder() {
    let url = leasehold_tests::pg::server()
        .fresh_database()
        .await
        .unwrap();
    let manifest = "[schedule]\ninterval = \"1s\"\n[events]\nchannels = [\"probe_events\"]\n[config]\nverb = \"idle\"\n".to_string();
    let dir = plugins("capability-probe", &[("probe-events", manifest)]);
    let args = [
        "--database-url",
        &url,
        "--ttl",
        "1s",
        "--plugins",
        dir_arg(dir.path()),
    ];
    let mut hosts = Host::start_each(&["a", "b"], &args, &[]).await.unwrap();
    let leader = wait_for_single_leader(&hosts, "leader", Duration::from_secs(20))
        .await
        .unwrap();
    let pool = sqlx::PgPool::connect(&url).await.unwrap();
    // The holder's listener starts with its term: notify until one arrives.
    let deliver = async |host: &Host, tag: &str| -> String {
        let mut n = 0;
        // Each probe notifies once and gives the delivery 150 ms.
        eventually_every(
            "an event delivered (the holder's log)",
            Duration::from_secs(20),
            Duration::ZERO,
            async || {
                n += 1;
                let payload = format!("{tag}-{n}");
                sqlx::query("SELECT pg_notify('probe_events', $1)")
                    .bind(&payload)
                    .execute(&pool)
                    .await
                    .unwrap();
                tokio::time::sleep(Duration::from_millis(150)).await;
                let log = host.log_text();
                if log.contains(&format!("payload={payload}")) {
                    Ok(payload)
                } else {
                    Err(Text(log))
                }
            },
        )
        .await
        .unwrap()
    };
    let first = deliver(&hosts[leader], "first").await;
    let line = wait_for_log(
        &hosts[leader],
        &format!("payload={first}"),
        Duration::from_secs(1),
    )
    .await;
    assert!(line.contains("event channel=probe_events"), "{line}");
    let first_epoch = epoch_of(&line);
    let standby = 1 - leader;
    assert!(
        !hosts[standby].log_text().contains("payload=first"),
        "a standby got an event"
    );

    // The holder dies; the other replica takes over and now receives them.
    hosts[leader].kill().await.unwrap();
    let survivor = hosts.remove(standby);
    wait_for_single_leader(&[&survivor], "leader", Duration::from_secs(20))
        .await
        .unwrap();
    let second = deliver(&survivor, "second").await;
    let line = wait_for_log(
        &survivor,
        &format!("payload={second}"),
        Duration::from_secs(1),
    )
    .await;
    // A later term than the first holder's (epoch 2, unless the short ttl let it change hands
    // more than once under load).
    assert!(epoch_of(&line) > first_epoch, "{line}");
}

/// The epoch of a guest's log line: its span's `epoch=E` (`plugin{plugin=P lease=L epoch=E}:`).
fn epoch_of(line: &str) -> i64 {
    line.split_whitespace()
        .find_map(|word| {
            word.strip_prefix("epoch=")?
                .trim_end_matches(['}', ':'])
                .parse()
                .ok()
        })
        .unwrap_or_else(|| panic!("no epoch in {line:?}"))
}

/// The orphan-sweeper example, driven by notifications (its interval is longer than the test),
/// across a kill -9 of its holder.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_orphan_sweeper_sweeps_across_a_failover() {
    let url = leasehold_tests::pg::server()
        .fresh_database()
        .await
        .unwrap();
    let pool = sqlx::PgPool::connect(&url).await.unwrap();
    let schema = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../guests/examples/orphan-sweeper/schema.sql"),
    )
    .unwrap();
    sqlx::raw_sql(sqlx::AssertSqlSafe(schema))
        .execute(&pool)
        .await
        .unwrap();
    sqlx::query(
        "INSERT INTO sandboxes (id, backend, last_heartbeat) VALUES
           ('gone-1', 'b1', now() - interval '1 hour'),
           ('gone-2', 'b1', now() - interval '1 hour'),
           ('alive', 'b2', now())",
    )
    .execute(&pool)
    .await
    .unwrap();
    let manifest = "lease = \"sweeper\"
[schedule]
interval = \"1h\"
[grants]
kv = true
[grants.sql]
database_url_env = \"APP_DATABASE_URL\"
[events]
channels = [\"sandbox_events\"]
[config]
orphan_after = \"2s\"
delete_after = \"2s\"
"
    .to_string();
    let dir = plugins("orphan-sweeper", &[("orphan-sweeper", manifest)]);
    let args = [
        "--database-url",
        &url,
        "--lease",
        "sweeper",
        "--ttl",
        "1s",
        "--plugins",
        dir_arg(dir.path()),
    ];
    // The sweeper's own role: its table, and nothing of the lease tables beside it.
    let sweeper = leasehold_tests::pg::server()
        .plugin_role(&url, "sweeper")
        .await
        .unwrap();
    let role = leasehold_tests::pg::user_of(&sweeper);
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "GRANT SELECT, UPDATE, DELETE ON sandboxes TO {role}"
    )))
    .execute(&pool)
    .await
    .unwrap();
    let env = [("APP_DATABASE_URL", sweeper.as_str())];
    let mut hosts = Host::start_each(&["a", "b"], &args, &env).await.unwrap();
    let leader = wait_for_single_leader(&hosts, "sweeper", Duration::from_secs(20))
        .await
        .unwrap();
    // The app: "alive" heartbeats, and every change is announced.
    let beat = async || {
        sqlx::query("UPDATE sandboxes SET last_heartbeat = now() WHERE backend = 'b2'")
            .execute(&pool)
            .await
            .unwrap();
        sqlx::query("NOTIFY sandbox_events")
            .execute(&pool)
            .await
            .unwrap();
    };
    let state = async |id: &str| -> Option<(String, Option<i64>)> {
        sqlx::query_as("SELECT state, swept_epoch FROM sandboxes WHERE id = $1")
            .bind(id)
            .fetch_optional(&pool)
            .await
            .unwrap()
    };
    eventually_every(
        "gone-1 to be orphaned",
        Duration::from_secs(20),
        Duration::from_millis(200),
        async || {
            beat().await;
            when(state("gone-1").await.unwrap(), |s| s.0 == "orphaned")
        },
    )
    .await
    .unwrap();
    // One sweep marks both, under one epoch.
    assert_eq!(state("gone-2").await, state("gone-1").await);

    // The holder dies before the second grace ends; the other replica finishes the job.
    hosts[leader].kill().await.unwrap();
    let survivor = hosts.remove(1 - leader);
    eventually_every(
        "the survivor to delete gone-1 and gone-2",
        Duration::from_secs(30),
        Duration::from_millis(200),
        async || {
            beat().await;
            let left = (state("gone-1").await, state("gone-2").await);
            when(left, |l| l.0.is_none() && l.1.is_none())
        },
    )
    .await
    .unwrap();
    assert_eq!(state("alive").await.unwrap().0, "active");
    // The guest logs its sweep after the commit the test has just seen.
    wait_for_log(&survivor, "sweep epoch=", Duration::from_secs(10)).await;
    // A backend that comes back before deletion is revived.
    sqlx::query("INSERT INTO sandboxes (id, backend, last_heartbeat) VALUES ('flaky', 'b3', now() - interval '1 hour')")
        .execute(&pool)
        .await
        .unwrap();
    eventually_every(
        "flaky to be orphaned",
        Duration::from_secs(20),
        Duration::from_millis(100),
        async || {
            beat().await;
            when(state("flaky").await.unwrap(), |s| s.0 == "orphaned")
        },
    )
    .await
    .unwrap();
    sqlx::query("UPDATE sandboxes SET last_heartbeat = now() WHERE id = 'flaky'")
        .execute(&pool)
        .await
        .unwrap();
    eventually_every(
        "flaky to be revived",
        Duration::from_secs(20),
        Duration::from_millis(100),
        async || {
            beat().await;
            when(state("flaky").await.unwrap(), |s| s.0 == "active")
        },
    )
    .await
    .unwrap();
}

/// A statement a guest left in flight on an application database (unfenced: `pg_sleep(3)`,
/// then an insert) when its holder shuts down: it is stopped on the server before the `lease
/// released` line, so the next holder never runs beside it, and nothing of it commits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unfenced_statement_in_flight_is_cancelled_before_the_lease_is_released() {
    let server = leasehold_tests::pg::server();
    let url = server.fresh_database().await.unwrap();
    let app = server.fresh_database().await.unwrap();
    let manifest = "[schedule]\ninterval = \"1s\"\n[limits]\ncall_timeout = \"10s\"\n[grants.sql]\ndatabase_url_env = \"APP_DATABASE_URL\"\nstatement_timeout = \"10s\"\n[config]\nverb = \"slow-write\"\nsleep_ms = \"3000\"\n";
    let dir = plugins("capability-probe", &[("slow", manifest.to_string())]);
    let mut host = HostBuilder::new("slow")
        .database_url(&url)
        .ttl(Duration::from_secs(2))
        .plugins(dir.path())
        .env("APP_DATABASE_URL", &app)
        .start_in_process()
        .await
        .unwrap();
    host.wait_for_log("probe slow-write started", Duration::from_secs(30))
        .await
        .unwrap();
    // The insert is now sleeping on the server.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let stopping = Instant::now();
    // The ordered shutdown a SIGTERM starts.
    let stopped = host.stop().await.unwrap();
    assert!(stopped.all_released(), "{stopped:?}");
    let log = host.log_text();
    let cancelled = log
        .find("statement cancelled on the server")
        .unwrap_or_else(|| panic!("the statement was not cancelled:\n{log}"));
    let released = log
        .find("lease released")
        .unwrap_or_else(|| panic!("no release:\n{log}"));
    assert!(
        cancelled < released,
        "the lease was released before the statement was stopped:\n{log}"
    );
    let took = stopping.elapsed();
    // Past the moment the sleep would have ended: nothing of the write was kept.
    tokio::time::sleep(Duration::from_millis(3500).saturating_sub(took)).await;
    let pool = sqlx::PgPool::connect(&app).await.unwrap();
    let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM slow_writes")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(rows, 0, "the abandoned write committed:\n{log}");
    println!("SIGTERM -> exit with the statement stopped on the server: {took:?}");
}
