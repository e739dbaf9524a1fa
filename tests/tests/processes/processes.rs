//! Real `leasehold run` processes against a real PostgreSQL and real SQLite files.

#![allow(clippy::unwrap_used, missing_docs)]

use leasehold::lease::Epoch;
use leasehold_tests::log::Logged;
use std::time::{Duration, Instant};

use leasehold_tests::eventually::eventually;
use leasehold_tests::host::{Host, run_to_exit, wait_for_single_leader};
use leasehold_tests::status::{LeaseStatus, Role, Status, StatusExt};
use leasehold_tests::stores::{Backend, Db};
use serde_json::Value;

fn lease_entry(status: &Status) -> &LeaseStatus {
    status.lease("leader").unwrap()
}

async fn start_replicas(url: &str, ttl: &str, n: usize) -> Vec<Host> {
    let mut hosts = Vec::with_capacity(n);
    for i in 0..n {
        let args = ["--database-url", url, "--ttl", ttl];
        hosts.push(Host::start(&format!("r{i}"), &args).await.unwrap());
    }
    hosts
}

/// Every replica's `/status` names the same holder and epoch for `leader`; returns them. Each is
/// a snapshot up to a few hundred ms old, so a replica that saw no change of its own may show the
/// last holder a moment longer: they must agree within two seconds.
async fn agreed_holder(hosts: &[&Host]) -> (String, Epoch) {
    eventually(
        "the replicas to agree on the holder",
        Duration::from_secs(2),
        async || {
            let mut seen = Vec::new();
            for h in hosts {
                let status = h.status().await.map_err(|e| e.to_string())?;
                let entry = lease_entry(&status);
                seen.push((entry.holder.clone(), entry.epoch));
            }
            match &seen[..] {
                [(Some(holder), Some(epoch)), rest @ ..] if rest.iter().all(|s| *s == seen[0]) => {
                    Ok((holder.clone(), *epoch))
                }
                _ => Err(format!("replicas disagree: {seen:?}")),
            }
        },
    )
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_replicas_on_postgres_elect_one_and_survive_kill_9() {
    let db = Db::new(Backend::Postgres).await.unwrap();
    let url = db.url().unwrap();
    let ttl = Duration::from_secs(2);
    let mut hosts = start_replicas(&url, "2s", 3).await;
    let refs: Vec<&Host> = hosts.iter().collect();
    let leader = wait_for_single_leader(&refs, "leader", Duration::from_secs(15))
        .await
        .unwrap();
    let (holder, epoch) = agreed_holder(&refs).await;
    let status = hosts[leader].status().await.unwrap();
    assert_eq!(status.replica, holder);
    // The ttl, the yardstick of the time left (the page's bar).
    assert_eq!(lease_entry(&status).ttl_ms, 2000);
    assert!(hosts[leader].log_text().contains(&format!(
        "lease acquired lease=leader epoch={epoch} holder={holder}"
    )));
    for (i, h) in hosts.iter().enumerate().filter(|(i, _)| *i != leader) {
        assert_eq!(
            lease_entry(&h.status().await.unwrap()).role,
            Role::Standby,
            "host {i}"
        );
    }

    // kill -9: no release, so the others must wait out the ttl and then one poll.
    let mut dead = hosts.remove(leader);
    let killed = Instant::now();
    dead.signal("KILL").unwrap();
    dead.wait_exit(Duration::from_secs(5)).await.unwrap();
    let refs: Vec<&Host> = hosts.iter().collect();
    let next = wait_for_single_leader(&refs, "leader", Duration::from_secs(10))
        .await
        .unwrap();
    let took = killed.elapsed();
    // ttl + one poll (ttl/5 plus up to 20% jitter), plus slack for a loaded machine.
    let bound = ttl + ttl / 5 + ttl / 25 + Duration::from_millis(1500);
    assert!(took < bound, "failover took {took:?}, bound {bound:?}");
    let (new_holder, new_epoch) = agreed_holder(&refs).await;
    assert_ne!(new_holder, holder);
    assert_eq!(new_epoch, epoch.next());
    assert_eq!(hosts[next].status().await.unwrap().replica, new_holder);
    println!("kill -9 failover with ttl {ttl:?}: {took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigterm_hands_the_lease_over_at_once() {
    let db = Db::new(Backend::Postgres).await.unwrap();
    let url = db.url().unwrap();
    // A long ttl, so standbys poll only every 12-14.4 s: a handoff well under a second can only
    // come from the release + NOTIFY path.
    let mut hosts = start_replicas(&url, "60s", 3).await;
    let refs: Vec<&Host> = hosts.iter().collect();
    let leader = wait_for_single_leader(&refs, "leader", Duration::from_secs(15))
        .await
        .unwrap();
    let (holder, epoch) = agreed_holder(&refs).await;
    // Every replica's release listener has subscribed (each runs its LISTEN in the background).
    leasehold_tests::pg::wait_for_listeners(&url, 3, Duration::from_secs(20))
        .await
        .unwrap();

    let mut old = hosts.remove(leader);
    let sent = Instant::now();
    old.signal("TERM").unwrap();
    let refs: Vec<&Host> = hosts.iter().collect();
    wait_for_single_leader(&refs, "leader", Duration::from_secs(5))
        .await
        .unwrap();
    let took = sent.elapsed();
    let status = old.wait_exit(Duration::from_secs(10)).await.unwrap();
    assert!(
        status.success(),
        "SIGTERM exit: {status:?}; log:\n{}",
        old.log_text()
    );
    let log = old.log_text();
    let ended = log.find("term ended").expect("term ended logged");
    let released = log.find("lease released").expect("release logged");
    assert!(
        ended < released,
        "plugins must stop before the release:\n{log}"
    );
    let (new_holder, new_epoch) = agreed_holder(&refs).await;
    assert_ne!(new_holder, holder);
    assert_eq!(new_epoch, epoch.next());
    // The handoff as the processes saw it (their own log clocks), free of this test's polling.
    let new_log = hosts
        .iter()
        .map(|h| h.log_text())
        .find(|l| l.contains(&format!("epoch={new_epoch} holder={new_holder}")))
        .unwrap();
    let signalled = leasehold_tests::host::log_time(&log, "SIGTERM received").unwrap();
    let acquired = leasehold_tests::host::log_time(
        &new_log,
        &format!("lease acquired lease=leader epoch={new_epoch}"),
    )
    .unwrap();
    let handoff = Duration::from_secs_f64((acquired - signalled).max(0.0));
    // Typically about 10 ms; the bound leaves room for fsync stalls on a loaded machine.
    assert!(
        handoff < Duration::from_secs(1),
        "graceful handoff took {handoff:?} (observed via /status: {took:?})"
    );
    println!("SIGTERM handoff with ttl 60s: {handoff:?} by the logs, {took:?} via /status");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_processes_on_one_sqlite_file_elect_one() {
    let db = Db::new(Backend::Sqlite).await.unwrap();
    let url = db.url().unwrap();
    let hosts = start_replicas(&url, "2s", 2).await;
    let refs: Vec<&Host> = hosts.iter().collect();
    let leader = wait_for_single_leader(&refs, "leader", Duration::from_secs(15))
        .await
        .unwrap();
    // Hold for a few renewals: still exactly one leader, the same one.
    for _ in 0..10 {
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(
            wait_for_single_leader(&refs, "leader", Duration::from_secs(2))
                .await
                .unwrap(),
            leader
        );
    }
    let (holder, epoch) = agreed_holder(&refs).await;
    assert_eq!(epoch, Epoch::new(1), "no spurious re-acquisitions");
    assert!(holder.starts_with(&hosts[leader].name));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_signal_exits_at_once() {
    let db = Db::new(Backend::Sqlite).await.unwrap();
    let url = db.url().unwrap();
    // A ttl of 30 s: the release waits for the lock up to 5.4 s, well past the second signal.
    let mut host = Host::start("solo", &["--database-url", &url, "--ttl", "30s"])
        .await
        .unwrap();
    wait_for_single_leader(&[&host], "leader", Duration::from_secs(15))
        .await
        .unwrap();
    // Hold the file's write lock so the release cannot commit and the shutdown hangs in it.
    let mut conn = <sqlx::SqliteConnection as sqlx::Connection>::connect(&url)
        .await
        .unwrap();
    sqlx::query("BEGIN EXCLUSIVE")
        .execute(&mut conn)
        .await
        .unwrap();
    host.signal("TERM").unwrap();
    // Past the 1 s within which a repeated signal is the same request (first_day.rs).
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert!(
        host.wait_exit(Duration::from_millis(1)).await.is_err(),
        "first signal should still be releasing"
    );
    let second = Instant::now();
    host.signal("TERM").unwrap();
    let status = host.wait_exit(Duration::from_secs(5)).await.unwrap();
    assert!(
        second.elapsed() < Duration::from_secs(1),
        "second signal took {:?}",
        second.elapsed()
    );
    assert_eq!(status.code(), Some(130), "{}", host.log_text());
    assert!(host.log_text().contains("second signal"));
    sqlx::query("ROLLBACK").execute(&mut conn).await.unwrap();
}

#[tokio::test]
async fn bad_database_urls_fail_at_start_with_one_clear_line() {
    let cases = [
        (
            "postgres://leasehold:hunter2@127.0.0.1:1/nowhere",
            "cannot connect to postgres://leasehold:***@127.0.0.1:1/nowhere",
        ),
        (
            "postgres://leasehold:hunter2@[::1/x",
            "the database URL in --database-url or LEASEHOLD_DATABASE_URL cannot be read by the PostgreSQL driver (invalid IPv6 address)",
        ),
        (
            "mysql://root:hunter2@localhost/db",
            "the database URL in --database-url or LEASEHOLD_DATABASE_URL is not a postgres://",
        ),
        (
            "sqlite:/nonexistent-dir/leases.db",
            "cannot create the SQLite lease file /nonexistent-dir/leases.db: No such file or directory",
        ),
    ];
    for (url, expected) in cases {
        let started = Instant::now();
        let (status, stderr) = run_to_exit(
            &["run", "--database-url", url, "--http", "127.0.0.1:0"],
            Duration::from_secs(30),
        )
        .await
        .unwrap();
        assert!(!status.success(), "{url}: {status:?}");
        let lines: Vec<&str> = stderr.lines().filter(|l| l.contains("error")).collect();
        assert_eq!(lines.len(), 1, "{url}: one error line expected:\n{stderr}");
        assert!(
            lines[0].starts_with("leasehold: error: "),
            "{url}: {stderr}"
        );
        assert!(lines[0].contains(expected), "{url}: {stderr}");
        assert!(
            !stderr.contains("hunter2"),
            "{url}: password leaked:\n{stderr}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "{url}: took {:?}",
            started.elapsed()
        );
    }
}

/// An in-memory SQLite database is private to the process (to each connection, even): every
/// replica would lead at once and every restart would hand out epoch 1 again. Each spelling of
/// one is refused at start, saying why and what to use instead.
#[tokio::test]
async fn an_in_memory_sqlite_store_is_refused_at_start_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("leases.db");
    let cases = [
        "sqlite::memory:".to_string(),
        "sqlite://:memory:".to_string(),
        "sqlite:file::memory:?cache=shared".to_string(),
        format!("sqlite:file:{}?mode=memory", file.display()),
        format!("sqlite://{}?cache=shared&mode=memory", file.display()),
        "sqlite://?mode=memory".to_string(),
    ];
    for url in &cases {
        let (status, stderr) = run_to_exit(
            &["run", "--database-url", url, "--http", "127.0.0.1:0"],
            Duration::from_secs(20),
        )
        .await
        .unwrap_or_else(|e| panic!("{url}: {e}"));
        assert!(!status.success(), "{url}: {status:?}");
        let lines: Vec<&str> = stderr.lines().filter(|l| l.contains("error")).collect();
        assert_eq!(lines.len(), 1, "{url}: one error line expected:\n{stderr}");
        assert!(
            lines[0].contains("in-memory")
                && lines[0].contains("every replica would lead")
                && lines[0].contains("sqlite:/var/lib/leasehold/leases.db"),
            "{url}: {stderr}"
        );
    }
    assert!(!file.exists(), "a refused URL created {}", file.display());
}

/// `sqlite:./leases.db` names a different file in every working directory. It is resolved
/// against the working directory once, at start, and the process logs the absolute path.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relative_sqlite_path_is_made_absolute_at_start_and_logged() {
    let dir = tempfile::tempdir().unwrap();
    // The process's working directory, as the kernel reports it (symbolic links resolved).
    let cwd = dir.path().canonicalize().unwrap();
    let host = Host::start_under_shell(
        "relative",
        &format!("cd '{}'", cwd.display()),
        &["--database-url", "sqlite:./leases.db", "--ttl", "2s"],
    )
    .await
    .unwrap();
    wait_for_single_leader(&[&host], "leader", Duration::from_secs(15))
        .await
        .unwrap();
    let absolute = format!("sqlite:{}", cwd.join("leases.db").display());
    let log = host.log_text();
    let starting = log
        .lines()
        .find(|l| l.contains("leasehold starting"))
        .unwrap_or_else(|| panic!("no start line:\n{log}"));
    assert!(starting.contains(&format!("store={absolute} ")), "{log}");
    let resolved = log
        .lines()
        .find(|l| l.contains("relative SQLite path resolved"))
        .unwrap_or_else(|| panic!("the resolution is not logged:\n{log}"));
    assert!(
        resolved.contains("given=./leases.db")
            && resolved.contains(&format!("path={}", cwd.join("leases.db").display())),
        "{resolved}"
    );
    assert!(cwd.join("leases.db").is_file());
}

#[tokio::test]
async fn bad_settings_are_rejected_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite:{}", dir.path().join("x.db").display());
    let (status, stderr) = run_to_exit(
        &["run", "--database-url", &db, "--ttl", "10ms"],
        Duration::from_secs(20),
    )
    .await
    .unwrap();
    assert!(!status.success());
    assert!(stderr.contains("ttl = 10ms"), "{stderr}");
    let config = dir.path().join("bad.toml");
    std::fs::write(&config, "database_url = 'sqlite:x.db'\nttll = '5s'\n").unwrap();
    let (status, stderr) = run_to_exit(
        &["run", "--config", config.to_str().unwrap()],
        Duration::from_secs(20),
    )
    .await
    .unwrap();
    assert!(!status.success());
    assert!(
        stderr.contains("bad.toml") && stderr.contains("ttll"),
        "{stderr}"
    );
    std::fs::write(&config, "[timing]\nttl = '3s'\nrenew_interval = '3s'\n").unwrap();
    let (status, stderr) = run_to_exit(
        &[
            "run",
            "--config",
            config.to_str().unwrap(),
            "--database-url",
            &db,
        ],
        Duration::from_secs(20),
    )
    .await
    .unwrap();
    assert!(!status.success());
    assert!(stderr.contains("renew_interval"), "{stderr}");
}

/// A margin of 1ns passed every check, though the ttl and the database's times are whole
/// milliseconds: the binary refuses it at start, naming the config key, the value and the rule.
#[tokio::test]
async fn a_margin_below_its_floor_is_refused_at_start_by_its_config_key() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("leasehold.toml");
    std::fs::write(
        &config,
        format!(
            "database_url = 'sqlite:{}'\n[timing]\nttl = '2s'\nmargin = '1ns'\n",
            dir.path().join("leases.db").display()
        ),
    )
    .unwrap();
    let (status, stderr) = run_to_exit(
        &[
            "run",
            "--config",
            config.to_str().unwrap(),
            "--http",
            "127.0.0.1:0",
        ],
        Duration::from_secs(20),
    )
    .await
    .unwrap();
    assert!(!status.success(), "{status:?}");
    let lines: Vec<&str> = stderr.lines().filter(|l| l.contains("error")).collect();
    assert_eq!(lines.len(), 1, "one error line expected:\n{stderr}");
    assert!(
        lines[0].contains("timing.margin = 1ns") && lines[0].contains("at least 10ms"),
        "{stderr}"
    );
    assert!(
        !dir.path().join("leases.db").exists(),
        "refused before opening the store"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_list_pages_through_the_table() {
    let db = Db::new(Backend::Postgres).await.unwrap();
    let url = db.url().unwrap();
    let store = db.open().await.unwrap();
    for i in 0..7 {
        store
            .campaign(&format!("job-{i}"), "someone-1", Duration::from_secs(60))
            .await
            .unwrap();
    }
    let bin = leasehold_tests::host::binary().unwrap();
    let list = async |extra: &[&str]| {
        let out = tokio::process::Command::new(&bin)
            .args(["leases", "list", "--database-url", url.as_str()])
            .args(extra)
            .output()
            .await
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    // Small pages must still return every row once, in order.
    let json: Value = serde_json::from_str(&list(&["--json", "--page-size", "2"]).await).unwrap();
    let names: Vec<&str> = json
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        (0..7).map(|i| format!("job-{i}")).collect::<Vec<_>>()
    );
    assert_eq!(json[0]["holder"], "someone-1");
    assert_eq!(json[0]["epoch"], 1);
    assert!(json[0]["expires_in_ms"].as_i64().unwrap() > 50_000);
    let json: Value =
        serde_json::from_str(&list(&["--json", "--after", "job-4", "--limit", "1"]).await).unwrap();
    assert_eq!(json.as_array().unwrap().len(), 1);
    assert_eq!(json[0]["name"], "job-5");
    let table = list(&[]).await;
    assert!(table.starts_with("NAME"), "{table}");
    assert_eq!(table.lines().count(), 8, "{table}");
    // A database with no rows (it exists: admin commands create none) lists none.
    let empty = Db::new(Backend::Sqlite).await.unwrap();
    let _created = empty.open().await.unwrap();
    let out = tokio::process::Command::new(&bin)
        .args([
            "leases",
            "list",
            "--json",
            "--database-url",
            &empty.url().unwrap(),
        ])
        .output()
        .await
        .unwrap();
    assert_eq!(String::from_utf8(out.stdout).unwrap().trim(), "[]");
}

/// `leases list` tells a free lease's story: `held`, or how its last term ended (released by its
/// holder, forced by an operator, or expired: its holder went silent); `--held` leaves free
/// names out, and a `--limit` that leaves rows unread says on stderr how to go on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_list_says_how_each_free_lease_was_freed_and_how_to_go_on() {
    let db = Db::new(Backend::Sqlite).await.unwrap();
    let url = db.url().unwrap();
    let store = db.open().await.unwrap();
    let long = Duration::from_secs(60);
    for name in ["job-held", "job-released", "job-forced"] {
        store.campaign(name, "someone-1", long).await.unwrap();
    }
    let epoch = store
        .campaign("job-expired", "someone-1", Duration::from_millis(200))
        .await
        .unwrap()
        .epoch
        .unwrap();
    assert_eq!(epoch, Epoch::new(1));
    store
        .release("job-released", "someone-1", Epoch::new(1))
        .await
        .unwrap();
    store.force_release("job-forced").await.unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await;

    let bin = leasehold_tests::host::binary().unwrap();
    let list = async |extra: &[&str]| {
        let out = tokio::process::Command::new(&bin)
            .args(["leases", "list", "--database-url", url.as_str()])
            .args(extra)
            .output()
            .await
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr).to_string();
        assert!(out.status.success(), "{stderr}");
        (String::from_utf8(out.stdout).unwrap(), stderr)
    };
    let (json, _) = list(&["--json"]).await;
    let json: Value = serde_json::from_str(&json).unwrap();
    let states: Vec<(&str, &str)> = json
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["name"].as_str().unwrap(), r["state"].as_str().unwrap()))
        .collect();
    assert_eq!(
        states,
        [
            ("job-expired", "expired"),
            ("job-forced", "forced"),
            ("job-held", "held"),
            ("job-released", "released"),
        ]
    );
    let (table, _) = list(&[]).await;
    assert!(table.lines().next().unwrap().contains("STATE"), "{table}");
    assert!(
        table
            .lines()
            .any(|l| l.starts_with("job-forced") && l.contains(" forced ")),
        "{table}"
    );

    let (held, _) = list(&["--held"]).await;
    let names: Vec<&str> = held
        .lines()
        .skip(1)
        .map(|l| l.split(' ').next().unwrap())
        .collect();
    assert_eq!(names, ["job-held"], "{held}");

    let (two, more) = list(&["--limit", "2"]).await;
    assert_eq!(two.lines().count(), 3, "{two}");
    assert_eq!(
        more.trim(),
        "more leases follow: leasehold leases list --after job-forced"
    );
    let (all, none) = list(&["--limit", "4"]).await;
    assert_eq!(all.lines().count(), 5, "{all}");
    assert_eq!(none.trim(), "", "no hint when nothing is left");
}

/// TLS through `sslmode` in the URL: with `verify-full` against the server's own certificate the
/// host leads and admin commands work, over an encrypted session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    given_server,
    ignore = "DATABASE_URL is set, and this test needs the TLS certificate of the server the harness starts itself"
)]
async fn postgres_over_tls_with_sslmode() {
    leasehold_tests::pg::needs_own_server("needs the TLS certificate of its server");
    let server = leasehold_tests::pg::server();
    // The harness makes the certificate with openssl (scripts/install-deps.sh installs it).
    let ca = server
        .tls_root_cert()
        .expect("the harness's server runs without TLS: is openssl installed?");
    let url = server.fresh_database().await.unwrap();
    let tls = format!("{url}?sslmode=verify-full&sslrootcert={}", ca.display());
    let mut conn = <sqlx::PgConnection as sqlx::Connection>::connect(&tls)
        .await
        .unwrap();
    let encrypted: bool =
        sqlx::query_scalar("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
            .fetch_one(&mut conn)
            .await
            .unwrap();
    assert!(encrypted);
    let host = Host::start("tls", &["--database-url", &tls]).await.unwrap();
    wait_for_single_leader(&[&host], "leader", Duration::from_secs(15))
        .await
        .unwrap();
    let (status, stderr) = run_to_exit(
        &["leases", "list", "--database-url", &tls],
        Duration::from_secs(30),
    )
    .await
    .unwrap();
    assert!(status.success(), "{stderr}");
    // A certificate the client does not trust is refused, with the reason.
    let wrong = format!("{url}?sslmode=verify-full&sslrootcert=/etc/ssl/certs/ca-certificates.crt");
    let (status, stderr) = run_to_exit(
        &["leases", "list", "--database-url", &wrong],
        Duration::from_secs(30),
    )
    .await
    .unwrap();
    assert!(!status.success());
    assert!(
        stderr.to_lowercase().contains("certificate") || stderr.contains("tls"),
        "{stderr}"
    );
}

/// With `--log-format json` every line on stderr is one JSON object, and a password in the
/// database URL shows nowhere: not in the log, not in a startup error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_logs_and_no_password_anywhere() {
    let url = leasehold_tests::pg::server()
        .fresh_database()
        .await
        .unwrap();
    // The test server trusts every local connection, so any password is accepted and unused.
    let secret = "pw-never-shown-5150";
    let with_password = url.replacen(
        "postgres://postgres@",
        &format!("postgres://postgres:{secret}@"),
        1,
    );
    assert_ne!(with_password, url);
    let host = Host::start(
        "json",
        &["--database-url", &with_password, "--log-format", "json"],
    )
    .await
    .unwrap();
    wait_for_single_leader(&[&host], "leader", Duration::from_secs(15))
        .await
        .unwrap();
    let log = host.log_text();
    for line in log.lines().filter(|l| !l.trim().is_empty()) {
        let parsed: Result<Value, _> = serde_json::from_str(line);
        assert!(parsed.is_ok(), "not JSON: {line}");
    }
    assert!(log.contains("lease acquired"), "{log}");
    assert!(!log.contains(secret), "{log}");
    // A refused connection names the URL, redacted.
    let unreachable = format!("postgres://postgres:{secret}@127.0.0.1:1/nowhere");
    let (status, stderr) = run_to_exit(
        &["leases", "list", "--database-url", &unreachable],
        Duration::from_secs(30),
    )
    .await
    .unwrap();
    assert!(!status.success());
    assert!(
        stderr.contains("127.0.0.1:1") && !stderr.contains(secret),
        "{stderr}"
    );
}

/// A host whose stderr nobody reads (a log collector that fell behind: the pipe full) keeps its
/// lease and its plugins: three plugins logging every 10 ms fill the pipe's 64 KiB in about a
/// second, and the lines past that are queued and then dropped, never waited for; SIGTERM still
/// stops it. A host that wrote its log where it logged would wait in write(2) in each plugin call
/// and then in the lease loop, until the lease expired.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_whose_log_nobody_reads_keeps_its_lease_and_its_plugins_running() {
    use leasehold_tests::endpoint::Endpoint;
    use rustix::process::{Pid, Signal, kill_process};
    use tokio::io::AsyncReadExt;
    let db = Db::new(Backend::Sqlite).await.unwrap();
    let manifest = "[schedule]\ninterval = \"10ms\"\n[config]\ngreeting = \"noise\"\n";
    let plugins = leasehold_tests::host::plugin_dir(&[("hello-reconciler", manifest)]).unwrap();
    for name in ["noisy-2", "noisy-3"] {
        let dir = plugins.path();
        std::fs::copy(
            dir.join("hello-reconciler.wasm"),
            dir.join(format!("{name}.wasm")),
        )
        .unwrap();
        std::fs::write(dir.join(format!("{name}.toml")), manifest).unwrap();
    }
    let port = leasehold_tests::pg::free_port().unwrap();
    let mut child = tokio::process::Command::new(leasehold_tests::host::binary().unwrap())
        .args(["run", "--database-url", &db.url().unwrap(), "--ttl", "1s"])
        .args(["--http", &format!("127.0.0.1:{port}"), "--plugins"])
        .arg(plugins.path())
        .env("RUST_LOG", "info")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    // Held open and never read until the end.
    let mut stderr = child.stderr.take().unwrap();
    let host = Endpoint::new(([127, 0, 0, 1], port).into()).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let epoch = loop {
        // The role is the host's own, the epoch its last read of the database, which on a busy
        // machine may still be from before it acquired: both, or ask again.
        if let Ok(status) = host.status().await {
            let lease = lease_entry(&status);
            if lease.role == Role::Leader
                && let Some(epoch) = lease.epoch
            {
                break epoch;
            }
        }
        assert!(Instant::now() < deadline, "the host never led");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    // Five ttls with the pipe full (it is after two seconds; the end checks that it was).
    tokio::time::sleep(Duration::from_secs(2)).await;
    let calls = async || {
        let status = host.status().await;
        let status = status.expect("the host stopped answering while its log was not read");
        status.plugin("noisy-2").expect("noisy-2 in /status").calls
    };
    let calls_before = calls().await;
    let watch_until = Instant::now() + Duration::from_secs(5);
    while Instant::now() < watch_until {
        let status = host.status().await;
        let status = status.expect("the host stopped answering while its log was not read");
        let lease = lease_entry(&status);
        assert_eq!(
            (lease.role, lease.epoch),
            (Role::Leader, Some(epoch)),
            "the lease moved while the log was not read: {lease:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let calls_after = calls().await;
    assert!(
        calls_after > calls_before + 100,
        "the plugins stalled: {calls_before} calls, then {calls_after} five seconds later"
    );
    // A stop still releases and exits with the log unread: nothing at exit waits on stderr for
    // good (the queue's last lines get 1.1 s).
    let pid = i32::try_from(child.id().unwrap())
        .ok()
        .and_then(Pid::from_raw);
    kill_process(pid.unwrap(), Signal::TERM).unwrap();
    let exit = tokio::time::timeout(Duration::from_secs(10), child.wait()).await;
    let exit = exit.expect("no exit within 10 s of SIGTERM with the log unread");
    assert!(exit.unwrap().success());
    let mut written = Vec::new();
    stderr.read_to_end(&mut written).await.unwrap();
    assert!(
        written.len() >= 60_000,
        "the pipe never filled ({} bytes), so this proved nothing",
        written.len()
    );
}
