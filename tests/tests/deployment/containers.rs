//! The image as operators run it: real podman containers of the project's image
//! (examples/docker/Dockerfile's runtime stage, built from this build's binary by
//! scripts/image.sh), against the test's PostgreSQL on the host's loopback.
//!
//! What a container file gets wrong only shows when it runs: the user, the cache directory's
//! permissions, a read-only root, signals to PID 1, a bind mount the process cannot read. Each
//! test here runs one of those for real and reads the outcome from outside: `podman logs`, the
//! container's exit code, `/status`, `/readyz` and `/metrics` through the published port.

#![allow(clippy::unwrap_used, missing_docs)]

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

use leasehold_tests::containers::{
    Container, ContainerBuilder, UID, from_container, readable_by_all,
};
use leasehold_tests::host::{
    log_time, now_time_of_day, plugin_dir, time_of_day, wait_for_single_leader,
};
use leasehold_tests::log::Logged;
use leasehold_tests::pg;
use leasehold_tests::status::{Role, StatusExt};

/// The lease ttl of these tests: short, so that a takeover after `podman kill` is quick.
const TTL: Duration = Duration::from_secs(3);

/// hello-reconciler ticking every 200 ms: each call logs "hello from epoch E, tick T".
const HELLO: &str = "lease = \"leader\"\n[schedule]\ninterval = \"200ms\"\n\
                     [limits]\ncall_timeout = \"2s\"\nmemory = \"64MiB\"\n\
                     [config]\ngreeting = \"hello\"\n";

/// The example plugin in a directory the image's user can read (a bind mount keeps the host's
/// owner and mode).
fn hello_plugins() -> tempfile::TempDir {
    let dir = plugin_dir(&[("hello-reconciler", HELLO)]).unwrap();
    readable_by_all(dir.path()).unwrap();
    dir
}

/// A fresh lease database on the test's PostgreSQL, as the containers reach it.
async fn database() -> String {
    from_container(&pg::server().fresh_lease_database().await.unwrap())
}

/// A replica container of `database` with `plugins` mounted read-only and the test's ttl.
fn replica(name: &str, database: &str, plugins: &Path) -> ContainerBuilder {
    ContainerBuilder::new(name)
        .plugins(plugins)
        .env("LEASEHOLD_DATABASE_URL", database)
        .env("LEASEHOLD_TTL", &format!("{}ms", TTL.as_millis()))
}

/// Seconds since midnight of the first line of `container`'s log containing every needle.
fn time_of(container: &Container, needles: &[&str]) -> Option<f64> {
    container
        .log_text()
        .lines()
        .find(|l| needles.iter().all(|n| l.contains(n)))
        .and_then(time_of_day)
}

#[tokio::test]
async fn three_containers_elect_one_leader_hand_over_on_podman_stop_and_take_over_after_podman_kill()
 {
    let database = database().await;
    let plugins = hello_plugins();
    let mut replicas = Vec::new();
    for name in ["c1", "c2", "c3"] {
        replicas.push(
            replica(name, &database, plugins.path())
                .start()
                .await
                .unwrap(),
        );
    }
    let first = wait_for_single_leader(&replicas, "leader", Duration::from_secs(20))
        .await
        .unwrap();
    let epoch = replicas[first]
        .status()
        .await
        .unwrap()
        .lease("leader")
        .unwrap()
        .epoch
        .unwrap();
    // Its plugin's lines are in `podman logs`, and only the leader's.
    replicas[first]
        .wait_for_log(
            &format!("hello from epoch {epoch}, tick 1"),
            Duration::from_secs(10),
        )
        .await
        .unwrap();
    let logs = replicas[first].podman_logs().unwrap();
    assert!(
        logs.contains(&format!("hello from epoch {epoch}, tick 1")),
        "the leader's plugin lines are missing from podman logs:\n{logs}"
    );
    for (i, r) in replicas.iter().enumerate() {
        if i != first {
            assert!(
                !r.log_text().contains("hello from epoch"),
                "standby {} ran the plugin:\n{}",
                r.name,
                r.log_text()
            );
        }
    }

    // podman stop: SIGTERM to PID 1, an ordered release, exit code 0, and a standby leads at
    // once: well within a second, not after the ttl.
    let mut holder = replicas.remove(first);
    let stop_sent = now_time_of_day();
    let started = Instant::now();
    let status = holder.stop(Duration::from_secs(30)).await.unwrap();
    let stop_took = started.elapsed();
    assert_eq!(
        status.code(),
        Some(0),
        "podman stop: {status:?}\n{}",
        holder.log_text()
    );
    let second = wait_for_single_leader(&replicas, "leader", Duration::from_secs(10))
        .await
        .unwrap();
    let next = epoch.next();
    let new_leader = &replicas[second];
    new_leader
        .wait_for_log(
            &format!("hello from epoch {next}, tick 0"),
            Duration::from_secs(10),
        )
        .await
        .unwrap();
    let acquired = time_of(new_leader, &["lease acquired", &format!("epoch={next}")]).unwrap();
    let handoff = acquired - stop_sent;
    assert!(
        handoff < 1.0,
        "{} led {handoff:.3} s after podman stop was sent\n{}",
        new_leader.name,
        new_leader.log_text()
    );
    // The stopped holder's plugins ended before the new term's first guest call (its init).
    let old_log = holder.log_text();
    let ended = log_time(&old_log, "term ended: plugins stopped").unwrap_or_else(|| {
        panic!("the stopped holder never logged the end of its term:\n{old_log}")
    });
    let first_call = time_of(new_leader, &["hello: starting", &format!("epoch={next}")]).unwrap();
    assert!(
        ended < first_call,
        "the old term ended at {ended:.6}, after the new term's first call at {first_call:.6}"
    );
    eprintln!(
        "container handoff: podman stop → next leader {:.0} ms (podman stop returned after {stop_took:?}); old plugins ended {:.1} ms before the new term's first call",
        handoff * 1000.0,
        (first_call - ended) * 1000.0
    );

    // podman kill: no release; the last standby takes over once the ttl runs out, within ttl +
    // poll interval (the poll interval defaults to the ttl).
    let mut holder = replicas.remove(second);
    let killed = Instant::now();
    let status = holder.kill().await.unwrap();
    assert_ne!(status.code(), Some(0), "a killed container exits non-zero");
    let last = &replicas[0];
    wait_for_single_leader(&replicas, "leader", TTL * 2 + Duration::from_secs(2))
        .await
        .unwrap();
    let takeover = killed.elapsed();
    assert!(
        takeover <= TTL * 2 + Duration::from_millis(500),
        "takeover after podman kill took {takeover:?} (ttl {TTL:?})"
    );
    assert_eq!(
        last.status().await.unwrap().lease("leader").unwrap().epoch,
        Some(next.next())
    );
    eprintln!("container takeover after podman kill: {takeover:?} (ttl {TTL:?})");
}

#[tokio::test]
async fn a_read_only_root_compiles_plugins_into_a_tmpfs_cache_and_a_cache_volume_is_reused_without_compiling()
 {
    let database = database().await;
    let plugins = hello_plugins();
    let read_only = |name: &str| replica(name, &database, plugins.path()).options(&["--read-only"]);

    // A tmpfs at the cache directory: the compiled plugin is written there. A new tmpfs belongs
    // to root: podman's `U` hands it to the container's user (docker: `uid=10001,gid=10001`).
    let tmpfs = "type=tmpfs,destination=/var/cache/leasehold,tmpfs-mode=0750,U";
    let c = read_only("tmpfs")
        .options(&["--mount", tmpfs])
        .start()
        .await
        .unwrap();
    let loaded = c
        .wait_for_log("plugin loaded", Duration::from_secs(30))
        .await
        .unwrap();
    assert!(loaded.contains("cache=Compiled"), "{loaded}");
    let cached = c
        .exec(&["sh", "-c", "ls /var/cache/leasehold/components | wc -l"])
        .unwrap();
    assert_ne!(cached.trim(), "0", "nothing written to the cache");
    drop(c);

    // A named volume: the first container compiles into it, the next one loads from it.
    let volume = format!("leasehold-test-cache-{}", std::process::id());
    let _volume = Volume(volume.clone());
    let mount = format!("{volume}:/var/cache/leasehold");
    for (run, expected) in [("vol1", "cache=Compiled"), ("vol2", "cache=Hit")] {
        let mut c = read_only(run)
            .options(&["--volume", &mount])
            .start()
            .await
            .unwrap();
        let loaded = c
            .wait_for_log("plugin loaded", Duration::from_secs(30))
            .await
            .unwrap();
        assert!(loaded.contains(expected), "{run}: {loaded}");
        assert_eq!(
            c.stop(Duration::from_secs(30)).await.unwrap().code(),
            Some(0)
        );
    }
}

/// A named volume, removed when dropped.
struct Volume(String);

impl Drop for Volume {
    fn drop(&mut self) {
        let _ = leasehold_tests::containers::podman_out(&["volume", "rm", "--force", &self.0]);
    }
}

#[tokio::test]
async fn a_container_runs_as_its_fixed_uid_answers_on_its_port_and_exits_within_shutdown_grace_when_stopped_mid_call()
 {
    let database = database().await;
    // hello-rust computing without end from its second tick: a call that never returns by itself.
    let busy = "lease = \"leader\"\n[schedule]\ninterval = \"100ms\"\n\
                [limits]\ncall_timeout = \"120s\"\nmemory = \"64MiB\"\n[grants]\nkv = true\n\
                [config]\ngreeting = \"busy\"\nbusy_at_tick = \"1\"\n";
    let plugins = plugin_dir(&[("hello-rust", busy)]).unwrap();
    readable_by_all(plugins.path()).unwrap();
    let grace = Duration::from_secs(4);
    let mut c = replica("busy", &database, plugins.path())
        .env("LEASEHOLD_SHUTDOWN_GRACE", &format!("{}s", grace.as_secs()))
        .start()
        .await
        .unwrap();

    // PID 1 is leasehold, as uid and gid 10001.
    let ids = c
        .exec(&[
            "sh",
            "-c",
            "grep -E '^(Uid|Gid):' /proc/1/status; cat /proc/1/comm",
        ])
        .unwrap();
    assert!(
        ids.contains(&format!("Uid:\t{UID}\t{UID}\t{UID}\t{UID}"))
            && ids.contains(&format!("Gid:\t{UID}\t{UID}\t{UID}\t{UID}"))
            && ids.trim_end().ends_with("leasehold"),
        "PID 1:\n{ids}"
    );
    // Probes and Prometheus reach it through the published port, once it leads: serving HTTP
    // comes before the first campaign's answer, which a busy machine can delay.
    leasehold_tests::eventually::eventually(
        "the container to lead",
        Duration::from_secs(20),
        async || match c.role("leader").await {
            Some(Role::Leader) => Ok(()),
            other => Err(other),
        },
    )
    .await
    .unwrap();
    assert_eq!(c.get("/readyz").await.unwrap().0, 200);
    let metrics = c.metrics().await.unwrap();
    assert!(
        metrics.contains("leasehold_lease_is_leader{lease=\"leader\"} 1"),
        "{metrics}"
    );

    // Mid-call: tick 0 returned, tick 1 computes without end.
    c.wait_for_log("busy from epoch 1, tick 0", Duration::from_secs(10))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!c.log_text().contains("tick 1"), "{}", c.log_text());
    let started = Instant::now();
    let status = c.stop(Duration::from_secs(30)).await.unwrap();
    let took = started.elapsed();
    assert_eq!(status.code(), Some(0), "{}", c.log_text());
    assert!(
        took < grace + Duration::from_secs(1),
        "stopped after {took:?}; shutdown_grace {grace:?}"
    );
    let log = c.log_text();
    assert!(log.contains("term ended: plugins stopped"), "{log}");
    assert!(!log.contains("shutdown grace elapsed"), "{log}");
    eprintln!("SIGTERM to PID 1 mid-call: exited 0 after {took:?} (shutdown_grace {grace:?})");
}

#[tokio::test]
async fn a_wasm_replaced_in_the_mounted_directory_on_the_host_is_reloaded_in_the_container() {
    let database = database().await;
    let plugins = hello_plugins();
    let c = replica("reload", &database, plugins.path())
        .start()
        .await
        .unwrap();
    c.wait_for_log("hello from epoch 1, tick 1", Duration::from_secs(20))
        .await
        .unwrap();
    let before = c.log_len();

    // Another component under the same name, written beside and renamed over it, as a deploy
    // would; its lines read differently ("rs-hi from epoch …").
    let dir = plugins.path();
    let manifest = "lease = \"leader\"\n[schedule]\ninterval = \"200ms\"\n[limits]\n\
                    call_timeout = \"2s\"\nmemory = \"64MiB\"\n[grants]\nkv = true\n\
                    [config]\ngreeting = \"rs-hi\"\n";
    let dist = leasehold_tests::host::guests_dist();
    std::fs::write(dir.join("hello-reconciler.toml"), manifest).unwrap();
    std::fs::copy(dist.join("hello-rust.wasm"), dir.join(".next.wasm")).unwrap();
    readable_by_all(dir).unwrap();
    std::fs::rename(dir.join(".next.wasm"), dir.join("hello-reconciler.wasm")).unwrap();

    leasehold_tests::eventually::eventually(
        "the replaced plugin to run in the container",
        Duration::from_secs(20),
        async || {
            let lines = c.log_lines_from(before);
            if lines.iter().any(|l| l.contains("rs-hi from epoch 1")) {
                Ok(())
            } else {
                Err(lines.join("\n"))
            }
        },
    )
    .await
    .unwrap();
}

/// The one error line of a container that must fail at start, after checking that it exited
/// non-zero, logged exactly one error and no panic.
async fn one_error_line(builder: ContainerBuilder) -> String {
    let mut c = builder.expect_failure().start().await.unwrap();
    let status = c.wait_exit(Duration::from_secs(60)).await.unwrap();
    let log = c.podman_logs().unwrap();
    assert!(!status.success(), "{}: exited {status:?}\n{log}", c.name);
    assert!(!log.contains("panicked"), "{}: a panic\n{log}", c.name);
    let errors: Vec<&str> = log.lines().filter(|l| l.contains("error")).collect();
    assert_eq!(
        errors.len(),
        1,
        "{}: one error line expected:\n{log}",
        c.name
    );
    assert!(errors[0].starts_with("leasehold: error: "), "{}", errors[0]);
    errors[0].to_string()
}

#[tokio::test]
async fn bad_container_setups_fail_with_one_clear_line() {
    let database = database().await;

    // A plugin directory the container's user cannot read: the host's owner keeps it to itself.
    let private = plugin_dir(&[("hello-reconciler", HELLO)]).unwrap();
    std::fs::set_permissions(private.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let line = one_error_line(replica("unreadable", &database, private.path())).await;
    assert!(
        line.contains("/plugins") && line.contains("Permission denied"),
        "unreadable plugin directory: {line}"
    );

    // No database URL on a read-only root: the SQLite default cannot be created.
    let plugins = hello_plugins();
    let line = one_error_line(
        ContainerBuilder::new("no-url")
            .plugins(plugins.path())
            .options(&["--read-only"]),
    )
    .await;
    assert!(
        line.contains("cannot create the SQLite lease file /var/lib/leasehold/leasehold.db")
            && line.contains("Read-only file system")
            && line.contains("LEASEHOLD_DATABASE_URL"),
        "read-only root without a database URL: {line}"
    );

    // A database that refuses the connection (nothing listens on port 1).
    let refused = format!(
        "postgres://leasehold:hunter2@{}:1/leasehold",
        leasehold_tests::containers::HOST_LOOPBACK
    );
    let line = one_error_line(replica("refused", &refused, plugins.path())).await;
    assert!(
        line.contains("cannot connect to postgres://leasehold:***@10.0.2.2:1/leasehold")
            && line.contains("refused"),
        "refused database: {line}"
    );
}

#[tokio::test]
async fn the_image_has_ca_certificates_no_compiler_and_oci_labels() {
    let image = leasehold_tests::containers::image();
    let labels = leasehold_tests::containers::podman_out(&[
        "image",
        "inspect",
        "--format",
        "{{json .Labels}}",
        image,
    ])
    .unwrap();
    let labels: serde_json::Value = serde_json::from_str(&labels).unwrap();
    for key in ["source", "version", "licenses", "revision"] {
        let value = labels[format!("org.opencontainers.image.{key}")]
            .as_str()
            .unwrap_or_default();
        assert!(!value.is_empty(), "label {key} missing: {labels}");
    }
    assert_eq!(
        labels["org.opencontainers.image.version"],
        env!("CARGO_PKG_VERSION")
    );
    assert_eq!(labels["org.opencontainers.image.licenses"], "Apache-2.0");
    let found = leasehold_tests::containers::podman_out(&[
        "run",
        "--rm",
        "--entrypoint",
        "sh",
        image,
        "-c",
        "test -s /etc/ssl/certs/ca-certificates.crt && echo certs; \
         for tool in cc gcc rustc cargo ld; do command -v $tool; done; true",
    ])
    .unwrap();
    assert_eq!(
        found.trim(),
        "certs",
        "CA certificates, and no compiler: {found}"
    );
    // The binary names the commit the image's revision label names.
    let version =
        leasehold_tests::containers::podman_out(&["run", "--rm", image, "--version"]).unwrap();
    let revision = labels["org.opencontainers.image.revision"]
        .as_str()
        .unwrap_or_default()
        .trim_end_matches("-dirty");
    assert_eq!(
        version.trim(),
        format!("leasehold {} ({revision})", env!("CARGO_PKG_VERSION")),
        "{labels}"
    );
}
