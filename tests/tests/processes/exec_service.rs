//! Services leasehold does not own (`[[service]]`), from outside: real hosts whose activate,
//! deactivate and health scripts append to one history file and read flag files the test sets;
//! and apps that only lend their health to the lease, through an HTTP endpoint the test serves.

#![allow(clippy::unwrap_used, missing_docs)]

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};

use leasehold_tests::eventually::{eventually, when};
use leasehold_tests::host::{Host, HostBuilder};
use leasehold_tests::log::Logged;
use leasehold_tests::proxy::{Fault, Proxy, upstream_of};

/// A `[[service]]` on lease `relay` whose scripts write `EPOCH activate|deactivate NANOS` lines
/// to `dir/history`; `health` fails in a role while `dir/fail-ROLE` exists, `activate` while
/// `dir/fail-activate` does.
fn config(dir: &Path, deactivate: &str, grace: &str) -> String {
    let d = dir.display();
    format!(
        r#"leases = ["relay"]
[[service]]
name = "relay"
activate = ["sh", "-c", "test ! -e {d}/fail-activate || exit 1; echo \"$LEASEHOLD_EPOCH activate $(date +%s%N)\" >> {d}/history"]
deactivate = ["sh", "-c", "{deactivate}echo \"$LEASEHOLD_EPOCH deactivate $(date +%s%N)\" >> {d}/history"]
health = ["sh", "-c", "test ! -e {d}/fail-$1", "health"]
health_interval = "200ms"
grace = "{grace}"
"#
    )
}

/// `(epoch, what, nanos)` of each line of the history.
fn history(dir: &Path) -> Vec<(i64, String, u128)> {
    std::fs::read_to_string(dir.join("history"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let mut p = l.split(' ');
            Some((
                p.next()?.parse().ok()?,
                p.next()?.to_string(),
                p.next()?.parse().ok()?,
            ))
        })
        .collect()
}

async fn in_history(dir: &Path, epoch: i64, what: &str) -> u128 {
    eventually(
        format!("epoch {epoch} {what}"),
        Duration::from_secs(20),
        async || {
            when(history(dir), |h| {
                h.iter().any(|(e, w, _)| *e == epoch && w == what)
            })
        },
    )
    .await
    .unwrap()
    .into_iter()
    .find(|(e, w, _)| *e == epoch && w == what)
    .unwrap()
    .2
}

fn replica(name: &str, url: &str, dir: &Path, deactivate: &str, grace: &str) -> HostBuilder {
    HostBuilder::new(name)
        .database_url(url)
        .ttl(Duration::from_secs(2))
        .config(&config(dir, deactivate, grace))
}

/// On a fresh PostgreSQL database: `a` holding `relay` with its epoch 1 activated (its
/// deactivate prefixed by `deactivate`), and `b` a standby ready to take over (its gate open, its
/// first campaign done).
async fn holder_and_standby(dir: &Path, deactivate: &str) -> (Host, Host) {
    let url = leasehold_tests::pg::server()
        .fresh_database()
        .await
        .unwrap();
    let a = replica("a", &url, dir, deactivate, "500ms")
        .spawn_leading("relay")
        .await
        .unwrap();
    in_history(dir, 1, "activate").await;
    let b = replica("b", &url, dir, "", "500ms").spawn().await.unwrap();
    b.wait_for_log("campaigning allowed", Duration::from_secs(10))
        .await
        .unwrap();
    // b has campaigned once: it stands in the line, ready to take over.
    b.wait_placed("relay", &["b"], Duration::from_secs(10))
        .await
        .unwrap();
    (a, b)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_holder_activates_and_deactivates_before_the_next_holder_activates() {
    let dir = tempfile::tempdir().unwrap();
    let (mut a, b) = holder_and_standby(dir.path(), "").await;
    let last = a.stop_for_last_line().await.unwrap();
    let deactivated = in_history(dir.path(), 1, "deactivate").await;
    let next = in_history(dir.path(), 2, "activate").await;
    assert!(deactivated < next, "{:?}", history(dir.path()));
    eprintln!(
        "deactivate of epoch 1 → activate of epoch 2: {:.1} ms",
        (next - deactivated) as f64 / 1e6
    );
    let log = a.log_text();
    assert!(log.contains("service deactivated"), "{log}");
    assert!(
        last.contains("processes: relay (relay) deactivated, stopped in"),
        "{last}"
    );
    drop(b);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_standby_health_script_keeps_the_replica_from_campaigning_until_it_passes() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("fail-standby"), "").unwrap();
    let url = format!("sqlite:{}", dir.path().join("leases.db").display());
    let host = replica("gated", &url, dir.path(), "", "500ms")
        .spawn()
        .await
        .unwrap();
    host.wait_for_log("standby health script fails", Duration::from_secs(10))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        !host.log_text().contains("lease acquired"),
        "{}",
        host.log_text()
    );
    assert!(history(dir.path()).is_empty());
    std::fs::remove_file(dir.path().join("fail-standby")).unwrap();
    host.wait_for_log("lease acquired", Duration::from_secs(10))
        .await
        .unwrap();
    in_history(dir.path(), 1, "activate").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_standby_health_script_keeps_the_replica_from_campaigning_whatever_a_health_check_plugin_says()
 {
    // The plugin fails every other standby check: each pass after a failure opens the gate as
    // far as the plugin is concerned, never for the script.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("fail-standby"), "").unwrap();
    let plugins = leasehold_tests::host::plugin_dir(&[(
        "flaky-health",
        "lease = \"relay\"\n[schedule]\ninterval = \"100ms\"\n[config]\nfail = \"standby\"\nfail_every = \"2\"\n",
    )])
    .unwrap();
    let url = format!("sqlite:{}", dir.path().join("leases.db").display());
    let host = replica("gated", &url, dir.path(), "", "500ms")
        .plugins(plugins.path())
        .spawn()
        .await
        .unwrap();
    host.wait_for_log("standby health script fails", Duration::from_secs(10))
        .await
        .unwrap();
    host.wait_for_log("standby health check fails", Duration::from_secs(10))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let log = host.log_text();
    let failed = log.find("standby health check fails").unwrap();
    assert!(
        log[failed..].contains("health check passes: campaigning allowed"),
        "the plugin passed again meanwhile: {log}"
    );
    assert!(!log.contains("lease acquired"), "{log}");
    assert!(history(dir.path()).is_empty());
    // The script passes: the gate opens once the plugin's next check passes too.
    std::fs::remove_file(dir.path().join("fail-standby")).unwrap();
    host.wait_for_log("lease acquired", Duration::from_secs(10))
        .await
        .unwrap();
    in_history(dir.path(), 1, "activate").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_active_health_script_that_keeps_failing_deactivates_and_gives_the_lease_up() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite:{}", dir.path().join("leases.db").display());
    let host = replica("sick", &url, dir.path(), "", "500ms")
        .spawn_leading("relay")
        .await
        .unwrap();
    in_history(dir.path(), 1, "activate").await;
    std::fs::write(dir.path().join("fail-active"), "").unwrap();
    host.wait_for_log("failed 3 times in a row", Duration::from_secs(10))
        .await
        .unwrap();
    in_history(dir.path(), 1, "deactivate").await;
    host.wait_for_log("lease released", Duration::from_secs(10))
        .await
        .unwrap();
    let status = host.status().await.unwrap();
    let card = &status.processes[0];
    assert_eq!(card.starts, 1, "{card:?}");
    assert_eq!(
        card.exits.get("health code 1").copied(),
        Some(3),
        "{card:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deactivate_that_outlasts_its_grace_is_killed_and_counted_as_an_unconfirmed_stop() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite:{}", dir.path().join("leases.db").display());
    let mut host: Host = replica("stuck", &url, dir.path(), "sleep 600; ", "300ms")
        .spawn_leading("relay")
        .await
        .unwrap();
    in_history(dir.path(), 1, "activate").await;
    let last = host.stop_for_last_line().await.unwrap();
    let log = host.log_text();
    assert!(log.contains("counted as an unconfirmed stop"), "{log}");
    assert!(
        last.contains("processes: relay (relay): stop unconfirmed"),
        "{last}"
    );
    assert!(
        !history(dir.path())
            .iter()
            .any(|(_, w, _)| w == "deactivate"),
        "the killed deactivate ran to its end"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_activate_is_followed_by_deactivate_and_the_lease_is_given_up() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("fail-activate"), "").unwrap();
    let url = format!("sqlite:{}", dir.path().join("leases.db").display());
    let host = replica("broken", &url, dir.path(), "", "500ms")
        .spawn_leading("relay")
        .await
        .unwrap();
    host.wait_for_log(
        "activate failed: deactivating, and giving the lease up",
        Duration::from_secs(10),
    )
    .await
    .unwrap();
    in_history(dir.path(), 1, "deactivate").await;
    host.wait_for_log("lease released", Duration::from_secs(10))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_renewals_fail_the_holder_deactivates_before_the_next_holder_activates() {
    let dir = tempfile::tempdir().unwrap();
    let url = leasehold_tests::pg::server()
        .fresh_database()
        .await
        .unwrap();
    // `a` reaches the database through a proxy the test can cut.
    let proxy = Proxy::start(upstream_of(&url).unwrap()).unwrap();
    let a = replica("a", &proxy.url(&url).unwrap(), dir.path(), "", "500ms")
        .spawn_leading("relay")
        .await
        .unwrap();
    in_history(dir.path(), 1, "activate").await;
    let b = replica("b", &url, dir.path(), "", "500ms")
        .spawn()
        .await
        .unwrap();
    proxy.set(Fault::BlackHole {
        to_server: true,
        to_client: true,
    });
    a.wait_for_log(
        "deactivating ahead of the lease's deadline",
        Duration::from_secs(10),
    )
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", a.log_text()));
    let deactivated = in_history(dir.path(), 1, "deactivate").await;
    let next = in_history(dir.path(), 2, "activate").await;
    assert!(deactivated < next, "{:?}", history(dir.path()));
    eprintln!(
        "epoch 1 deactivated {:.0} ms before epoch 2 activated",
        (next - deactivated) as f64 / 1e6
    );
    // The line comes once the keeper has seen the service's tree gone, which on a loaded
    // machine can be after the next holder's start; the order above is the history's.
    a.wait_for_log("service deactivated", Duration::from_secs(10))
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", a.log_text()));
    proxy.set(Fault::None);
    drop(b);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_table_that_cannot_run_fails_at_start_in_one_line_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite:{}", dir.path().join("leases.db").display());
    let cases = [
        (
            "activate = [\"true\"]\ndeactivate = []",
            "invalid service \"relay\": deactivate is empty",
        ),
        ("", "invalid service \"relay\": nothing to run"),
        (
            "health = \"https://127.0.0.1:8443/healthz\"",
            "invalid service \"relay\": health = \"https://127.0.0.1:8443/healthz\": https is not probed",
        ),
        (
            "activate = [\"/no/such/script\"]\ndeactivate = [\"true\"]",
            "invalid service \"relay\": activate: command /no/such/script: No such file or directory",
        ),
        (
            "activate = [\"true\"]\ndeactivate = [\"true\"]\nfailure_threshold = 0",
            "failure_threshold = 0: at least 1",
        ),
        (
            "activate = [\"true\"]\ndeactivate = [\"true\"]\nhealth_check = [\"true\"]",
            "unknown field `health_check`",
        ),
        (
            "activate = [\"true\"]\ndeactivate = [\"true\"]\n[[process]]\nname = \"relay\"\ncommand = [\"true\"]",
            "invalid service \"relay\": a [[process]] has this name too",
        ),
    ];
    for (keys, wanted) in cases {
        let file = dir.path().join("leasehold.toml");
        std::fs::write(
            &file,
            format!("leases = [\"relay\"]\n[[service]]\nname = \"relay\"\n{keys}\n"),
        )
        .unwrap();
        let (status, stderr) = leasehold_tests::host::run_to_exit(
            &[
                "run",
                "--config",
                file.to_str().unwrap(),
                "--database-url",
                &url,
                "--http",
                "127.0.0.1:0",
            ],
            Duration::from_secs(30),
        )
        .await
        .unwrap();
        assert_eq!(status.code(), Some(1), "{keys}: {stderr}");
        assert!(stderr.contains(wanted), "{keys}: {stderr}");
        assert_eq!(stderr.trim().lines().count(), 1, "{keys}: {stderr}");
    }
}

/// A holder frozen alone (SIGSTOP of its host, a debugger, a stuck runtime) cannot stop its
/// service: the keeper holding `deactivate` ready runs it on its own clock a grace before the
/// lease's deadline, so it has ended before the next holder's `activate` begins; the resumed host
/// says the keeper did it, counts the stop as the keeper's and as confirmed (it ended in time).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_holder_s_service_is_deactivated_by_its_keeper_before_the_next_holder_activates() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = holder_and_standby(dir.path(), "sleep 0.2; ").await;
    a.signal("STOP").unwrap();
    let deactivated = in_history(dir.path(), 1, "deactivate").await;
    let next = in_history(dir.path(), 2, "activate").await;
    assert!(deactivated < next, "{:?}", history(dir.path()));
    eprintln!(
        "frozen holder: epoch 1 deactivated by its keeper {:.0} ms before epoch 2 activated",
        (next - deactivated) as f64 / 1e6
    );
    tokio::time::sleep(Duration::from_secs(4)).await;
    a.signal("CONT").unwrap();
    a.wait_for_log(
        "the keeper began deactivate on its own",
        Duration::from_secs(10),
    )
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", a.log_text()));
    let over = a
        .wait_for_log("before this host resumed", Duration::from_secs(10))
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", a.log_text()));
    a.wait_for_log("service deactivated", Duration::from_secs(10))
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", a.log_text()));
    eprintln!("{over}");
    let status = a.status().await.unwrap();
    let card = &status.processes[0];
    assert_eq!(card.keeper_stops, 1, "{card:?}");
    assert_eq!(card.unconfirmed_stops, 0, "{card:?}");
    let took = card.last_stop_ms.unwrap();
    assert!((200.0..500.0).contains(&took), "{card:?}");
    drop(b);
}

/// The whole tree frozen (host and keepers together, as a frozen machine or container would be)
/// and resumed past the deadline: nothing ran while it was frozen, so `deactivate` runs late, with
/// its whole grace (stopping the service late beats leaving it running), and the stop is counted
/// unconfirmed: here the fence is the backstop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_frozen_with_its_keepers_deactivates_late_on_resume_and_says_it_is_unconfirmed() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite:{}", dir.path().join("leases.db").display());
    let host = replica("frozen", &url, dir.path(), "sleep 0.2; ", "500ms")
        .spawn_leading("relay")
        .await
        .unwrap();
    in_history(dir.path(), 1, "activate").await;
    let signal_all = |pids: &[u32], signal| {
        for pid in pids {
            let _ = rustix::process::kill_process(
                rustix::process::Pid::from_raw(*pid as i32).unwrap(),
                signal,
            );
        }
    };
    host.signal("STOP").unwrap();
    let mut tree = vec![host.pid()];
    tree.extend(leasehold_tests::exec::descendants(host.pid()));
    signal_all(&tree, rustix::process::Signal::STOP);
    tokio::time::sleep(Duration::from_secs(6)).await;
    signal_all(&tree, rustix::process::Signal::CONT);
    in_history(dir.path(), 1, "deactivate").await;
    host.wait_for_log("counted as an unconfirmed stop", Duration::from_secs(10))
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", host.log_text()));
}

/// A holder's host killed alone (the OOM killer, a crash): the keeper holding `deactivate` ready
/// sees its host gone and runs it at once; the next holder activates after it has ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_holder_s_service_is_deactivated_by_its_keeper_before_the_next_holder_activates() {
    let dir = tempfile::tempdir().unwrap();
    let (mut a, b) = holder_and_standby(dir.path(), "").await;
    let killed = leasehold_tests::exec::now_ns();
    a.kill().await.unwrap();
    let deactivated = in_history(dir.path(), 1, "deactivate").await;
    let next = in_history(dir.path(), 2, "activate").await;
    assert!(deactivated < next, "{:?}", history(dir.path()));
    let after = (deactivated - killed) as f64 / 1e6;
    eprintln!(
        "killed holder: epoch 1 deactivated {after:.0} ms after the kill, {:.0} ms before epoch 2 activated",
        (next - deactivated) as f64 / 1e6
    );
    assert!(
        after < 1000.0,
        "deactivate ran {after:.0} ms after the kill"
    );
    drop(b);
}

/// What `activate` leaves running when it exits is the service (a daemon it started, as
/// `redis-server --daemonize yes`, `nginx` or `pg_ctl start` do): the term is activated on the
/// first try and the daemon runs on until `deactivate` stops it. The log says it left them running,
/// and, when they still hold the script's output, that their output is no longer read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_activate_leaves_running_is_the_service_and_runs_until_deactivate() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().display();
    let url = format!("sqlite:{}", dir.path().join("leases.db").display());
    let config = format!(
        r#"leases = ["relay"]
[[service]]
name = "relay"
activate = ["sh", "-c", "setsid sleep 600 </dev/null >/dev/null 2>&1 & echo $! > {d}/daemon; sleep 300 & echo $! > {d}/chatty; echo started"]
deactivate = ["sh", "-c", "kill $(cat {d}/daemon) $(cat {d}/chatty)"]
grace = "500ms"
"#
    );
    // A 4 s ttl: at 2 s, a host starved of the CPU under the whole suite saw its deactivate's
    // end after the term's deadline ("stop unconfirmed"), which this test is not about.
    let mut host = HostBuilder::new("daemon")
        .database_url(&url)
        .ttl(Duration::from_secs(4))
        .config(&config)
        .spawn_leading("relay")
        .await
        .unwrap();
    host.wait_for_log("service activated", Duration::from_secs(10))
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", host.log_text()));
    let pid = |name: &str| -> i32 {
        std::fs::read_to_string(dir.path().join(name))
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    };
    let alive = |pid: i32| std::path::Path::new(&format!("/proc/{pid}")).exists();
    let (daemon, chatty) = (pid("daemon"), pid("chatty"));
    // More than a ttl of renewals: nothing kills them, and the lease stays.
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(alive(daemon) && alive(chatty), "{}", host.log_text());
    let log = host.log_text();
    assert!(
        log.contains("the activate script left 2 process(es) running"),
        "{log}"
    );
    assert!(log.contains("no longer read: redirect it"), "{log}");
    assert!(!log.contains("activate failed"), "{log}");
    assert!(!log.contains("killed"), "{log}");
    assert_eq!(log.matches("lease acquired").count(), 1, "{log}");
    let last = host.stop_for_last_line().await.unwrap();
    assert!(
        last.contains("relay (relay) deactivated"),
        "{last}\n{}",
        host.log_text()
    );
    eventually(
        "the daemon stopped by deactivate",
        Duration::from_secs(5),
        async || when((alive(daemon), alive(chatty)), |(d, c)| !*d && !*c),
    )
    .await
    .unwrap();
}

/// A script that does not exit by its time limit is killed with its tree, and the log says that
/// (not that it left anything behind).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_activate_that_does_not_exit_by_the_deadline_is_killed_and_the_log_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite:{}", dir.path().join("leases.db").display());
    let config = r#"leases = ["relay"]
[[service]]
name = "relay"
activate = ["sleep", "600"]
deactivate = ["true"]
grace = "300ms"
"#;
    let host = HostBuilder::new("hung")
        .database_url(&url)
        .ttl(Duration::from_secs(2))
        .config(config)
        .spawn_leading("relay")
        .await
        .unwrap();
    let line = host
        .wait_for_log("did not exit by its time limit", Duration::from_secs(10))
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", host.log_text()));
    assert!(line.contains("the activate script"), "{line}");
    host.wait_for_log("activate failed", Duration::from_secs(5))
        .await
        .unwrap();
}

/// One request the app's health endpoint answered.
#[derive(Debug, Clone)]
struct Probed {
    /// Its query string.
    query: String,
    /// Its `X-Leasehold-Role`, `X-Leasehold-Lease` and `X-Leasehold-Epoch` headers.
    role: Option<String>,
    lease: Option<String>,
    epoch: Option<String>,
}

/// An app's `/healthz`, served by the test on a port of its own: 200 while `healthy`, else 503.
struct App {
    port: u16,
    healthy: Arc<AtomicBool>,
    probed: Arc<Mutex<Vec<Probed>>>,
    server: tokio::task::JoinHandle<()>,
}

type AppState = (Arc<AtomicBool>, Arc<Mutex<Vec<Probed>>>);

async fn healthz(
    State((healthy, probed)): State<AppState>,
    uri: Uri,
    headers: HeaderMap,
) -> StatusCode {
    let header = |name: &str| {
        headers
            .get(name)
            .map(|v| v.to_str().unwrap_or_default().to_string())
    };
    probed.lock().unwrap().push(Probed {
        query: uri.query().unwrap_or_default().to_string(),
        role: header("x-leasehold-role"),
        lease: header("x-leasehold-lease"),
        epoch: header("x-leasehold-epoch"),
    });
    match healthy.load(Ordering::SeqCst) {
        true => StatusCode::OK,
        false => StatusCode::SERVICE_UNAVAILABLE,
    }
}

impl App {
    async fn start(healthy: bool) -> App {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let healthy = Arc::new(AtomicBool::new(healthy));
        let probed = Arc::new(Mutex::new(Vec::new()));
        let router = axum::Router::new()
            .route("/healthz", axum::routing::get(healthz))
            .with_state((healthy.clone(), probed.clone()));
        let server = tokio::spawn(async move {
            axum::serve(listener, router).await.unwrap();
        });
        App {
            port,
            healthy,
            probed,
            server,
        }
    }

    fn set_healthy(&self, healthy: bool) {
        self.healthy.store(healthy, Ordering::SeqCst);
    }

    /// The requests so far whose `X-Leasehold-Role` is `role`.
    fn probed_as(&self, role: &str) -> Vec<Probed> {
        let probed = self.probed.lock().unwrap();
        probed
            .iter()
            .filter(|p| p.role.as_deref() == Some(role))
            .cloned()
            .collect()
    }

    /// Waits for a request in `role` and returns it.
    async fn wait_probed_as(&self, role: &str) -> Probed {
        eventually(
            format!("a probe as {role}"),
            Duration::from_secs(20),
            async || self.probed_as(role).pop().ok_or(()),
        )
        .await
        .unwrap()
    }
}

impl Drop for App {
    fn drop(&mut self) {
        self.server.abort();
    }
}

/// A host whose `[[service]]` on lease `relay` is `app`'s health alone: no scripts.
fn probed_replica(name: &str, url: &str, app: &App) -> HostBuilder {
    HostBuilder::new(name)
        .database_url(url)
        .ttl(Duration::from_secs(2))
        .config(&format!(
            r#"leases = ["relay"]
[[service]]
name = "relay"
health = "http://127.0.0.1:{}/healthz?from=leasehold"
health_interval = "200ms"
"#,
            app.port
        ))
}

/// Whether `host` is ready for `relay` (`GET /readyz/leases/relay` answers 200: the holder).
async fn holds(host: &Host) -> bool {
    matches!(host.get("/readyz/leases/relay").await, Ok((200, _)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_health_probe_that_fails_three_times_makes_the_holder_step_down_and_another_take_over()
 {
    let url = leasehold_tests::pg::server()
        .fresh_database()
        .await
        .unwrap();
    let (app_a, app_b) = (App::start(true).await, App::start(true).await);
    let a = probed_replica("a", &url, &app_a)
        .spawn_leading("relay")
        .await
        .unwrap();
    let b = probed_replica("b", &url, &app_b).spawn().await.unwrap();
    // A standby ready to take over: its gate open, its first campaign done.
    b.wait_for_log("standby health probe passes", Duration::from_secs(10))
        .await
        .unwrap();
    b.wait_placed("relay", &["b"], Duration::from_secs(10))
        .await
        .unwrap();
    assert!(holds(&a).await && !holds(&b).await);

    // Each app is asked in its replica's role, in the query (after its own) and the headers.
    let active = app_a.wait_probed_as("active").await;
    assert_eq!(active.query, "from=leasehold&role=active", "{active:?}");
    assert_eq!(active.lease.as_deref(), Some("relay"), "{active:?}");
    assert_eq!(active.epoch.as_deref(), Some("1"), "{active:?}");
    let standby = app_b.wait_probed_as("standby").await;
    assert_eq!(standby.query, "from=leasehold&role=standby", "{standby:?}");
    assert_eq!(standby.lease.as_deref(), Some("relay"), "{standby:?}");
    assert_eq!(standby.epoch, None, "{standby:?}");
    assert!(app_b.probed_as("active").is_empty());

    app_a.set_healthy(false);
    let sick = std::time::Instant::now();
    a.wait_for_log(
        "health probe failed 3 times in a row",
        Duration::from_secs(10),
    )
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", a.log_text()));
    let log = a.log_text();
    assert!(
        log.contains("active health probe failed: answered 503 Service Unavailable"),
        "{log}"
    );
    eventually("b holds relay", Duration::from_secs(15), async || {
        match (holds(&a).await, holds(&b).await) {
            (false, true) => Ok(()),
            seen => Err(seen),
        }
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}\n{}", a.log_text(), b.log_text()));
    eprintln!(
        "a's app sick → b holds relay: {:.0} ms",
        sick.elapsed().as_secs_f64() * 1e3
    );
    let active = app_b.wait_probed_as("active").await;
    assert_eq!(active.epoch.as_deref(), Some("2"), "{active:?}");
    // Every request says one role, the same in its query and its header.
    for app in [&app_a, &app_b] {
        for p in app.probed.lock().unwrap().iter() {
            let role = p.role.as_deref().unwrap_or("none");
            assert!(p.query.ends_with(&format!("&role={role}")), "{p:?}");
        }
    }
    // The failed probes show in the card, as a script's exits do (more since, as a standby).
    let status = a.status().await.unwrap();
    let card = &status.processes[0];
    assert_eq!(card.starts, 1, "{card:?}");
    assert!(
        card.exits.get("health http 503").copied() >= Some(3),
        "{card:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_standby_http_probe_keeps_the_replica_from_campaigning_until_it_passes() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite:{}", dir.path().join("leases.db").display());
    let app = App::start(false).await;
    let host = probed_replica("gated", &url, &app).spawn().await.unwrap();
    host.wait_for_log("standby health probe fails", Duration::from_secs(10))
        .await
        .unwrap();
    assert!(
        host.log_text()
            .contains("standby health probe fails (answered 503 Service Unavailable)"),
        "{}",
        host.log_text()
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        !host.log_text().contains("lease acquired"),
        "{}",
        host.log_text()
    );
    assert!(!holds(&host).await);
    assert!(app.probed_as("active").is_empty());
    app.set_healthy(true);
    host.wait_for_log("lease acquired", Duration::from_secs(10))
        .await
        .unwrap();
    assert!(holds(&host).await);
    app.wait_probed_as("active").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_probe_of_an_app_that_is_not_listening_fails_and_says_why() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite:{}", dir.path().join("leases.db").display());
    // A port nothing listens on: the app is down.
    let app = App::start(true).await;
    app.server.abort();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let host = probed_replica("down", &url, &app).spawn().await.unwrap();
    let line = host
        .wait_for_log("standby health probe fails", Duration::from_secs(10))
        .await
        .unwrap();
    assert!(line.contains("Connection refused"), "{line}");
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(!holds(&host).await);
}
