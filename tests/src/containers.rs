//! Containers for tests: the image built from this build's `leasehold` binary by
//! `scripts/image.sh` (the Dockerfile and runtime stage `make image` uses, tagged
//! `leasehold:test`), and replicas run from it with podman ([`Container`]: its log, its published
//! HTTP port, `podman stop` and `podman kill`).
//!
//! Each container has a network of its own (slirp4netns) that still reaches the host's loopback
//! at 10.0.2.2, where the test's PostgreSQL listens; its port 9464 is published on a free
//! loopback port. podman reads `scripts/containers.conf` unless `CONTAINERS_CONF` says otherwise.

use std::ops::Deref;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use anyhow::{Context, bail};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use crate::endpoint::Endpoint;
use crate::log::{Log, Logged};

/// The tag the tests build and run.
pub const IMAGE: &str = "localhost/leasehold:test";

/// The host's loopback as a container sees it (slirp4netns with `allow_host_loopback`).
pub const HOST_LOOPBACK: &str = "10.0.2.2";

/// The uid and gid the image runs as (examples/docker/Dockerfile).
pub const UID: u32 = 10001;

/// The repository's root.
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// A `podman` command with the project's containers.conf (unless `CONTAINERS_CONF` is set).
pub fn podman() -> std::process::Command {
    let mut cmd = std::process::Command::new("podman");
    if std::env::var_os("CONTAINERS_CONF").is_none() {
        cmd.env("CONTAINERS_CONF", repo().join("scripts/containers.conf"));
    }
    cmd
}

/// The async twin of [`podman`].
pub fn podman_async() -> Command {
    Command::from(podman())
}

/// Runs `podman ARGS` to completion and returns its stdout; fails with its stderr.
pub fn podman_out(args: &[&str]) -> anyhow::Result<String> {
    let out = podman()
        .args(args)
        .stdin(Stdio::null())
        .output()
        .with_context(|| {
            format!("running podman {args:?} (scripts/install-deps.sh --containers installs it)")
        })?;
    if !out.status.success() {
        bail!(
            "podman {args:?} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The image of this build, made once per test process with `scripts/image.sh --binary` (a few
/// seconds when only the binary changed: the base and the layers before it are cached).
pub fn image() -> &'static str {
    static BUILT: OnceLock<Result<(), String>> = OnceLock::new();
    let built = BUILT.get_or_init(|| {
        sweep_killed_runs();
        let binary = crate::host::binary().map_err(|e| format!("{e:#}"))?;
        let out = std::process::Command::new(repo().join("scripts/image.sh"))
            .arg("--binary")
            .arg(&binary)
            .args(["--tag", IMAGE])
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("running scripts/image.sh: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "scripts/image.sh failed ({}):\n{}{}",
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        Ok(())
    });
    match built {
        Ok(()) => IMAGE,
        Err(e) => panic!("cannot build the test image: {e}"),
    }
}

/// Removes the containers and volumes of earlier test and bench processes that were killed before
/// they could (their names end in `-PID`, and that process is gone).
fn sweep_killed_runs() {
    for (list, remove) in [
        (["ps", "--all", "--format", "{{.Names}}"], ["rm", "--force"]),
        (["volume", "ls", "--format", "{{.Name}}"], ["volume", "rm"]),
    ] {
        let names = podman_out(&list).unwrap_or_default();
        for name in names.split_whitespace() {
            let ours = name.starts_with("leasehold-test-") || name.starts_with("leasehold-bench-");
            let pid = name.rsplit('-').next().and_then(|p| p.parse::<u32>().ok());
            if let (true, Some(pid)) = (ours, pid)
                && !Path::new(&format!("/proc/{pid}")).exists()
            {
                eprintln!("removing {name}, left by a run that was killed");
                let _ = podman_out(&[remove[0], remove[1], name]);
            }
        }
    }
}

/// A database URL of the test's PostgreSQL as a container reaches it.
pub fn from_container(url: &str) -> String {
    url.replace("@127.0.0.1:", &format!("@{HOST_LOOPBACK}:"))
}

/// Makes `dir` (plugin files) and its files readable by the image's user, as a bind mount keeps
/// the host's owner and modes.
pub fn readable_by_all(dir: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))?;
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644))?;
    }
    Ok(())
}

/// How to run one container: `podman run` options, then the host's arguments.
#[derive(Debug, Default)]
pub struct ContainerBuilder {
    /// The container's name (unique per test run), also its replica id.
    name: String,
    /// `podman run` options before the image.
    options: Vec<String>,
    /// Arguments after the image (the default command is `run`).
    args: Vec<String>,
    /// Whether to wait for `/readyz` (false for set-ups that must fail).
    wait_ready: bool,
}

impl ContainerBuilder {
    /// A container named `name` plus a suffix unique to this test process.
    pub fn new(name: &str) -> ContainerBuilder {
        ContainerBuilder {
            name: format!("leasehold-test-{name}-{}", std::process::id()),
            wait_ready: true,
            ..ContainerBuilder::default()
        }
    }

    /// Adds `podman run` options (before the image).
    pub fn options(mut self, options: &[&str]) -> Self {
        self.options.extend(options.iter().map(|o| o.to_string()));
        self
    }

    /// Sets an environment variable in the container.
    pub fn env(self, key: &str, value: &str) -> Self {
        self.options(&["--env", &format!("{key}={value}")])
    }

    /// Mounts `dir` read-only at /plugins.
    pub fn plugins(self, dir: &Path) -> Self {
        self.options(&["--volume", &format!("{}:/plugins:ro", dir.display())])
    }

    /// The host's arguments (replaces the image's `run`).
    pub fn args(mut self, args: &[&str]) -> Self {
        self.args = args.iter().map(|a| a.to_string()).collect();
        self
    }

    /// Does not wait for the container to answer (a set-up that must fail).
    pub fn expect_failure(mut self) -> Self {
        self.wait_ready = false;
        self
    }

    /// `podman run` in the foreground (its output is the container's), with the HTTP port
    /// published on a free loopback port; waits until `/healthz` answers unless told not to.
    pub async fn start(self) -> anyhow::Result<Container> {
        let image = image();
        let port = crate::pg::free_port()?;
        // A left-over from an aborted run of the same process id would refuse the name.
        let _ = podman_out(&["rm", "--force", "--ignore", &self.name]);
        let mut cmd = podman_async();
        cmd.args(["run", "--name", &self.name])
            .args(["--network", "slirp4netns:allow_host_loopback=true"])
            .args(["--publish", &format!("127.0.0.1:{port}:9464")])
            .args(["--env", &format!("LEASEHOLD_REPLICA_ID={}", self.name)])
            .args(["--env", "RUST_BACKTRACE=0"])
            .args(&self.options)
            .arg(image)
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = cmd.spawn().context("spawning podman run")?;
        let log = Log::new(&self.name);
        let stdout = child.stdout.take().context("no stdout")?;
        let stderr = child.stderr.take().context("no stderr")?;
        let readers = [
            tokio::spawn(read_lines(BufReader::new(stdout), log.clone())),
            tokio::spawn(read_lines(BufReader::new(stderr), log.clone())),
        ];
        let mut container = Container {
            name: self.name,
            endpoint: Endpoint::new(([127, 0, 0, 1], port).into())?,
            child,
            log,
            readers: readers.into(),
        };
        if self.wait_ready {
            container.wait_healthy(Duration::from_secs(60)).await?;
        }
        Ok(container)
    }
}

async fn read_lines<R: tokio::io::AsyncBufRead + Unpin>(reader: R, log: Log) {
    let mut lines = reader.lines();
    while let Ok(Some(line)) = lines.next_line().await {
        log.push(line);
    }
}

/// A running container; removed (by force) when dropped.
#[derive(Debug)]
pub struct Container {
    /// Its name, also its replica id.
    pub name: String,
    /// Its HTTP port as published on the host's loopback.
    endpoint: Endpoint,
    /// The foreground `podman run`: it exits with the container's exit code.
    child: Child,
    /// What the container wrote to stdout and stderr.
    log: Log,
    /// The tasks reading its output.
    readers: Vec<tokio::task::JoinHandle<()>>,
}

impl Deref for Container {
    type Target = Endpoint;

    fn deref(&self) -> &Endpoint {
        &self.endpoint
    }
}

impl AsRef<Endpoint> for Container {
    fn as_ref(&self) -> &Endpoint {
        &self.endpoint
    }
}

impl Logged for Container {
    fn log(&self) -> &Log {
        &self.log
    }
}

impl Container {
    /// Waits until `/healthz` answers through the published port; fails at once if the
    /// container exits first.
    async fn wait_healthy(&mut self, timeout: Duration) -> anyhow::Result<()> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if let Ok((200, _)) = self.get("/healthz").await {
                return Ok(());
            }
            if let Some(status) = self.child.try_wait()? {
                let _ = self.wait_exit(Duration::from_secs(5)).await;
                bail!(
                    "{} exited ({status}) before answering; log:\n{}",
                    self.name,
                    self.log.text()
                );
            }
            if tokio::time::Instant::now() >= deadline {
                bail!(
                    "{} did not answer /healthz within {timeout:?}; log:\n{}",
                    self.name,
                    self.log.text()
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// `podman stop --time T`: SIGTERM to PID 1, SIGKILL after `T` seconds; returns the
    /// container's exit status.
    pub async fn stop(&mut self, time: Duration) -> anyhow::Result<ExitStatus> {
        let secs = time.as_secs().max(1).to_string();
        let out = podman_async()
            .args(["stop", "--time", &secs, &self.name])
            .output()
            .await?;
        if !out.status.success() {
            bail!(
                "podman stop {}: {}",
                self.name,
                String::from_utf8_lossy(&out.stderr)
            );
        }
        self.wait_exit(Duration::from_secs(10)).await
    }

    /// `podman kill` (SIGKILL: no release, no clean-up); returns the container's exit status.
    pub async fn kill(&mut self) -> anyhow::Result<ExitStatus> {
        let out = podman_async().args(["kill", &self.name]).output().await?;
        if !out.status.success() {
            bail!(
                "podman kill {}: {}",
                self.name,
                String::from_utf8_lossy(&out.stderr)
            );
        }
        self.wait_exit(Duration::from_secs(10)).await
    }

    /// Waits up to `timeout` for the container to exit, then for its last output.
    pub async fn wait_exit(&mut self, timeout: Duration) -> anyhow::Result<ExitStatus> {
        match tokio::time::timeout(timeout, self.child.wait()).await {
            Ok(status) => {
                for reader in self.readers.drain(..) {
                    let _ = tokio::time::timeout(Duration::from_secs(5), reader).await;
                }
                Ok(status?)
            }
            Err(_) => bail!(
                "{} did not exit within {timeout:?}; log:\n{}",
                self.name,
                self.log.text()
            ),
        }
    }

    /// What `podman logs` holds for the container (stdout and stderr).
    pub fn podman_logs(&self) -> anyhow::Result<String> {
        let out = podman()
            .args(["logs", &self.name])
            .stdin(Stdio::null())
            .output()?;
        Ok(format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }

    /// `podman exec NAME ARGS` as the container's user; returns stdout.
    pub fn exec(&self, args: &[&str]) -> anyhow::Result<String> {
        let mut all = vec!["exec", self.name.as_str()];
        all.extend_from_slice(args);
        podman_out(&all)
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        let _ = podman()
            .args(["rm", "--force", "--volumes", "--time", "0", &self.name])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}
