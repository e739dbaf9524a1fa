//! The chart's pods, run for real: the Deployment, ConfigMap and Secret rendered by Helm's
//! library (`scripts/helm-render.sh`) played by `podman kube play` against the test's
//! PostgreSQL, with the plugins on the claim the chart mounts (podman makes a named volume of a
//! claim). Two replicas elect one holder, `helm test`'s check passes against them, and stopping
//! the holder's pod hands the lease over to the other one at once.
//!
//! Three things podman 4.3 does unlike a cluster, each bridged by the least change to what the
//! chart rendered:
//! - it publishes every `containerPort` on the machine, so the replicas of one Deployment collide
//!   on one port (fixed in podman 4.4, which picks a free port each): each replica is played as a
//!   Deployment of one with a `hostPort` of its own;
//! - it keeps a Secret of the YAML in a form it cannot read back: the test creates the podman
//!   secret itself, with the same keys and values (a JSON object of base64 values);
//! - it waits about 20 s for an init container and then fails to remove it ("cannot remove
//!   container … as it is running"): plugins from an image (the chart's init container) are
//!   held by the render tests (`chart`), and here come from the claim.

#![allow(clippy::unwrap_used, missing_docs)]

use std::ffi::OsStr;
use std::path::Path;
use std::time::Duration;

use leasehold_tests::containers::{from_container, image, podman_out, readable_by_all};
use leasehold_tests::eventually::eventually_every;
use leasehold_tests::host::plugin_dir;
use leasehold_tests::pg;
use serde::Deserialize;
use serde_norway::Value;

use super::chart::{one, render};

/// The lease's ttl: a takeover after a failed release would wait this out, so a next holder well
/// within it (podman's own stop and inspect take a second or so on a loaded machine) was handed
/// the lease.
const TTL: Duration = Duration::from_secs(10);

/// hello-reconciler ticking every 200 ms, logging "hello from epoch E, tick T".
const HELLO: &str = "lease = \"leader\"\n[schedule]\ninterval = \"200ms\"\n\
                     [limits]\ncall_timeout = \"2s\"\nmemory = \"64MiB\"\n\
                     [config]\ngreeting = \"hello\"\n";

/// What podman made for one test, removed (by force) when dropped, also when the test fails.
struct Played {
    pods: Vec<String>,
    secret: String,
    volume: String,
}

impl Drop for Played {
    fn drop(&mut self) {
        for pod in &self.pods {
            let _ = podman_out(&["pod", "rm", "--force", pod]);
        }
        let _ = podman_out(&["secret", "rm", &self.secret]);
        let _ = podman_out(&["volume", "rm", "--force", &self.volume]);
    }
}

/// The plugin claim as podman makes it, a named volume, holding the example plugin.
fn plugin_volume(name: &str) {
    podman_out(&["volume", "create", name]).unwrap();
    let at = podman_out(&["volume", "inspect", name, "--format", "{{.Mountpoint}}"]).unwrap();
    let dir = plugin_dir(&[("hello-reconciler", HELLO)]).unwrap();
    for entry in std::fs::read_dir(dir.path()).unwrap() {
        let path = entry.unwrap().path();
        std::fs::copy(&path, Path::new(at.trim()).join(path.file_name().unwrap())).unwrap();
    }
    readable_by_all(Path::new(at.trim())).unwrap();
}

/// Each replica's `podman kube play` file: the Deployment as one replica, named `NAME-I`, its
/// port published on `ports[I]`, beside the ConfigMap.
fn per_replica(objects: &[Value], ports: &[u16]) -> Vec<String> {
    let config = one(objects, "ConfigMap");
    ports
        .iter()
        .enumerate()
        .map(|(i, port)| {
            let mut deployment = one(objects, "Deployment").clone();
            let name = format!("{}-{i}", deployment["metadata"]["name"].as_str().unwrap());
            deployment["metadata"]["name"] = Value::from(name);
            deployment["spec"]["replicas"] = Value::from(1);
            let container = &mut deployment["spec"]["template"]["spec"]["containers"][0];
            assert_eq!(container["name"], "leasehold");
            container["ports"][0]["hostPort"] = Value::from(*port);
            format!(
                "{}---\n{}",
                serde_norway::to_string(config).unwrap(),
                serde_norway::to_string(&deployment).unwrap()
            )
        })
        .collect()
}

#[derive(Debug, Deserialize)]
struct Leases {
    replica: String,
    leases: Vec<Lease>,
}

#[derive(Debug, Deserialize)]
struct Lease {
    role: String,
    holder: Option<String>,
    epoch: Option<i64>,
}

async fn leases(port: u16) -> anyhow::Result<Leases> {
    let url = format!("http://127.0.0.1:{port}/v1/leases");
    Ok(reqwest::get(&url).await?.error_for_status()?.json().await?)
}

/// `helm test`'s pod, as the chart renders it, run with podman against `urls` in place of the
/// peers Service (podman has no Service names): its exit status and output.
fn helm_test(objects: &[Value], urls: &[String]) -> (bool, String) {
    let pod = one(objects, "Pod");
    let container = &pod["spec"]["containers"][0];
    let mut args: Vec<String> = container["args"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_string())
        .collect();
    let peers = args
        .iter()
        .position(|a| a.ends_with("-peers:9464"))
        .unwrap();
    args.splice(peers..=peers, urls.iter().cloned());
    let mut cmd = leasehold_tests::containers::podman();
    cmd.args([
        "run",
        "--rm",
        "--network",
        "slirp4netns:allow_host_loopback=true",
    ])
    .args(["--read-only", "--user", "10001:10001"])
    .arg(container["image"].as_str().unwrap())
    .args(&args);
    let out = cmd.output().unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), said)
}

#[tokio::test]
async fn the_rendered_pods_run_under_podman_elect_one_holder_and_hand_over_when_its_pod_stops() {
    let volume = format!("leasehold-test-plugins-{}", std::process::id());
    let secret = format!("leasehold-test-db-{}", std::process::id());
    let (image_repo, image_tag) = image().rsplit_once(':').unwrap();
    let database = from_container(&pg::server().fresh_lease_database().await.unwrap());
    let objects = render(&format!(
        "replicas: 2\nttl: {}ms\nshutdownGrace: 10s\n\
         image:\n  repository: {image_repo}\n  tag: {image_tag}\n  pullPolicy: Never\n\
         database:\n  url: \"{database}\"\n  secret:\n    name: {secret}\n    key: url\n\
         plugins:\n  claimName: {volume}\n",
        TTL.as_millis()
    ))
    .unwrap();
    let mut played = Played {
        pods: Vec::new(),
        secret: secret.clone(),
        volume: volume.clone(),
    };
    plugin_volume(&volume);

    // The Secret's keys and values, as podman reads a secret named in secretKeyRef.
    let rendered = one(&objects, "Secret");
    assert_eq!(rendered["metadata"]["name"], secret.as_str());
    let data: serde_json::Map<String, serde_json::Value> = rendered["stringData"]
        .as_mapping()
        .unwrap()
        .iter()
        .map(|(k, v)| {
            (
                k.as_str().unwrap().to_string(),
                base64(v.as_str().unwrap()).into(),
            )
        })
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let secret_file = dir.path().join("secret.json");
    std::fs::write(&secret_file, serde_json::to_string(&data).unwrap()).unwrap();
    podman_out(&["secret", "create", &secret, &secret_file.to_string_lossy()]).unwrap();

    let ports = [pg::free_port().unwrap(), pg::free_port().unwrap()];
    for (i, file) in per_replica(&objects, &ports).iter().enumerate() {
        let path = dir.path().join(format!("replica-{i}.yaml"));
        std::fs::write(&path, file).unwrap();
        let deployment = one(&objects, "Deployment")["metadata"]["name"]
            .as_str()
            .unwrap();
        played.pods.push(format!("{deployment}-{i}-pod-0"));
        kube_play(&path);
    }

    // One holder, named by both; the plugins from the claim run on it.
    let (holder, epoch) = eventually_every(
        "one holder of leader",
        Duration::from_secs(60),
        Duration::from_millis(200),
        async || {
            let views = [leases(ports[0]).await?, leases(ports[1]).await?];
            let holders: Vec<usize> = (0..2)
                .filter(|&i| views[i].leases[0].role == "leader")
                .collect();
            match holders.as_slice() {
                [i] if views
                    .iter()
                    .all(|v| v.leases[0].holder.as_deref() == Some(&views[*i].replica)) =>
                {
                    Ok((*i, views[*i].leases[0].epoch.unwrap()))
                }
                _ => Err(anyhow::anyhow!("{views:?}")),
            }
        },
    )
    .await
    .unwrap();
    let holder_pod = &played.pods[holder];
    eventually_every(
        "the holder's plugin to run",
        Duration::from_secs(30),
        Duration::from_millis(200),
        async || match logs(holder_pod).contains(&format!("hello from epoch {epoch}")) {
            true => Ok(()),
            false => Err(()),
        },
    )
    .await
    .unwrap();

    // `helm test`'s check, against both replicas.
    let urls: Vec<String> = ports
        .iter()
        .map(|p| format!("http://{}:{p}", leasehold_tests::containers::HOST_LOOPBACK))
        .collect();
    let (passed, said) = helm_test(&objects, &urls);
    assert!(passed, "helm test's check failed:\n{said}");
    assert!(said.contains("(2 of 2 agree)"), "{said}");

    // Stop the holder's pod as the kubelet does: SIGTERM to its container, SIGKILL after the
    // grace period, the pod's network up until the container has exited. (`podman pod stop`
    // stops the pod's infra container, and with it the network, alongside the others: the
    // release then finds no database.) The ordered stop releases the lease and the other replica
    // takes it at once, long before the ttl would have let it.
    let other = 1 - holder;
    let stopped = std::time::Instant::now();
    let grace =
        one(&objects, "Deployment")["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
            .as_u64()
            .unwrap();
    let container = format!("{holder_pod}-leasehold");
    podman_out(&["stop", "--time", &grace.to_string(), &container]).unwrap();
    let next = eventually_every(
        "the other replica to hold leader",
        Duration::from_secs(30),
        Duration::from_millis(20),
        async || {
            let view = leases(ports[other]).await?;
            match view.leases[0].role.as_str() {
                "leader" => Ok(view.leases[0].epoch.unwrap()),
                role => Err(anyhow::anyhow!("{role}")),
            }
        },
    )
    .await
    .unwrap();
    let took = stopped.elapsed();
    assert!(next > epoch, "epoch {epoch} -> {next}");
    let old = logs(holder_pod);
    assert!(
        old.contains("lease released"),
        "the holder released it:\n{old}"
    );
    assert!(
        took < TTL,
        "the lease was handed over in {took:?}, not left to expire (ttl {TTL:?})"
    );
    let exit = podman_out(&["inspect", "--format", "{{.State.ExitCode}}", &container]).unwrap();
    assert_eq!(exit.trim(), "0", "the holder's container exited cleanly");
    eprintln!(
        "chart pods under podman: the holder's container stopped -> next holder in {took:?} (epoch {epoch} -> {next})"
    );
    drop(played);
}

/// `text` in base64, by coreutils' `base64`.
fn base64(text: &str) -> String {
    use std::io::Write;
    let mut child = std::process::Command::new("base64")
        .arg("-w0")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    String::from_utf8(child.wait_with_output().unwrap().stdout).unwrap()
}

/// What the leasehold container of `pod` wrote, stdout and stderr.
fn logs(pod: &str) -> String {
    let out = leasehold_tests::containers::podman()
        .args(["logs", &format!("{pod}-leasehold")])
        .output()
        .unwrap();
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// `podman kube play FILE` with the network the container tests use (the machine's loopback,
/// where the test's PostgreSQL listens, at 10.0.2.2).
fn kube_play(file: &Path) {
    let out = leasehold_tests::containers::podman()
        .args([
            "kube",
            "play",
            "--network",
            "slirp4netns:allow_host_loopback=true",
        ])
        .arg(OsStr::new(file))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "podman kube play: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
