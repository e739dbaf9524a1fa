//! `leasehold exec` from outside: two real hosts on a real PostgreSQL, each running the same shell
//! worker under lease `nightly` ([`leasehold_tests::exec::WORKER`]): it and a grandchild it
//! double-forks into a session of its own append their lines to one file, the recorded history. Whatever happens to the holder — SIGTERM, SIGKILL of the host process alone,
//! SIGSTOP of the host process alone past the ttl — no line of an epoch is written after the
//! first line of the next.

#![allow(clippy::unwrap_used, missing_docs)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use leasehold_tests::eventually::{eventually, when};
use leasehold_tests::exec::{Line, WORKER, history, now_ns, overlaps};
use leasehold_tests::host::{Host, HostBuilder};
use leasehold_tests::log::Logged;

const TTL: Duration = Duration::from_secs(2);

/// Fails if a line of one epoch comes after the first line of a later epoch.
fn assert_no_overlap(file: &Path) -> Vec<Line> {
    let lines = history(file);
    let found = overlaps(&lines);
    assert!(found.is_empty(), "{}", found.join("\n"));
    lines
}

/// `a` holding `nightly` with its worker at work for 300 ms (epoch 1), and `b` beside it.
async fn hosts(url: &str, file: &Path) -> (Host, Host) {
    let replica = |name: &str| {
        HostBuilder::new(name)
            .database_url(url)
            .lease("nightly")
            .ttl(TTL)
            .exec(&["sh", "-c", WORKER, "worker", file.to_str().unwrap()])
    };
    let a = replica("a").spawn_leading("nightly").await.unwrap();
    let b = replica("b").spawn().await.unwrap();
    started(file, 1).await;
    // b has campaigned once: it stands in the line, ready to take over.
    b.wait_placed("nightly", &["b"], Duration::from_secs(10))
        .await
        .unwrap();
    (a, b)
}

async fn started(file: &Path, epoch: i64) {
    let file: PathBuf = file.to_path_buf();
    eventually(
        format!("epoch {epoch}'s worker started"),
        Duration::from_secs(20),
        async || {
            when(history(&file), |h| {
                h.iter().any(|l| l.epoch == epoch && l.what == "start")
            })
        },
    )
    .await
    .unwrap();
}

async fn database() -> String {
    leasehold_tests::pg::server()
        .fresh_database()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigterm_to_the_holder_stops_its_worker_before_the_next_holder_s_starts() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("history");
    let (mut a, b) = hosts(&database().await, &file).await;
    a.signal("TERM").unwrap();
    let status = a.wait_exit(Duration::from_secs(20)).await.unwrap();
    assert_eq!(status.code(), Some(0), "{}", a.log_text());
    started(&file, 2).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let lines = assert_no_overlap(&file);
    let stop = lines.iter().find(|l| l.epoch == 1 && l.what == "stop");
    let next = lines
        .iter()
        .find(|l| l.epoch == 2 && l.what == "start")
        .unwrap();
    let stop =
        stop.unwrap_or_else(|| panic!("epoch 1's worker did not stop on SIGTERM: {lines:?}"));
    eprintln!(
        "worker 1 stopped → worker 2 started: {:.1} ms",
        (next.at - stop.at) as f64 / 1e6
    );
    let log = a.log_text();
    assert!(
        log.contains("process stopped: no process of its tree is left"),
        "{log}"
    );
    drop(b);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_killed_alone_takes_its_worker_and_grandchild_with_it() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("history");
    let (a, _b) = hosts(&database().await, &file).await;
    // The host process alone, not its group: the keeper is in a group of its own anyway.
    let killed_at = now_ns();
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(a.pid() as i32).unwrap(),
        rustix::process::Signal::KILL,
    )
    .unwrap();
    started(&file, 2).await;
    let lines = assert_no_overlap(&file);
    let last = lines
        .iter()
        .filter(|l| l.epoch == 1)
        .map(|l| l.at)
        .max()
        .unwrap();
    let after = last.saturating_sub(killed_at) as f64 / 1e6;
    eprintln!("last line of epoch 1: {after:.1} ms after the host's SIGKILL");
    // A heartbeat already under way may land; none after that.
    assert!(
        after < 100.0,
        "epoch 1's worker ran on {after:.1} ms after its host was killed"
    );
}

/// The host frozen alone: its keeper stops the worker on its own clock before the next holder's
/// starts. Once resumed, the host's log and `/status` give the keeper's time of the stop, not the
/// time the host read of it: the log line says how long before the resume the tree was gone, and
/// that moment comes before the next holder's start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_frozen_alone_past_the_ttl_has_its_worker_dead_before_the_next_starts() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("history");
    let (a, b) = hosts(&database().await, &file).await;
    a.signal("STOP").unwrap();
    started(&file, 2).await;
    tokio::time::sleep(TTL * 3).await;
    a.signal("CONT").unwrap();
    // Its keeper did it, on its own clock, while the host was frozen; the host hears it after.
    a.wait_for_log(
        "the process was sent its stop signal ahead of the lease's deadline, by its keeper",
        Duration::from_secs(10),
    )
    .await
    .unwrap();
    let over = a
        .wait_for_log("before this host resumed", Duration::from_secs(10))
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", a.log_text()));
    let lines = assert_no_overlap(&file);
    assert!(
        !lines
            .iter()
            .any(|l| l.epoch == 1 && l.what == "start" && l.at > lines[0].at),
        "epoch 1's worker started again after the thaw: {lines:?}"
    );
    // The stop as the record tells it: the resumed host's line, less the time it says the tree
    // had been gone, against the next holder's start.
    let ago_ms: f64 = over
        .split("left ")
        .nth(1)
        .and_then(|rest| rest.split(" ms before").next())
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no figure in {over:?}"));
    let gone = leasehold_tests::host::time_of_day(&over).unwrap() - ago_ms / 1000.0;
    let next = leasehold_tests::host::log_time(&b.log_text(), "process started").unwrap();
    eprintln!(
        "the keeper's stop by the resumed host's log: {:.0} ms before the next holder's start",
        (next - gone) * 1000.0
    );
    assert!(gone < next, "{over}\n{}", b.log_text());
    let status = a.status().await.unwrap();
    let card = &status.processes[0];
    assert_eq!(card.keeper_stops, 1, "{card:?}");
    let took = card.last_stop_ms.unwrap();
    assert!(took < 1000.0, "{card:?}");
}

/// A process that writes as fast as it can, and a line of 1 MB: the host's log takes what a
/// plugin's rate allows (a burst of 128 KiB, then 32 KiB a second, a line costing 256 bytes
/// more than its text), says what it dropped (at most every 10 s), and cuts the long line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_that_floods_its_output_costs_the_log_no_more_than_a_plugin_may() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite:{}", dir.path().join("leases.db").display());
    let script = "head -c 1000000 /dev/zero | tr '\\0' a; echo; while :; do echo flood-line; done";
    let started = std::time::Instant::now();
    let host = HostBuilder::new("flood")
        .database_url(&url)
        .lease("nightly")
        .exec(&["sh", "-c", script])
        .spawn_leading("nightly")
        .await
        .unwrap();
    host.wait_for_log("process output dropped", Duration::from_secs(20))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let log = host.log_text();
    let lines = log.matches("flood-line").count();
    let secs = started.elapsed().as_secs_f64();
    // The burst (128 KiB at 266 bytes a line: 492 lines), then 32 KiB a second (123 lines).
    let allowed = 492.0 + 123.0 * secs;
    eprintln!("{lines} lines of the flood logged in {secs:.1} s (the rate allows {allowed:.0})");
    assert!((lines as f64) < allowed * 1.1, "{lines} lines logged");
    assert!(log.contains("(991808 bytes cut)"), "the long line is cut");
}

/// `leasehold exec` refuses at start, in one line naming what is wrong: a missing command, an
/// unknown stop signal, a grace the timing cannot give, and no lease or more than one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_refuses_bad_input_at_start_in_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite:{}", dir.path().join("leases.db").display());
    let cases: [(&[&str], &str); 5] = [
        (
            &["--lease", "nightly", "--", "/no/such/program"],
            "invalid process \"program\": command /no/such/program: No such file or directory",
        ),
        (
            &["--lease", "nightly", "--stop-signal", "SIGFOO", "--", "sh"],
            "stop_signal: unknown signal \"SIGFOO\": one of SIGHUP",
        ),
        (
            &["--lease", "nightly", "--grace", "1h", "--", "sh"],
            "grace = 1h is longer than the",
        ),
        (&["--", "sh"], "give --lease NAME once"),
        (
            &["--lease", "a", "--lease", "b", "--", "sh"],
            "give --lease NAME once",
        ),
    ];
    for (args, wanted) in cases {
        let mut all = vec!["exec", "--database-url", &url, "--http", "127.0.0.1:0"];
        all.extend(args);
        let (status, stderr) = leasehold_tests::host::run_to_exit(&all, Duration::from_secs(30))
            .await
            .unwrap();
        assert_eq!(status.code(), Some(1), "{args:?}: {stderr}");
        assert!(stderr.contains(wanted), "{args:?}: {stderr}");
        assert_eq!(stderr.trim().lines().count(), 1, "{args:?}: {stderr}");
    }
}

/// A command that exits at once with `--on-exit restart` is started again after a growing
/// backoff (0.5 s, 1 s, 2 s, 4 s), not in a tight loop, and after five exits in a row the
/// lease is given up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_that_keeps_exiting_backs_off_and_then_gives_the_lease_up() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite:{}", dir.path().join("leases.db").display());
    let host = HostBuilder::new("exits")
        .database_url(&url)
        .lease("nightly")
        .args(&["--on-exit", "restart"])
        .exec(&["sh", "-c", "echo up; exit 3"])
        .spawn_leading("nightly")
        .await
        .unwrap();
    let line = host
        .wait_for_log("giving the lease up", Duration::from_secs(30))
        .await
        .unwrap();
    assert!(line.contains("exits=5"), "{line}");
    let log = host.log_text();
    let starts: Vec<f64> = log
        .lines()
        .take_while(|l| !l.contains("giving the lease up"))
        .filter(|l| l.contains("process started"))
        .filter_map(leasehold_tests::host::time_of_day)
        .collect();
    assert_eq!(starts.len(), 5, "{log}");
    let gaps: Vec<f64> = starts.windows(2).map(|w| w[1] - w[0]).collect();
    eprintln!("gaps between starts: {gaps:?}");
    for (gap, backoff) in gaps.iter().zip([0.5, 1.0, 2.0, 4.0]) {
        assert!(*gap >= backoff, "{gaps:?}");
    }
    assert!(log.contains("process exited with code 3"), "{log}");
}

/// The child's environment has the term's `LEASEHOLD_*` variables and the host's other
/// variables, but none of the host's own `LEASEHOLD_*` settings; a line longer than 8 KiB is
/// logged cut, saying how much was cut.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_child_gets_the_term_s_variables_not_the_host_s_settings_and_long_lines_are_cut() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite:{}", dir.path().join("leases.db").display());
    let script = "env | grep -E '^(LEASEHOLD_|WORKER_)' | sort; \
                  head -c 20000 /dev/zero | tr '\\0' x; echo; exec sleep 600";
    let host = HostBuilder::new("env")
        .database_url(&url)
        .lease("nightly")
        .env("LEASEHOLD_LOG_FORMAT", "text")
        .env("WORKER_MODE", "batch")
        .exec(&["sh", "-c", script])
        .spawn_leading("nightly")
        .await
        .unwrap();
    host.wait_for_log("bytes cut", Duration::from_secs(10))
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", host.log_text()));
    let log = host.log_text();
    for wanted in [
        "LEASEHOLD_LEASE=nightly",
        "LEASEHOLD_EPOCH=1",
        "LEASEHOLD_HOLDER=env-",
        "WORKER_MODE=batch",
        "… (11808 bytes cut)",
    ] {
        assert!(log.contains(wanted), "no {wanted:?} in the log:\n{log}");
    }
    assert!(!log.contains("LEASEHOLD_LOG_FORMAT"), "{log}");
}

/// A child that closes its stdout and stderr is still running: the end of its output is not its
/// end. It shows as running, and a SIGTERM to the host stops it in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_that_closes_its_output_still_runs_and_is_stopped_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite:{}", dir.path().join("leases.db").display());
    let mut host = HostBuilder::new("quiet")
        .database_url(&url)
        .lease("nightly")
        .exec(&["sh", "-c", "echo before; exec >&- 2>&-; exec sleep 600"])
        .spawn_leading("nightly")
        .await
        .unwrap();
    host.wait_for_log("before", Duration::from_secs(10))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let status = host.status().await.unwrap();
    let card = &status.processes[0];
    assert_eq!(
        card.state,
        leasehold::supervisor::ProcessState::Running,
        "{card:?}"
    );
    assert!(card.exits.is_empty(), "{card:?}");
    let last = host.stop_for_last_line().await.unwrap();
    assert!(
        last.contains("processes: sh (nightly) ended by signal 15"),
        "{last}"
    );
}
