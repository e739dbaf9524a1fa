//! Lease groups between real `leasehold` processes (docs/ARCHITECTURE.md §6): a group's shards
//! spread over the replicas in fair shares, moved by handoff when one joins or leaves, taken over
//! after expiry when one dies, and never led by two at once, as a checker sampling every replica's
//! `/status` finds in the recorded history.

#![allow(clippy::unwrap_used, missing_docs)]

use std::collections::BTreeMap;
use std::time::Duration;

use leasehold_tests::eventually::{eventually, when};
use leasehold_tests::groups::{Checker, group, led};
use leasehold_tests::host::{Host, HostBuilder};
use leasehold_tests::log::Logged;
use leasehold_tests::stores::{Backend, Db};
use tokio::time::Instant;

const GROUP: &str = "orders";
/// The shards of the group [`start`] joins.
const SHARDS: usize = 12;
const TTL: Duration = Duration::from_millis(1_500);
/// The ttl of the tests on PostgreSQL, whose store calls wait on the server's fsync: on a loaded
/// machine that stalls for hundreds of milliseconds, and at 1.5 s the store timeout is 300 ms, so
/// renewals timed out, shards went uncertain for a beat and the counts of moves and arrivals were
/// the machine's, not the group's (seen under the whole suite).
const PG_TTL: Duration = Duration::from_secs(3);
/// The checker's sampling period: well under a handoff's worth of time on this scale.
const SAMPLE: Duration = Duration::from_millis(15);
/// The samples the checker must have seen each replica leading in before its shards move on.
const SEEN: u64 = 5;

async fn start(url: &str, name: &str, ttl: Duration) -> Host {
    HostBuilder::new(name)
        .database_url(url)
        .ttl(ttl)
        .args(&["--group", &format!("{GROUP}={SHARDS}")])
        .spawn()
        .await
        .unwrap()
}

/// Who leads each shard, by replica name, as the replicas' own `/status` say: once they show a
/// leader for every one (a shard whose renewal is late shows as uncertain, not led, for a beat).
async fn leaders(hosts: &[&Host]) -> BTreeMap<String, String> {
    eventually(
        format!("a leader for each of {SHARDS} shards"),
        Duration::from_secs(10),
        async || {
            let mut out = BTreeMap::new();
            for host in hosts {
                if let Ok(status) = host.status().await {
                    for shard in led(&status, GROUP) {
                        out.insert(shard, host.name.clone());
                    }
                }
            }
            when(out, |out| out.len() == SHARDS)
        },
    )
    .await
    .unwrap()
}

/// Waits until `hosts` lead every shard between them, `each` apiece, every one counting
/// `hosts.len()` members and holding `each` as of its own last look; returns how long that took.
///
/// A replica counts a shard it took as a handoff or a takeover at its next look, not when it
/// takes it, so a shard's arrival shows in `/status` as led before it shows in the counts; once
/// the look's `held` matches, the counts include every shard the replica leads.
async fn until_shares(hosts: &[&Host], each: usize, timeout: Duration) -> Duration {
    let started = Instant::now();
    eventually(
        format!("{} replicas leading {each} shards each", hosts.len()),
        timeout,
        async || {
            let mut seen = Vec::new();
            for host in hosts {
                let status = host.status().await.map_err(|e| format!("{e}"))?;
                let g = group(&status, GROUP).cloned();
                seen.push((host.name.clone(), led(&status, GROUP).len(), g));
            }
            let settled = seen.iter().all(|(_, n, g)| {
                *n == each
                    && g.as_ref().is_some_and(|g| {
                        g.members as usize == hosts.len() && g.held as usize == each
                    })
            });
            if settled {
                Ok(())
            } else {
                Err(format!("{seen:?}"))
            }
        },
    )
    .await
    .unwrap();
    started.elapsed()
}

/// The shards `hosts` took by handoff and by takeover after expiry, summed, as their `/status`
/// count them: final once [`until_shares`] has seen their looks catch up.
async fn arrivals(hosts: &[&Host]) -> (u64, u64) {
    let mut sum = (0, 0);
    for host in hosts {
        let status = host.status().await.unwrap();
        let g = group(&status, GROUP).unwrap();
        sum = (sum.0 + g.handoffs, sum.1 + g.takeovers);
    }
    sum
}

/// Shards whose leader differs between two maps.
fn moved(before: &BTreeMap<String, String>, after: &BTreeMap<String, String>) -> usize {
    after
        .iter()
        .filter(|(s, h)| before.get(*s) != Some(*h))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_a_group_spreads_over_the_replicas_and_moves_by_handoff_as_they_join_and_leave() {
    let db = Db::new(Backend::Postgres).await.unwrap();
    let url = db.url().unwrap();
    let a = start(&url, "a", PG_TTL).await;
    let b = start(&url, "b", PG_TTL).await;
    let c = start(&url, "c", PG_TTL).await;
    let took = until_shares(&[&a, &b, &c], 4, Duration::from_secs(30)).await;
    eprintln!("three replicas: 4 shards each after {took:?}");

    let checker = Checker::start(GROUP, SAMPLE);
    for h in [&a, &b, &c] {
        checker.add(&h.name, h);
    }
    // Let the checker see the settled state first.
    checker
        .until_seen_leading(&["a", "b", "c"], SEEN, Duration::from_secs(10))
        .await
        .unwrap();
    let before = leaders(&[&a, &b, &c]).await;

    // A fourth joins: three shards move to it, one from each, by the ordered release.
    let joined = Instant::now();
    let d = start(&url, "d", PG_TTL).await;
    checker.add(&d.name, &d);
    until_shares(&[&a, &b, &c, &d], 3, Duration::from_secs(30)).await;
    let took = joined.elapsed();
    let after = leaders(&[&a, &b, &c, &d]).await;
    assert_eq!(
        moved(&before, &after),
        3,
        "the fewest moves: {before:?} → {after:?}"
    );
    eprintln!("a fourth joined: 3 shards each after {took:?} (ttl {PG_TTL:?})");
    assert_eq!(arrivals(&[&d]).await, (3, 0), "d took its three by handoff");
    for h in [&a, &b, &c] {
        assert!(
            h.log_text()
                .contains("handing a shard over to rebalance the group"),
            "{} gave nothing away by handoff:\n{}",
            h.name,
            h.log_text()
        );
    }

    // One is stopped: it leaves the group, then releases, and the others take its shards in
    // milliseconds, not after its ttl.
    checker
        .until_seen_leading(&["d"], SEEN, Duration::from_secs(10))
        .await
        .unwrap();
    let (_, takeovers) = arrivals(&[&a, &b, &c]).await;
    let before = leaders(&[&a, &b, &c, &d]).await;
    let d_id = d.status().await.unwrap().replica;
    let mut d = d;
    let stopped = Instant::now();
    d.signal("TERM").unwrap();
    until_shares(&[&a, &b, &c], 4, Duration::from_secs(30)).await;
    let took = stopped.elapsed();
    d.wait_exit(Duration::from_secs(10)).await.unwrap();
    checker.remove(&d.name);
    eprintln!("d stopped: its shards taken over after {took:?}");
    let after = leaders(&[&a, &b, &c]).await;
    assert_eq!(
        moved(&before, &after),
        3,
        "only d's: {before:?} → {after:?}"
    );
    // By handoff: each of the three shards' newest change of holder is from d, whose term ended
    // by its release, as the cluster recorded it. (The replicas' own handoff counters are not
    // the measure here: a replica that gave a shard to d and takes it back without having looked
    // while d held it does not count it as an arrival.)
    // Read from a's status, whose store reading may be up to 250 ms old: until it shows them.
    let d_shards: Vec<&String> = before
        .iter()
        .filter(|(_, h)| h.as_str() == "d")
        .map(|(s, _)| s)
        .collect();
    let handoffs = eventually(
        "d's handoffs in a's status",
        Duration::from_secs(5),
        async || {
            let status = a.status().await.unwrap();
            let handoffs: Vec<_> = d_shards
                .iter()
                .map(|shard| {
                    let lease = status.leases.iter().find(|l| &l.name == *shard);
                    (
                        shard.to_string(),
                        lease.and_then(|l| l.last_handoff.clone()),
                    )
                })
                .collect();
            when(handoffs, |h| {
                h.iter().all(|(_, handoff)| {
                    handoff
                        .as_ref()
                        .is_some_and(|h| h.from.as_str() == d_id.as_str())
                })
            })
        },
    )
    .await
    .unwrap();
    for (shard, handoff) in handoffs {
        let handoff = handoff.unwrap();
        assert_eq!(
            (handoff.from.as_str(), handoff.reason),
            (d_id.as_str(), leasehold::lease::history::TermEnd::Released),
            "{shard}: {handoff:?}"
        );
    }
    assert_eq!(
        arrivals(&[&a, &b, &c]).await.1,
        takeovers,
        "no shard of d's waited for its expiry"
    );
    assert!(
        took < PG_TTL,
        "after a SIGTERM the shards waited for the ttl: {took:?}"
    );

    // One is killed: its shards are taken over once its lease and membership expire.
    let (handoffs, takeovers) = arrivals(&[&a, &b]).await;
    let mut c = c;
    let killed = Instant::now();
    c.kill().await.unwrap();
    until_shares(&[&a, &b], 6, Duration::from_secs(30)).await;
    let took = killed.elapsed();
    checker.remove(&c.name);
    eprintln!("c killed: its shards taken over after {took:?}");
    assert_eq!(
        arrivals(&[&a, &b]).await,
        (handoffs, takeovers + 4),
        "c's four were taken over after expiry"
    );
    let metrics = a.metrics().await.unwrap();
    for family in [
        "leasehold_group_handoffs_total",
        "leasehold_group_takeovers_total",
    ] {
        assert!(
            metrics.contains(&format!("{family}{{group=\"orders\"}}")),
            "{family} missing:\n{metrics}"
        );
    }
    let poll = PG_TTL; // the default poll interval is the ttl
    assert!(took < PG_TTL + poll, "takeover after a kill took {took:?}");

    let verdict = checker.finish().await.unwrap();
    eprintln!("checker: {verdict:?}");
    assert!(verdict.samples > 100, "{verdict:?}");
    verdict
        .each_seen_leading(&["a", "b", "c", "d"], SEEN)
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_two_replicas_share_a_group_and_take_it_over_from_each_other() {
    let db = Db::new(Backend::Sqlite).await.unwrap();
    let url = db.url().unwrap();
    let a = start(&url, "a", TTL).await;
    until_shares(&[&a], 12, Duration::from_secs(30)).await;
    let checker = Checker::start(GROUP, SAMPLE);
    checker.add(&a.name, &a);

    let b = start(&url, "b", TTL).await;
    checker.add(&b.name, &b);
    let took = until_shares(&[&a, &b], 6, Duration::from_secs(30)).await;
    eprintln!("b joined: 6 shards each after {took:?}");
    checker
        .until_seen_leading(&["a", "b"], SEEN, Duration::from_secs(10))
        .await
        .unwrap();

    let mut b = b;
    let stopped = Instant::now();
    b.signal("TERM").unwrap();
    until_shares(&[&a], 12, Duration::from_secs(30)).await;
    eprintln!("b stopped: a holds all 12 after {:?}", stopped.elapsed());
    b.wait_exit(Duration::from_secs(10)).await.unwrap();
    checker.remove(&b.name);

    let b = start(&url, "b2", TTL).await;
    checker.add(&b.name, &b);
    until_shares(&[&a, &b], 6, Duration::from_secs(30)).await;
    checker
        .until_seen_leading(&["b2"], SEEN, Duration::from_secs(10))
        .await
        .unwrap();
    let mut b = b;
    let killed = Instant::now();
    b.kill().await.unwrap();
    until_shares(&[&a], 12, Duration::from_secs(30)).await;
    let took = killed.elapsed();
    checker.remove(&b.name);
    eprintln!("b2 killed: a holds all 12 after {took:?}");
    assert!(took < TTL + TTL, "takeover after a kill took {took:?}");

    let verdict = checker.finish().await.unwrap();
    eprintln!("checker: {verdict:?}");
    verdict.each_seen_leading(&["a", "b", "b2"], SEEN).unwrap();
}

/// The last value `log` shows `shard` (e.g. `"2/4"`) checkpointed at, from the example
/// plugin's `shard 2/4 checkpoint N` lines.
fn last_checkpoint(log: &str, shard: &str) -> Option<u64> {
    let needle = format!("shard {shard} checkpoint ");
    log.lines()
        .rev()
        .filter_map(|l| l.split(&needle).nth(1))
        .find_map(|rest| rest.split_whitespace().next()?.parse().ok())
}

/// Where `log` shows `shard` resuming (the first reconcile of a term), in order: the checkpoint
/// and who wrote it.
fn resumes(log: &str, shard: &str) -> Vec<(u64, String)> {
    let needle = format!("shard {shard} resumes from checkpoint ");
    log.lines()
        .filter_map(|l| l.split(&needle).nth(1))
        .filter_map(|rest| {
            let mut words = rest.split_whitespace();
            let count = words.next()?.parse().ok()?;
            let by = words.nth(2)?.to_string(); // "N written by HOLDER"
            Some((count, by))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_a_shard_s_plugin_carries_on_from_the_checkpoint_its_previous_holder_wrote() {
    let db = Db::new(Backend::Postgres).await.unwrap();
    let url = db.url().unwrap();
    let counter = "group = \"orders\"\n[schedule]\ninterval = \"50ms\"\n[grants]\nkv = true\n";
    // A plugin built against the WIT before shards could be asked for runs per shard as well.
    let first = "group = \"orders\"\n[schedule]\ninterval = \"200ms\"\n";
    let plugins =
        leasehold_tests::host::plugin_dir(&[("sharded-counter", counter), ("first-wit", first)])
            .unwrap();
    let host = |name: &str| {
        HostBuilder::new(name)
            .database_url(&url)
            .ttl(PG_TTL)
            .args(&["--group", "orders=4"])
            .plugins(plugins.path())
    };
    let a = host("a").spawn().await.unwrap();
    let shards: Vec<String> = (0..4).map(|i| format!("{i}/4")).collect();
    eventually(
        "a to checkpoint every shard a few times",
        Duration::from_secs(30),
        async || {
            let log = a.log_text();
            let seen: Vec<_> = shards.iter().map(|s| last_checkpoint(&log, s)).collect();
            if seen.iter().all(|c| c.is_some_and(|c| c >= 5)) {
                Ok(())
            } else {
                Err(seen)
            }
        },
    )
    .await
    .unwrap();
    assert!(
        a.log_text().contains("first-wit reconciles orders/"),
        "the plugin of the first WIT did not run:\n{}",
        a.log_text()
    );

    // b joins and takes two shards; each carries on from a's last checkpoint of it.
    let b = host("b").spawn().await.unwrap();
    eventually(
        "b to resume two shards",
        Duration::from_secs(30),
        async || {
            let log = b.log_text();
            let resumed: Vec<_> = shards
                .iter()
                .filter(|s| !resumes(&log, s).is_empty())
                .collect();
            if resumed.len() == 2 {
                Ok(())
            } else {
                Err(resumed.len())
            }
        },
    )
    .await
    .unwrap();
    let (a_log, b_log) = (a.log_text(), b.log_text());
    let mut moved = 0;
    for shard in &shards {
        let Some((count, by)) = resumes(&b_log, shard).first().cloned() else {
            continue;
        };
        moved += 1;
        assert!(by.starts_with("a-"), "shard {shard} resumed from {by}");
        // The checkpoint b read is the last one a logged, or one more: a's last call may have
        // been stopped by the handoff between its (committed, fenced) put and its log line.
        let logged = last_checkpoint(&a_log, shard).unwrap_or_default();
        assert!(
            count == logged || count == logged + 1,
            "shard {shard}: b resumed from {count}, a's last logged checkpoint is {logged}"
        );
        assert!(count >= 5, "shard {shard} resumed from {count}");
    }
    assert_eq!(moved, 2);

    // b has carried each of its shards on a few steps before it stops.
    eventually(
        "b to checkpoint its shards",
        Duration::from_secs(30),
        async || {
            let log = b.log_text();
            let ahead: Vec<_> = shards
                .iter()
                .filter_map(|s| Some((resumes(&log, s).first()?.0, last_checkpoint(&log, s)?)))
                .collect();
            if ahead.len() == 2 && ahead.iter().all(|(from, at)| *at >= from + 3) {
                Ok(())
            } else {
                Err(ahead)
            }
        },
    )
    .await
    .unwrap();

    // b stops: its two shards go back to a, which carries on from b's checkpoints.
    let mut b = b;
    b.signal("TERM").unwrap();
    b.wait_exit(Duration::from_secs(10)).await.unwrap();
    let b_log = b.log_text();
    eventually(
        "a to resume b's shards",
        Duration::from_secs(30),
        async || {
            let log = a.log_text();
            let back: Vec<_> = shards
                .iter()
                .filter(|s| resumes(&log, s).iter().any(|(_, by)| by.starts_with("b-")))
                .collect();
            if back.len() == 2 {
                Ok(())
            } else {
                Err(back.len())
            }
        },
    )
    .await
    .unwrap();
    let a_log = a.log_text();
    for shard in &shards {
        if let Some((count, _)) = resumes(&a_log, shard)
            .into_iter()
            .find(|(_, by)| by.starts_with("b-"))
        {
            // As above: b's last call may have been stopped between its put and its log line.
            let logged = last_checkpoint(&b_log, shard).unwrap_or_default();
            assert!(
                count == logged || count == logged + 1,
                "shard {shard}: a resumed from {count}, b's last logged checkpoint is {logged}"
            );
        }
    }
}

/// A replica's own plugin directory with the `flaky-health` check bound to the group, failing
/// as `fail` says; rewritten in place to change its mind.
fn group_health(fail: &str) -> String {
    format!(
        "group = \"orders\"\n[schedule]\ninterval = \"100ms\"\n[health]\nfailure_threshold = 2\n[config]\nfail = \"{fail}\"\n"
    )
}

fn set_health(dir: &tempfile::TempDir, fail: &str) {
    std::fs::write(dir.path().join("flaky-health.toml"), group_health(fail)).unwrap();
}

/// Waits until `host` stands aside from the group: kept out by its check, holding nothing.
async fn until_aside(host: &Host) {
    eventually(
        format!("{} to stand aside from the group", host.name),
        Duration::from_secs(30),
        async || {
            let status = host.status().await.map_err(|e| format!("{e}"))?;
            let g = group(&status, GROUP).cloned();
            match g {
                Some(g) if g.gated && !g.member && led(&status, GROUP).is_empty() => Ok(()),
                other => Err(format!("{other:?}, leads {:?}", led(&status, GROUP))),
            }
        },
    )
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_a_failing_health_check_bound_to_a_group_keeps_its_replica_out_of_the_whole_group()
{
    let db = Db::new(Backend::Postgres).await.unwrap();
    let url = db.url().unwrap();
    let dirs: Vec<_> = ["always", "never", "never"]
        .iter()
        .map(|fail| {
            leasehold_tests::host::plugin_dir(&[("flaky-health", &group_health(fail))]).unwrap()
        })
        .collect();
    let host = |name: &str, dir: &tempfile::TempDir| {
        HostBuilder::new(name)
            .database_url(&url)
            .ttl(PG_TTL)
            .args(&["--group", "orders=6"])
            .plugins(dir.path())
            .spawn()
    };
    // a's check fails from the start: it never joins, and b and c share the group.
    let a = host("a", &dirs[0]).await.unwrap();
    let b = host("b", &dirs[1]).await.unwrap();
    let c = host("c", &dirs[2]).await.unwrap();
    until_shares(&[&b, &c], 3, Duration::from_secs(30)).await;
    until_aside(&a).await;
    let checker = Checker::start(GROUP, SAMPLE);
    for h in [&a, &b, &c] {
        checker.add(&h.name, h);
    }
    let status = a.status().await.unwrap();
    assert_eq!(
        status
            .plugins
            .iter()
            .filter(|p| p.name == "flaky-health")
            .count(),
        1,
        "one check for the group, not one per shard: {:?}",
        status.plugins
    );

    // a's check passes again: it joins, and takes its two shards by handoff.
    let healed = Instant::now();
    set_health(&dirs[0], "never");
    until_shares(&[&a, &b, &c], 2, Duration::from_secs(30)).await;
    eprintln!(
        "a's check passes: 2 shards each after {:?}",
        healed.elapsed()
    );
    assert_eq!(arrivals(&[&a]).await, (2, 0), "a took two by handoff");
    checker
        .until_seen_leading(&["a", "b", "c"], SEEN, Duration::from_secs(10))
        .await
        .unwrap();

    // b's check starts failing while it holds its shards: after two failures in a row it leaves
    // the group, and a and c take its shards by handoff, not after its ttl.
    let sick = Instant::now();
    set_health(&dirs[1], "always");
    until_aside(&b).await;
    until_shares(&[&a, &c], 3, Duration::from_secs(30)).await;
    let took = sick.elapsed();
    eprintln!("b's check fails: a and c hold 3 each after {took:?}");
    assert!(
        b.log_text()
            .contains("a health check bound to the group fails: leaving it"),
        "{}",
        b.log_text()
    );
    let metrics = b.metrics().await.unwrap();
    assert!(
        metrics.contains("leasehold_group_gated{group=\"orders\"} 1"),
        "{metrics}"
    );
    let verdict = checker.finish().await.unwrap();
    eprintln!("checker: {verdict:?}");
    verdict.each_seen_leading(&["a", "b", "c"], SEEN).unwrap();
}

/// A rolling change of a group's shard count: a replica configured with `orders=6` joins one
/// running `orders=12`. It takes no part (no churn: the first keeps every shard at its epoch),
/// and both say so: its log names the count in force and whose it is, `/status` shows the
/// conflict, and `leasehold_group_count_conflicts` is 1 on both. Once the last replica with the
/// old count stops, the new count comes into force and the newcomer takes its six shards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_a_replica_with_another_shard_count_takes_no_part_until_the_old_count_is_gone() {
    use leasehold_tests::endpoint::sample;

    let db = Db::new(Backend::Sqlite).await.unwrap();
    let url = db.url().unwrap();
    let a = start(&url, "a", TTL).await;
    until_shares(&[&a], 12, Duration::from_secs(30)).await;
    let epochs =
        |s: &leasehold_tests::status::Status| -> BTreeMap<String, Option<leasehold::lease::Epoch>> {
            s.leases
                .iter()
                .filter(|l| l.name.starts_with("orders/"))
                .map(|l| (l.name.clone(), l.epoch))
                .collect()
        };
    let first = a.status().await.unwrap();
    let before = epochs(&first);

    let six = HostBuilder::new("six")
        .database_url(&url)
        .ttl(TTL)
        .args(&["--group", "orders=6"])
        .spawn()
        .await
        .unwrap();
    let line = six
        .wait_for_log("another shard count", Duration::from_secs(20))
        .await
        .unwrap();
    assert!(
        line.contains("in_force=12") && line.contains(&format!("by={}", first.replica)),
        "{line}"
    );
    let conflict = eventually(
        "six shows the conflict",
        Duration::from_secs(10),
        async || {
            let status = six.status().await?;
            let g = group(&status, GROUP)
                .cloned()
                .ok_or(anyhow::anyhow!("no group"))?;
            anyhow::ensure!(g.count_conflict.is_some(), "{g:?}");
            Ok(g)
        },
    )
    .await
    .unwrap();
    assert_eq!(conflict.count_conflict.as_ref().unwrap().shards, 12);
    assert_eq!(
        (conflict.held, conflict.member, conflict.other_counts),
        (0, false, 1)
    );
    a.wait_for_log("another shard count take no part", Duration::from_secs(10))
        .await
        .unwrap();
    // `leasehold status` shows the group and why this replica takes no part.
    let shown = tokio::process::Command::new(leasehold_tests::host::binary().unwrap())
        .args(["status", "--url", &six.addr().to_string()])
        .output()
        .await
        .unwrap();
    let shown = String::from_utf8_lossy(&shown.stdout).to_string();
    assert!(
        shown.lines().any(|l| l.starts_with("orders ")
            && l.contains("takes no part: the group runs with 12 shards")),
        "{shown}"
    );
    for host in [&a, &six] {
        let metrics = host.metrics().await.unwrap();
        assert_eq!(
            sample(
                &metrics,
                r#"leasehold_group_count_conflicts{group="orders"}"#
            ),
            Some(1.0),
            "{}",
            host.name
        );
    }
    // The cluster's view from the database says the same: both members with their counts, who
    // holds what, and the disagreement.
    let listed = tokio::process::Command::new(leasehold_tests::host::binary().unwrap())
        .args(["leases", "groups", "--database-url", &url])
        .output()
        .await
        .unwrap();
    let listed = String::from_utf8_lossy(&listed.stdout).to_string();
    let row = |id: &str| {
        listed
            .lines()
            .find(|l| l.starts_with("orders ") && l.contains(id))
            .map(|l| l.split_whitespace().collect::<Vec<_>>())
            .unwrap_or_else(|| panic!("no row of {id}:\n{listed}"))
    };
    assert_eq!(row(&first.replica)[2..4], ["12", "12"], "{listed}");
    let six_id = six.status().await.unwrap().replica;
    assert_eq!(row(&six_id)[2..4], ["6", "0"], "{listed}");
    assert!(
        listed.contains(&format!(
            "orders: members disagree on the shard count: it runs with 12 (its longest-standing member {}'s); {six_id} has 6",
            first.replica
        )),
        "{listed}"
    );
    // Some beats later nothing has moved: a still leads all twelve at the epochs it had.
    tokio::time::sleep(TTL * 3).await;
    let status = a.status().await.unwrap();
    assert_eq!(led(&status, GROUP).len(), 12);
    assert_eq!(epochs(&status), before);
    assert!(led(&six.status().await.unwrap(), GROUP).is_empty());

    let mut a = a;
    a.signal("TERM").unwrap();
    a.wait_exit(Duration::from_secs(10)).await.unwrap();
    six.wait_for_log(
        "now runs with this replica's shard count",
        Duration::from_secs(20),
    )
    .await
    .unwrap();
    until_shares(&[&six], 6, Duration::from_secs(30)).await;
    let g = group(&six.status().await.unwrap(), GROUP).cloned().unwrap();
    assert_eq!((g.shards, g.count_conflict, g.other_counts), (6, None, 0));
    six.signal("TERM").unwrap();
}
