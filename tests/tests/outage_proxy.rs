//! An outage as a proxy shows it (HAProxy in front of a PostgreSQL with no primary): two real
//! hosts reach the database through a TCP proxy that accepts every connection and closes it while
//! the server is down. The outage is told in a few lines, not one per retry; campaigns back off to
//! a few a second; a leader is back within a fraction of the ttl once the server is. Its own test
//! binary, because it stops the server its tests share.

#![allow(clippy::unwrap_used, missing_docs)]

use std::time::{Duration, Instant};

use leasehold_tests::host::{Host, wait_for_single_leader};
use leasehold_tests::log::Logged;
use leasehold_tests::pg;
use leasehold_tests::proxy::{Proxy, upstream_of};
use leasehold_tests::stores::{Backend, Db};

/// Long enough for several summaries' worth of retries at the old rate (every ttl/15).
const OUTAGE: Duration = Duration::from_secs(12);

/// The campaigns `host` has seen fail, by its metrics.
async fn failed_campaigns(host: &Host) -> f64 {
    let metrics = host.metrics().await.unwrap();
    metrics
        .lines()
        .filter(|l| l.starts_with("leasehold_store_errors_total{") && l.contains("op=\"campaign\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[cfg_attr(
    given_server,
    ignore = "DATABASE_URL is set, and this test stops and starts the server: it needs the one the harness starts itself"
)]
async fn an_outage_behind_a_proxy_is_told_in_a_few_lines_and_campaigns_back_off() {
    pg::needs_own_server("stops and starts the server");
    let db = Db::new(Backend::Postgres).await.unwrap();
    let url = db.url().unwrap();
    let proxy = Proxy::start(upstream_of(&url).unwrap()).unwrap();
    let through = proxy.url(&url).unwrap();
    let args = ["--database-url", through.as_str(), "--ttl", "2s"];
    let a = Host::start("a", &args).await.unwrap();
    let b = Host::start("b", &args).await.unwrap();
    let hosts = [&a, &b];
    wait_for_single_leader(&hosts, "leader", Duration::from_secs(15))
        .await
        .unwrap();
    let from = [a.log_len(), b.log_len()];
    let before = [failed_campaigns(&a).await, failed_campaigns(&b).await];

    pg::server().stop().unwrap();
    let connects_before = proxy.accepted();
    tokio::time::sleep(OUTAGE).await;
    let during = [failed_campaigns(&a).await, failed_campaigns(&b).await];
    // Every connection the replicas tried reached the proxy, which accepted and closed it.
    let connects = (proxy.accepted() - connects_before) as f64 / 2.0 / OUTAGE.as_secs_f64();
    pg::server().restart().unwrap();
    let restarted = Instant::now();
    wait_for_single_leader(&hosts, "leader", Duration::from_secs(20))
        .await
        .unwrap();
    let back = restarted.elapsed();
    // Each replica's next call lands, and says so.
    for h in hosts {
        h.wait_for_log("lease store calls land again", Duration::from_secs(5))
            .await
            .unwrap();
    }

    for (i, h) in hosts.iter().enumerate() {
        let lines = h.log_lines_from(from[i]);
        let warned: Vec<&String> = lines
            .iter()
            .filter(|l| l.contains(" WARN ") || l.contains(" ERROR "))
            .collect();
        let rate = (during[i] - before[i]) / OUTAGE.as_secs_f64();
        println!(
            "{}: {} warnings and errors through a {OUTAGE:?} outage; {:.1} failed campaigns a second",
            h.name,
            warned.len(),
            rate
        );
        for line in &warned {
            println!("  {line}");
        }
        // The first failure named, a summary per 10 s, the holder's renewals and term, the
        // listener's first failure and summary: a handful, not one per retry (136 before).
        assert!(warned.len() <= 12, "{} lines: {warned:#?}", warned.len());
        let first = warned
            .iter()
            .find(|l| l.contains("lease store calls failing"))
            .unwrap_or_else(|| panic!("no line names the outage: {warned:#?}"));
        assert!(
            !first.contains("an error of the store's"),
            "the cause is named: {first}"
        );
        // Backed off: at most a quarter of the poll (500 ms at ttl 2 s) between campaigns once
        // past the first few, where every retry interval (133 ms) was 7.5 a second.
        assert!(rate <= 4.0, "{rate:.1} failed campaigns a second");
    }
    // One connection attempt per call (the pool's own retries are for a refused connection,
    // which the proxy never answers with): about as many as the failed calls.
    println!("{connects:.1} connection attempts a second per replica");
    assert!(
        connects <= 6.0,
        "{connects:.1} connection attempts a second"
    );
    println!("server restarted → a leader again after {back:?}");
    assert!(back < Duration::from_secs(2), "{back:?}");
    drop(proxy);
}
