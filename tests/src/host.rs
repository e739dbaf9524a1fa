//! Real `leasehold` processes: spawn one, read its log, ask its `/status`, signal it.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

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
    log: Arc<Mutex<Vec<String>>>,
    client: reqwest::Client,
}

impl Host {
    /// Starts `leasehold run ARGS --http 127.0.0.1:0` and waits until it serves HTTP.
    pub fn start(name: &str, args: &[&str]) -> anyhow::Result<Host> {
        Self::start_with_env(name, args, &[])
    }

    /// [`Host::start`] with extra environment variables.
    pub fn start_with_env(name: &str, args: &[&str], env: &[(&str, &str)]) -> anyhow::Result<Host> {
        Self::spawn(name, Command::new(binary()?), args, env)
    }

    /// [`Host::start`] under a shell that first runs `prefix` (e.g. `ulimit -v …`), then execs
    /// the host.
    pub fn start_under_shell(name: &str, prefix: &str, args: &[&str]) -> anyhow::Result<Host> {
        let mut shell = Command::new("bash");
        shell
            .arg("-c")
            .arg(format!("{prefix}; exec \"$@\""))
            .arg("bash")
            .arg(binary()?);
        Self::spawn(name, shell, args, &[])
    }

    fn spawn(
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
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().context("spawning leasehold")?;
        let stderr = child.stderr.take().context("no stderr")?;
        let log = Arc::new(Mutex::new(Vec::new()));
        let (addr_tx, addr_rx) = std::sync::mpsc::channel();
        let sink = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                // The bound address, from a text line (`addr=…`) or a JSON one (`"addr":"…"`).
                let addr = line.split("addr=").nth(1).map(|a| a.trim()).or_else(|| {
                    line.split("\"addr\":\"")
                        .nth(1)
                        .and_then(|rest| rest.split('"').next())
                });
                if let Some(addr) = addr
                    && line.contains("http listening")
                {
                    let _ = addr_tx.send(addr.to_string());
                }
                sink.lock().unwrap().push(line);
            }
        });
        let mut host = Host {
            name: name.to_string(),
            addr: "127.0.0.1:0".parse()?,
            child,
            log,
            client: reqwest::Client::builder()
                .timeout(Duration::from_secs(5))
                .build()?,
        };
        match addr_rx.recv_timeout(Duration::from_secs(60)) {
            Ok(addr) => {
                host.addr = addr
                    .parse()
                    .with_context(|| format!("bad address {addr:?}"))?
            }
            Err(_) => bail!(
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
        self.child.id()
    }

    /// Sends `signal` (e.g. "TERM", "KILL", "STOP", "CONT").
    pub fn signal(&self, signal: &str) -> anyhow::Result<()> {
        let ok = Command::new("kill")
            .arg("-s")
            .arg(signal)
            .arg(self.pid().to_string())
            .status()?
            .success();
        if !ok {
            bail!("kill -s {signal} {} failed", self.pid());
        }
        Ok(())
    }

    /// Waits up to `timeout` for the process to exit.
    pub fn wait_exit(&mut self, timeout: Duration) -> anyhow::Result<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait()? {
                return Ok(status);
            }
            if Instant::now() > deadline {
                bail!(
                    "{} did not exit within {timeout:?}; log:\n{}",
                    self.name,
                    self.log_text()
                );
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
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
pub fn run_to_exit(args: &[&str], timeout: Duration) -> anyhow::Result<(ExitStatus, String)> {
    let mut child = Command::new(binary()?)
        .args(args)
        .env("RUST_BACKTRACE", "0")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()?;
    let mut stderr = child.stderr.take().context("no stderr")?;
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut stderr, &mut s);
        s
    });
    let deadline = Instant::now() + timeout;
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            bail!("leasehold {args:?} still running after {timeout:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    Ok((status, reader.join().unwrap_or_default()))
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
