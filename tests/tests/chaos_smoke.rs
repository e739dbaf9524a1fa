//! The fault-trial blocks together: two real hosts, each reaching the lease database through a
//! proxy of its own, run the `fenced-writer` guest, which records each term's work on the
//! witness. The holder is cut off by a black hole for two ttls and then healed, and the history
//! is judged. `CHAOS_LOGS=1` prints both hosts' logs (all but their successful writes).

#![allow(clippy::unwrap_used, missing_docs)]

use std::time::Duration;

use leasehold_tests::chaos::checker::{Summary, check, last_before, recovery, takeover};
use leasehold_tests::chaos::witness::{self, Witness};
use leasehold_tests::eventually::{eventually, when};
use leasehold_tests::host::{Host, HostBuilder, plugin_dir, wait_for_single_leader};
use leasehold_tests::log::Logged;
use leasehold_tests::proxy::{Fault, Proxy, upstream_of};

const TTL: Duration = Duration::from_secs(2);

/// The writer with its sql grant on the witness (unfenced there) and fenced kv puts in the lease
/// database, writing every 20 ms.
fn manifest() -> String {
    format!(
        "lease = \"leader\"
[schedule]
interval = \"1s\"
[limits]
call_timeout = \"2s\"
[grants]
kv = true
[grants.sql]
database_url_env = \"{}\"
[config]
table = \"{}\"
mode = \"both\"
requeue_ms = \"20\"
",
        witness::URL_VARIABLE,
        witness::TABLE
    )
}

/// The lines of a host's log that are not a successful write.
fn log_excerpt(host: &Host) -> String {
    host.log_text()
        .lines()
        .filter(|l| !l.contains("sql-txn ok") && !l.contains("kv-put ok"))
        .collect::<Vec<_>>()
        .join("\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_cut_off_by_a_black_hole_stops_before_the_next_term_works() {
    let url = leasehold_tests::pg::server()
        .fresh_lease_database()
        .await
        .unwrap();
    witness::install_commit_log(&url).await.unwrap();
    let witness = Witness::create().await.unwrap();
    let dir = plugin_dir(&[("fenced-writer", &manifest())]).unwrap();
    let upstream = upstream_of(&url).unwrap();
    let proxies = [
        Proxy::start(upstream).unwrap(),
        Proxy::start(upstream).unwrap(),
    ];
    let mut hosts = Vec::new();
    for (name, proxy) in ["a", "b"].into_iter().zip(&proxies) {
        let host = HostBuilder::new(name)
            .database_url(&proxy.url(&url).unwrap())
            .lease("leader")
            .ttl(TTL)
            .plugins(dir.path())
            .env(witness::URL_VARIABLE, witness.role_url())
            .spawn()
            .await
            .unwrap();
        hosts.push(host);
    }
    let holder = wait_for_single_leader(&hosts, "leader", Duration::from_secs(20))
        .await
        .unwrap();
    let epoch = eventually("the holder's work on the witness", TTL * 5, async || {
        let rows = witness.rows().await.map_err(|e| e.to_string())?;
        rows.last().map(|r| r.epoch).ok_or("no row yet".to_string())
    })
    .await
    .unwrap();

    let cut = witness.now().await.unwrap();
    proxies[holder].set(Fault::BlackHole {
        to_server: true,
        to_client: true,
    });
    tokio::time::sleep(TTL * 2).await;
    proxies[holder].set(Fault::None);
    let healed = witness.now().await.unwrap();
    eventually("work on the witness after healing", TTL * 5, async || {
        let rows = witness.rows().await.map_err(|e| format!("{e:#}"))?;
        let after = rows.iter().filter(|r| r.at >= healed).count();
        when(after, |n| *n > 0).map_err(|n| format!("{n} rows"))
    })
    .await
    .unwrap();
    // Time for the healed host to act on whatever it held, then a clean stop of both.
    tokio::time::sleep(TTL / 2).await;
    for host in &mut hosts {
        host.stop(Duration::from_secs(10)).await.unwrap();
    }

    let rows = witness.rows().await.unwrap();
    let commits = witness::fenced_commits(&url).await.unwrap();
    let verdict = check(&rows, &commits);
    let back = recovery(&rows, healed);
    let mut summary = Summary::default();
    summary.add("black-hole holder", &verdict, back);
    let silent = last_before(&rows, cut);
    let next_term = takeover(&rows, "leader", epoch, cut);
    eprintln!("{summary}");
    eprintln!(
        "epoch {epoch}: last row {:?} µs before the cut; a newer term wrote {next_term:.2?} after it; {} rows, {} fenced commits",
        silent.map(|last| cut - last),
        rows.len(),
        commits.len()
    );
    let logs = || {
        let cut_off = &hosts[holder];
        let other = &hosts[1 - holder];
        format!(
            "cut off ({}):\n{}\nother ({}):\n{}",
            cut_off.name,
            log_excerpt(cut_off),
            other.name,
            log_excerpt(other)
        )
    };
    if std::env::var("CHAOS_LOGS").is_ok() {
        eprintln!("{}", logs());
    }
    assert!(verdict.is_safe(), "{verdict}\n{}", logs());
    assert!(back.is_some(), "no work after healing\n{}", logs());
    assert!(
        next_term.is_some(),
        "no newer term wrote after the cut\n{}",
        logs()
    );
}
