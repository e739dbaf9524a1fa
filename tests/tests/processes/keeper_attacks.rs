//! The keeper attacked from outside, on real hosts: a child that floods its output as fast as it
//! can (`yes`) must not grow its keeper's memory, nor hold back the report of its exit; a keeper
//! killed on its own (`kill -9`, as the OOM killer would) must not leave what its child started
//! running beside the work the host starts again, or beside another replica's.

#![allow(clippy::unwrap_used, missing_docs)]

use std::path::Path;
use std::time::{Duration, Instant};

use leasehold_tests::eventually::{eventually, when};
use leasehold_tests::exec::descendants;
use leasehold_tests::host::{Host, HostBuilder};
use leasehold_tests::log::Logged;
use leasehold_tests::procstat::rss_kib;

/// The keeper processes below `host` (not their children, which run the command).
fn keepers(host: &Host) -> Vec<u32> {
    descendants(host.pid())
        .into_iter()
        .filter(|pid| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let args: Vec<&[u8]> = cmdline.split(|&b| b == 0).collect();
            args.get(1) == Some(&&b"keeper"[..]) && !args.iter().any(|a| *a == b"--child-of")
        })
        .collect()
}

/// Whether process `pid` exists and has not ended (a zombie runs no code).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        !stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'))
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn yes_for_10_s_keeps_its_keeper_small_and_its_exit_is_still_reported() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite:{}", dir.path().join("leases.db").display());
    let host = HostBuilder::new("flood")
        .database_url(&url)
        .lease("flood")
        .exec(&["sh", "-c", "timeout 10 yes; exit 7"])
        .spawn_leading("flood")
        .await
        .unwrap();
    let keeper = eventually("the keeper", Duration::from_secs(10), async || {
        when(keepers(&host), |k| k.len() == 1)
    })
    .await
    .unwrap()[0];
    let started = Instant::now();
    let mut peak = 0;
    while started.elapsed() < Duration::from_secs(12) {
        match rss_kib(keeper) {
            Ok(kib) => peak = peak.max(kib),
            Err(_) => break,
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    eprintln!("the keeper's largest RSS while yes ran 10 s: {} KiB", peak);
    assert!(peak < 64 * 1024, "the keeper reached {peak} KiB");
    let exited = host
        .wait_for_log("process exited", Duration::from_secs(10))
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", host.log_text()));
    assert!(exited.contains("code 7"), "{exited}");
    host.wait_for_log(
        "process stopped: no process of its tree is left",
        Duration::from_secs(10),
    )
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", host.log_text()));
    let log = host.log_text();
    assert!(!log.contains("stop unconfirmed"), "{log}");
    // What the keeper could not queue is counted, and said.
    assert!(log.contains("dropped"), "{log}");
}

/// A tree that ignores SIGTERM: its child writes its pid, and starts a daemon (setsid, double
/// fork) and a grandchild in a process group of its own, each writing theirs to `dir/pids`.
fn stubborn_tree(dir: &Path) -> String {
    let pids = dir.join("pids");
    let p = pids.display();
    format!(
        "trap '' TERM; echo $$ >> {p}; \
         (setsid sh -c 'echo $$ >> {p}; exec sleep 300' &); \
         (sh -c 'set -m; sleep 301 & echo $! >> {p}; wait' &); \
         exec sleep 302"
    )
}

fn tree_pids(dir: &Path) -> Vec<u32> {
    std::fs::read_to_string(dir.join("pids"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

async fn keeper_killed_alone(on_exit: &str, next: &str) {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite:{}", dir.path().join("leases.db").display());
    let host = HostBuilder::new("orphans")
        .database_url(&url)
        .lease("orphans")
        .ttl(Duration::from_secs(3))
        .args(&["--on-exit", on_exit])
        .exec(&["sh", "-c", &stubborn_tree(dir.path())])
        .spawn_leading("orphans")
        .await
        .unwrap();
    let pids = eventually("the tree's pids", Duration::from_secs(10), async || {
        when(tree_pids(dir.path()), |p| p.len() == 3)
    })
    .await
    .unwrap();
    let keeper = keepers(&host)[0];
    let from = host.log().len();
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(keeper as i32).unwrap(),
        rustix::process::Signal::KILL,
    )
    .unwrap();
    let line = eventually(
        format!("{next:?} after the keeper's kill"),
        Duration::from_secs(20),
        async || {
            let lines = host.log().lines_from(from);
            match lines.into_iter().find(|l| l.contains(next)) {
                Some(line) => Ok(line),
                None => Err(String::new()),
            }
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", host.log_text()));
    // At the moment the work starts again, or the lease is released: none of the old tree.
    let left: Vec<u32> = pids.iter().copied().filter(|p| alive(*p)).collect();
    assert!(
        left.is_empty(),
        "{left:?} of {pids:?} still ran when the host logged {line:?}\n{}",
        host.log_text()
    );
    let log = host.log().lines_from(from).join("\n");
    assert!(
        log.contains("process(es) left of its tree; none is left"),
        "{log}"
    );
    assert!(!log.contains("stop unconfirmed"), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keeper_killed_alone_leaves_nothing_of_its_tree_when_the_work_starts_again() {
    keeper_killed_alone("restart", "process started pid").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keeper_killed_alone_leaves_nothing_of_its_tree_when_the_lease_is_released() {
    keeper_killed_alone("release", "lease released").await;
}
