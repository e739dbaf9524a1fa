//! Handoffs between real `leasehold` processes: a release on SQLite wakes the standbys of the
//! same file at once (the event file beside it), as `NOTIFY` does on PostgreSQL; and
//! `leasehold leases handoff NAME [--to REPLICA]`, the graceful step-down an operator asks for,
//! on both stores, and the same over the admin API (`POST /v1/admin/leases/NAME/handoff`): the
//! old holder's plugins stop before the new holder's start, at a new epoch.

#![allow(clippy::unwrap_used, missing_docs)]

use leasehold::lease::Epoch;
use std::time::{Duration, Instant};

use leasehold_tests::admin;
use leasehold_tests::eventually::{eventually, when};
use leasehold_tests::groups::led;
use leasehold_tests::host::{
    Host, HostBuilder, binary, log_time, now_time_of_day, plugin_dir, seconds_between, time_of_day,
    wait_for_single_leader,
};
use leasehold_tests::log::Logged;
use leasehold_tests::status::{Role, StatusExt};

/// Long enough that a standby which missed the wake-up (and waits for the holder's old expiry,
/// or its poll) would be an order of magnitude slower than one that heard it.
const TTL: Duration = Duration::from_secs(10);

/// What a woken standby must beat: a tenth of the ttl, far above the milliseconds a wake-up
/// takes and far below the ttl a missed one costs, on a loaded two-core machine.
const WOKEN: Duration = Duration::from_secs(1);

fn sqlite_file() -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite:{}", dir.path().join("leases.db").display());
    (dir, url)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_on_sqlite_wakes_the_standby_within_milliseconds() {
    let (_dir, url) = sqlite_file();
    let host = |name: &str| HostBuilder::new(name).database_url(&url).ttl(TTL);
    let mut a = host("a").spawn().await.unwrap();
    wait_for_single_leader(&[&a], "leader", Duration::from_secs(15))
        .await
        .unwrap();
    let b = host("b").spawn().await.unwrap();
    // b has campaigned and lost: it now waits for a's expiry, about a ttl away.
    b.wait_for_log("http listening", Duration::from_secs(5))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(b.role("leader").await, Some(Role::Standby));

    let sent = Instant::now();
    a.signal("TERM").unwrap();
    eventually("b to lead", TTL * 2, async || {
        when(b.role("leader").await, |r| *r == Some(Role::Leader))
    })
    .await
    .unwrap();
    let took = sent.elapsed();
    assert!(
        took < WOKEN,
        "b led {took:?} after a's SIGTERM (ttl {TTL:?}): the release did not wake it\n{}",
        b.log_text()
    );
    assert!(
        a.wait_exit(Duration::from_secs(10))
            .await
            .unwrap()
            .success()
    );
    eprintln!("sqlite: SIGTERM -> the standby leads in {took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_member_stopped_on_sqlite_hands_its_shards_over_within_milliseconds() {
    let (_dir, url) = sqlite_file();
    let host = |name: &str| {
        HostBuilder::new(name)
            .database_url(&url)
            .ttl(TTL)
            .args(&["--group", "g=4"])
    };
    let mut a = host("a").spawn().await.unwrap();
    let b = host("b").spawn().await.unwrap();
    // Settled: two shards each (b counts once it has been a member for a renewal interval).
    eventually("two shards each", TTL * 3, async || {
        let (sa, sb) = (a.status().await, b.status().await);
        let held = |s: &anyhow::Result<leasehold_tests::status::Status>| {
            s.as_ref().map(|s| led(s, "g").len()).unwrap_or(0)
        };
        when((held(&sa), held(&sb)), |h| *h == (2, 2))
    })
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;

    let sent = Instant::now();
    a.signal("TERM").unwrap();
    eventually("b to lead all four shards", TTL * 2, async || {
        let held = b.status().await.map(|s| led(&s, "g").len()).unwrap_or(0);
        when(held, |h| *h == 4)
    })
    .await
    .unwrap();
    let took = sent.elapsed();
    assert!(
        took < WOKEN,
        "b led every shard {took:?} after a's SIGTERM (ttl {TTL:?})"
    );
    assert!(
        a.wait_exit(Duration::from_secs(10))
            .await
            .unwrap()
            .success()
    );
    eprintln!("sqlite group: SIGTERM -> the other member leads every shard in {took:?}");
}

/// The plugin every replica runs: the hello reconciler as `work`, called every 20 ms, so that
/// each term's work is a dense run of timestamped log lines (`work from epoch N, tick K`).
fn work_plugins() -> tempfile::TempDir {
    plugin_dir(&[(
        "hello-reconciler",
        "[schedule]\ninterval = \"20ms\"\n[config]\ngreeting = \"work\"\n",
    )])
    .unwrap()
}

/// Runs `leasehold ARGS` and returns its exit code, stdout and stderr.
async fn leasehold(args: &[&str]) -> (Option<i32>, String, String) {
    let out = tokio::process::Command::new(binary().unwrap())
        .args(args)
        .env_remove("LEASEHOLD_DATABASE_URL")
        .env("RUST_BACKTRACE", "0")
        .output()
        .await
        .unwrap();
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.code(), text(&out.stdout), text(&out.stderr))
}

/// The times (seconds of the day) of `host`'s log lines of the plugin's work in the term at
/// `epoch`: its init (`epoch=N`) and its reconciles (`from epoch N,`).
fn work_of(host: &Host, epoch: Epoch) -> Vec<f64> {
    let (init, call) = (
        format!("epoch={epoch}"),
        format!("work from epoch {epoch},"),
    );
    host.log_text()
        .lines()
        .filter(|l| l.contains(&call) || (l.contains("work: starting") && l.contains(&init)))
        .filter_map(time_of_day)
        .collect()
}

/// The history check of a handoff from `old` at `epoch` to `new` at a later epoch: both terms
/// did work, and the old term's last work is before the new term's first, by the replicas'
/// shared clock.
fn assert_no_overlap(old: &Host, epoch: Epoch, new: &Host, new_epoch: Epoch) {
    assert!(new_epoch > epoch, "epoch {new_epoch} after {epoch}");
    let (before, after) = (work_of(old, epoch), work_of(new, new_epoch));
    let (Some(last_old), Some(first_new)) = (
        before.iter().copied().reduce(f64::max),
        after.iter().copied().reduce(f64::min),
    ) else {
        panic!(
            "no work logged for epoch {epoch} on {} or {new_epoch} on {}",
            old.name, new.name
        );
    };
    assert!(
        last_old < first_new,
        "{}'s work at epoch {epoch} ran until {last_old:.6}, after {}'s at epoch {new_epoch} began at {first_new:.6}",
        old.name,
        new.name
    );
    eprintln!(
        "{} stopped its plugins {:.1} ms before {} started its own",
        old.name,
        (first_new - last_old) * 1000.0,
        new.name
    );
}

/// The epoch of `leader` as `host` reads it, once `host` leads it.
async fn led_epoch(host: &Host) -> Epoch {
    eventually(
        format!("{} to lead", host.name),
        Duration::from_secs(10),
        async || when(host.role("leader").await, |r| *r == Some(Role::Leader)),
    )
    .await
    .unwrap();
    epoch_of(host).await
}

/// The epoch of `leader` as `host` reads it from the store.
async fn epoch_of(host: &Host) -> Epoch {
    host.status()
        .await
        .unwrap()
        .lease("leader")
        .unwrap()
        .epoch
        .unwrap()
}

/// `a` leading with its plugin at work (three ticks of its term), and `b` beside it as a
/// standby: the start of every handoff specification here. Returns both and `a`'s epoch.
async fn holder_at_work_and_standby(host: impl Fn(&str) -> HostBuilder) -> (Host, Host, Epoch) {
    let a = host("a").spawn_leading("leader").await.unwrap();
    let b = host("b").spawn().await.unwrap();
    let epoch = led_epoch(&a).await;
    a.wait_for_log(
        &format!("work from epoch {epoch}, tick 3"),
        Duration::from_secs(10),
    )
    .await
    .unwrap();
    (a, b, epoch)
}

/// Two replicas on `url`; `leases handoff leader` moves the lease from the holder to the other
/// with no overlap of their work, and says so; then the commands that have nothing to do.
async fn a_handoff_stops_the_holder_s_plugins_before_the_standby_starts_its_own(url: &str) {
    let plugins = work_plugins();
    let host = |name: &str| {
        HostBuilder::new(name)
            .database_url(url)
            .ttl(TTL)
            .plugins(plugins.path())
    };
    let (mut a, mut b, epoch) = holder_at_work_and_standby(host).await;

    let asked = Instant::now();
    let asked_at = now_time_of_day();
    let (code, out, err) = leasehold(&["leases", "handoff", "leader", "--database-url", url]).await;
    let took = asked.elapsed();
    assert_eq!(code, Some(0), "{out}{err}");
    let next = epoch.next();
    assert!(
        out.contains("a-")
            && out.contains(&format!("(epoch {epoch}) -> b-"))
            && out.contains(&format!("(epoch {next})"))
            && out.contains("released in order"),
        "{out}"
    );
    // The holder heard of it at once, not at its next renewal (a third of the ttl away): from
    // the ask to the line the holder logged as it heard, the command's own start included, not
    // the stop of the holder's plugins and the standby's start that the command waits for too.
    let heard = log_time(&a.log_text(), "handoff requested")
        .map(|t| seconds_between(t, asked_at))
        .unwrap_or_else(|| panic!("the holder logged no handoff request:\n{}", a.log_text()));
    assert!(
        heard < (WOKEN * 2).as_secs_f64(),
        "the holder heard of the handoff {heard:.3} s after it was asked (the whole command took {took:?}):\n{out}"
    );
    assert_eq!(led_epoch(&b).await, next);
    a.wait_for_log("handoff requested (by an operator", Duration::from_secs(5))
        .await
        .unwrap();
    b.wait_for_log(
        &format!("work from epoch {next}, tick 3"),
        Duration::from_secs(10),
    )
    .await
    .unwrap();
    assert_no_overlap(&a, epoch, &b, next);
    eprintln!("leases handoff on {url}: {took:?} from the command's start to its answer");

    // Nothing to hand over: a lease nobody holds, one never held, a name no lease can have.
    for host in [&mut a, &mut b] {
        assert!(host.stop(Duration::from_secs(10)).await.unwrap().success());
    }
    let (code, _, err) = leasehold(&["leases", "handoff", "leader", "--database-url", url]).await;
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("leader is not held by anyone"), "{err}");
    let (code, _, err) =
        leasehold(&["leases", "handoff", "nothing-here", "--database-url", url]).await;
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("no lease named nothing-here"), "{err}");
    let (code, _, err) = leasehold(&["leases", "handoff", "no such", "--database-url", url]).await;
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("invalid lease name \"no such\""), "{err}");
}

on_both_stores!(
    on_sqlite_a_handoff_stops_the_holder_s_plugins_before_the_standby_starts_its_own,
    on_postgres_a_handoff_stops_the_holder_s_plugins_before_the_standby_starts_its_own,
    a_handoff_stops_the_holder_s_plugins_before_the_standby_starts_its_own
);

/// Three replicas on `url`; `leases handoff leader --to X` gives the lease to X each time, while
/// the third replica, woken by the same release, campaigns for it too.
async fn a_handoff_to_a_named_replica_gives_it_the_lease_over_a_third_one_campaigning(url: &str) {
    // Short, so that the replica that handed over campaigns again (after a poll) between rounds.
    let ttl = Duration::from_secs(3);
    let plugins = work_plugins();
    let host = |name: &str| {
        HostBuilder::new(name)
            .database_url(url)
            .ttl(ttl)
            .plugins(plugins.path())
    };
    let a = host("a").spawn().await.unwrap();
    wait_for_single_leader(&[&a], "leader", Duration::from_secs(15))
        .await
        .unwrap();
    let hosts = [
        a,
        host("b").spawn().await.unwrap(),
        host("c").spawn().await.unwrap(),
    ];
    let mut holder = 0;
    // Each round names the replica that joined last or held the longest ago; the other standby
    // is campaigning at the same wake-up.
    for target in [2, 1] {
        // Every standby campaigns again (the last holder's hold-off is a poll, ttl + 20%).
        tokio::time::sleep(ttl * 13 / 10).await;
        let epoch = led_epoch(&hosts[holder]).await;
        hosts[holder]
            .wait_for_log(
                &format!("work from epoch {epoch}, tick 1"),
                Duration::from_secs(10),
            )
            .await
            .unwrap();
        let name = hosts[target].name.clone();
        let (code, out, err) = leasehold(&[
            "leases",
            "handoff",
            "leader",
            "--to",
            &name,
            "--database-url",
            url,
        ])
        .await;
        assert_eq!(code, Some(0), "{out}{err}");
        assert!(out.contains(&format!("-> {name}-")), "{out}");
        let next = led_epoch(&hosts[target]).await;
        hosts[target]
            .wait_for_log(
                &format!("work from epoch {next}, tick 1"),
                Duration::from_secs(10),
            )
            .await
            .unwrap();
        assert_no_overlap(&hosts[holder], epoch, &hosts[target], next);
        let third = 3 - holder - target;
        assert_eq!(hosts[third].role("leader").await, Some(Role::Standby));
        holder = target;
    }
    // A replica that does not take it (there is none of that name) loses it after the
    // reservation: the command says so and fails.
    let (code, out, err) = leasehold(&[
        "leases",
        "handoff",
        "leader",
        "--to",
        "nobody",
        "--database-url",
        url,
    ])
    .await;
    assert_eq!(code, Some(1), "{out}{err}");
    assert!(err.contains("not to nobody"), "{out}{err}");
}

on_both_stores!(
    on_sqlite_a_handoff_to_a_named_replica_gives_it_the_lease_over_a_third_one_campaigning,
    on_postgres_a_handoff_to_a_named_replica_gives_it_the_lease_over_a_third_one_campaigning,
    a_handoff_to_a_named_replica_gives_it_the_lease_over_a_third_one_campaigning
);

/// Two replicas on `url` with an admin token; `POST /v1/admin/leases/leader/handoff`, asked of
/// the standby, moves the lease from the holder to it with no overlap of their work, and
/// answers with both terms.
async fn a_handoff_over_the_admin_api_stops_the_holder_s_plugins_before_the_standby_starts_its_own(
    url: &str,
) {
    let plugins = work_plugins();
    let secrets = tempfile::tempdir().unwrap();
    let token = admin::token_file(secrets.path(), 0o600);
    let host = |name: &str| {
        HostBuilder::new(name)
            .database_url(url)
            .ttl(TTL)
            .plugins(plugins.path())
            .args(&["--admin-token-file", token.to_str().unwrap()])
    };
    let (a, b, epoch) = holder_at_work_and_standby(host).await;

    let asked = Instant::now();
    let answer = admin::handoff(&b, "leader", None).await.unwrap();
    let took = asked.elapsed();
    let next = epoch.next();
    assert_eq!(answer.status, 200, "{answer:?}");
    assert!(
        answer.str("lease") == "leader"
            && answer.str("from").starts_with("a-")
            && answer.json["from_epoch"] == epoch.get()
            && answer.str("to").starts_with("b-")
            && answer.json["to_epoch"] == next.get()
            && answer.str("ended") == "released",
        "{answer:?}"
    );
    assert!(took < WOKEN * 2, "the handoff took {took:?}: {answer:?}");
    assert_eq!(led_epoch(&b).await, next);
    a.wait_for_log("handoff requested (by an operator", Duration::from_secs(5))
        .await
        .unwrap();
    b.wait_for_log(
        "handoff requested by an operator over the admin API",
        Duration::from_secs(5),
    )
    .await
    .unwrap();
    assert!(
        b.log_text()
            .lines()
            .any(|l| l.contains("over the admin API") && l.contains("from=127.0.0.1:")),
        "the request is logged with where it came from:\n{}",
        b.log_text()
    );
    b.wait_for_log(
        &format!("work from epoch {next}, tick 3"),
        Duration::from_secs(10),
    )
    .await
    .unwrap();
    assert_no_overlap(&a, epoch, &b, next);
    eprintln!("admin API handoff on {url}: {took:?} from the request to its answer");
}

on_both_stores!(
    on_sqlite_a_handoff_over_the_admin_api_stops_the_holder_s_plugins_before_the_standby_starts_its_own,
    on_postgres_a_handoff_over_the_admin_api_stops_the_holder_s_plugins_before_the_standby_starts_its_own,
    a_handoff_over_the_admin_api_stops_the_holder_s_plugins_before_the_standby_starts_its_own
);
