//! Real `leasehold` processes: spawn one, read its log, ask its `/status`, signal it. All of it
//! async (`tokio::process`, the log read by a task), so no test blocks its runtime's threads.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, bail};
use rustix::process::{Pid, Signal, kill_process};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, ChildStderr, Command};
use tokio::sync::oneshot;

use crate::eventually::{Text, eventually, eventually_every};
use crate::status::{PluginStatus, Role, Status, StatusExt};

/// The `leasehold` binary beside the running test executable (`target/<profile>/leasehold`),
/// or `LEASEHOLD_BIN`. `make test` builds it first.
pub fn binary() -> anyhow::Result<PathBuf> {
    if let Ok(bin) = std::env::var("LEASEHOLD_BIN") {
        return Ok(PathBuf::from(bin));
    }
    let exe = std::env::current_exe()?;
    // target/<profile>/deps/<test> or target/<profile>/<bench>
    for dir in exe.ancestors().skip(1).take(2) {
        let candidate = dir.join("leasehold");
        if candidate.is_file() {
            return Ok(candidate);
        }
    }
    bail!(
        "the leasehold binary is not built next to {}: run `cargo build -p leasehold` (make test does)",
        exe.display()
    )
}

/// A running `leasehold run` process; killed when dropped.
#[derive(Debug)]
pub struct Host {
    /// A name for messages.
    pub name: String,
    /// The HTTP address it bound.
    pub addr: SocketAddr,
    child: Child,
    /// Kept apart from `child`, which forgets its id once the exit is collected.
    pid: u32,
    log: Arc<Mutex<Vec<String>>>,
    client: reqwest::Client,
}

impl Host {
    /// Starts `leasehold run ARGS --http 127.0.0.1:0` and waits until it serves HTTP.
    pub async fn start(name: &str, args: &[&str]) -> anyhow::Result<Host> {
        Self::start_with_env(name, args, &[]).await
    }

    /// [`Host::start`] with extra environment variables.
    pub async fn start_with_env(
        name: &str,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> anyhow::Result<Host> {
        Self::spawn(name, Command::new(binary()?), args, env).await
    }

    /// [`Host::start`] under a shell that first runs `prefix` (e.g. `ulimit -v …`), then execs
    /// the host.
    pub async fn start_under_shell(
        name: &str,
        prefix: &str,
        args: &[&str],
    ) -> anyhow::Result<Host> {
        let mut shell = Command::new("bash");
        shell
            .arg("-c")
            .arg(format!("{prefix}; exec \"$@\""))
            .arg("bash")
            .arg(binary()?);
        Self::spawn(name, shell, args, &[]).await
    }

    async fn spawn(
        name: &str,
        mut cmd: Command,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> anyhow::Result<Host> {
        cmd.arg("run")
            .args(args)
            .args(["--http", "127.0.0.1:0", "--replica-id", name]);
        cmd.envs(env.iter().copied())
            .env("RUST_LOG", "info")
            .env("RUST_BACKTRACE", "0");
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = cmd.spawn().context("spawning leasehold")?;
        let pid = child.id().context("no pid")?;
        let stderr = child.stderr.take().context("no stderr")?;
        let log = Arc::new(Mutex::new(Vec::new()));
        let (addr_tx, addr_rx) = oneshot::channel();
        tokio::spawn(read_log(stderr, log.clone(), addr_tx));
        let mut host = Host {
            name: name.to_string(),
            addr: "127.0.0.1:0".parse()?,
            child,
            pid,
            log,
            client: reqwest::Client::builder()
                .timeout(Duration::from_secs(5))
                .build()?,
        };
        match tokio::time::timeout(Duration::from_secs(60), addr_rx).await {
            Ok(Ok(addr)) => {
                host.addr = addr
                    .parse()
                    .with_context(|| format!("bad address {addr:?}"))?
            }
            // Timed out, or the log ended (the process exited) without the line.
            _ => bail!(
                "{name} did not start serving HTTP; log:\n{}",
                host.log_text()
            ),
        }
        Ok(host)
    }

    /// Everything the process logged so far.
    pub fn log_text(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }

    /// How many lines the process logged so far: an offset for [`Host::log_lines_from`].
    pub fn log_len(&self) -> usize {
        self.log.lock().unwrap().len()
    }

    /// The lines logged from line `offset` on (0-based), without copying the whole log.
    pub fn log_lines_from(&self, offset: usize) -> Vec<String> {
        let log = self.log.lock().unwrap();
        log.get(offset..)
            .map(<[String]>::to_vec)
            .unwrap_or_default()
    }

    /// Waits up to `timeout` for a log line containing `needle`, and returns the first such line.
    pub async fn wait_for_log(&self, needle: &str, timeout: Duration) -> anyhow::Result<String> {
        eventually(
            format!("{} to log {needle:?} (its log)", self.name),
            timeout,
            async || {
                let log = self.log_text();
                match log.lines().find(|l| l.contains(needle)) {
                    Some(line) => Ok(line.to_string()),
                    None => Err(Text(log)),
                }
            },
        )
        .await
    }

    /// `GET /status`, read into the host's own types.
    pub async fn status(&self) -> anyhow::Result<Status> {
        let url = format!("http://{}/status", self.addr);
        let body = self
            .client
            .get(url)
            .send()
            .await?
            .error_for_status()?
            .bytes()
            .await?;
        crate::status::parse(&body)
    }

    /// `GET path`: the status code and the body.
    pub async fn get(&self, path: &str) -> anyhow::Result<(u16, String)> {
        let response = self
            .client
            .get(format!("http://{}{path}", self.addr))
            .send()
            .await?;
        let code = response.status().as_u16();
        Ok((code, response.text().await?))
    }

    /// The role of `lease` in `/status`, or `None` if the process does not answer.
    pub async fn role(&self, lease: &str) -> Option<Role> {
        let status = self.status().await.ok()?;
        status.lease(lease).map(|l| l.role)
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Sends `signal` (e.g. "TERM", "KILL", "STOP", "CONT").
    pub fn signal(&self, signal: &str) -> anyhow::Result<()> {
        let sig = match signal {
            "TERM" => Signal::TERM,
            "KILL" => Signal::KILL,
            "STOP" => Signal::STOP,
            "CONT" => Signal::CONT,
            "INT" => Signal::INT,
            other => bail!("unknown signal {other:?}"),
        };
        let pid = i32::try_from(self.pid)
            .ok()
            .and_then(Pid::from_raw)
            .context("no such pid")?;
        kill_process(pid, sig).with_context(|| format!("kill -s {signal} {}", self.pid))
    }

    /// Waits up to `timeout` for the process to exit.
    pub async fn wait_exit(&mut self, timeout: Duration) -> anyhow::Result<ExitStatus> {
        match tokio::time::timeout(timeout, self.child.wait()).await {
            Ok(status) => Ok(status?),
            Err(_) => bail!(
                "{} did not exit within {timeout:?}; log:\n{}",
                self.name,
                self.log_text()
            ),
        }
    }
}

/// Collects the process's stderr into `log` line by line, and sends the address of its
/// "http listening" line.
async fn read_log(
    stderr: ChildStderr,
    log: Arc<Mutex<Vec<String>>>,
    addr: oneshot::Sender<String>,
) {
    let mut addr = Some(addr);
    let mut lines = BufReader::new(stderr).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        // The bound address, from a text line (`addr=…`) or a JSON one (`"addr":"…"`).
        let listening = line.split("addr=").nth(1).map(|a| a.trim()).or_else(|| {
            line.split("\"addr\":\"")
                .nth(1)
                .and_then(|rest| rest.split('"').next())
        });
        let listening = listening
            .filter(|_| line.contains("http listening"))
            .map(str::to_string);
        log.lock().unwrap().push(line);
        if let Some(found) = listening
            && let Some(tx) = addr.take()
        {
            let _ = tx.send(found);
        }
    }
}

/// Polls the hosts' `/status` until exactly one reports `leader` for `lease`; returns its index.
pub async fn wait_for_single_leader(
    hosts: &[&Host],
    lease: &str,
    timeout: Duration,
) -> anyhow::Result<usize> {
    // Polls are sequential, so a handoff between two polls can show the old and the new leader
    // together: that is not a double holder, so keep polling. A short period, as handoffs are
    // timed by this wait.
    eventually_every(
        format!("a single leader of {lease}"),
        timeout,
        Duration::from_millis(2),
        async || {
            let mut leaders = Vec::new();
            for (i, h) in hosts.iter().enumerate() {
                if h.role(lease).await == Some(Role::Leader) {
                    leaders.push(i);
                }
            }
            match leaders[..] {
                [one] => Ok(one),
                _ => Err(format!("leaders {leaders:?}")),
            }
        },
    )
    .await
}

/// Runs `leasehold ARGS` to completion (at most `timeout`) and returns its exit status and stderr.
pub async fn run_to_exit(args: &[&str], timeout: Duration) -> anyhow::Result<(ExitStatus, String)> {
    let child = Command::new(binary()?)
        .args(args)
        .env("RUST_BACKTRACE", "0")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    // On a timeout the child is dropped, hence killed.
    match tokio::time::timeout(timeout, child.wait_with_output()).await {
        Ok(out) => {
            let out = out?;
            Ok((
                out.status,
                String::from_utf8_lossy(&out.stderr).into_owned(),
            ))
        }
        Err(_) => bail!("leasehold {args:?} still running after {timeout:?}"),
    }
}

/// Seconds since midnight of the first log line containing `needle` (RFC 3339 timestamps).
pub fn log_time(log: &str, needle: &str) -> Option<f64> {
    log.lines()
        .find(|l| l.contains(needle))
        .and_then(time_of_day)
}

/// Seconds since midnight of the last log line containing `needle`.
pub fn last_log_time(log: &str, needle: &str) -> Option<f64> {
    log.lines()
        .rev()
        .find(|l| l.contains(needle))
        .and_then(time_of_day)
}

/// Seconds since midnight UTC now, on the clock the processes' log timestamps use.
pub fn now_time_of_day() -> f64 {
    let since_epoch = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    since_epoch.as_secs_f64().rem_euclid(86_400.0)
}

/// Seconds since midnight UTC of one log line, from its RFC 3339 timestamp.
pub fn time_of_day(line: &str) -> Option<f64> {
    // 2026-11-22T04:11:59.302550Z ...
    let t = line
        .split_whitespace()
        .next()?
        .split('T')
        .nth(1)?
        .trim_end_matches('Z');
    let mut parts = t.split(':');
    let h: f64 = parts.next()?.parse().ok()?;
    let m: f64 = parts.next()?.parse().ok()?;
    let s: f64 = parts.next()?.parse().ok()?;
    Some(h * 3600.0 + m * 60.0 + s)
}

/// The directory of built guest components (`make guests`).
pub fn guests_dist() -> PathBuf {
    let dist = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../guests/dist");
    assert!(
        dist.join("hello-reconciler.wasm").is_file(),
        "guest components are missing in {}: run `make guests` (make test does)",
        dist.display()
    );
    dist
}

/// A plugin directory holding guest `name` from `guests/dist` with the given manifest.
pub fn plugin_dir(plugins: &[(&str, &str)]) -> anyhow::Result<tempfile::TempDir> {
    let dir = tempfile::tempdir()?;
    for (name, manifest) in plugins {
        let from = guests_dist().join(format!("{name}.wasm"));
        std::fs::copy(&from, dir.path().join(format!("{name}.wasm")))
            .with_context(|| format!("copying {}", from.display()))?;
        std::fs::write(dir.path().join(format!("{name}.toml")), manifest)?;
    }
    Ok(dir)
}

/// The `/status` entry of plugin `name`.
pub async fn plugin_status(host: &Host, name: &str) -> Option<PluginStatus> {
    let status = host.status().await.ok()?;
    status.plugin(name).cloned()
}
