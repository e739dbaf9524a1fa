//! An operator's first day, from outside: real `leasehold` processes doing what the README says,
//! and each mistake an operator makes on the way answered with a clear error (or a warning) that
//! names the fix. A second `run` on the default port; a shutdown that cannot release (its exit
//! code and last line); a signal delivered twice; fatal errors under `--log-format json`; a ttl
//! the database cannot time out; admin commands without a database; a misspelt lease; a
//! misspelt URL parameter; `migrate`'s count, `--http localhost:…`, a timing key out of its table;
//! `config check`'s verdict with no log line beside it.

#![allow(clippy::unwrap_used, missing_docs)]

use std::path::Path;
use std::process::{Output, Stdio};
use std::time::Duration;

use leasehold_tests::host::{Host, HostBuilder, binary, wait_for_single_leader};
use leasehold_tests::log::Logged;
use leasehold_tests::pg::{RowLock, lock_lease_row};

/// Runs `leasehold ARGS` in `dir` with `env` (and no `LEASEHOLD_*` or `RUST_LOG` of the test's
/// own), at most 60 s.
async fn leasehold(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = tokio::process::Command::new(binary().unwrap());
    cmd.args(args)
        .current_dir(dir)
        .env("RUST_BACKTRACE", "0")
        .env_remove("RUST_LOG");
    for (key, _) in std::env::vars().filter(|(k, _)| k.starts_with("LEASEHOLD_")) {
        cmd.env_remove(key);
    }
    cmd.envs(env.iter().copied())
        .stdin(Stdio::null())
        .kill_on_drop(true);
    tokio::time::timeout(Duration::from_secs(60), cmd.output())
        .await
        .unwrap_or_else(|_| panic!("leasehold {args:?} still running after 60 s"))
        .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn sqlite(dir: &Path) -> String {
    format!("sqlite:{}", dir.join("leases.db").display())
}

/// The last line a stopped host logged.
fn last_line(host: &Host) -> String {
    host.log_text()
        .lines()
        .last()
        .unwrap_or_default()
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_run_on_the_default_port_serves_on_another_and_says_so() {
    // The default address taken, as by a first `make run` (or by whoever has it already).
    let _first = match std::net::TcpListener::bind("127.0.0.1:9464") {
        Ok(listener) => Some(listener),
        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => None,
        Err(e) => panic!("binding 127.0.0.1:9464: {e}"),
    };
    let dir = tempfile::tempdir().unwrap();
    let mut second = HostBuilder::new("second")
        .database_url(&sqlite(dir.path()))
        .default_http()
        .spawn()
        .await
        .unwrap();
    assert_ne!(second.addr().port(), 9464);
    assert_eq!(second.addr().ip().to_string(), "127.0.0.1");
    let log = second.log_text();
    assert!(
        log.contains("the default HTTP address 127.0.0.1:9464 is taken")
            && log.contains(&format!("serving on {} instead", second.addr())),
        "{log}"
    );
    wait_for_single_leader(&[&second], "leader", Duration::from_secs(15))
        .await
        .unwrap();
    assert_eq!(
        second.stop(Duration::from_secs(30)).await.unwrap().code(),
        Some(0)
    );

    // An address someone chose stays theirs: taken, it is an error naming where it was set.
    for (args, env, named) in [
        (
            vec!["--http", "127.0.0.1:9464"],
            vec![],
            "--http or LEASEHOLD_HTTP",
        ),
        (
            vec![],
            vec![("LEASEHOLD_HTTP", "127.0.0.1:9464")],
            "--http or LEASEHOLD_HTTP",
        ),
    ] {
        let db = sqlite(dir.path());
        let mut all = vec!["run", "--database-url", &db];
        all.extend(args);
        let out = leasehold(dir.path(), &all, &env).await;
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(
            err.contains("cannot listen on 127.0.0.1:9464") && err.contains(named),
            "{err}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clean_stop_exits_0_and_its_last_line_names_each_lease_released() {
    let dir = tempfile::tempdir().unwrap();
    let mut host = HostBuilder::new("clean")
        .database_url(&sqlite(dir.path()))
        .lease("jobs")
        .lease("reports")
        .spawn_leading("jobs")
        .await
        .unwrap();
    wait_for_single_leader(&[&host], "reports", Duration::from_secs(15))
        .await
        .unwrap();
    assert_eq!(
        host.stop(Duration::from_secs(30)).await.unwrap().code(),
        Some(0)
    );
    let last = last_line(&host);
    assert!(
        last.contains("stopped: released 2 of 2 leases held (jobs at epoch 1, reports at epoch 1)")
            && last.contains("exit 0"),
        "{last}"
    );
}

/// A host on PostgreSQL holding `leader`, with `args`, whose lease row the returned transaction
/// holds locked: its release waits for the lock until the database gives up (9/10 of the store
/// timeout, ttl/5).
async fn a_holder_behind_a_row_lock(
    name: &str,
    args: &[&str],
) -> (Host, sqlx::Transaction<'static, sqlx::Postgres>) {
    let url = leasehold_tests::pg::server()
        .fresh_database()
        .await
        .unwrap();
    let host = HostBuilder::new(name)
        .database_url(&url)
        .args(args)
        .spawn_leading("leader")
        .await
        .unwrap();
    let lock = lock_lease_row(&url, "leader", RowLock::Update)
        .await
        .unwrap();
    (host, lock)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shutdown_that_cannot_release_exits_3_naming_each_lease_left_to_expire_and_why() {
    // The release fails first: the lock outlasts the database's lock timeout (1.8 s).
    let (mut host, lock) = a_holder_behind_a_row_lock("failed", &["--ttl", "10s"]).await;
    let status = host.stop(Duration::from_secs(30)).await.unwrap();
    drop(lock);
    let last = last_line(&host);
    assert_eq!(status.code(), Some(3), "{}", host.log_text());
    assert!(
        last.contains("ERROR")
            && last.contains("stopped, but 1 of 1 leases held were left to expire")
            && last.contains("leader at epoch 1 expires by ")
            && last.contains("release failed: release failed")
            && last.contains("exit 3"),
        "{last}"
    );
    assert!(!host.log_text().contains("every lease released"));

    // The grace runs out first: the same account and exit code, with that reason.
    let (mut host, lock) =
        a_holder_behind_a_row_lock("graceless", &["--ttl", "10s", "--shutdown-grace", "300ms"])
            .await;
    let status = host.stop(Duration::from_secs(30)).await.unwrap();
    drop(lock);
    let last = last_line(&host);
    assert_eq!(status.code(), Some(3), "{}", host.log_text());
    assert!(
        last.contains("stopped, but 1 of 1 leases held were left to expire")
            && last.contains("leader at epoch 1 expires by ")
            && last.contains("shutdown_grace (300ms) ran out before its release was done")
            && last.contains("exit 3"),
        "{last}"
    );
}

/// Waits for `host` to exit and checks it stopped as one signal asks: exit 0, its lease released,
/// no second signal seen.
async fn exits_0_having_released_as_asked_once(host: &mut Host) {
    let status = host.wait_exit(Duration::from_secs(30)).await.unwrap();
    let log = host.log_text();
    assert_eq!(status.code(), Some(0), "{log}");
    assert!(
        log.contains("lease released") && !log.contains("second signal"),
        "{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signal_delivered_twice_at_once_counts_once_and_a_later_one_forces_the_exit() {
    // As `timeout` or a supervisor signalling the process group delivers it: twice, at once.
    let dir = tempfile::tempdir().unwrap();
    let mut host = HostBuilder::new("twice")
        .database_url(&sqlite(dir.path()))
        .spawn_leading("leader")
        .await
        .unwrap();
    host.signal("TERM").unwrap();
    host.signal("TERM").unwrap();
    exits_0_having_released_as_asked_once(&mut host).await;

    // The repeat seen as such: it comes while the release waits behind a lock.
    let (mut host, lock) = a_holder_behind_a_row_lock("repeated", &["--ttl", "30s"]).await;
    host.signal("TERM").unwrap();
    host.log()
        .wait_for("SIGTERM received", Duration::from_secs(10))
        .await
        .unwrap();
    host.signal("TERM").unwrap();
    host.log()
        .wait_for("counted once", Duration::from_secs(10))
        .await
        .unwrap();
    lock.rollback().await.unwrap();
    exits_0_having_released_as_asked_once(&mut host).await;

    // A second signal well after the first (the release stuck behind a lock for 5.4 s) is a
    // request to stop now, and says so.
    let (mut host, lock) = a_holder_behind_a_row_lock("forced", &["--ttl", "30s"]).await;
    host.signal("TERM").unwrap();
    host.log()
        .wait_for("releasing leases in order", Duration::from_secs(10))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    host.signal("TERM").unwrap();
    let status = host.wait_exit(Duration::from_secs(30)).await.unwrap();
    drop(lock);
    let log = host.log_text();
    assert_eq!(status.code(), Some(130), "{log}");
    assert!(log.contains("second signal: exiting at once"), "{log}");
}

#[tokio::test]
async fn under_json_a_fatal_error_is_one_json_line_like_every_other() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("leasehold.toml");
    std::fs::write(
        &file,
        "log_format = \"json\"\n[timing]\nttl = \"200days\"\n",
    )
    .unwrap();
    let file = file.to_str().unwrap();
    let db = sqlite(dir.path());
    for (args, env) in [
        (
            vec![
                "--log-format",
                "json",
                "run",
                "--ttl",
                "200days",
                "--database-url",
                &db,
            ],
            vec![],
        ),
        (
            vec!["run", "--ttl", "200days", "--database-url", &db],
            vec![("LEASEHOLD_LOG_FORMAT", "json")],
        ),
        (vec!["run", "--config", file, "--database-url", &db], vec![]),
        (vec!["config", "check", file], vec![]),
    ] {
        let out = leasehold(dir.path(), &args, &env).await;
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        let last = err.lines().last().unwrap();
        let line: serde_json::Value = serde_json::from_str(last)
            .unwrap_or_else(|e| panic!("{args:?}: not JSON ({e}): {last}"));
        assert_eq!(line["level"], "ERROR", "{last}");
        let message = line["fields"]["message"].as_str().unwrap();
        assert!(
            message.contains("invalid timing.ttl") && message.contains("at most 24days"),
            "{last}"
        );
        assert!(line["fields"]["error_chain"].is_string(), "{last}");
        assert!(line["timestamp"].is_string(), "{last}");
        assert!(!err.contains("leasehold: error:"), "{err}");
    }
}

#[tokio::test]
async fn config_check_and_run_refuse_a_ttl_the_database_cannot_time_out_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let db = sqlite(dir.path());
    for args in [
        vec!["config", "check", "--ttl", "200days"],
        vec!["run", "--ttl", "200days", "--database-url", &db],
    ] {
        let out = leasehold(dir.path(), &args, &[]).await;
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(
            err.contains("invalid timing.ttl")
                && err.contains("--ttl or LEASEHOLD_TTL")
                && err.contains("at most 24days"),
            "{args:?}: {err}"
        );
        assert!(!err.contains("panicked"), "{err}");
    }
    let out = leasehold(dir.path(), &["config", "check", "--ttl", "24days"], &[]).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
}

#[tokio::test]
async fn admin_commands_without_a_database_create_none_and_say_how_to_name_one() {
    let dir = tempfile::tempdir().unwrap();
    for args in [
        vec!["leases", "list"],
        vec!["leases", "release", "leader", "--force"],
    ] {
        let out = leasehold(dir.path(), &args, &[]).await;
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(
            err.contains(&format!(
                "no SQLite lease file at {}",
                dir.path().join("leasehold.db").display()
            )) && err.contains("--database-url or LEASEHOLD_DATABASE_URL"),
            "{args:?}: {err}"
        );
        assert!(text(&out.stdout).is_empty(), "{args:?}");
    }
    let other = dir.path().join("elsewhere.db");
    let url = format!("sqlite:{}", other.display());
    let out = leasehold(dir.path(), &["leases", "list", "--database-url", &url], &[]).await;
    assert!(
        text(&out.stderr).contains("the database URL given"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "a file was created"
    );

    // `migrate` creates it, and says how many migrations it applied; then that none were due.
    let out = leasehold(dir.path(), &["migrate", "--database-url", &url], &[]).await;
    let said = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        said.contains("applied ") && said.contains(" migrations; the lease schema is up to date"),
        "{said}"
    );
    let out = leasehold(dir.path(), &["migrate", "--database-url", &url], &[]).await;
    assert!(
        text(&out.stdout).contains("was already up to date"),
        "{}",
        text(&out.stdout)
    );
    let out = leasehold(dir.path(), &["leases", "list", "--database-url", &url], &[]).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrate_on_postgres_says_how_many_it_applied_then_that_none_were_due() {
    let url = leasehold_tests::pg::server()
        .fresh_database()
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out = leasehold(dir.path(), &["migrate", "--database-url", &url], &[]).await;
    let said = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let applied: u32 = said
        .split_once("applied ")
        .and_then(|(_, rest)| rest.split_once(' '))
        .and_then(|(n, _)| n.parse().ok())
        .unwrap_or_else(|| panic!("{said}"));
    assert!(
        said.contains(&format!("up to date ({applied} in all)")),
        "{said}"
    );
    let out = leasehold(dir.path(), &["migrate", "--database-url", &url], &[]).await;
    assert!(
        text(&out.stdout).contains(&format!("was already up to date ({applied} migrations)")),
        "{}",
        text(&out.stdout)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_of_a_misspelt_or_invalid_lease_fails_and_names_the_close_one() {
    let dir = tempfile::tempdir().unwrap();
    let url = sqlite(dir.path());
    let mut host = HostBuilder::new("holder")
        .database_url(&url)
        .spawn_leading("leader")
        .await
        .unwrap();
    let release = |name: &'static str| {
        let (dir, url) = (dir.path().to_path_buf(), url.clone());
        async move {
            leasehold(
                &dir,
                &["leases", "release", name, "--force", "--database-url", &url],
                &[],
            )
            .await
        }
    };
    let out = release("ledaer").await;
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("no lease named ledaer") && err.contains("did you mean leader?"),
        "{err}"
    );
    let out = release("nothing-like-it").await;
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("leasehold leases list"), "{err}");
    let out = release("Leader!").await;
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("invalid lease name"),
        "{}",
        text(&out.stderr)
    );
    let out = release("leader").await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("released leader"),
        "{}",
        text(&out.stdout)
    );
    // A lease that exists but that nobody holds: nothing to do, and that is no error.
    host.stop(Duration::from_secs(30)).await.unwrap();
    let out = release("leader").await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("leader: not held by anyone; nothing to release"),
        "{}",
        text(&out.stdout)
    );
}

#[tokio::test]
async fn a_misspelt_url_parameter_is_refused_by_name_before_any_connection() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        (
            "postgres://u:s3cr3t@127.0.0.1:1/db?sslmde=verify-full",
            "\"sslmde\" that the PostgreSQL driver does not read (did you mean \"sslmode\"?)",
        ),
        (
            "sqlite:/tmp/leases.db?mdoe=rwc",
            "\"mdoe\" that SQLite does not read (did you mean \"mode\"?)",
        ),
        (
            "postgres://u@127.0.0.1:1/db?sslmode=verify-full&sslrootcert=/nonexistent/ca.crt",
            "sslrootcert = \"/nonexistent/ca.crt\", which is not a file",
        ),
    ];
    for (url, said) in cases {
        for args in [
            vec!["run", "--database-url", url],
            vec!["config", "check", "--database-url", url],
            vec!["leases", "list", "--database-url", url],
        ] {
            let out = leasehold(dir.path(), &args, &[]).await;
            let err = text(&out.stderr);
            assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
            assert!(err.contains(said), "{args:?}: {err}");
            assert!(!err.contains("s3cr3t"), "{err}");
        }
    }
}

#[tokio::test]
async fn config_check_takes_localhost_and_points_a_timing_key_to_its_table() {
    let dir = tempfile::tempdir().unwrap();
    let out = leasehold(
        dir.path(),
        &["config", "check", "--http", "localhost:9470"],
        &[],
    )
    .await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("http = \"127.0.0.1:9470\""),
        "{}",
        text(&out.stdout)
    );
    let out = leasehold(
        dir.path(),
        &["config", "check", "--http", "status.internal:9464"],
        &[],
    )
    .await;
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("e.g. 127.0.0.1:9464"),
        "{}",
        text(&out.stderr)
    );
    let file = dir.path().join("leasehold.toml");
    std::fs::write(&file, "ttl = \"30s\"\n").unwrap();
    let out = leasehold(
        dir.path(),
        &["config", "check", file.to_str().unwrap()],
        &[],
    )
    .await;
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("did you mean `[timing] ttl`?"),
        "{}",
        text(&out.stderr)
    );
}

#[tokio::test]
async fn config_check_prints_its_verdict_alone_with_a_relative_sqlite_path_shown_absolute() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("leasehold.toml");
    std::fs::write(&file, "database_url = \"sqlite:./leases.db\"\n").unwrap();
    for args in [
        vec!["config", "check", "leasehold.toml"],
        // The built-in default is a relative path too.
        vec!["config", "check"],
    ] {
        let out = leasehold(dir.path(), &args, &[]).await;
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        assert!(out.status.success(), "{args:?}: {stderr}");
        assert_eq!(stderr, "", "{args:?}: a check logged beside its verdict");
        assert!(
            stdout.starts_with("# leasehold.toml: ok;")
                || stdout.starts_with("# built-in defaults: ok;"),
            "{args:?}: {stdout}"
        );
        let cwd = dir.path().canonicalize().unwrap();
        let db = if args.len() == 3 {
            "leases.db"
        } else {
            "leasehold.db"
        };
        assert!(
            stdout.contains(&format!("sqlite:{}", cwd.join(db).display())),
            "{args:?}: {stdout}"
        );
    }
}

#[tokio::test]
async fn a_bad_value_in_a_variable_is_reported_as_the_variable_not_as_a_flag() {
    let dir = tempfile::tempdir().unwrap();
    let out = leasehold(
        dir.path(),
        &["config", "check"],
        &[("LEASEHOLD_TTL", "soon")],
    )
    .await;
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("'soon'") && err.contains("environment variable LEASEHOLD_TTL"),
        "{err}"
    );
    let out = leasehold(dir.path(), &["config", "check", "--ttl", "soon"], &[]).await;
    assert!(
        !text(&out.stderr).contains("environment variable"),
        "{}",
        text(&out.stderr)
    );
}
