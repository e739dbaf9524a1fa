//! A hostile plugin cannot blow up the host's memory (README "Memory budget"). Each attack is a
//! verb of the real `misbehave` guest ([`leasehold_tests::memory::ATTACKS`]): its call must end
//! with an error or a trap that names what stopped it, and the host must keep its lease at its
//! first epoch. The last test runs them all at once in a real process and holds its peak RSS to the
//! budget its plugins' limits add up to.

#![allow(clippy::unwrap_used, missing_docs)]

use leasehold::lease::Epoch;
use std::time::Duration;

use leasehold_tests::eventually::{eventually, when};
use leasehold_tests::host::HostBuilder;
use leasehold_tests::in_process::InProcessHost;
use leasehold_tests::log::Logged;
use leasehold_tests::memory::{self, APP_URL_ENV, attack};
use leasehold_tests::status::Role;
use leasehold_tests::stores::{Backend, Db};

/// Runs the attack `name` in an in-process host on SQLite (the sql grant on a fresh database of
/// the harness's PostgreSQL) until its call has ended as it must; asserts that the host still
/// leads at epoch 1 and logged the failure with the plugin's name.
async fn attack_ends_safely(name: &str) {
    let attack = attack(name);
    let db = Db::new(Backend::Sqlite).await.unwrap();
    let app_url = leasehold_tests::pg::server()
        .fresh_database()
        .await
        .unwrap();
    let dir = memory::plugin_dir(&[attack]).unwrap();
    let host: InProcessHost = HostBuilder::new(name)
        .database_url(&db.url().unwrap())
        .ttl(Duration::from_secs(2))
        .plugins(dir.path())
        .env(APP_URL_ENV, &app_url)
        .start_in_process()
        .await
        .unwrap();
    let ended = memory::wait_for_attacks(&host, &[attack], Duration::from_secs(30))
        .await
        .unwrap();
    eprintln!("{name}: {:?}", ended[0].1.last_error);
    // The span of the plugin's calls names it on each of its lines.
    host.wait_for_log(&format!("{{plugin={name} "), Duration::from_secs(5))
        .await
        .unwrap();
    eventually(
        format!("{name}: the host to lead"),
        Duration::from_secs(5),
        async || when(host.role("leader").await, |r| *r == Some(Role::Leader)),
    )
    .await
    .unwrap();
    let status = host.status().await.unwrap();
    assert_eq!(
        status.leases[0].epoch,
        Some(Epoch::new(1)),
        "{name}: {status:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guest_asking_wasi_random_for_64_mib_traps_and_the_host_keeps_its_lease() {
    attack_ends_safely("random-flood").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guest_that_never_drops_its_handles_traps_at_the_table_cap() {
    attack_ends_safely("handle-flood").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parameters_aliasing_one_large_guest_string_trap_before_the_host_copies_them() {
    attack_ends_safely("big-params").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sql_parameters_over_the_call_cap_are_refused_as_too_large() {
    attack_ends_safely("big-params-small").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_of_null_rows_counts_its_host_size_against_max_bytes() {
    attack_ends_safely("null-rows").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guest_growing_its_memory_traps_at_its_store_wide_limit() {
    attack_ends_safely("alloc").await;
}

/// All attacks at once in a real process: its peak RSS (`VmHWM`) stays within the budget of its
/// plugins (README "Memory budget"), both its leases keep epoch 1, and the plugin on the other
/// lease keeps running. Before the limits, null-rows alone built ~530 MB of host values and
/// big-params lifted 8 × 60 MiB.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_under_memory_attacks_keeps_its_rss_within_its_plugin_budget() {
    let report = memory::run_all().await.unwrap();
    println!("{report}");
    eprintln!("{report}");
    assert!(
        report.peak_kib / 1024 < report.budget.total_mib(),
        "{report}"
    );
    assert_eq!(report.epochs, (Some(1), Some(1)), "{report}");
    assert!(report.other_ran, "{report}");
}
