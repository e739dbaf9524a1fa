//! A frozen and resumed holder (SIGSTOP, as a VM pause or a stop-the-world pause would do) between
//! real processes on a real PostgreSQL: frozen past its ttl, it starts no guest call after its
//! `safe_until` once resumed, however its timers fire (docs/ARCHITECTURE.md §3.4); frozen for less
//! than the renew interval, it keeps its term. The figures are printed; `make bench` runs the same
//! trials (`freeze-bench`).

#![allow(clippy::unwrap_used, missing_docs)]

use leasehold_tests::log::Logged;
use std::time::Duration;

use leasehold_tests::eventually::{Text, eventually_every, when};

use leasehold_tests::freeze::{FreezeCluster, FreezeSettings, LEASE, run_freeze_trials};
use leasehold_tests::host::now_time_of_day;
use leasehold_tests::status::Role;

/// Three replicas, ttl 1 s, hello-reconciler every 15 ms; the holder is frozen for ttl + 750 ms
/// (until another replica has acquired the next epoch), then resumed. Over at least 50 trials
/// no call of the frozen holder's epoch is stamped at or after the resume. `FREEZE_TRIALS`
/// raises the count.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_holder_runs_no_guest_call_after_its_deadline() {
    let trials = std::env::var("FREEZE_TRIALS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(50usize)
        .max(50);
    let settings = FreezeSettings::new(trials, Duration::from_secs(1));
    let out = run_freeze_trials(&settings).await.unwrap();
    eprintln!("{}", out.report());
    assert_eq!(out.trials.len(), trials);
    for t in &out.trials {
        assert!(t.successor_epoch > t.epoch, "{t:?}");
        assert!(t.frozen_for > settings.ttl, "{t:?}");
    }
    assert_eq!(
        out.calls_after_deadline(),
        0,
        "guest calls started after the frozen holder's safe_until:\n{}",
        out.report()
    );
}

/// Freezes shorter than the renew interval (ttl 1 s: renewals every 333 ms, safe_until 750 ms
/// after a renewal is sent) never end the term: twenty freezes of 100–150 ms, each after a call,
/// and the holder logs no `term ended` or `lease lost`, keeps its epoch, and reconciles after
/// every resume; no other replica acquires.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn short_freezes_keep_the_term() {
    let settings = FreezeSettings::new(0, Duration::from_secs(1));
    let cluster = FreezeCluster::start(&settings).await.unwrap();
    let (holder, epoch) = cluster.holder(Duration::from_secs(30)).await.unwrap();
    let host = &cluster.hosts[holder];
    let offsets: Vec<usize> = cluster.hosts.iter().map(|h| h.log_len()).collect();
    let call = format!("hello from epoch {epoch},");
    let freezes = 20;
    for i in 0..freezes {
        // A call of this epoch after the previous resume: the term goes on reconciling.
        let from = host.log_len();
        eventually_every(
            format!("freeze {i}: a call at epoch {epoch} since the last resume (the log)"),
            Duration::from_secs(5),
            Duration::from_millis(2),
            async || {
                let log = host.log_lines_from(from);
                when(Text(log.join("\n")), |l| l.0.contains(&call))
            },
        )
        .await
        .unwrap();
        host.signal("STOP").unwrap();
        // The freeze is the parameter here, not a condition to wait for.
        tokio::time::sleep(Duration::from_millis(100 + (i as u64 * 37) % 51)).await;
        host.signal("CONT").unwrap();
    }
    let resumed_at = now_time_of_day();
    // A call after the last resume, and still the leader at the same epoch.
    eventually_every(
        "a call after the last resume (the log)",
        Duration::from_secs(5),
        Duration::from_millis(2),
        async || {
            let log = host.log_lines_from(offsets[holder]);
            let after = log.iter().any(|l| {
                l.contains(&call)
                    && leasehold_tests::host::time_of_day(l).is_some_and(|t| t >= resumed_at)
            });
            when(Text(log.join("\n")), |_| after)
        },
    )
    .await
    .unwrap();
    let status = host.status().await.unwrap();
    assert_eq!(status.leases[0].role, Role::Leader, "{status:?}");
    assert_eq!(
        status.leases[0].epoch.and_then(|e| e.for_guest()),
        Some(epoch),
        "{status:?}"
    );
    let log = host.log_lines_from(offsets[holder]).join("\n");
    for stop in ["term ended", "lease lost", "renewal failing", "safe_until"] {
        assert!(!log.contains(stop), "`{stop}` after short freezes:\n{log}");
    }
    for (i, other) in cluster.hosts.iter().enumerate() {
        if i != holder {
            let log = other.log_lines_from(offsets[i]).join("\n");
            assert!(!log.contains("lease acquired"), "r{i} acquired:\n{log}");
            assert_eq!(other.role(LEASE).await, Some(Role::Standby));
        }
    }
}
