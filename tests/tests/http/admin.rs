//! The admin commands, as processes, against a real PostgreSQL and hosts running in the test's
//! process: `leases release --force` (break-glass, epoch kept, its risk said), `status --url`,
//! and `config check`.

#![allow(clippy::unwrap_used, missing_docs)]

use leasehold::lease::Epoch;
use std::process::Output;
use std::time::Duration;

use leasehold_tests::eventually::{eventually, when};
use leasehold_tests::host::{HostBuilder, binary, wait_for_single_leader};
use leasehold_tests::status::Role;

async fn leasehold(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = tokio::process::Command::new(binary().unwrap());
    cmd.args(args)
        .env_remove("LEASEHOLD_DATABASE_URL")
        .env_remove("LEASEHOLD_CONFIG");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().await.unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forced_release_moves_the_lease_and_keeps_the_epoch() {
    let url = leasehold_tests::pg::server()
        .fresh_database()
        .await
        .unwrap();
    let host = |name: &str| {
        HostBuilder::new(name)
            .database_url(&url)
            .ttl(Duration::from_secs(6))
    };
    let a = host("a").start_in_process().await.unwrap();
    wait_for_single_leader(&[&a], "leader", Duration::from_secs(15))
        .await
        .unwrap();
    let b = host("b").start_in_process().await.unwrap();

    let refused = leasehold(
        &["leases", "release", "leader", "--database-url", &url],
        &[],
    )
    .await;
    assert_eq!(refused.status.code(), Some(1));
    assert!(
        text(&refused.stderr).contains("--force")
            && text(&refused.stderr).contains("leasehold leases handoff leader"),
        "{}",
        text(&refused.stderr)
    );

    let released = leasehold(
        &["leases", "release", "leader", "--force"],
        &[("LEASEHOLD_DATABASE_URL", &url)],
    )
    .await;
    let out = text(&released.stdout);
    assert!(released.status.success(), "{out}{}", text(&released.stderr));
    assert!(
        out.contains("released leader") && out.contains("epoch 1") && out.contains("epoch 2"),
        "{out}"
    );
    // What it risks with a live holder, and what to use instead.
    assert!(
        out.contains("beside the next holder's") && out.contains("leases handoff leader"),
        "{out}"
    );
    assert!(
        text(&released.stderr).contains("force-released"),
        "{}",
        text(&released.stderr)
    );
    // The standby heard the release and took the lease with the next epoch; the old holder's
    // renewal was rejected.
    eventually("b to lead", Duration::from_secs(10), async || {
        when(b.role("leader").await, |r| *r == Some(Role::Leader))
    })
    .await
    .unwrap();
    let status = b.status().await.unwrap();
    assert_eq!(status.leases[0].epoch, Some(Epoch::new(2)), "{status:?}");
    eventually("a to lose the lease", Duration::from_secs(10), async || {
        when(a.role("leader").await, |r| *r == Some(Role::Standby))
    })
    .await
    .unwrap();
    let again = leasehold(
        &[
            "leases",
            "release",
            "nothing-here",
            "--force",
            "--database-url",
            &url,
        ],
        &[],
    )
    .await;
    assert_eq!(again.status.code(), Some(1));
    assert!(
        text(&again.stderr).contains("no lease named nothing-here"),
        "{}",
        text(&again.stderr)
    );

    // status --url renders the live host's view.
    let shown = leasehold(&["status", "--url", &b.addr().to_string()], &[]).await;
    let out = text(&shown.stdout);
    assert!(shown.status.success(), "{}", text(&shown.stderr));
    assert!(
        out.contains("LEASE") && out.contains("leader") && out.contains("replica b-"),
        "{out}"
    );
    assert!(out.contains("forced from a-"), "the forced handoff: {out}");
    let shown = leasehold(
        &["status", "--url", &format!("http://{}", b.addr()), "--json"],
        &[],
    )
    .await;
    let json = leasehold_tests::status::parse(&shown.stdout).unwrap();
    assert_eq!(json.leases[0].role, Role::Leader);
    let handoff = json.leases[0].last_handoff.as_ref().unwrap();
    assert_eq!(
        (handoff.from_epoch, handoff.to_epoch, handoff.reason),
        (
            Epoch::new(1),
            Epoch::new(2),
            leasehold::lease::history::TermEnd::Forced
        ),
        "{handoff:?}"
    );
    let nobody = leasehold(&["status", "--url", "127.0.0.1:1"], &[]).await;
    assert_eq!(nobody.status.code(), Some(1));
    assert!(
        text(&nobody.stderr).contains("127.0.0.1:1"),
        "{}",
        text(&nobody.stderr)
    );
}

#[tokio::test]
async fn config_check_prints_the_effective_config_redacted_or_names_the_fault() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("leasehold.toml");
    std::fs::write(
        &file,
        "leases = [\"jobs\", \"reports\"]\n[timing]\nttl = \"9s\"\n",
    )
    .unwrap();
    let ok = leasehold(
        &[
            "config",
            "check",
            file.to_str().unwrap(),
            "--replica-id",
            "r1",
        ],
        &[
            (
                "LEASEHOLD_DATABASE_URL",
                "postgres://app:hunter2@db.example/app",
            ),
            ("LEASEHOLD_SHUTDOWN_GRACE", "7s"),
        ],
    )
    .await;
    let out = text(&ok.stdout);
    assert!(ok.status.success(), "{out}{}", text(&ok.stderr));
    assert!(!out.contains("hunter2"), "{out}");
    assert!(out.contains("postgres://app:***@db.example/app"), "{out}");
    assert!(out.contains("shutdown_grace = \"7s\""), "{out}");
    assert!(
        out.contains("replica_id = \"r1\"")
            && out.contains("ttl = \"9s\"")
            && out.contains("renew_interval = \"3s\""),
        "{out}"
    );
    // The output is itself a valid config file.
    let effective = dir.path().join("effective.toml");
    std::fs::write(&effective, &out).unwrap();
    let again = leasehold(&["config", "check", effective.to_str().unwrap()], &[]).await;
    assert!(again.status.success(), "{}", text(&again.stderr));
    // Derived intervals are whole milliseconds, printed as a person reads them.
    let ten = leasehold(&["config", "check", "--ttl", "10s"], &[]).await;
    let out = text(&ten.stdout);
    assert!(
        out.contains("renew_interval = \"3s 333ms\"") && !out.contains("us "),
        "{out}"
    );

    std::fs::write(&file, "leases = [\"jobs\"]\n[timing]\nttll = \"9s\"\n").unwrap();
    let bad = leasehold(&["config", "check", file.to_str().unwrap()], &[]).await;
    assert_eq!(bad.status.code(), Some(1));
    let err = text(&bad.stderr);
    assert!(
        err.contains("leasehold.toml") && err.contains("ttll"),
        "{err}"
    );
}
