//! The compose example (`examples/compose/compose.yaml`) works as its README says: `up` starts
//! PostgreSQL and three replicas, which find the database by its service name, elect exactly one
//! leader, and answer `/status`, `/readyz` and `/metrics` on their published ports; only the
//! leader runs the plugin from `./plugins` (its greeting is in that container's log). Stopping
//! the leader's container ends it with exit status 0 after releasing the lease, and another
//! replica takes over at the next epoch well within the ttl, so by the release, not by expiry.
//! `down -v` leaves no container, pod, network or volume behind.
//!
//! It runs the file as a user would, from a copy in a fresh directory with the example plugin in
//! `./plugins`, through podman-compose (`scripts/podman-compose.sh`), with images made on this
//! machine: the host's dev build in the image of `examples/docker/Dockerfile`
//! (`scripts/image.sh`) and, in place of the official PostgreSQL image, one made from Debian's
//! packages (`scripts/postgres-image.sh`). Whatever the outcome, the project is taken down.

#![allow(clippy::unwrap_used, missing_docs)]

use leasehold::lease::Epoch;
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::path::Path;
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, ensure};
use leasehold_tests::containers::{podman as podman_std, podman_async as podman, repo};
use leasehold_tests::endpoint::Endpoint;
use leasehold_tests::eventually::{Text, eventually_every, when};
use leasehold_tests::host::guests_dist;
use leasehold_tests::status::{Role, StatusExt};
use tokio::process::Command;

/// The images the compose file is run with (`LEASEHOLD_IMAGE`, `LEASEHOLD_POSTGRES_IMAGE`).
const LEASEHOLD_IMAGE: &str = leasehold_tests::containers::IMAGE;
const POSTGRES_IMAGE: &str = "localhost/leasehold-postgres:test";
/// The replica services of the compose file, with the variable that sets each one's host port.
const REPLICAS: [(&str, &str); 3] = [
    ("replica-a", "LEASEHOLD_PORT_A"),
    ("replica-b", "LEASEHOLD_PORT_B"),
    ("replica-c", "LEASEHOLD_PORT_C"),
];
/// The compose file's default ttl: a takeover well within it was a handoff, not an expiry.
const TTL: Duration = Duration::from_secs(15);

/// Runs `cmd` (described as `what`) to completion within `timeout`; its stdout, or an error with
/// both outputs when it fails.
async fn run(what: &str, cmd: &mut Command, timeout: Duration) -> anyhow::Result<String> {
    cmd.stdin(Stdio::null()).kill_on_drop(true);
    let Output {
        status,
        stdout,
        stderr,
    } = tokio::time::timeout(timeout, cmd.output())
        .await
        .with_context(|| format!("{what}: no end after {timeout:?}"))?
        .with_context(|| format!("{what}: cannot start"))?;
    let (stdout, stderr) = (
        String::from_utf8_lossy(&stdout).into_owned(),
        String::from_utf8_lossy(&stderr).into_owned(),
    );
    ensure!(
        status.success(),
        "{what}: {status}\n--- stdout\n{stdout}\n--- stderr\n{stderr}"
    );
    Ok(stdout)
}

/// Three ports on 127.0.0.1 that nothing listens on, for the replicas' published ports (the
/// compose file's defaults, 9464-9466, may be taken by a host on this machine).
fn free_ports() -> [u16; 3] {
    let listeners: Vec<TcpListener> = (0..3)
        .map(|_| TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap())
        .collect();
    let ports: Vec<u16> = listeners
        .iter()
        .map(|l| l.local_addr().unwrap().port())
        .collect();
    ports.try_into().unwrap()
}

/// A compose project in a directory of its own: the example's compose file beside a `plugins`
/// directory with the hello-reconciler plugin. Dropping it takes the project down, so a failed
/// test leaves nothing running.
struct Project {
    name: String,
    ports: [u16; 3],
    /// Removed after the project is down (fields drop after `Drop::drop`).
    dir: tempfile::TempDir,
}

impl Project {
    fn new() -> anyhow::Result<Project> {
        let dir = tempfile::tempdir()?;
        std::fs::copy(
            repo().join("examples/compose/compose.yaml"),
            dir.path().join("compose.yaml"),
        )?;
        let plugins = dir.path().join("plugins");
        std::fs::create_dir(&plugins)?;
        let dist = guests_dist();
        std::fs::copy(
            dist.join("hello-reconciler.wasm"),
            plugins.join("hello-reconciler.wasm"),
        )?;
        // A greeting every second instead of every five, so the wait for one is short.
        let manifest = std::fs::read_to_string(dist.join("hello-reconciler.toml"))?;
        let manifest: String = manifest
            .lines()
            .map(|l| {
                if l.starts_with("interval") {
                    "interval = \"1s\"\n".to_string()
                } else {
                    format!("{l}\n")
                }
            })
            .collect();
        std::fs::write(plugins.join("hello-reconciler.toml"), manifest)?;
        Ok(Project {
            name: format!("{PREFIX}{}", std::process::id()),
            ports: free_ports(),
            dir,
        })
    }

    /// `podman-compose -p NAME ARGS` in the project's directory, with the images made here and
    /// the free ports; every other variable of the compose file at its default.
    fn compose(&self, args: &[&str]) -> Command {
        self.compose_std(args).into()
    }

    fn compose_std(&self, args: &[&str]) -> std::process::Command {
        let mut cmd = std::process::Command::new(repo().join("scripts/podman-compose.sh"));
        cmd.current_dir(self.dir.path())
            .env("LEASEHOLD_IMAGE", LEASEHOLD_IMAGE)
            .env("LEASEHOLD_POSTGRES_IMAGE", POSTGRES_IMAGE)
            .env_remove("LEASEHOLD_PLUGIN_DIR")
            .env_remove("LEASEHOLD_TTL")
            .env_remove("POSTGRES_PASSWORD")
            .arg("-p")
            .arg(&self.name)
            .args(args);
        for ((_, var), port) in REPLICAS.iter().zip(self.ports) {
            cmd.env(var, port.to_string());
        }
        cmd
    }

    fn endpoints(&self) -> anyhow::Result<Vec<Endpoint>> {
        self.ports
            .iter()
            .map(|&port| Endpoint::new(SocketAddr::from((Ipv4Addr::LOCALHOST, port))))
            .collect()
    }

    /// The container of `service`.
    async fn container(&self, service: &str) -> anyhow::Result<String> {
        let listing = run(
            "podman ps",
            podman().args([
                "ps",
                "-a",
                "--filter",
                &format!("label=com.docker.compose.project={}", self.name),
                "--format",
                "{{.Names}} {{index .Labels \"com.docker.compose.service\"}}",
            ]),
            Duration::from_secs(30),
        )
        .await?;
        listing
            .lines()
            .find_map(|l| {
                let (name, svc) = l.split_once(' ')?;
                (svc == service).then(|| name.to_string())
            })
            .with_context(|| format!("no container of {service} in:\n{listing}"))
    }
}

impl Drop for Project {
    /// `down -v`, then removes by force whatever of the project is left.
    fn drop(&mut self) {
        let mut down = self.compose_std(&["down", "-v", "-t", "5"]);
        let _ = down
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        remove(&self.name);
    }
}

/// The prefix of the test's project names; the rest is the test process's id.
const PREFIX: &str = "leasehold-compose-";

/// What podman-compose makes for project `name`: the objects of each kind (command words),
/// listed by name. Containers, volumes and networks carry the project's label, the pod only its
/// name.
fn left_of(name: &str) -> Vec<(&'static str, String)> {
    let label = format!("label=io.podman.compose.project={name}");
    let pod = format!("name=^pod_{name}$");
    let mut left = Vec::new();
    for (kind, list) in [
        (
            "container",
            ["ps", "-a", "--filter", &label, "--format", "{{.Names}}"],
        ),
        (
            "volume",
            ["volume", "ls", "--filter", &label, "--format", "{{.Name}}"],
        ),
        (
            "network",
            ["network", "ls", "--filter", &label, "--format", "{{.Name}}"],
        ),
        (
            "pod",
            ["pod", "ls", "--filter", &pod, "--format", "{{.Name}}"],
        ),
    ] {
        if let Ok(out) = podman_std().args(list).stderr(Stdio::null()).output() {
            for object in String::from_utf8_lossy(&out.stdout).split_whitespace() {
                left.push((kind, object.to_string()));
            }
        }
    }
    left
}

/// Removes by force whatever is left of project `name`.
fn remove(name: &str) {
    for (kind, object) in left_of(name) {
        let args: &[&str] = match kind {
            "container" => &["rm", "-f", "-v"],
            "pod" => &["pod", "rm", "-f"],
            _ => &[kind, "rm", "-f"],
        };
        let _ = podman_std()
            .args(args)
            .arg(&object)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

/// Removes the projects of earlier runs of this test that were killed before they could take
/// theirs down (their process is gone).
fn sweep_killed_runs() {
    let mut names = String::new();
    for list in [
        &["ps", "-a", "--format", "{{.Names}}"][..],
        &["volume", "ls", "--format", "{{.Name}}"],
        &["network", "ls", "--format", "{{.Name}}"],
        &["pod", "ls", "--format", "{{.Name}}"],
    ] {
        if let Ok(out) = podman_std().args(list).stderr(Stdio::null()).output() {
            names.push_str(&String::from_utf8_lossy(&out.stdout));
        }
    }
    let mut pids: Vec<u32> = names
        .split_whitespace()
        .filter_map(|n| {
            let rest = &n[n.find(PREFIX)? + PREFIX.len()..];
            let digits = rest
                .find(|c: char| !c.is_ascii_digit())
                .unwrap_or(rest.len());
            rest[..digits].parse().ok()
        })
        .filter(|pid| !Path::new(&format!("/proc/{pid}")).exists())
        .collect();
    pids.sort_unstable();
    pids.dedup();
    for pid in pids {
        eprintln!("removing {PREFIX}{pid}, left by a run that was killed");
        remove(&format!("{PREFIX}{pid}"));
    }
}

/// Makes (or finds up to date) the two images the compose file is run with.
async fn images() -> anyhow::Result<()> {
    let started = Instant::now();
    // Blocks this test's thread for the build: nothing else runs on it meanwhile.
    leasehold_tests::containers::image();
    let leasehold = started.elapsed();
    run(
        "scripts/postgres-image.sh",
        Command::new(repo().join("scripts/postgres-image.sh")).arg(POSTGRES_IMAGE),
        Duration::from_secs(600),
    )
    .await?;
    eprintln!(
        "images: {LEASEHOLD_IMAGE} in {:.1} s, {POSTGRES_IMAGE} in {:.1} s",
        leasehold.as_secs_f64(),
        (started.elapsed() - leasehold).as_secs_f64()
    );
    Ok(())
}

/// Polls the replicas' `/status` until all answer, exactly one leads `leader` at an epoch above
/// `after`, and the others name it as the holder; returns its index and epoch.
async fn single_leader(
    endpoints: &[Option<&Endpoint>],
    after: Epoch,
    timeout: Duration,
) -> anyhow::Result<(usize, Epoch)> {
    eventually_every(
        format!("exactly one leader above epoch {after}, named by every replica"),
        timeout,
        Duration::from_millis(100),
        async || {
            // Per replica asked: its index, and the lease's role, holder and epoch it reports.
            let mut seen = Vec::new();
            for (i, endpoint) in endpoints.iter().enumerate() {
                let Some(endpoint) = endpoint else { continue };
                match endpoint.status().await {
                    Ok(status) => {
                        let lease = status.lease("leader");
                        seen.push((
                            i,
                            lease.map(|l| l.role),
                            lease.and_then(|l| l.holder.clone()),
                            lease.and_then(|l| l.epoch),
                        ));
                    }
                    Err(e) => return Err(format!("{}: {e:#}", endpoint.addr())),
                }
            }
            let leaders: Vec<(usize, Option<Epoch>)> = seen
                .iter()
                .filter(|(_, role, _, _)| *role == Some(Role::Leader))
                .map(|(i, _, _, epoch)| (*i, *epoch))
                .collect();
            let agreed = seen.iter().all(|(_, _, holder, _)| *holder == seen[0].2);
            match leaders[..] {
                [(leader, Some(epoch))] if epoch > after && agreed => Ok((leader, epoch)),
                _ => Err(format!("leaders {leaders:?}; seen {seen:?}")),
            }
        },
    )
    .await
}

/// What `podman logs` shows of `container` (its stdout and stderr).
async fn logs(container: &str) -> anyhow::Result<String> {
    let out = podman()
        .args(["logs", container])
        .stdin(Stdio::null())
        .output()
        .await?;
    Ok(format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    ))
}

/// Waits until the log of `container` holds `needle`.
async fn wait_for_log(container: &str, needle: &str, timeout: Duration) -> anyhow::Result<()> {
    eventually_every(
        format!("`{needle}` in the log of {container}"),
        timeout,
        Duration::from_millis(250),
        async || {
            let log = logs(container).await.unwrap_or_else(|e| format!("{e:#}"));
            when(Text(log), |l| l.0.contains(needle)).map(|_| ())
        },
    )
    .await
}

#[tokio::test]
async fn the_compose_file_runs_three_replicas_and_postgres_with_exactly_one_leader() {
    sweep_killed_runs();
    images().await.unwrap();
    let project = Project::new().unwrap();

    let started = Instant::now();
    let compose_up = &mut project.compose(&["up", "-d"]);
    run("podman-compose up", compose_up, Duration::from_secs(180))
        .await
        .unwrap();
    eprintln!("up: {:.1} s", started.elapsed().as_secs_f64());

    // The replicas start with PostgreSQL still initialising (podman before 4.6 cannot wait for
    // its health): they exit, are restarted and connect once it is up.
    let endpoints = project.endpoints().unwrap();
    let all: Vec<Option<&Endpoint>> = endpoints.iter().map(Some).collect();
    let (leader, epoch) = single_leader(&all, Epoch::new(0), Duration::from_secs(120))
        .await
        .unwrap();
    let (service, _) = REPLICAS[leader];
    eprintln!(
        "{service} leads at epoch {epoch}, {:.1} s after up",
        started.elapsed().as_secs_f64()
    );
    for endpoint in &endpoints {
        let (code, body) = endpoint.get("/readyz").await.unwrap();
        assert_eq!(code, 200, "/readyz of {}: {body}", endpoint.addr());
    }
    let metrics = endpoints[leader].metrics().await.unwrap();
    assert!(metrics.contains("leasehold_"), "{metrics}");
    // The health check is the holder's alone (`leasehold status --holds leader`), run here by
    // hand: podman runs health checks on its own only under systemd.
    for (i, (replica, _)) in REPLICAS.iter().enumerate() {
        let container = project.container(replica).await.unwrap();
        let checked = podman()
            .args(["healthcheck", "run", &container])
            .output()
            .await
            .unwrap();
        assert_eq!(
            checked.status.success(),
            i == leader,
            "{replica}'s health check: {checked:?}"
        );
    }

    // Only the holder runs the plugin.
    let container = project.container(service).await.unwrap();
    wait_for_log(
        &container,
        &format!("hello from epoch {epoch}"),
        Duration::from_secs(30),
    )
    .await
    .unwrap();
    for (other, _) in REPLICAS.iter().filter(|(s, _)| *s != service) {
        let log = logs(&project.container(other).await.unwrap())
            .await
            .unwrap();
        assert!(
            !log.contains("hello from"),
            "{other} ran the plugin:\n{log}"
        );
    }

    // A graceful stop: the lease is released and a standby takes it at the next epoch.
    let stopped = Instant::now();
    run(
        "podman stop",
        podman().args(["stop", "-t", "30", &container]),
        Duration::from_secs(60),
    )
    .await
    .unwrap();
    let stop_took = stopped.elapsed();
    let exit = run(
        "podman inspect",
        podman().args(["inspect", "--format", "{{.State.ExitCode}}", &container]),
        Duration::from_secs(30),
    )
    .await
    .unwrap();
    let log = logs(&container).await.unwrap();
    assert_eq!(exit.trim(), "0", "{service} exited with {exit}:\n{log}");
    assert!(log.contains("lease released"), "{log}");

    let rest: Vec<Option<&Endpoint>> = endpoints
        .iter()
        .enumerate()
        .map(|(i, e)| (i != leader).then_some(e))
        .collect();
    let (next, next_epoch) = single_leader(&rest, epoch, TTL).await.unwrap();
    let took = stopped.elapsed();
    let (next_service, _) = REPLICAS[next];
    eprintln!(
        "stop of {service}: {:.2} s; {next_service} leads at epoch {next_epoch} {:.2} s after the stop began",
        stop_took.as_secs_f64(),
        took.as_secs_f64()
    );
    assert_eq!(next_epoch, epoch.next());
    assert!(
        took < TTL / 2,
        "the takeover took {took:?}: the lease expired instead of being released"
    );
    wait_for_log(
        &project.container(next_service).await.unwrap(),
        &format!("hello from epoch {next_epoch}"),
        Duration::from_secs(30),
    )
    .await
    .unwrap();

    let down = Instant::now();
    run(
        "podman-compose down",
        &mut project.compose(&["down", "-v"]),
        Duration::from_secs(120),
    )
    .await
    .unwrap();
    eprintln!("down: {:.1} s", down.elapsed().as_secs_f64());
    let left = left_of(&project.name);
    assert!(left.is_empty(), "left behind by down -v: {left:?}");
}
