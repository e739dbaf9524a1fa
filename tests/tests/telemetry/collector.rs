//! A collector that accepts and never answers, or is down, costs no lease: a host holding 1,000
//! leases exports to it for a minute, keeps every lease at its epoch, and counts what it could
//! not send in `/metrics`; a burst of spans beyond the queue is dropped and counted, not waited
//! for.

use std::time::Duration;

use leasehold_tests::endpoint::Endpoint;
use leasehold_tests::flood::{Holding, renewals, start_holder_with};
use leasehold_tests::host::Host;
use leasehold_tests::log::Logged;
use leasehold_tests::otlp::{black_hole, down, span_counter};
use leasehold_tests::stats::quantile;
use leasehold_tests::stores::{Backend, Db};

const SHARDS: usize = 1_000;
/// Short, so that a stalled renewal path would lose leases within the trial: it renews all of
/// them every second.
const TTL: Duration = Duration::from_secs(3);

/// A host holding [`SHARDS`] shards, exporting to `endpoint`.
async fn holder(url: &str, endpoint: &str) -> Host {
    let service = format!("collector-{}", std::process::id());
    let env = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint),
        ("OTEL_SERVICE_NAME", service.as_str()),
    ];
    start_holder_with(url, SHARDS, TTL, &env).await.unwrap()
}

/// A `leasehold_trace_spans_*` counter of `host`'s `/metrics`.
async fn counter(host: &Host, name: &str) -> u64 {
    let metrics = host.metrics().await.unwrap();
    span_counter(&metrics, name)
        .unwrap_or_else(|| panic!("no spans {name} counter in /metrics:\n{metrics}")) as u64
}

/// More traced requests than the span queue holds (2,048): their spans must overflow it.
const BURST: usize = 4_000;

/// Sends [`BURST`] `/v1` requests to `host`, 16 at a time, each of which makes a span; says how
/// many were answered 200.
async fn burst(host: &Host) -> usize {
    let endpoint: Endpoint = host.as_ref().clone();
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..16 {
        let endpoint = endpoint.clone();
        workers.spawn(async move {
            let mut ok = 0;
            for _ in 0..BURST / 16 {
                if let Ok((200, _)) = endpoint.get("/v1/leases/orders/0").await {
                    ok += 1;
                }
            }
            ok
        });
    }
    workers.join_all().await.into_iter().sum()
}

/// Holds 1,000 shards for `window` while exporting to `endpoint`; not one is lost or changes
/// epoch, no renewal fails, and every span the host made is counted as lost, none as sent.
/// With `overflow`, a burst of [`BURST`] traced requests then overflows the span queue: the
/// requests are all answered, the overflow counted as dropped, and no lease is lost.
async fn costs_no_lease(endpoint: &str, window: Duration, overflow: bool) {
    let db = Db::new(Backend::Postgres).await.unwrap();
    let mut host = holder(&db.url().unwrap(), endpoint).await;
    let before = Holding::of(&host).await.unwrap();
    assert_eq!(before.epochs.len(), SHARDS);
    let from = host.log_len();
    tokio::time::sleep(window).await;
    let dropped_before = counter(&host, "dropped").await;
    if overflow {
        let answered = burst(&host).await;
        assert_eq!(answered, BURST, "traced requests went unanswered");
    }
    let after = Holding::of(&host).await.unwrap();
    let (mut took, failed) = renewals(&host, from);
    let (dropped, lost, exported) = (
        counter(&host, "dropped").await,
        counter(&host, "export_failed").await,
        counter(&host, "exported").await,
    );
    took.sort();
    let p99 = quantile(&took, 0.99);
    println!(
        "{endpoint} for {window:?}: renewals n={} p99={p99:?} failed={failed}; spans dropped={dropped} export_failed={lost} exported={exported}",
        took.len()
    );
    assert_eq!(after, before, "a shard changed hands or epoch");
    assert_eq!(failed, 0, "renewals failed");
    assert!(took.len() >= 10, "too few renewals: {took:?}");
    assert_eq!(exported, 0, "nothing can have been sent");
    // Each shard's acquisition is a span at least; those still queued are neither.
    assert!(
        dropped + lost >= SHARDS as u64 / 2,
        "the spans that could not be sent are not counted: dropped={dropped} export_failed={lost}"
    );
    if overflow {
        // The export thread takes 512 at most every 3 s from a collector that never answers.
        println!(
            "a burst of {BURST} traced requests: {} spans dropped",
            dropped - dropped_before
        );
        assert!(
            dropped > dropped_before,
            "{BURST} spans into a queue of 2,048 stuck on the collector, yet none dropped"
        );
    }
    // And the stop is not held by the collector: the flush gives up within its bound.
    host.signal("TERM").unwrap();
    let status = host.wait_exit(Duration::from_secs(30)).await.unwrap();
    assert!(status.success(), "{}", host.log_text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collector_that_never_answers_for_a_minute_costs_a_host_of_1000_leases_none_and_the_overflow_is_counted()
 {
    let hole = black_hole().await.unwrap();
    costs_no_lease(&hole.endpoint(), Duration::from_secs(60), true).await;
}

/// Shorter: a collector that is down refuses each request at once, so the host reaches its
/// steady state (every export failing) within a second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collector_that_is_down_costs_a_host_of_1000_leases_none() {
    costs_no_lease(&down().unwrap(), Duration::from_secs(15), false).await;
}
