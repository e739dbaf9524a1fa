//! What a host shows of the processes it runs under leases, from outside: `/status`, `/metrics`,
//! `leasehold status`, and the host's last line, for a process at work, one that keeps failing
//! and one that ignores its stop signal.

#![allow(clippy::unwrap_used, missing_docs)]

use leasehold::lease::Epoch;
use std::time::Duration;

use leasehold::supervisor::{ProcessState, ProcessStatus};
use leasehold_tests::eventually::{eventually, when};
use leasehold_tests::host::{Host, HostBuilder, binary};
use leasehold_tests::log::Logged;

fn sqlite(dir: &tempfile::TempDir) -> String {
    format!("sqlite:{}", dir.path().join("leases.db").display())
}

async fn processes(host: &Host) -> Vec<ProcessStatus> {
    host.status().await.unwrap().processes
}

/// The series `name{labels}`'s value in `host`'s `/metrics`, if it has one.
async fn series(host: &Host, name: &str) -> Option<f64> {
    let text = host.metrics().await.unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_metrics_and_leasehold_status_show_a_process_at_work_and_the_last_line_how_it_ended()
{
    let dir = tempfile::tempdir().unwrap();
    let mut host = HostBuilder::new("worker")
        .database_url(&sqlite(&dir))
        .lease("nightly")
        .exec(&["sleep", "600"])
        .spawn_leading("nightly")
        .await
        .unwrap();
    host.wait_for_log("process started", Duration::from_secs(10))
        .await
        .unwrap();
    let [shown] = &processes(&host).await[..] else {
        panic!("one process: {:?}", processes(&host).await)
    };
    assert_eq!(
        (shown.name.as_str(), shown.lease.as_str()),
        ("sleep", "nightly")
    );
    assert_eq!(shown.state, ProcessState::Running);
    assert_eq!((shown.starts, shown.epoch), (1, Some(Epoch::new(1))));
    let pid = shown.pid.expect("a running process shows its pid");
    // The pid is the command's from the start: its keeper's trampoline execs it there.
    eventually(
        "the pid shown running sleep",
        Duration::from_secs(5),
        async || {
            when(
                std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default(),
                |comm| comm.trim() == "sleep",
            )
        },
    )
    .await
    .unwrap();

    let labels = r#"{process="sleep",lease="nightly"}"#;
    assert_eq!(
        series(&host, &format!("leasehold_process_starts_total{labels}")).await,
        Some(1.0)
    );
    assert_eq!(
        series(&host, &format!("leasehold_process_running{labels}")).await,
        Some(1.0)
    );

    let out = tokio::process::Command::new(binary().unwrap())
        .args(["status", "--url", &host.addr().to_string()])
        .output()
        .await
        .unwrap();
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(table.contains("PROCESS"), "{table}");
    let row = table
        .lines()
        .find(|l| l.starts_with("sleep "))
        .unwrap_or_else(|| panic!("no row for the process: {table}"));
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(
        &cells[..5],
        ["sleep", "nightly", "running", &pid.to_string(), "1"],
        "{row}"
    );

    let last = host.stop_for_last_line().await.unwrap();
    assert!(
        last.contains("processes: sleep (nightly) ended by signal 15, stopped in"),
        "{last}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_that_keeps_failing_shows_its_exits_by_code_in_status_and_metrics() {
    let dir = tempfile::tempdir().unwrap();
    let host = HostBuilder::new("failing")
        .database_url(&sqlite(&dir))
        .lease("nightly")
        .args(&["--on-exit", "restart", "--max-failures", "2"])
        .exec(&["sh", "-c", "exit 3"])
        .spawn_leading("nightly")
        .await
        .unwrap();
    host.wait_for_log("giving the lease up", Duration::from_secs(20))
        .await
        .unwrap();
    let shown = eventually(
        "two exits with code 3",
        Duration::from_secs(10),
        async || {
            when(processes(&host).await, |p| {
                p.first()
                    .is_some_and(|p| p.exits.get("code 3").copied().unwrap_or(0) >= 2)
            })
        },
    )
    .await
    .unwrap()
    .remove(0);
    assert_eq!(shown.last_exit.as_deref(), Some("code 3"), "{shown:?}");
    assert!(shown.starts >= 2, "{shown:?}");
    assert_eq!(shown.pid, None, "{shown:?}");
    let exits = series(
        &host,
        r#"leasehold_process_exits_total{process="sh",lease="nightly",ended="code 3"}"#,
    )
    .await
    .unwrap();
    assert!(exits >= 2.0, "{exits}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_that_ignores_its_stop_signal_is_killed_after_its_grace_and_the_last_line_says_so()
 {
    let dir = tempfile::tempdir().unwrap();
    let mut host = HostBuilder::new("stubborn")
        .database_url(&sqlite(&dir))
        .lease("nightly")
        .args(&["--grace", "300ms"])
        .exec(&["sh", "-c", "trap '' TERM; echo ignoring; sleep 600"])
        .spawn_leading("nightly")
        .await
        .unwrap();
    host.wait_for_log("ignoring", Duration::from_secs(10))
        .await
        .unwrap();
    let last = host.stop_for_last_line().await.unwrap();
    assert!(
        last.contains(
            "processes: sh (nightly) was killed (SIGKILL of its tree) when its grace ran out, stopped in"
        ),
        "{last}"
    );
}
