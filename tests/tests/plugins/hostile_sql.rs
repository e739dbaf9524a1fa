//! A hostile plugin's sql grant, played by the `hostile-sql` guest in real `leasehold` processes
//! on a real PostgreSQL: it tries to rewrite another lease, to take the fence's lock itself and
//! hold it, to hold a transaction open for an hour, to end the fence with `;COMMIT`, to leave
//! state on its pooled session, to read the host's own URL or another secret through its
//! manifest, and to send forged handoff notices. Each attack fails, and the leases keep their holder and epoch throughout.

#![allow(clippy::unwrap_used, missing_docs)]

use std::path::Path;
use std::time::Duration;

use leasehold_tests::eventually::{eventually, when};
use leasehold_tests::host::{Host, HostBuilder, guests_dist};
use leasehold_tests::log::Logged;
use sqlx::PgPool;

/// A plugin directory with the `hostile-sql` guest copied under each name, with its manifest.
fn plugins(entries: &[(&str, String)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (name, manifest) in entries {
        std::fs::copy(
            guests_dist().join("hostile-sql.wasm"),
            dir.path().join(format!("{name}.wasm")),
        )
        .unwrap();
        std::fs::write(dir.path().join(format!("{name}.toml")), manifest).unwrap();
    }
    dir
}

/// A manifest for `hostile-sql` on lease `leader`: `call` over `statements` (joined by the
/// guest's `;;` lines), through the variable `env`, every `interval`.
fn manifest(env: &str, call: &str, statements: &[&str], extra: &str) -> String {
    let statements = statements
        .join("\n;;\n")
        .replace('\\', "\\\\")
        .replace('"', "\\\"");
    format!(
        "lease = \"leader\"
[schedule]
interval = \"300ms\"
[limits]
call_timeout = \"6s\"
[grants.sql]
database_url_env = \"{env}\"
{extra}
[config]
call = \"{call}\"
statements = \"\"\"{statements}\"\"\"
"
    )
}

/// The holder and epoch of every lease, by name.
async fn leases(pool: &PgPool) -> Vec<(String, String, i64)> {
    sqlx::query_as("SELECT name, holder, epoch FROM leasehold_leases ORDER BY name")
        .fetch_all(pool)
        .await
        .unwrap()
}

/// A fresh lease database, a pool on it as the superuser, and a role for plugins (nothing on
/// the leasehold tables) with its URL.
async fn database() -> (String, PgPool, String) {
    let server = leasehold_tests::pg::server();
    let url = server.fresh_lease_database().await.unwrap();
    let pool = PgPool::connect(&url).await.unwrap();
    let role_url = server.plugin_role(&url, "hostile").await.unwrap();
    (url, pool, role_url)
}

async fn start(url: &str, dir: &Path, env: &[(&str, &str)]) -> Host {
    let mut builder = HostBuilder::new("a")
        .database_url(url)
        .lease("leader")
        .lease("other")
        .ttl(Duration::from_secs(2))
        .plugins(dir);
    for (k, v) in env {
        builder = builder.env(k, v);
    }
    builder.spawn().await.unwrap()
}

/// Both leases held by one replica at epoch 1.
async fn wait_for_both_leases(pool: &PgPool) -> Vec<(String, String, i64)> {
    eventually("both leases held", Duration::from_secs(20), async || {
        when(leases(pool).await, |l| l.len() == 2)
    })
    .await
    .unwrap()
}

/// Rewriting another lease from inside the plugin's transaction: with the host's own URL (under a
/// name the operator allows) the grant is refused for its role's privileges, naming the plugin;
/// with a role of the plugin's own the database refuses the statement. The host's own variable
/// and a variable outside the operator's list cannot be named at all, and their values appear
/// nowhere. Both leases keep their holder and epoch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_cannot_rewrite_another_lease_or_borrow_the_host_s_secrets() {
    let (url, pool, role_url) = database().await;
    let attack = [
        "UPDATE leasehold_leases SET expires_at = now() WHERE name = 'other'",
        "UPDATE leasehold_leases SET expires_at = 'infinity' WHERE name = '{lease}'",
    ];
    let secret = format!("not-a-url-{}", std::process::id());
    let dir = plugins(&[
        (
            "as-host",
            manifest("HOST_COPY_DATABASE_URL", "transaction", &attack, ""),
        ),
        (
            "as-role",
            manifest("APP_DATABASE_URL", "transaction", &attack, ""),
        ),
        (
            "host-url",
            manifest("LEASEHOLD_DATABASE_URL", "transaction", &attack, ""),
        ),
        (
            "a-secret",
            manifest("CLOUD_SECRET_KEY", "transaction", &attack, ""),
        ),
    ]);
    let host = start(
        &url,
        dir.path(),
        &[
            ("HOST_COPY_DATABASE_URL", url.as_str()),
            ("APP_DATABASE_URL", role_url.as_str()),
            ("CLOUD_SECRET_KEY", secret.as_str()),
        ],
    )
    .await;
    let before = wait_for_both_leases(&pool).await;
    let refused = host
        .wait_for_log(
            "hostile transaction err=not-granted",
            Duration::from_secs(20),
        )
        .await
        .unwrap();
    for needle in [
        "as-host",
        "HOST_COPY_DATABASE_URL",
        "leasehold_leases",
        "is refused",
    ] {
        assert!(refused.contains(needle), "{needle:?} missing: {refused}");
    }
    let denied = host
        .wait_for_log("hostile transaction err=database", Duration::from_secs(20))
        .await
        .unwrap();
    assert!(denied.contains("permission denied"), "{denied}");
    // Several more attempts of each.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let after = leases(&pool).await;
    assert_eq!(after, before, "a lease changed hands or epoch");
    let forever: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM leasehold_leases WHERE expires_at = 'infinity' OR expires_at < now()",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(forever, 0, "an attack changed an expiry");
    let (_, status) = host.as_ref().get("/status").await.unwrap();
    for (plugin, env) in [
        ("host-url", "LEASEHOLD_DATABASE_URL"),
        ("a-secret", "CLOUD_SECRET_KEY"),
    ] {
        let entry = host.as_ref().plugin_status(plugin).await.unwrap();
        let error = format!("{entry:?}");
        assert!(
            error.contains(env) && error.contains("not a variable plugins may name"),
            "{plugin}: {error}"
        );
    }
    let log = host.log_text();
    for shown in [&log, &status] {
        assert!(!shown.contains(&secret), "a secret's value was shown");
    }
    assert!(
        !log.contains("hostile transaction ok"),
        "an attack ran:\n{log}"
    );
}

/// Calling the fence function itself, with a guessed key, to hold its lease row's share lock,
/// fails at once; a transaction that raises its own `statement_timeout` and sleeps for an hour
/// holds no lease row (the fence is taken last) and ends at the plugin's call timeout, its
/// session ended on the server. Renewals go on throughout: both leases keep their holder and
/// epoch over several ttls.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_cannot_hold_up_renewals_from_its_transaction() {
    let (url, pool, role_url) = database().await;
    let dir = plugins(&[
        (
            "take-the-lock",
            manifest(
                "APP_DATABASE_URL",
                "transaction",
                &[
                    "SELECT public.leasehold_fence('{lease}', '{holder}', {epoch}, 'a guess', 0)",
                    "SELECT pg_sleep(3600)",
                ],
                "",
            ),
        ),
        (
            "sleep-an-hour",
            manifest(
                "APP_DATABASE_URL",
                "transaction",
                &[
                    "SET LOCAL statement_timeout = 0",
                    "SET LOCAL lock_timeout = 0",
                    "SELECT pg_sleep(3600)",
                ],
                "statement_timeout = \"1h\"",
            ),
        ),
    ]);
    let host = start(&url, dir.path(), &[("APP_DATABASE_URL", role_url.as_str())]).await;
    let before = wait_for_both_leases(&pool).await;
    let refused = host
        .wait_for_log("hostile transaction err=database", Duration::from_secs(20))
        .await
        .unwrap();
    assert!(
        refused.contains("may only be called by the leasehold host"),
        "{refused}"
    );
    // Four ttls: each renewal must get through while the hour-long transaction runs.
    tokio::time::sleep(Duration::from_secs(8)).await;
    assert_eq!(
        leases(&pool).await,
        before,
        "a lease changed hands or epoch"
    );
    let log = host.log_text();
    assert!(!log.contains("lease lost"), "a lease was lost:\n{log}");
    host.wait_for_log(
        "statement cancelled on the server: the call was dropped",
        Duration::from_secs(10),
    )
    .await
    .unwrap();
}

/// `;COMMIT` would end the fence mid-transaction: it is refused. Settings made with
/// `set_config(…, false)` or in a `DO` block, a session advisory lock, a temporary table and a
/// cursor `WITH HOLD` do not outlive the call: the next call, on the same pooled session (one
/// connection), finds none of them, and no advisory lock stays held on the server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_cannot_end_the_fence_or_leave_state_on_its_session() {
    let (url, pool, role_url) = database().await;
    let check = "DO $$ BEGIN
        IF current_setting('search_path') = 'evil'
           OR current_setting('statement_timeout') = '0'
           OR EXISTS (SELECT FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid())
           OR to_regclass('pg_temp.leftover') IS NOT NULL
           OR EXISTS (SELECT FROM pg_cursors WHERE is_holdable) THEN
            RAISE EXCEPTION 'state left by an earlier call';
        END IF;
    END $$";
    let dir = plugins(&[
        (
            "commit",
            manifest(
                "APP_DATABASE_URL",
                "transaction",
                &[
                    "CREATE TABLE IF NOT EXISTS marks (n int)",
                    ";COMMIT",
                    "INSERT INTO marks VALUES (1)",
                ],
                "",
            ),
        ),
        (
            "leftovers",
            manifest(
                "APP_DATABASE_URL",
                "execute",
                &[
                    check,
                    "SELECT set_config('search_path', 'evil', false)",
                    "DO $$ BEGIN EXECUTE 'SET statement_timeout = 0'; END $$",
                    "SELECT pg_advisory_lock(42)",
                    "CREATE TEMP TABLE leftover (x int)",
                    "DECLARE held CURSOR WITH HOLD FOR SELECT 1",
                ],
                "max_connections = 1",
            ),
        ),
    ]);
    let host = start(&url, dir.path(), &[("APP_DATABASE_URL", role_url.as_str())]).await;
    let refused = host
        .wait_for_log("hostile transaction err=invalid", Duration::from_secs(20))
        .await
        .unwrap();
    assert!(refused.contains("may not open with ';'"), "{refused}");
    // Three clean calls in a row: the check ran on the session the last call polluted.
    eventually("three clean calls", Duration::from_secs(20), async || {
        when(host.log_text(), |l| {
            l.matches("hostile execute ok").count() >= 3
        })
    })
    .await
    .unwrap();
    let log = host.log_text();
    assert!(!log.contains("state left by an earlier call"), "{log}");
    assert!(!log.contains("hostile execute err"), "{log}");
    // A lock left behind would be there at every look; one taken by a running call, at few.
    let mut seen_held = 0;
    for _ in 0..5 {
        let held: i64 =
            sqlx::query_scalar("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'")
                .fetch_one(&pool)
                .await
                .unwrap();
        seen_held += usize::from(held > 0);
        tokio::time::sleep(Duration::from_millis(110)).await;
    }
    assert!(seen_held < 5, "an advisory lock outlived its call");
    let kept: Option<i64> = sqlx::query_scalar("SELECT count(*) FROM marks")
        .fetch_optional(&pool)
        .await
        .unwrap_or(None);
    assert_eq!(kept.unwrap_or(0), 0, "a statement after ;COMMIT ran");
}

/// PostgreSQL lets any role that can connect send a notification on any channel, the handoff
/// channel included: a plugin's sql role sends "hand over" for its own lease and for another,
/// at their epochs, every 300 ms. A notice only makes the holder renew and read the row, where no
/// operator's request is written: both leases keep their holder and epoch, and no handoff begins.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_s_forged_handoff_notices_do_not_make_the_holder_step_down() {
    let (url, pool, role_url) = database().await;
    let dir = plugins(&[(
        "forger",
        manifest(
            "APP_DATABASE_URL",
            "execute",
            &[
                "NOTIFY leasehold_handoff, '{epoch} {lease}'",
                "NOTIFY leasehold_handoff, '1 other'",
            ],
            "",
        ),
    )]);
    // The test hears what the holder hears, to count the forgeries that reached it.
    let mut listener = sqlx::postgres::PgListener::connect(&url).await.unwrap();
    listener.listen("leasehold_handoff").await.unwrap();
    let host = start(&url, dir.path(), &[("APP_DATABASE_URL", role_url.as_str())]).await;
    let before = wait_for_both_leases(&pool).await;
    assert!(before.iter().all(|(_, _, epoch)| *epoch == 1), "{before:?}");
    eventually(
        "ten forged notice pairs sent",
        Duration::from_secs(30),
        async || {
            when(host.log_text(), |l| {
                l.matches("hostile execute ok").count() >= 10
            })
        },
    )
    .await
    .unwrap();
    let mut heard = Vec::new();
    while let Ok(Some(n)) = listener.try_recv().await {
        heard.push(n.payload().to_string());
        if heard.len() >= 20 {
            break;
        }
    }
    assert!(
        heard.iter().filter(|p| *p == "1 leader").count() >= 5
            && heard.iter().filter(|p| *p == "1 other").count() >= 5,
        "the forged notices were delivered: {heard:?}"
    );
    let log = host.log_text();
    assert_eq!(
        leases(&pool).await,
        before,
        "a lease changed hands or epoch"
    );
    assert!(
        !log.contains("handoff requested"),
        "a handoff began:\n{log}"
    );
    let terms: i64 = sqlx::query_scalar("SELECT count(*) FROM leasehold_terms")
        .fetch_one(&pool)
        .await
        .unwrap_or(0);
    assert!(terms <= 2, "{terms} terms recorded: a lease was given up");
}
