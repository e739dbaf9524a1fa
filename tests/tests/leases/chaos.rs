//! The fault suite, short: two trials of every fault (`make chaos` runs twenty), each fault on a
//! cluster of its own (PostgreSQL, two real hosts behind proxies, the witness). Each must end
//! with a safe history (no overlapping terms, no stale fenced commit, no epoch going back or
//! handed out twice), every trial's pause of work within the fault's bound, and no host exited.

#![allow(clippy::unwrap_used, missing_docs)]

use std::time::Duration;

use leasehold_tests::chaos::checker::Summary;
use leasehold_tests::chaos::faults::{Fault, Side};
use leasehold_tests::chaos::trials::run_fault;

const TTL: Duration = Duration::from_secs(2);
const TRIALS: usize = 2;

async fn survives(fault: Fault) {
    leasehold_tests::pg::needs_own_server("starts, restarts and fails over servers of its own");
    let run = run_fault(fault, TRIALS, TTL).await.unwrap();
    let mut summary = Summary::default();
    summary.add_run(&fault.name(), &run.verdict, &run.pauses);
    eprintln!("{summary}");
    assert!(run.exits.is_empty(), "{}", run.exits.join("\n"));
    assert!(run.verdict.is_safe(), "{}", run.verdict);
    assert_eq!(
        run.over_bound(TTL),
        0,
        "pauses {:?}, bound {:?}, plus the server's own stop and start {:?}",
        run.pauses,
        fault.bound(TTL),
        run.server_time
    );
}

fn hole(side: Side, to_server: bool, to_client: bool) -> Fault {
    Fault::BlackHole {
        side,
        to_server,
        to_client,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    given_server,
    ignore = "DATABASE_URL is set, and this test starts, restarts and fails over PostgreSQL servers of its own instead of using it"
)]
async fn a_holder_black_holed_both_ways_stops_before_the_other_replica_works() {
    survives(hole(Side::Holder, true, true)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    given_server,
    ignore = "DATABASE_URL is set, and this test starts, restarts and fails over PostgreSQL servers of its own instead of using it"
)]
async fn a_holder_whose_requests_vanish_stops_before_the_other_replica_works() {
    survives(hole(Side::Holder, true, false)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    given_server,
    ignore = "DATABASE_URL is set, and this test starts, restarts and fails over PostgreSQL servers of its own instead of using it"
)]
async fn a_holder_whose_replies_vanish_stops_before_the_other_replica_works() {
    survives(hole(Side::Holder, false, true)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    given_server,
    ignore = "DATABASE_URL is set, and this test starts, restarts and fails over PostgreSQL servers of its own instead of using it"
)]
async fn a_standby_black_holed_leaves_the_holder_working() {
    survives(hole(Side::Standby, true, true)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    given_server,
    ignore = "DATABASE_URL is set, and this test starts, restarts and fails over PostgreSQL servers of its own instead of using it"
)]
async fn a_standby_whose_replies_vanish_leaves_the_holder_working() {
    survives(hole(Side::Standby, false, true)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    given_server,
    ignore = "DATABASE_URL is set, and this test starts, restarts and fails over PostgreSQL servers of its own instead of using it"
)]
async fn replicas_all_black_holed_work_again_under_one_holder_once_healed() {
    survives(hole(Side::Both, true, true)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    given_server,
    ignore = "DATABASE_URL is set, and this test starts, restarts and fails over PostgreSQL servers of its own instead of using it"
)]
async fn a_fast_restart_of_the_database_while_plugins_write_is_survived() {
    survives(Fault::Restart { immediate: false }).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    given_server,
    ignore = "DATABASE_URL is set, and this test starts, restarts and fails over PostgreSQL servers of its own instead of using it"
)]
async fn an_immediate_restart_of_the_database_while_plugins_write_is_survived() {
    survives(Fault::Restart { immediate: true }).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    given_server,
    ignore = "DATABASE_URL is set, and this test starts, restarts and fails over PostgreSQL servers of its own instead of using it"
)]
async fn a_failover_to_a_standby_that_missed_renewals_lets_no_term_overlap() {
    survives(Fault::Failover {
        missed_takeover: false,
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    given_server,
    ignore = "DATABASE_URL is set, and this test starts, restarts and fails over PostgreSQL servers of its own instead of using it"
)]
async fn a_failover_to_a_standby_that_missed_a_takeover_hands_out_no_epoch_twice() {
    survives(Fault::Failover {
        missed_takeover: true,
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    given_server,
    ignore = "DATABASE_URL is set, and this test starts, restarts and fails over PostgreSQL servers of its own instead of using it"
)]
async fn a_database_clock_jump_ends_terms_before_a_takeover_can_overlap_them() {
    survives(Fault::DatabaseClockJump).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    given_server,
    ignore = "DATABASE_URL is set, and this test starts, restarts and fails over PostgreSQL servers of its own instead of using it"
)]
async fn a_replica_clock_jump_changes_nothing() {
    survives(Fault::ReplicaClockJump).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    given_server,
    ignore = "DATABASE_URL is set, and this test starts, restarts and fails over PostgreSQL servers of its own instead of using it"
)]
async fn a_lease_row_locked_by_another_session_fails_closed_and_recovers() {
    survives(Fault::SlowLock).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    given_server,
    ignore = "DATABASE_URL is set, and this test starts, restarts and fails over PostgreSQL servers of its own instead of using it"
)]
async fn a_trigger_sleeping_past_the_statement_timeout_fails_closed_and_recovers() {
    survives(Fault::SlowTrigger).await;
}
