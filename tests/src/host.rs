//! Hosts for tests: a [`HostBuilder`] starts one as a real `leasehold run` process ([`Host`]:
//! read its log, signal it) or in-process ([`crate::in_process`]); both are asked through an
//! [`Endpoint`]. Processes are async (`tokio::process`, the log read by a task), so no test
//! blocks its runtime's threads.

use std::ops::Deref;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use anyhow::{Context, bail};
use rustix::process::{Pid, Signal, kill_process};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, ChildStderr, Command};
use tokio::sync::oneshot;

use crate::endpoint::Endpoint;
use crate::eventually::eventually_every;
use crate::log::{Log, Logged};
use crate::status::Role;

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

/// How to start a host: what every test sets (name, database, leases, ttl, plugins, extra
/// config), and what only a process has (arguments, environment, a shell prefix). It starts the
/// same host two ways: [`HostBuilder::spawn`] runs a `leasehold run` process, and
/// [`HostBuilder::start_in_process`] an [`leasehold::app::App`] in the test's own runtime.
#[derive(Debug, Clone, Default)]
pub struct HostBuilder {
    /// The replica id, and a name for messages.
    pub(crate) name: String,
    /// `database_url`.
    pub(crate) database_url: Option<String>,
    /// `leases`; the host's default when empty.
    pub(crate) leases: Vec<String>,
    /// `[timing] ttl`.
    pub(crate) ttl: Option<Duration>,
    /// `plugins`.
    pub(crate) plugins: Option<PathBuf>,
    /// More config file text (e.g. `[runtime] fuel = false`).
    pub(crate) config: Option<String>,
    /// More `leasehold run` arguments (process only).
    pub(crate) args: Vec<String>,
    /// More environment variables (process only).
    pub(crate) env: Vec<(String, String)>,
    /// A shell command run before the host is exec'd, e.g. `ulimit -v …` (process only).
    pub(crate) shell: Option<String>,
    /// The working directory, against which relative paths in its arguments resolve (process
    /// only); the test's own when `None`.
    pub(crate) dir: Option<PathBuf>,
    /// Leave the HTTP address to the host's default (process only): no `--http 127.0.0.1:0`.
    pub(crate) default_http: bool,
    /// `leasehold exec … -- COMMAND` instead of `leasehold run` (process only).
    pub(crate) exec: Option<Vec<String>>,
    /// Another `leasehold` binary than [`binary`], e.g. an earlier release (process only).
    pub(crate) program: Option<PathBuf>,
    /// The uid and gid to run as, when the tests run as root (process only).
    pub(crate) user: Option<(u32, u32)>,
}

impl HostBuilder {
    /// A host named `name` (its replica id), with the host's defaults for everything else.
    pub fn new(name: &str) -> HostBuilder {
        HostBuilder {
            name: name.to_string(),
            ..HostBuilder::default()
        }
    }

    /// The lease store.
    pub fn database_url(mut self, url: &str) -> Self {
        self.database_url = Some(url.to_string());
        self
    }

    /// One more lease to campaign for.
    pub fn lease(mut self, name: &str) -> Self {
        self.leases.push(name.to_string());
        self
    }

    /// The lease ttl (the rest of the timing derived from it).
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }

    /// The plugin directory.
    pub fn plugins(mut self, dir: &Path) -> Self {
        self.plugins = Some(dir.to_path_buf());
        self
    }

    /// Config file text for settings the builder has no method for; the builder's own
    /// settings win over the same keys in it.
    pub fn config(mut self, toml: &str) -> Self {
        self.config = Some(toml.to_string());
        self
    }

    /// More `leasehold run` arguments (process only).
    pub fn args(mut self, args: &[&str]) -> Self {
        self.args.extend(args.iter().map(|a| a.to_string()));
        self
    }

    /// One more environment variable (process only).
    pub fn env(mut self, key: &str, value: &str) -> Self {
        self.env.push((key.to_string(), value.to_string()));
        self
    }

    /// Runs `prefix` in a shell that then execs the host, e.g. `ulimit -v …` (process only).
    pub fn under_shell(mut self, prefix: &str) -> Self {
        self.shell = Some(prefix.to_string());
        self
    }

    /// Runs the process in `dir`, as a user starts it from there (process only).
    pub fn current_dir(mut self, dir: &Path) -> Self {
        self.dir = Some(dir.to_path_buf());
        self
    }

    /// Leaves the HTTP address to the host's default, as an operator's `leasehold run` does
    /// (process only).
    pub fn default_http(mut self) -> Self {
        self.default_http = true;
        self
    }

    /// Starts `leasehold exec … -- COMMAND` instead of `leasehold run …` (process only).
    pub fn exec(mut self, command: &[&str]) -> Self {
        self.exec = Some(command.iter().map(|a| a.to_string()).collect());
        self
    }

    /// Runs the process as `uid` and `gid` with no supplementary groups, as a service account
    /// runs it: root's capabilities would let it past checks that hold for every other user
    /// (process only; the tests must run as root to use it).
    pub fn user(mut self, uid: u32, gid: u32) -> Self {
        self.user = Some((uid, gid));
        self
    }

    /// Runs `program` instead of this tree's binary, e.g. an earlier release (process only).
    pub fn program(mut self, program: &Path) -> Self {
        self.program = Some(program.to_path_buf());
        self
    }

    /// Spawns the host and waits (15 s at most) until it leads `lease`, as a test that needs a
    /// holder first does.
    pub async fn spawn_leading(self, lease: &str) -> anyhow::Result<Host> {
        let host = self.spawn().await?;
        wait_for_single_leader(&[&host], lease, Duration::from_secs(15)).await?;
        Ok(host)
    }

    /// Starts `leasehold run --http 127.0.0.1:0 --replica-id NAME …` (the test's own `--http`
    /// instead, if its arguments have one) and waits until it serves HTTP.
    pub async fn spawn(self) -> anyhow::Result<Host> {
        let program = match &self.program {
            Some(program) => program.clone(),
            None => binary()?,
        };
        let mut cmd = match &self.shell {
            Some(prefix) => {
                let mut shell = Command::new("bash");
                shell
                    .arg("-c")
                    .arg(format!("{prefix}; exec \"$@\""))
                    .arg("bash")
                    .arg(&program);
                shell
            }
            None => Command::new(&program),
        };
        cmd.arg(if self.exec.is_some() { "exec" } else { "run" });
        let config_dir = match &self.config {
            Some(text) => {
                let dir = tempfile::tempdir()?;
                let file = dir.path().join("leasehold.toml");
                std::fs::write(&file, text)?;
                cmd.arg("--config").arg(file);
                Some(dir)
            }
            None => None,
        };
        if let Some(url) = &self.database_url {
            cmd.args(["--database-url", url]);
        }
        for lease in &self.leases {
            cmd.args(["--lease", lease]);
        }
        if let Some(ttl) = self.ttl {
            cmd.arg("--ttl").arg(format!("{}ms", ttl.as_millis()));
        }
        if let Some(dir) = &self.plugins {
            cmd.arg("--plugins").arg(dir);
        }
        cmd.args(&self.args);
        // A free port unless the test gave its own `--http` (the host takes the flag once), e.g.
        // to start a host again where a page still polls the last one.
        let own_http = self
            .args
            .iter()
            .any(|a| a == "--http" || a.starts_with("--http="));
        if !own_http && !self.default_http {
            cmd.args(["--http", "127.0.0.1:0"]);
        }
        cmd.args(["--replica-id", &self.name]);
        if let Some(command) = &self.exec {
            cmd.arg("--").args(command);
        }
        // Defaults first, so that a test's own `.env("RUST_LOG", …)` wins: the binary's own
        // filter, as an operator who sets none sees it.
        cmd.env("RUST_LOG", leasehold::cli::DEFAULT_LOG_FILTER)
            .env("RUST_BACKTRACE", "0")
            .envs(self.env.iter().map(|(k, v)| (k, v)));
        if let Some(dir) = &self.dir {
            cmd.current_dir(dir);
        }
        if let Some((uid, gid)) = self.user {
            cmd.uid(uid).gid(gid);
        }
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let name = self.name;
        let mut child = cmd.spawn().context("spawning leasehold")?;
        let pid = child.id().context("no pid")?;
        let stderr = child.stderr.take().context("no stderr")?;
        let log = Log::new(&name);
        let (addr_tx, addr_rx) = oneshot::channel();
        let reader = tokio::spawn(read_log(stderr, log.clone(), addr_tx));
        let log_text = || log.text();
        let addr = match tokio::time::timeout(Duration::from_secs(60), addr_rx).await {
            Ok(Ok(addr)) => addr,
            // Timed out, or the log ended (the process exited) without the line.
            _ => bail!("{name} did not start serving HTTP; log:\n{}", log_text()),
        };
        let addr = addr
            .parse()
            .with_context(|| format!("bad address {addr:?}"))?;
        Ok(Host {
            name,
            endpoint: Endpoint::new(addr)?,
            child,
            pid,
            log,
            reader: Some(reader),
            _config: config_dir,
        })
    }
}

/// A running `leasehold run` process; killed when dropped. Asked over HTTP through its
/// [`Endpoint`] (`host.status()`, `host.role(…)`, …).
#[derive(Debug)]
pub struct Host {
    /// A name for messages.
    pub name: String,
    /// Its HTTP endpoint.
    endpoint: Endpoint,
    /// The process.
    child: Child,
    /// Kept apart from `child`, which forgets its id once the exit is collected.
    pid: u32,
    /// Every line of its stderr so far.
    log: Log,
    /// The task reading stderr into `log`; it ends when the process's stderr closes.
    reader: Option<tokio::task::JoinHandle<()>>,
    /// Holds the config file given with `--config`, if any.
    _config: Option<tempfile::TempDir>,
}

impl Deref for Host {
    type Target = Endpoint;

    fn deref(&self) -> &Endpoint {
        &self.endpoint
    }
}

impl AsRef<Endpoint> for Host {
    fn as_ref(&self) -> &Endpoint {
        &self.endpoint
    }
}

impl Host {
    /// Starts `leasehold run ARGS --http 127.0.0.1:0` and waits until it serves HTTP.
    pub async fn start(name: &str, args: &[&str]) -> anyhow::Result<Host> {
        HostBuilder::new(name).args(args).spawn().await
    }

    /// [`Host::start`] with extra environment variables.
    pub async fn start_with_env(
        name: &str,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> anyhow::Result<Host> {
        let mut builder = HostBuilder::new(name).args(args);
        for (key, value) in env {
            builder = builder.env(key, value);
        }
        builder.spawn().await
    }

    /// One host per name in `names`, all with the same `args` and `env`, started one after
    /// another: replicas competing for the same leases.
    pub async fn start_each(
        names: &[&str],
        args: &[&str],
        env: &[(&str, &str)],
    ) -> anyhow::Result<Vec<Host>> {
        let mut hosts = Vec::with_capacity(names.len());
        for name in names {
            hosts.push(Host::start_with_env(name, args, env).await?);
        }
        Ok(hosts)
    }

    /// [`Host::start`] under a shell that first runs `prefix` (e.g. `ulimit -v …`), then execs
    /// the host.
    pub async fn start_under_shell(
        name: &str,
        prefix: &str,
        args: &[&str],
    ) -> anyhow::Result<Host> {
        HostBuilder::new(name)
            .under_shell(prefix)
            .args(args)
            .spawn()
            .await
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

    /// Whether the process has exited (without waiting).
    pub fn has_exited(&mut self) -> bool {
        !matches!(self.child.try_wait(), Ok(None))
    }

    /// The graceful stop: SIGTERM, then up to `timeout` for the process to exit.
    pub async fn stop(&mut self, timeout: Duration) -> anyhow::Result<ExitStatus> {
        self.signal("TERM")?;
        self.wait_exit(timeout).await
    }

    /// SIGTERM, an exit with 0 within 20 s, and the host's last line (`stopped: …`), which
    /// says what became of each lease and process.
    pub async fn stop_for_last_line(&mut self) -> anyhow::Result<String> {
        let status = self.stop(Duration::from_secs(20)).await?;
        let log = self.log().text();
        anyhow::ensure!(status.code() == Some(0), "exit {status}:\n{log}");
        log.lines()
            .rev()
            .find(|l| l.contains("stopped: "))
            .map(str::to_string)
            .with_context(|| format!("no last line:\n{log}"))
    }

    /// The crash: SIGKILL (no release, no clean-up), then up to 5 s for the process to exit.
    pub async fn kill(&mut self) -> anyhow::Result<ExitStatus> {
        self.signal("KILL")?;
        self.wait_exit(Duration::from_secs(5)).await
    }

    /// Waits up to `timeout` for the process to exit.
    pub async fn wait_exit(&mut self, timeout: Duration) -> anyhow::Result<ExitStatus> {
        match tokio::time::timeout(timeout, self.child.wait()).await {
            Ok(status) => {
                // The process is gone, but its last lines may still be in the pipe: read them
                // all before anyone asks what it logged.
                if let Some(reader) = self.reader.take() {
                    let _ = tokio::time::timeout(Duration::from_secs(5), reader).await;
                }
                Ok(status?)
            }
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
async fn read_log(stderr: ChildStderr, log: Log, addr: oneshot::Sender<String>) {
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
        log.push(line);
        if let Some(found) = listening
            && let Some(tx) = addr.take()
        {
            let _ = tx.send(found);
        }
    }
}

/// Polls the hosts' `/status` until exactly one reports `leader` for `lease`; returns its index.
pub async fn wait_for_single_leader<H: AsRef<Endpoint>>(
    hosts: &[H],
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
                if h.as_ref().role(lease).await == Some(Role::Leader) {
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

/// `later - earlier` in seconds, for two times of day (as [`time_of_day`] reads them) less than
/// twelve hours apart, across midnight too.
pub fn seconds_between(later: f64, earlier: f64) -> f64 {
    let d = later - earlier;
    if d < -43_200.0 {
        d + 86_400.0
    } else if d > 43_200.0 {
        d - 86_400.0
    } else {
        d
    }
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
        add_plugin(dir.path(), name, name, manifest)?;
    }
    Ok(dir)
}

/// Puts guest `guest` from `guests/dist` into the plugin directory `dir` as the plugin `name`,
/// with the given manifest.
pub fn add_plugin(dir: &Path, guest: &str, name: &str, manifest: &str) -> anyhow::Result<()> {
    let from = guests_dist().join(format!("{guest}.wasm"));
    std::fs::copy(&from, dir.join(format!("{name}.wasm")))
        .with_context(|| format!("copying {}", from.display()))?;
    std::fs::write(dir.join(format!("{name}.toml")), manifest)?;
    Ok(())
}

impl Logged for Host {
    fn log(&self) -> &Log {
        &self.log
    }
}
