//! Watching never costs a lease: a real `leasehold run` holding a group of 1,000 shards at a 3 s
//! ttl keeps every one of them, at the same epoch, while 250 keep-alive clients ask it for
//! `/status`, the page, `/metrics` and the lease API as fast as it answers and 500 watch streams
//! follow 500 of its shards, on SQLite and on PostgreSQL; its renewals stay within an order of
//! magnitude of those before the flood, and no watch stream lets its client's deadline run out.

#![allow(clippy::unwrap_used, missing_docs)]

use std::time::Duration;

use leasehold_tests::flood::{GROUP, Holding, flood, median, renewals, start_holder, watch_all};
use leasehold_tests::log::Logged;
use leasehold_tests::stores::{Backend, Db};

const SHARDS: usize = 1_000;
const TTL: Duration = Duration::from_secs(3);
const CLIENTS: usize = 250;
/// Watch streams open through the flood, one per shard: twice the other connections' bound.
const WATCHERS: usize = 500;
/// Long enough for a dozen renewals (every ttl/3) and for a starved one to run out of its ttl.
const FLOOD: Duration = Duration::from_secs(15);
/// The renewals before the flood, to compare with.
const QUIET: Duration = Duration::from_secs(6);

async fn a_flood_of_watchers_costs_no_lease(backend: Backend) {
    let db = Db::new(backend).await.unwrap();
    let host = start_holder(&db.url().unwrap(), SHARDS, TTL).await.unwrap();
    let before = Holding::of(&host).await.unwrap();
    assert_eq!(before.epochs.len(), SHARDS);

    let quiet_from = host.log_len();
    tokio::time::sleep(QUIET).await;
    let (mut quiet, quiet_failed) = renewals(&host, quiet_from);

    let flood_from = host.log_len();
    let shards: Vec<String> = (0..WATCHERS).map(|i| format!("{GROUP}/{i}")).collect();
    let (flooded, watched) = tokio::join!(
        flood(host.addr(), CLIENTS, FLOOD),
        watch_all(host.addr(), shards, FLOOD)
    );
    let (flooded, watched) = (flooded.unwrap(), watched.unwrap());
    let (mut during, during_failed) = renewals(&host, flood_from);

    let after = Holding::of(&host).await.unwrap();
    let (quiet_median, during_median) = (median(&mut quiet), median(&mut during));
    println!(
        "{backend:?}: {flooded:?} ({} answered, {:.0}/s); {watched:?}; renewals quiet: n={} median={quiet_median:?} worst={:?} failed={quiet_failed}; \
         flooded: n={} median={during_median:?} worst={:?} failed={during_failed}",
        flooded.answered(),
        flooded.answered() as f64 / flooded.took.as_secs_f64(),
        quiet.len(),
        quiet.last().copied().unwrap_or_default(),
        during.len(),
        during.last().copied().unwrap_or_default(),
    );
    // The flood reached the host: every path answered, many times.
    for path in leasehold_tests::flood::PATHS {
        assert!(
            flooded.ok.get(path).copied().unwrap_or(0) >= 10,
            "{path} was hardly answered: {flooded:?}"
        );
    }
    // Every watch stream stayed open and kept its client's deadline ahead of it.
    assert_eq!(
        (watched.open, watched.lost.len(), watched.late),
        (WATCHERS, 0, 0),
        "{watched:?}"
    );
    // Not one lease lost: every shard still led, at the epoch it had, and no role changed.
    let log = host.log_text();
    let tail: Vec<&str> = log.lines().rev().take(30).collect();
    assert_eq!(
        after.epochs.len(),
        SHARDS,
        "shards lost to the flood; the log's last lines, newest first:\n{}",
        tail.join("\n")
    );
    assert_eq!(
        after, before,
        "a shard changed hands or epoch during the flood"
    );
    assert_eq!(during_failed, 0, "renewals failed during the flood");
    // Renewals went on, as fast to an order of magnitude (with a floor of 10 ms for a quiet
    // median of a few ms, where one scheduler delay is of that size).
    assert!(
        during.len() >= 5,
        "too few renewals during the flood: {during:?}"
    );
    let bound = (quiet_median * 10).max(Duration::from_millis(10));
    assert!(
        during_median <= bound,
        "renewals slowed from {quiet_median:?} to {during_median:?} (median) during the flood"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_watchers_costs_no_lease_on_sqlite() {
    a_flood_of_watchers_costs_no_lease(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_watchers_costs_no_lease_on_postgres() {
    a_flood_of_watchers_costs_no_lease(Backend::Postgres).await;
}
