//! The line of standbys between real `leasehold` processes, on SQLite and PostgreSQL: each time
//! the holder stops, the live replica of highest priority leads next (equal priorities in the
//! order they joined); and a replica of higher priority with `--preempt-after` takes the lease
//! over by a graceful handoff once it has waited that long, never twice within that long.

#![allow(clippy::unwrap_used, missing_docs)]

use std::time::{Duration, Instant};

use leasehold_tests::host::{
    Host, HostBuilder, seconds_between, time_of_day, wait_for_single_leader,
};
use leasehold_tests::log::Logged;

const TTL: Duration = Duration::from_secs(2);
/// The ttl of the test of a lapsed grant, whose bound (ttl/2, a campaign and a second for the
/// machine) stays clear of the whole ttl it would take if the grant did not lapse. Under the whole
/// suite the next in line has led after the whole ttl (2.01 s at a 2 s ttl, 4.03 s at 4 s): the
/// lease sat out a ttl, which is what this test is there to catch; the cause is not yet known.
const GRANT_TTL: Duration = Duration::from_secs(4);

/// A replica `name` at `priority`, started and in line: it has campaigned once (a standby joins
/// the line with its first campaign, as it starts).
async fn start(url: &str, name: &str, priority: i64, more: &[&str]) -> Host {
    let priority = priority.to_string();
    let mut args = vec!["--priority", priority.as_str()];
    args.extend_from_slice(more);
    let host = HostBuilder::new(name)
        .database_url(url)
        .ttl(TTL)
        .args(&args)
        .spawn()
        .await
        .unwrap();
    host.wait_for_log("http listening", Duration::from_secs(20))
        .await
        .unwrap();
    host.wait_placed("leader", &[name], Duration::from_secs(20))
        .await
        .unwrap();
    host
}

async fn stops_go_to_the_highest_priority(url: &str) {
    let priorities = [1, 2, 3];
    let mut hosts = Vec::new();
    for (i, p) in priorities.iter().enumerate() {
        hosts.push(start(url, &format!("p{i}"), *p, &[]).await);
    }
    // The line shows who is next: in the lease API of every replica, and `leases list`.
    let leader = wait_for_single_leader(&hosts, "leader", TTL * 5)
        .await
        .unwrap();
    let next = (0..hosts.len())
        .filter(|i| *i != leader)
        .max_by_key(|i| priorities[*i])
        .unwrap();
    // A place lives ttl/2 (1 s) from its standby's last campaign: on a loaded machine a late
    // campaign lets it lapse for a moment (the line was read empty once under the whole suite),
    // and the next campaign places it again.
    hosts[leader]
        .wait_placed("leader", &["p0", "p1", "p2"], Duration::from_secs(20))
        .await
        .unwrap();
    let (code, body) = hosts[leader].get("/v1/leases/leader").await.unwrap();
    assert_eq!(code, 200, "{body}");
    let view: serde_json::Value = serde_json::from_str(&body).unwrap();
    let line = view["line"].as_array().unwrap();
    assert_eq!(line.len(), 2, "{body}");
    assert!(
        line[0]["holder"]
            .as_str()
            .unwrap()
            .starts_with(&format!("p{next}-")),
        "{body}"
    );
    assert_eq!(line[0]["priority"], priorities[next], "{body}");
    let out = std::process::Command::new(leasehold_tests::host::binary().unwrap())
        .args(["leases", "list", "--database-url", url])
        .output()
        .unwrap();
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{table}");
    let row = table.lines().find(|l| l.starts_with("leader")).unwrap();
    assert!(
        row.contains(&format!("p{next}-"))
            && row.contains(&format!("(priority {}", priorities[next]))
            && row.ends_with("+1"),
        "{table}"
    );
    for trial in 0..10 {
        let leader = wait_for_single_leader(&hosts, "leader", TTL * 5)
            .await
            .unwrap();
        let expected = (0..hosts.len())
            .filter(|i| *i != leader)
            .max_by_key(|i| priorities[*i])
            .unwrap();
        hosts[leader].signal("TERM").unwrap();
        hosts[leader]
            .wait_exit(Duration::from_secs(30))
            .await
            .unwrap();
        let live: Vec<&Host> = (0..hosts.len())
            .filter(|i| *i != leader)
            .map(|i| &hosts[i])
            .collect();
        let next = wait_for_single_leader(&live, "leader", TTL * 5)
            .await
            .unwrap();
        let next = (0..hosts.len()).filter(|i| *i != leader).nth(next).unwrap();
        assert_eq!(
            next, expected,
            "trial {trial}: p{leader} stopped; p{expected} (priority {}) should lead, p{next} (priority {}) does",
            priorities[expected], priorities[next]
        );
        // The stopped replica comes back, at the end of the line.
        hosts[leader] = start(url, &format!("p{leader}"), priorities[leader], &[]).await;
    }
}

on_both_stores!(
    on_sqlite_each_time_the_holder_stops_the_live_replica_of_highest_priority_leads_next,
    on_postgres_each_time_the_holder_stops_the_live_replica_of_highest_priority_leads_next,
    stops_go_to_the_highest_priority
);

async fn equal_priorities_go_in_order(url: &str) {
    let mut hosts = Vec::new();
    for name in ["a", "b", "c"] {
        hosts.push(start(url, name, 0, &[]).await);
    }
    // a joined first and leads; then b, c, and a again (back at the end of the line).
    let names = ["a", "b", "c"];
    let mut order = Vec::new();
    for _ in 0..4 {
        let leader = wait_for_single_leader(&hosts, "leader", TTL * 5)
            .await
            .unwrap();
        order.push(names[leader]);
        hosts[leader].signal("TERM").unwrap();
        hosts[leader]
            .wait_exit(Duration::from_secs(30))
            .await
            .unwrap();
        hosts[leader] = start(url, names[leader], 0, &[]).await;
    }
    assert_eq!(order, ["a", "b", "c", "a"]);
}

on_both_stores!(
    on_sqlite_equal_priorities_lead_in_the_order_they_joined,
    on_postgres_equal_priorities_lead_in_the_order_they_joined,
    equal_priorities_go_in_order
);

async fn a_preferred_replica_takes_over(url: &str) {
    let after = Duration::from_secs(3);
    let after_text = "3s";
    let low = start(url, "low", 0, &[]).await;
    wait_for_single_leader(&[&low], "leader", TTL * 5)
        .await
        .unwrap();
    // A replica of higher priority joins: it waits preempt_after in line, then the holder
    // hands the lease over, gracefully.
    let high = start(url, "high", 5, &["--preempt-after", after_text]).await;
    // Its first campaign joined it to the line; `start` returned once the line showed it.
    let joined = Instant::now();
    leader_after(&[&low, &high], 1, after * 3).await;
    let waited = joined.elapsed();
    let moved = Instant::now();
    assert!(
        waited >= after - Duration::from_millis(500) && waited <= after + Duration::from_secs(1),
        "took over {waited:?} after joining, preempt_after {after:?}"
    );
    low.wait_for_log("a waiter of higher priority", Duration::from_secs(5))
        .await
        .unwrap();
    // A third, higher still, joins at once: the lease moved for a preemption just now, so it
    // waits preempt_after since that move, not since it joined.
    let top = start(url, "top", 9, &["--preempt-after", after_text]).await;
    let hosts = [&low, &high, &top];
    leader_after(&hosts, 2, after * 3).await;
    let between = moved.elapsed();
    assert!(
        between >= after - Duration::from_millis(200),
        "two moves {between:?} apart, preempt_after {after:?}"
    );
    // Each move counted: the preempting replica's request, the holder's release giving it away.
    let release = "cause=\"release\"";
    assert_eq!(
        counted(&low, "leasehold_lease_grants_total", release).await,
        1.0
    );
    assert_eq!(
        counted(&high, "leasehold_lease_preemptions_total", "").await,
        1.0
    );
    assert_eq!(
        counted(&high, "leasehold_lease_grants_total", release).await,
        1.0
    );
    assert_eq!(
        counted(&top, "leasehold_lease_preemptions_total", "").await,
        1.0
    );
}

/// The sum of `host`'s series of `family` (a counter's `_total`) whose labels contain `labels`.
async fn counted(host: &Host, family: &str, labels: &str) -> f64 {
    let (_, text) = host.get("/metrics").await.unwrap();
    text.lines()
        .filter(|l| l.starts_with(&format!("{family}{{")) && l.contains(labels))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Waits until `hosts[want]` is the single leader; returns how long that took.
async fn leader_after(hosts: &[&Host], want: usize, timeout: Duration) -> Duration {
    let started = Instant::now();
    loop {
        if let Ok(i) = wait_for_single_leader(hosts, "leader", timeout).await
            && i == want
        {
            return started.elapsed();
        }
        assert!(started.elapsed() < timeout, "host {want} never led");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

on_both_stores!(
    on_sqlite_a_replica_of_higher_priority_takes_the_lease_over_after_preempt_after_and_not_twice_within_it,
    on_postgres_a_replica_of_higher_priority_takes_the_lease_over_after_preempt_after_and_not_twice_within_it,
    a_preferred_replica_takes_over
);

/// A successor killed right after the lease was given to it: frozen before the holder's release
/// (so that the grant comes while it cannot take it up), then killed. The grant lapses after
/// ttl/2, and the next in line leads within ttl/2 plus one of its campaigns (ttl/5, with up to
/// 20% jitter) of the release; the history of the work (a witness the hosts write to from the
/// fenced-writer plugin every 20 ms) shows no overlap of terms and no epoch twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_successor_killed_right_after_its_grant_leaves_the_lease_to_the_next_in_line_within_the_bound()
 {
    use leasehold_tests::chaos::checker::check;
    use leasehold_tests::chaos::witness::{self, Witness};
    use leasehold_tests::fencing::writer_manifest;

    let url = leasehold_tests::pg::server()
        .fresh_lease_database()
        .await
        .unwrap();
    witness::install_commit_log(&url).await.unwrap();
    let witness = Witness::create().await.unwrap();
    let manifest = writer_manifest(
        witness::URL_VARIABLE,
        &format!(
            "table = \"{}\"\nmode = \"both\"\nrequeue_ms = \"20\"\n",
            witness::TABLE
        ),
    );
    let plugins = leasehold_tests::host::plugin_dir(&[("fenced-writer", &manifest)]).unwrap();
    let host = |name: &str, priority: &str| {
        HostBuilder::new(name)
            .database_url(&url)
            .ttl(GRANT_TTL)
            .plugins(plugins.path())
            .env(witness::URL_VARIABLE, witness.role_url())
            .args(&["--priority", priority])
    };
    let mut holder = host("holder", "0").spawn().await.unwrap();
    wait_for_single_leader(&[&holder], "leader", GRANT_TTL * 10)
        .await
        .unwrap();
    let mut doomed = host("doomed", "9").spawn().await.unwrap();
    let next = host("next", "5").spawn().await.unwrap();
    for h in [&doomed, &next] {
        h.wait_for_log("http listening", Duration::from_secs(20))
            .await
            .unwrap();
    }
    // Both have joined the line; then the first of it is frozen.
    holder
        .wait_placed("leader", &["doomed", "next"], Duration::from_secs(20))
        .await
        .unwrap();
    doomed.signal("STOP").unwrap();
    holder.signal("TERM").unwrap();
    holder
        .wait_for_log("lease released", Duration::from_secs(10))
        .await
        .unwrap();
    doomed.kill().await.unwrap();
    let led = leader_after(&[&holder, &next], 1, GRANT_TTL * 5).await;
    // From the release to the acquisition as the two hosts logged them, not as this test saw
    // them: a status poll on a loaded machine can take longer than the margin.
    let logged = |host: &Host, what: &str| {
        host.log_lines_from(0)
            .iter()
            .find(|l| l.contains(what))
            .and_then(|l| time_of_day(l))
            .unwrap_or_else(|| panic!("no `{what}` line:\n{}", host.log_text()))
    };
    let took = Duration::from_secs_f64(
        seconds_between(
            logged(&next, "lease acquired"),
            logged(&holder, "lease released"),
        )
        .max(0.0),
    );
    // A second for the machine: still under the whole ttl the lease would sit out if the grant
    // did not lapse at ttl/2.
    let bound = GRANT_TTL / 2 + (GRANT_TTL / 5).mul_f64(1.2) + Duration::from_secs(1);
    if took > bound {
        // Who held which epoch when, by the database, and what the other two logged: the
        // failures so far took the whole ttl, and their cause is not known yet.
        let wait = Duration::from_secs(10);
        let parsed = leasehold::lease::DatabaseUrl::parse(&url).unwrap();
        let store = leasehold::lease::open_store(&parsed, wait, wait)
            .await
            .unwrap();
        let terms = store.terms(&["leader".to_string()], 10).await.unwrap();
        let mut epochs = std::collections::BTreeMap::<i64, usize>::new();
        for row in witness.rows().await.unwrap() {
            *epochs.entry(row.epoch).or_default() += 1;
        }
        panic!(
            "the next in line led {took:?} after the release ({led:?} of waiting), bound {bound:?}\nterms: {terms:?}\nwork (rows by epoch): {epochs:?}\nthe next's log:\n{}\nthe holder's log:\n{}\nthe frozen one's log:\n{}",
            next.log_text(),
            holder.log_text(),
            doomed.log_text()
        );
    }
    // The grant went to the frozen replica, at the next epoch; the next in line leads at the one
    // after, and its work reaches the witness.
    let log = holder.log_text();
    assert!(log.contains("lease released"), "{log}");
    let started = Instant::now();
    let rows = loop {
        let rows = witness.rows().await.unwrap();
        if rows.iter().any(|r| r.epoch > 1) || started.elapsed() > Duration::from_secs(10) {
            break rows;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let commits = witness::fenced_commits(&url).await.unwrap();
    let verdict = check(&rows, &commits);
    assert!(verdict.is_safe(), "{verdict}");
    let epochs: std::collections::BTreeSet<i64> = rows.iter().map(|r| r.epoch).collect();
    assert_eq!(
        epochs.into_iter().collect::<Vec<_>>(),
        [1, 3],
        "the holder's work at 1, the next in line's at 3 (2 went to the frozen replica and lapsed)"
    );
    let _ = holder.wait_exit(Duration::from_secs(10)).await;
}
