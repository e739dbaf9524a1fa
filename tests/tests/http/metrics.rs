//! `/metrics` scraped from real processes: the lease metrics move with a lost lease and a failover,
//! and the plugin metrics count calls.

#![allow(clippy::unwrap_used, missing_docs)]

use std::time::Duration;

use leasehold_tests::eventually::{Text, eventually_every};

use leasehold_tests::endpoint::sample;
use leasehold_tests::host::{Host, plugin_dir, wait_for_single_leader};

async fn scrape(host: &Host) -> String {
    host.metrics().await.unwrap()
}

async fn wait_for(host: &Host, series: &str, ok: impl Fn(f64) -> bool) -> String {
    eventually_every(
        format!("{series} to match (the exposition)"),
        Duration::from_secs(20),
        Duration::from_millis(50),
        async || {
            let text = scrape(host).await;
            if sample(&text, series).is_some_and(&ok) {
                Ok(text)
            } else {
                Err(Text(text))
            }
        },
    )
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_and_plugin_metrics_follow_a_failover() {
    let url = leasehold_tests::pg::server()
        .fresh_database()
        .await
        .unwrap();
    let dir = plugin_dir(&[("hello-reconciler", "[schedule]\ninterval = \"100ms\"\n")]).unwrap();
    let args = [
        "--database-url",
        &url,
        "--ttl",
        "2s",
        "--plugins",
        dir.path().to_str().unwrap(),
    ];
    let mut hosts = Host::start_each(&["a", "b"], &args, &[]).await.unwrap();
    let leader = wait_for_single_leader(&hosts, "leader", Duration::from_secs(20))
        .await
        .unwrap();
    let l = &hosts[leader];
    let text = wait_for(
        l,
        "leasehold_plugin_calls_total{plugin=\"hello-reconciler\"}",
        |v| v >= 3.0,
    )
    .await;
    let lease = "{lease=\"leader\"}";
    assert_eq!(
        sample(&text, &format!("leasehold_lease_is_leader{lease}")),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        sample(&text, &format!("leasehold_lease_epoch{lease}")),
        Some(1.0),
        "{text}"
    );
    let left = sample(&text, &format!("leasehold_lease_expires_in_seconds{lease}")).unwrap();
    assert!(left > 0.0 && left <= 2.0, "{text}");
    assert!(sample(&text, &format!("leasehold_lease_transitions_total{lease}")).unwrap() >= 1.0);
    let text = wait_for(l, "leasehold_lease_renew_seconds_count", |v| v >= 1.0).await;
    // Counts by role, readable at any number of leases.
    assert_eq!(
        sample(&text, "leasehold_leases{role=\"leader\"}"),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        sample(&text, "leasehold_leases{role=\"standby\"}"),
        Some(0.0),
        "{text}"
    );
    assert!(
        sample(
            &text,
            "leasehold_plugin_call_seconds_count{plugin=\"hello-reconciler\"}"
        )
        .unwrap()
            >= 3.0,
        "{text}"
    );
    assert!(
        sample(
            &text,
            "leasehold_plugin_memory_high_water_bytes{plugin=\"hello-reconciler\"}"
        )
        .unwrap()
            > 0.0,
        "{text}"
    );
    let standby = scrape(&hosts[1 - leader]).await;
    assert_eq!(
        sample(&standby, &format!("leasehold_lease_is_leader{lease}")),
        Some(0.0),
        "{standby}"
    );
    assert_eq!(
        sample(&standby, "leasehold_leases{role=\"standby\"}"),
        Some(1.0),
        "{standby}"
    );

    // The lease is taken away behind the holder's back: its term ends (loss-to-stop is recorded)
    // and someone leads at epoch 2.
    let pool = sqlx::PgPool::connect(&url).await.unwrap();
    sqlx::query("UPDATE leasehold_leases SET expires_at = now()")
        .execute(&pool)
        .await
        .unwrap();
    let text = wait_for(
        &hosts[leader],
        "leasehold_lease_loss_to_stop_seconds_count",
        |v| v >= 1.0,
    )
    .await;
    assert!(
        sample(&text, &format!("leasehold_lease_transitions_total{lease}")).unwrap() >= 2.0,
        "{text}"
    );
    let new_leader = wait_for_single_leader(&hosts, "leader", Duration::from_secs(20))
        .await
        .unwrap();
    // Epoch 2, or later if the 2 s lease changed hands again under load.
    let text = wait_for(
        &hosts[new_leader],
        &format!("leasehold_lease_epoch{lease}"),
        |v| v >= 2.0,
    )
    .await;
    let second = sample(&text, &format!("leasehold_lease_epoch{lease}")).unwrap();

    // A crash failover: the survivor leads at the next epoch and runs the plugin.
    hosts[new_leader].kill().await.unwrap();
    let survivor = hosts.remove(1 - new_leader);
    let text = wait_for(&survivor, &format!("leasehold_lease_epoch{lease}"), |v| {
        v > second
    })
    .await;
    assert_eq!(
        sample(&text, &format!("leasehold_lease_is_leader{lease}")),
        Some(1.0),
        "{text}"
    );
    let calls = sample(
        &text,
        "leasehold_plugin_calls_total{plugin=\"hello-reconciler\"}",
    )
    .unwrap_or(0.0);
    wait_for(
        &survivor,
        "leasehold_plugin_calls_total{plugin=\"hello-reconciler\"}",
        |v| v > calls,
    )
    .await;
}
