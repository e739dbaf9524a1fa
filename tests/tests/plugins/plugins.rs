//! Plugins in running hosts, with real compiled guest components (`make guests`). A test runs
//! its hosts in-process when it reads only `/status` and `/metrics`; it runs real `leasehold`
//! processes when the point is in their log (guest output, log budgets, what an operator reads),
//! a kill between replicas, or a limit of the process (`ulimit`).

#![allow(clippy::unwrap_used, missing_docs)]

use leasehold::lease::Epoch;
use leasehold_tests::log::Logged;
use std::path::Path;
use std::time::{Duration, Instant};

use leasehold_tests::endpoint::sample;
use leasehold_tests::eventually::{Text, eventually, when};
use leasehold_tests::host::{
    HostBuilder, guests_dist, plugin_dir, run_to_exit, wait_for_single_leader,
};
use leasehold_tests::in_process::InProcessHost;
use leasehold_tests::status::{PluginState, Role, World};
use leasehold_tests::stores::{Backend, Db};

/// A host on `url` (ttl 2 s) with the plugin directory `plugins`, to start either way.
fn plugin_host(name: &str, url: &str, plugins: &Path) -> HostBuilder {
    HostBuilder::new(name)
        .database_url(url)
        .ttl(Duration::from_secs(2))
        .plugins(plugins)
}

/// An in-process host on `db` (ttl 2 s) with the plugin directory `plugins`.
async fn sqlite_in_process(name: &str, db: &Db, plugins: &Path) -> InProcessHost {
    plugin_host(name, &db.url().unwrap(), plugins)
        .start_in_process()
        .await
        .unwrap()
}

fn manifest(interval: &str, call_timeout: &str, config: &str) -> String {
    format!(
        "lease = \"leader\"\n[schedule]\ninterval = \"{interval}\"\n[limits]\ncall_timeout = \"{call_timeout}\"\nmemory = \"16MiB\"\n[config]\n{config}\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reconcilers_run_only_on_the_holder_and_follow_a_failover() {
    let db = Db::new(Backend::Postgres).await.unwrap();
    let url = db.url().unwrap();
    let dir = plugin_dir(&[(
        "hello-reconciler",
        &manifest("100ms", "1s", "greeting = \"hi\""),
    )])
    .unwrap();
    let mut hosts = vec![
        plugin_host("a", &url, dir.path()).spawn().await.unwrap(),
        plugin_host("b", &url, dir.path()).spawn().await.unwrap(),
    ];
    let leader = wait_for_single_leader(&hosts, "leader", Duration::from_secs(15))
        .await
        .unwrap();
    let standby = 1 - leader;
    eventually(
        "three reconcile calls on the leader (its log)",
        Duration::from_secs(10),
        async || {
            let log = hosts[leader].log_text();
            when(Text(log), |l| l.0.matches("hi from epoch 1").count() >= 3)
        },
    )
    .await
    .unwrap();
    assert!(
        !hosts[standby].log_text().contains("hi from epoch"),
        "the standby ran the reconciler"
    );
    let status = hosts[leader]
        .plugin_status("hello-reconciler")
        .await
        .unwrap();
    assert_eq!(status.state, PluginState::Running, "{status:?}");
    assert_eq!(status.world, Some(World::Reconciler));
    assert_eq!(
        hosts[standby]
            .plugin_status("hello-reconciler")
            .await
            .unwrap()
            .state,
        PluginState::Idle
    );

    let mut old = hosts.remove(leader);
    old.kill().await.unwrap();
    hosts[0]
        .wait_for_log("hi from epoch 2", Duration::from_secs(10))
        .await
        .unwrap();
    assert!(!hosts[0].log_text().contains("hi from epoch 1"));
}

/// Each verb of the misbehave guest, the failure kind it must end as, and words of its message.
const VERBS: &[(&str, &str, &str)] = &[
    ("loop", "timeout", "interrupted after its 300ms deadline"),
    ("sleep", "timeout", "interrupted after its 300ms deadline"),
    ("alloc", "memory", "exceeded its memory limit"),
    ("recurse", "trap", "trapped"),
    ("trap", "trap", "unreachable"),
    // A panic's message, which the guest printed to stderr, is part of the trap's report.
    ("panic", "trap", "misbehave: deliberate panic"),
    ("fail", "error", "deliberate failure"),
    // A million log lines outlast the deadline; all but the per-call budget are dropped, and
    // reported.
    (
        "log-flood",
        "timeout",
        "interrupted after its 300ms deadline",
    ),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_misbehaving_verb_ends_as_a_classified_failure() {
    let mut running = Vec::new();
    for (verb, _, _) in VERBS {
        let db = Db::new(Backend::Sqlite).await.unwrap();
        let dir = plugin_dir(&[(
            "misbehave",
            &manifest("100ms", "300ms", &format!("verb = \"{verb}\"")),
        )])
        .unwrap();
        let host = sqlite_in_process(verb, &db, dir.path()).await;
        running.push((db, dir, host));
    }
    for ((verb, kind, words), (_, _, host)) in VERBS.iter().zip(&running) {
        host.wait_for_plugin(
            "misbehave",
            format!("{verb} to fail"),
            Duration::from_secs(20),
            |s| s.last_error.is_some(),
        )
        .await
        .unwrap();
        let status = host.plugin_status("misbehave").await.unwrap();
        let error = status.last_error.as_deref().unwrap();
        assert!(error.contains(words), "{verb}: {status:?}");
        assert!(
            [
                PluginState::Backoff,
                PluginState::Quarantined,
                PluginState::Running
            ]
            .contains(&status.state),
            "{verb}: {status:?}"
        );
        assert_eq!(status.traps > 0, *kind != "error", "{verb}: {status:?}");
        // The warning is logged before /status changes, but reaches this test through a pipe.
        let needle = format!("kind=\"{kind}\"");
        host.wait_for_log(&needle, Duration::from_secs(5))
            .await
            .unwrap();
        // The host and its lease are unharmed: still the leader at the first epoch. (A renewal
        // slowed by eight busy hosts on two cores may show "uncertain" for a moment.)
        eventually(
            format!("{verb}: the host to lead"),
            Duration::from_secs(5),
            async || when(host.role("leader").await, |r| *r == Some(Role::Leader)),
        )
        .await
        .unwrap();
        let status = host.status().await.unwrap();
        assert_eq!(status.leases[0].epoch, Some(Epoch::new(1)), "{verb}");
    }
    let flood = &running[VERBS.iter().position(|v| v.0 == "log-flood").unwrap()].2;
    flood
        .wait_for_log("plugin output dropped in the last", Duration::from_secs(5))
        .await
        .unwrap();
    // A panic's message reaches the host log beside the trap.
    let panic_host = &running[VERBS.iter().position(|v| v.0 == "panic").unwrap()].2;
    panic_host
        .wait_for_log("misbehave: deliberate panic", Duration::from_secs(5))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn repeated_failures_quarantine_the_plugin_not_the_host() {
    let db = Db::new(Backend::Sqlite).await.unwrap();
    let dir = plugin_dir(&[
        ("misbehave", &manifest("10ms", "200ms", "verb = \"fail\"")),
        ("hello-reconciler", &manifest("100ms", "1s", "")),
    ])
    .unwrap();
    let host = sqlite_in_process("q", &db, dir.path()).await;
    // Backoff 0.5 + 1 + 2 + 4 s before the fifth failure quarantines it.
    let status = host
        .wait_for_plugin("misbehave", "quarantine", Duration::from_secs(20), |s| {
            s.state == PluginState::Quarantined
        })
        .await
        .unwrap();
    assert_eq!(
        status.last_error.as_deref(),
        Some("returned an error: deliberate failure")
    );
    assert_eq!(
        host.plugin_status("hello-reconciler").await.unwrap().state,
        PluginState::Running
    );
    let calls = status.calls;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        host.plugin_status("misbehave").await.unwrap().calls,
        calls,
        "quarantined plugin still called"
    );
}

/// When each failure of `plugin` showed in `/status` (traps plus errors going up), sampled every
/// 20 ms until it is quarantined; at most `within`.
async fn failure_times(host: &InProcessHost, plugin: &str, within: Duration) -> Vec<Instant> {
    let start = Instant::now();
    let (mut seen, mut times) = (0, Vec::new());
    while start.elapsed() < within {
        let status = host.plugin_status(plugin).await.unwrap();
        let failures = status.traps + status.errors;
        for _ in seen..failures {
            times.push(Instant::now());
        }
        seen = failures;
        if status.state == PluginState::Quarantined {
            return times;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let gaps: Vec<Duration> = times.windows(2).map(|w| w[1] - w[0]).collect();
    panic!(
        "{plugin} not quarantined within {within:?}: {} failures, {gaps:?} apart",
        times.len()
    );
}

/// The gaps between failures are the backoff 0.5 → 1 → 2 → 4 s (each plus the time to start a
/// fresh instance and fail again: well under a second here), and there are exactly five. Seen
/// through 20 ms polls of `/status` on a busy machine, a gap may look up to a fifth shorter; a
/// backoff stuck at 0.5 s fails from the second gap.
fn assert_backoff(times: &[Instant]) {
    assert_eq!(times.len(), 5, "quarantined after five failures in a row");
    let gaps: Vec<Duration> = times.windows(2).map(|w| w[1] - w[0]).collect();
    for (gap, backoff) in gaps.iter().zip([500u64, 1000, 2000, 4000]) {
        let backoff = Duration::from_millis(backoff);
        assert!(
            *gap >= backoff * 4 / 5 && *gap < backoff + Duration::from_secs(1),
            "gaps {gaps:?}: expected 0.5, 1, 2, 4 s"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_plugin_trapping_on_every_call_backs_off_0_5_1_2_4_s_and_the_fifth_trap_quarantines_it() {
    // Each trap gets a fresh instance, whose instantiate and init go fine: they must not count as
    // the plugin working, or it would be retried every 0.5 s for ever.
    let db = Db::new(Backend::Sqlite).await.unwrap();
    let dir = plugin_dir(&[
        ("misbehave", &manifest("10ms", "1s", "verb = \"trap\"")),
        ("hello-reconciler", &manifest("100ms", "1s", "")),
    ])
    .unwrap();
    let host = sqlite_in_process("trap", &db, dir.path()).await;
    let times = failure_times(&host, "misbehave", Duration::from_secs(20)).await;
    assert_backoff(&times);
    let status = host.plugin_status("misbehave").await.unwrap();
    assert_eq!((status.traps, status.errors), (5, 0), "{status:?}");
    assert_eq!(
        host.plugin_status("hello-reconciler").await.unwrap().state,
        PluginState::Running
    );
    tokio::time::sleep(Duration::from_millis(600)).await;
    let later = host.plugin_status("misbehave").await.unwrap();
    assert_eq!(
        later.calls, status.calls,
        "a quarantined plugin is not called"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_plugin_failing_every_other_call_backs_off_0_5_s_each_time_and_is_never_quarantined() {
    // Between two failures a call returns: the streak ends each time, so the backoff stays at
    // its first step and five failures in all are not five in a row.
    let db = Db::new(Backend::Sqlite).await.unwrap();
    let dir = plugin_dir(&[(
        "misbehave",
        &manifest("10ms", "1s", "verb = \"fail\"\nevery = \"2\""),
    )])
    .unwrap();
    let host = sqlite_in_process("alternate", &db, dir.path()).await;
    let start = Instant::now();
    let (mut seen, mut times) = (0, Vec::new());
    while start.elapsed() < Duration::from_secs(5) {
        let status = host.plugin_status("misbehave").await.unwrap();
        assert_ne!(status.state, PluginState::Quarantined, "{status:?}");
        for _ in seen..status.errors {
            times.push(Instant::now());
        }
        seen = status.errors;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let gaps: Vec<Duration> = times.windows(2).map(|w| w[1] - w[0]).collect();
    assert!(times.len() >= 6, "more than five failures in all: {gaps:?}");
    assert!(
        gaps.iter().all(|g| *g < Duration::from_millis(900)),
        "every failure backs off 0.5 s, never more: {gaps:?}"
    );
    let status = host.plugin_status("misbehave").await.unwrap();
    assert!(status.calls >= 2 * status.errors - 1, "{status:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_plugin_whose_init_fails_every_time_backs_off_and_the_fifth_failure_quarantines_it() {
    let db = Db::new(Backend::Sqlite).await.unwrap();
    let dir = plugin_dir(&[(
        "misbehave",
        &manifest("10ms", "1s", "verb = \"fail\"\nwhen = \"init\""),
    )])
    .unwrap();
    let host = sqlite_in_process("init", &db, dir.path()).await;
    let times = failure_times(&host, "misbehave", Duration::from_secs(20)).await;
    assert_backoff(&times);
    let status = host.plugin_status("misbehave").await.unwrap();
    assert_eq!(
        status.last_error.as_deref(),
        Some("returned an error: deliberate failure")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_plugin_bound_to_a_lease_this_host_does_not_campaign_for_warns_naming_the_hosts_leases() {
    let db = Db::new(Backend::Sqlite).await.unwrap();
    let misspelt = "lease = \"leadr\"\n[schedule]\ninterval = \"100ms\"\n";
    let dir = plugin_dir(&[("hello-reconciler", misspelt)]).unwrap();
    let host = sqlite_in_process("unbound", &db, dir.path()).await;
    let expected = "bound to lease \"leadr\", which this replica does not campaign for (its leases: leader; its groups: none): it stays idle here";
    let status = host.plugin_status("hello-reconciler").await.unwrap();
    assert_eq!(status.state, PluginState::Idle, "{status:?}");
    assert_eq!(status.warning.as_deref(), Some(expected));
    // Dropped in while the host runs, a plugin bound to a group it is not in says so too.
    let hello = guests_dist().join("hello-reconciler.wasm");
    std::fs::write(dir.path().join("late.toml"), "group = \"ordrs\"\n").unwrap();
    std::fs::copy(&hello, dir.path().join("late.wasm")).unwrap();
    let late = host
        .wait_for_plugin(
            "late",
            "the late plugin's warning",
            Duration::from_secs(10),
            |s| s.warning.is_some(),
        )
        .await
        .unwrap();
    assert!(
        late.warning.as_deref().unwrap().starts_with(
            "bound to group \"ordrs\", which this replica does not campaign for (its leases: leader;"
        ),
        "{late:?}"
    );
    let log = host.log_text();
    assert_eq!(
        log.matches("which this replica does not campaign for")
            .count(),
        2,
        "once each: {log}"
    );
    // Fixed, the warning goes.
    std::fs::write(dir.path().join("late.toml"), "lease = \"leader\"\n").unwrap();
    host.wait_for_plugin("late", "the warning to go", Duration::from_secs(10), |s| {
        s.warning.is_none()
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bad_plugin_files_are_reported_and_isolated() {
    let db = Db::new(Backend::Sqlite).await.unwrap();
    let dir = plugin_dir(&[("hello-reconciler", &manifest("100ms", "1s", ""))]).unwrap();
    let hello = std::fs::read(guests_dist().join("hello-reconciler.wasm")).unwrap();
    let bad: Vec<(&str, Vec<u8>, &str)> = vec![
        (
            "garbage",
            b"this is not wasm".to_vec(),
            "not a WebAssembly file",
        ),
        (
            "core",
            b"\0asm\x01\0\0\0".to_vec(),
            "core WebAssembly module",
        ),
        (
            "truncated",
            hello[..hello.len() / 2].to_vec(),
            "invalid component",
        ),
        (
            "other-world",
            std::fs::read(guests_dist().join("other-world.wasm")).unwrap(),
            "matches no leasehold:plugin@0.1.0 world: as a reconciler: missing exports init, reconcile; as a health-check: missing exports init, check (exports found: greet)",
        ),
        (
            "wrong-version",
            std::fs::read(guests_dist().join("wrong-version.wasm")).unwrap(),
            "imports leasehold:plugin/log@0.2.0); this host implements leasehold:plugin@0.1.0",
        ),
    ];
    for (name, bytes, _) in &bad {
        std::fs::write(dir.path().join(format!("{name}.wasm")), bytes).unwrap();
    }
    // A good component with a manifest that has a typo.
    std::fs::write(dir.path().join("typo.wasm"), &hello).unwrap();
    std::fs::write(
        dir.path().join("typo.toml"),
        "[schedule]\nintervall = \"1s\"\n",
    )
    .unwrap();
    // A manifest that exists but cannot be read: invalid, not silently defaulted.
    std::fs::write(dir.path().join("unreadable.wasm"), &hello).unwrap();
    std::fs::create_dir(dir.path().join("unreadable.toml")).unwrap();
    // A manifest asking for what the component cannot do.
    std::fs::write(dir.path().join("deaf.wasm"), &hello).unwrap();
    std::fs::write(
        dir.path().join("deaf.toml"),
        "lease = \"leader\"\n[events]\nchannels = [\"jobs\"]\n",
    )
    .unwrap();

    let host = sqlite_in_process("bad", &db, dir.path()).await;
    host.wait_for_plugin(
        "hello-reconciler",
        "hello to run",
        Duration::from_secs(15),
        |s| s.state == PluginState::Running,
    )
    .await
    .unwrap();
    for (name, _, reason) in &bad {
        let status = host.plugin_status(name).await.unwrap();
        assert_eq!(status.state, PluginState::Invalid, "{status:?}");
        let error = status.last_error.as_deref().unwrap();
        assert!(
            error.contains(&format!("{name}.wasm")) && error.contains(reason),
            "{name}: {error}"
        );
        // The same file through `leasehold check`: one error line naming the file, exit 1; a
        // component of no world is then told, in the WIT's words, what each world exports.
        let path = dir.path().join(format!("{name}.wasm"));
        let (exit, stderr) =
            run_to_exit(&["check", path.to_str().unwrap()], Duration::from_secs(30))
                .await
                .unwrap();
        assert!(!exit.success());
        let mut lines = stderr.trim().lines();
        let first = lines.next().unwrap_or_default();
        assert!(
            first.contains(&format!("{name}.wasm")) && first.contains(reason),
            "{stderr}"
        );
        assert_eq!(
            first.strip_prefix("leasehold: error: "),
            Some(error),
            "the host's words"
        );
        if *name == "other-world" {
            assert!(
                stderr.contains("MISSING reconcile: func(ctx: reconcile-context)"),
                "{stderr}"
            );
        } else {
            assert_eq!(lines.count(), 0, "{stderr}");
        }
    }
    let unreadable = host.plugin_status("unreadable").await.unwrap();
    assert_eq!(unreadable.state, PluginState::Invalid, "{unreadable:?}");
    let reason = unreadable.last_error.as_deref().unwrap();
    assert!(
        reason.contains("unreadable.toml: not a regular file"),
        "{unreadable:?}"
    );
    let typo = host.plugin_status("typo").await.unwrap();
    assert_eq!(typo.state, PluginState::Invalid);
    let reason = typo.last_error.as_deref().unwrap();
    assert!(reason.contains("typo.toml"), "{typo:?}");
    assert!(reason.contains("intervall"), "{typo:?}");
    // `leasehold check` reads the manifest as the host does, given the component (the manifest
    // beside it), the manifest (the component beside it) or both: one line, the host's words.
    for (name, reason) in [
        ("typo", "intervall"),
        ("unreadable", "not a regular file"),
        ("deaf", "does not export handle-event"),
    ] {
        let status = host.plugin_status(name).await.unwrap();
        assert_eq!(status.state, PluginState::Invalid, "{status:?}");
        let error = status.last_error.as_deref().unwrap();
        assert!(error.contains(reason), "{name}: {error}");
        let wasm = dir.path().join(format!("{name}.wasm"));
        let toml = dir.path().join(format!("{name}.toml"));
        let (wasm, toml) = (wasm.to_str().unwrap(), toml.to_str().unwrap());
        for args in [
            vec!["check", wasm],
            vec!["check", toml],
            vec!["check", wasm, "--manifest", toml],
        ] {
            let (exit, stderr) = run_to_exit(&args, Duration::from_secs(30)).await.unwrap();
            assert!(!exit.success(), "{args:?}");
            assert_eq!(
                stderr.trim().strip_prefix("leasehold: error: "),
                Some(error),
                "{args:?}: the host's words on one line"
            );
        }
    }
    // Every bad file was logged with its path and reason.
    let log = host.log_text();
    assert_eq!(log.matches("invalid plugin").count(), 8, "{log}");
}

#[test]
fn check_reports_the_world_of_good_plugins() {
    for (name, world) in [
        ("hello-reconciler", "reconciler"),
        ("flaky-health", "health-check"),
        ("misbehave", "reconciler"),
    ] {
        let path = guests_dist().join(format!("{name}.wasm"));
        let out = std::process::Command::new(leasehold_tests::host::binary().unwrap())
            .args(["check", "--json", path.to_str().unwrap()])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(report["world"], world, "{report}");
        // The manifest beside it was read: its binding is the one the host would use.
        let manifest = guests_dist().join(format!("{name}.toml"));
        assert_eq!(report["manifest"], manifest.to_str().unwrap(), "{report}");
        assert!(report["binding"].is_string(), "{report}");
        assert_eq!(report["package"], "leasehold:plugin@0.1.0");
        assert!(
            report["imports"]
                .as_array()
                .unwrap()
                .iter()
                .any(|i| i == "leasehold:plugin/log@0.1.0"),
            "{report}"
        );
    }
}

fn health_manifest(fail: &str) -> String {
    format!(
        "[schedule]\ninterval = \"100ms\"\n[health]\nfailure_threshold = 2\n[config]\nfail = \"{fail}\"\n"
    )
}

/// Two replicas in one test process: what it proves is between their leases, not their processes.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_failing_active_health_check_makes_the_holder_step_down() {
    let db = Db::new(Backend::Postgres).await.unwrap();
    let url = db.url().unwrap();
    let sick = plugin_dir(&[("flaky-health", &health_manifest("active"))]).unwrap();
    let healthy = plugin_dir(&[("flaky-health", &health_manifest("never"))]).unwrap();
    let ttl = Duration::from_secs(10);
    let a = plugin_host("sick", &url, sick.path())
        .ttl(ttl)
        .start_in_process_leading()
        .await
        .unwrap();
    let b = plugin_host("healthy", &url, healthy.path())
        .ttl(ttl)
        .start_in_process()
        .await
        .unwrap();
    // Two failed checks, an ordered release, and the healthy standby takes over long before the
    // 10 s ttl could have expired.
    eventually(
        "the healthy replica to lead",
        // Under the ttl: only a release by the sick holder can have let it in.
        Duration::from_secs(9),
        async || when(b.role("leader").await, |r| *r == Some(Role::Leader)),
    )
    .await
    .unwrap();
    // The sick holder released by stepping down, not by stopping: it runs on as a standby, its
    // check's failure on record.
    assert_eq!(a.role("leader").await, Some(Role::Standby));
    let status = a.plugin_status("flaky-health").await.unwrap();
    assert!(
        status
            .last_error
            .as_deref()
            .unwrap()
            .contains("deliberate active failure"),
        "{status:?}"
    );
    // The healthy holder keeps it.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(b.role("leader").await, Some(Role::Leader));
}

/// Two replicas in one test process; the holder releases the lease, so it is free at once and
/// stays free for many standby polls and a release notice.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_standby_whose_check_fails_does_not_campaign() {
    let db = Db::new(Backend::Postgres).await.unwrap();
    let url = db.url().unwrap();
    let healthy = plugin_dir(&[("flaky-health", &health_manifest("never"))]).unwrap();
    let sick = plugin_dir(&[("flaky-health", &health_manifest("standby"))]).unwrap();
    let ttl = Duration::from_secs(1);
    let mut a = plugin_host("holder", &url, healthy.path())
        .ttl(ttl)
        .start_in_process_leading()
        .await
        .unwrap();
    let b = plugin_host("sick-standby", &url, sick.path())
        .ttl(ttl)
        .start_in_process()
        .await
        .unwrap();
    // The first failed check stops the standby's campaigns; the check after it is counted only
    // once that is done (one task does both, in turn).
    let failed = b
        .wait_for_plugin(
            "flaky-health",
            "the standby check to fail",
            Duration::from_secs(15),
            |s| s.last_error.is_some(),
        )
        .await
        .unwrap();
    b.wait_for_plugin(
        "flaky-health",
        "the standby's next check",
        Duration::from_secs(15),
        |s| s.calls > failed.calls,
    )
    .await
    .unwrap();
    let stopped = a.stop().await.unwrap();
    assert!(stopped.all_released(), "{stopped:?}");
    // Well past a release notice and ttl + poll the lease is free, yet the failing standby never
    // takes it.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(b.role("leader").await, Some(Role::Standby));
    let status = b.status().await.unwrap();
    assert!(
        status.leases[0].holder.is_none(),
        "the lease should be free: {status:?}"
    );
}

/// Alone on a fresh store, the lease is free from the host's first campaign, which comes before
/// the check has run once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_replica_whose_standby_check_fails_never_leads_even_when_it_starts_alone() {
    let db = Db::new(Backend::Sqlite).await.unwrap();
    let sick = plugin_dir(&[("flaky-health", &health_manifest("standby"))]).unwrap();
    let host = sqlite_in_process("sick-alone", &db, sick.path()).await;
    let failed = host
        .wait_for_plugin(
            "flaky-health",
            "the standby check to fail",
            Duration::from_secs(15),
            |s| s.last_error.is_some(),
        )
        .await
        .unwrap();
    // Its active check would pass: had it taken the lease, it would keep it.
    for _ in 0..20 {
        assert_eq!(host.role("leader").await, Some(Role::Standby));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let status = host.status().await.unwrap();
    assert!(status.leases[0].holder.is_none(), "{status:?}");
    assert!(host.plugin_status("flaky-health").await.unwrap().calls > failed.calls);
    assert!(!host.log_text().contains("lease acquired"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn plugins_are_added_replaced_and_removed_without_a_restart() {
    let db = Db::new(Backend::Sqlite).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let host = sqlite_in_process("reload", &db, dir.path()).await;
    wait_for_single_leader(&[&host], "leader", Duration::from_secs(15))
        .await
        .unwrap();
    let wasm = std::fs::read(guests_dist().join("hello-reconciler.wasm")).unwrap();
    let put = |greeting: &str| {
        std::fs::write(
            dir.path().join("hello.toml"),
            manifest("100ms", "1s", &format!("greeting = \"{greeting}\"")),
        )
        .unwrap();
    };

    // Add: the manifest first, then the component in two halves with a pause shorter than the
    // quiet period, as a slow copy would; it must never be loaded half-written.
    put("first");
    let path = dir.path().join("hello.wasm");
    std::fs::write(&path, &wasm[..wasm.len() / 2]).unwrap();
    // Well inside the 300 ms quiet period, so a stalled test thread does not outlast it.
    tokio::time::sleep(Duration::from_millis(20)).await;
    std::fs::write(&path, &wasm).unwrap();
    host.wait_for_log("first from epoch 1", Duration::from_secs(15))
        .await
        .unwrap();
    // Rescans log from the runtime's blocking threads: the line proves they reach this log, so
    // the absence of "invalid plugin" below means something.
    assert!(
        host.log_text().contains("plugin loaded plugin=hello"),
        "{}",
        host.log_text()
    );
    assert!(
        !host.log_text().contains("invalid plugin"),
        "a half-written file was loaded:\n{}",
        host.log_text()
    );

    // Replace: the new version takes over after the current call.
    put("second");
    host.wait_for_log("second from epoch 1", Duration::from_secs(15))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let log = host.log_text();
    let last_first = log.rfind("first from epoch").unwrap();
    let first_second = log.find("second from epoch").unwrap();
    assert!(
        last_first < first_second,
        "the old version ran after the new one started"
    );

    // Remove: it stops and leaves /status.
    std::fs::remove_file(&path).unwrap();
    eventually(
        "the removed plugin to leave /status",
        Duration::from_secs(15),
        async || when(host.plugin_status("hello").await, Option::is_none),
    )
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let calls_then = host.log_text().matches("second from epoch").count();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        host.log_text().matches("second from epoch").count(),
        calls_then,
        "a removed plugin still runs"
    );
    // The lease was never disturbed.
    assert_eq!(
        host.status().await.unwrap().leases[0].epoch,
        Some(Epoch::new(1))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guest_output_is_captured_capped_and_tagged() {
    let db = Db::new(Backend::Sqlite).await.unwrap();
    let dir = plugin_dir(&[("misbehave", &manifest("200ms", "1s", "verb = \"print\""))]).unwrap();
    let host = sqlite_in_process("print", &db, dir.path()).await;
    host.wait_for_log("stream=\"stdout\"", Duration::from_secs(15))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let log = host.log_text();
    let out: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("stream=\"stdout\"") || l.contains("stream=\"stderr\""))
        .collect();
    assert!(
        // By the span its calls run in: `plugin{plugin=misbehave lease=leader epoch=1}`.
        out.iter()
            .all(|l| l.contains("plugin{plugin=misbehave lease=leader epoch=")),
        "untagged guest output"
    );
    let calls = host.plugin_status("misbehave").await.unwrap().calls;
    // At most 200 lines per stream per call reach the log, however much the guest prints.
    assert!(
        out.len() as u64 <= calls * 400,
        "{} output lines for {calls} calls",
        out.len()
    );
    eventually("the host to lead", Duration::from_secs(5), async || {
        when(host.role("leader").await, |r| *r == Some(Role::Leader))
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fuel_budgets_stop_a_spinning_guest_by_default() {
    let db = Db::new(Backend::Sqlite).await.unwrap();
    let manifest = "[schedule]\ninterval = \"100ms\"\n[limits]\ncall_timeout = \"60s\"\nfuel = 1000000\n[config]\nverb = \"loop\"\n";
    let dir = plugin_dir(&[("misbehave", manifest)]).unwrap();
    // A host that opted out of metering refuses the manifest, saying why.
    let off = plugin_host("nofuel", &db.url().unwrap(), dir.path())
        .config("[runtime]\nfuel = false\n")
        .start_in_process()
        .await
        .unwrap();
    let status = off.plugin_status("misbehave").await.unwrap();
    assert_eq!(status.state, PluginState::Invalid);
    assert!(
        status
            .last_error
            .as_deref()
            .unwrap()
            .contains("does not meter fuel"),
        "{status:?}"
    );
    drop(off);
    // By default the host meters fuel: the budget ends the call long before its 60 s deadline.
    let db = Db::new(Backend::Sqlite).await.unwrap();
    let host = sqlite_in_process("fuel", &db, dir.path()).await;
    host.wait_for_plugin(
        "misbehave",
        "the fuel budget to run out",
        Duration::from_secs(10),
        |s| s.last_error.as_deref() == Some("ran out of fuel"),
    )
    .await
    .unwrap();
    // Fuel per call shows in /status and /metrics, and the call is counted as a fuel trap.
    let status = host.plugin_status("misbehave").await.unwrap();
    assert!(status.fuel_last_call.unwrap() >= 1_000_000, "{status:?}");
    assert!(status.fuel_total >= 1_000_000, "{status:?}");
    let metrics = host.metrics().await.unwrap();
    assert!(
        metrics.contains("leasehold_plugin_call_fuel_count{plugin=\"misbehave\"}"),
        "{metrics}"
    );
    let traps = "leasehold_plugin_traps_total{plugin=\"misbehave\",kind=\"fuel\"}";
    assert!(
        sample(&metrics, traps).is_some_and(|n| n >= 1.0),
        "{metrics}"
    );
}

/// A component whose start function never returns (`slow-start`: a constructor run by the
/// component's `_initialize` at instantiation) is bounded like a call: it ends as a timeout, and
/// a replacement file is started even while it is still looping under a long deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_looping_start_function_times_out_and_its_replacement_runs() {
    let db = Db::new(Backend::Sqlite).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let wasm = dir.path().join("starter.wasm");
    let toml = dir.path().join("starter.toml");
    let put = |guest: &str, call_timeout: &str| {
        // The manifest first: the watcher waits for a quiet period before it loads the pair.
        std::fs::write(&toml, manifest("100ms", call_timeout, "")).unwrap();
        let tmp = dir.path().join("starter.wasm.part");
        std::fs::copy(guests_dist().join(format!("{guest}.wasm")), &tmp).unwrap();
        std::fs::rename(&tmp, &wasm).unwrap();
    };
    put("slow-start", "200ms");
    let host = sqlite_in_process("starter", &db, dir.path()).await;
    host.wait_for_plugin(
        "starter",
        "the start function to time out",
        Duration::from_secs(15),
        |s| {
            s.last_error
                .as_deref()
                .is_some_and(|e| e.contains("interrupted after its 200ms deadline"))
        },
    )
    .await
    .unwrap();
    host.wait_for_log("kind=\"timeout\"", Duration::from_secs(5))
        .await
        .unwrap();
    let status = host.plugin_status("starter").await.unwrap();
    assert!(status.traps >= 1, "{status:?}");
    assert_eq!(status.calls, 0, "init was entered: {status:?}");
    assert!(!host.log_text().contains("slow-start: init reached"));

    // Under a one-minute deadline the start function loops on; replacing the file retires it.
    put("slow-start", "1m");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let replaced = Instant::now();
    put("hello-reconciler", "1m");
    host.wait_for_log("hello from epoch 1", Duration::from_secs(15))
        .await
        .unwrap();
    assert!(
        replaced.elapsed() < Duration::from_secs(30),
        "the replacement waited for the old start function's deadline"
    );
    assert!(
        host.log_text()
            .contains("call interrupted: the plugin file was replaced or removed"),
        "{}",
        host.log_text()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconcile_can_ask_to_run_again_sooner() {
    let db = Db::new(Backend::Sqlite).await.unwrap();
    // Interval 10 s, but each call asks for the next in 50 ms.
    let dir = plugin_dir(&[(
        "misbehave",
        &manifest("10s", "1s", "verb = \"requeue\"\nms = \"50\""),
    )])
    .unwrap();
    let host = sqlite_in_process("requeue", &db, dir.path()).await;
    host.wait_for_plugin(
        "misbehave",
        "ten requeued calls",
        Duration::from_secs(10),
        |s| s.calls >= 10,
    )
    .await
    .unwrap();
    assert!(
        host.plugin_status("misbehave")
            .await
            .unwrap()
            .last_error
            .is_none()
    );
}

/// The guest fails its call if it can list `/`, read `/etc/passwd`, or see any environment
/// variable: a test process has plenty of those, so a host that passed its own through would
/// show it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wasi_grants_a_plugin_nothing() {
    let db = Db::new(Backend::Sqlite).await.unwrap();
    let dir = plugin_dir(&[("misbehave", &manifest("100ms", "1s", "verb = \"escape\""))]).unwrap();
    assert!(std::env::vars().next().is_some());
    let host = sqlite_in_process("sandbox", &db, dir.path()).await;
    // init, the first escape attempt, and the second one started: the first has ended.
    let status = host
        .wait_for_plugin(
            "misbehave",
            "the escape attempt",
            Duration::from_secs(10),
            |s| s.calls >= 3,
        )
        .await
        .unwrap();
    assert!(status.last_error.is_none(), "{status:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plugins_run_when_the_pooling_allocator_cannot_reserve_its_space() {
    let db = Db::new(Backend::Sqlite).await.unwrap();
    let dir = plugin_dir(&[(
        "hello-reconciler",
        &manifest("100ms", "1s", "greeting = \"small\""),
    )])
    .unwrap();
    // 16 GB of address space: too little for the pool's reservation, enough for one instance.
    let host = plugin_host("no-pool", &db.url().unwrap(), dir.path())
        .under_shell("ulimit -v 16000000")
        .spawn()
        .await
        .unwrap();
    host.wait_for_log("small from epoch 1", Duration::from_secs(15))
        .await
        .unwrap();
    assert!(
        host.log_text().contains("allocator=OnDemand"),
        "{}",
        host.log_text()
    );
}

/// A manifest is read as a small regular file and its parse errors point at a line and column:
/// a `.toml` that links to a file of secrets (`/proc/self/environ`, a credentials file) shows
/// none of its text in `/status` or the log, a FIFO cannot hang the scan, and a huge file (a
/// manifest or a component) is not read whole. Each such plugin is invalid; the others run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_manifest_that_is_not_a_manifest_leaks_nothing_and_hangs_nothing() {
    let db = Db::new(Backend::Sqlite).await.unwrap();
    let dir = plugin_dir(&[("hello-reconciler", &manifest("100ms", "1s", ""))]).unwrap();
    let hello = std::fs::read(guests_dist().join("hello-reconciler.wasm")).unwrap();
    let secrets = tempfile::tempdir().unwrap();
    let secret = format!("hunter2-{}", std::process::id());
    let credentials = secrets.path().join("credentials");
    std::fs::write(
        &credentials,
        format!("DATABASE_URL=postgres://app:{secret}@db/app\nTOKEN={secret}\n"),
    )
    .unwrap();
    let link = |name: &str, to: &Path| {
        std::fs::write(dir.path().join(format!("{name}.wasm")), &hello).unwrap();
        std::os::unix::fs::symlink(to, dir.path().join(format!("{name}.toml"))).unwrap();
    };
    link("environ", Path::new("/proc/self/environ"));
    link("creds", &credentials);
    std::fs::write(dir.path().join("fifo.wasm"), &hello).unwrap();
    let made = std::process::Command::new("mkfifo")
        .arg(dir.path().join("fifo.toml"))
        .status()
        .unwrap();
    assert!(made.success());
    std::fs::write(dir.path().join("huge.wasm"), &hello).unwrap();
    std::fs::write(
        dir.path().join("huge.toml"),
        format!("[config]\nfill = \"{}\"\n", "x".repeat(1 << 20)),
    )
    .unwrap();

    // A component file of 300 MiB (sparse: it costs no disk) is not read whole either.
    let enormous = std::fs::File::create(dir.path().join("enormous.wasm")).unwrap();
    enormous.set_len(300 << 20).unwrap();
    drop(enormous);

    let host = sqlite_in_process("hostile-manifests", &db, dir.path()).await;
    host.wait_for_plugin("hello-reconciler", "to run", Duration::from_secs(15), |s| {
        s.state == PluginState::Running
    })
    .await
    .unwrap();
    let enormous = host
        .wait_for_log("cannot read plugin", Duration::from_secs(5))
        .await
        .unwrap();
    assert!(
        enormous.contains("enormous") && enormous.contains("larger than 256 MiB"),
        "{enormous}"
    );
    for (name, reason) in [
        ("environ", "environ.toml: line 1, column "),
        ("creds", "creds.toml: line 1, column "),
        ("fifo", "fifo.toml: not a regular file"),
        ("huge", "huge.toml: larger than 65536 bytes"),
    ] {
        let status = host.plugin_status(name).await.unwrap();
        assert_eq!(status.state, PluginState::Invalid, "{status:?}");
        let error = status.last_error.as_deref().unwrap_or_default();
        assert!(error.contains(reason), "{name}: {error}");
    }
    let (_, body) = host.get("/status").await.unwrap();
    assert!(!body.contains(&secret), "a secret reached /status: {body}");
    assert!(
        !body.contains("PATH="),
        "the environment reached /status: {body}"
    );
    let log = host.log_text();
    assert!(!log.contains(&secret), "a secret reached the log:\n{log}");
    assert!(
        !log.contains("PATH="),
        "the environment reached the log:\n{log}"
    );
}

/// A guest's error is shown as its log lines are: capped and on one line, its line breaks
/// escaped, so it can neither bloat `/status` nor forge host log lines; and a reconcile that asks
/// to run again at once is held to the shortest schedule interval instead of busy-looping.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guest_can_neither_forge_host_log_lines_nor_busy_loop_the_host() {
    let db = Db::new(Backend::Sqlite).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let misbehave = guests_dist().join("misbehave.wasm");
    for (name, config) in [
        ("long", "verb = \"fail-long\""),
        ("eager", "verb = \"requeue\"\nms = \"0\""),
    ] {
        std::fs::copy(&misbehave, dir.path().join(format!("{name}.wasm"))).unwrap();
        std::fs::write(
            dir.path().join(format!("{name}.toml")),
            manifest("1s", "2s", config),
        )
        .unwrap();
    }
    let host = sqlite_in_process("hostile-guest", &db, dir.path()).await;
    let long = host
        .wait_for_plugin("long", "to fail", Duration::from_secs(15), |s| {
            s.last_error.is_some()
        })
        .await
        .unwrap();
    let error = long.last_error.unwrap();
    assert!(error.len() < 9 * 1024, "{} bytes of error", error.len());
    assert!(
        !error.contains('\n') && error.contains("forged 0\\n2026"),
        "{error}"
    );
    let eager = host
        .wait_for_plugin("eager", "to run", Duration::from_secs(15), |s| s.calls > 0)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let calls = host.plugin_status("eager").await.unwrap().calls - eager.calls;
    // At most one call per 10 ms (plus the calls' own time); unclamped, about 900.
    assert!(calls <= 110, "{calls} calls in one second");
    assert!(
        calls >= 5,
        "{calls} calls in one second: the requeue was not honoured"
    );
    let log = host.log_text();
    assert!(
        !log.lines().any(|l| l.starts_with("2026-01-01T00:00:00")),
        "a guest forged a host log line:\n{log}"
    );
}
