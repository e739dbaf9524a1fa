//! etcd as the reference the handoff benchmark compares leasehold against: a single-node etcd
//! server started on free loopback ports in a temporary directory ([`Etcd`]), and agents that
//! hold a named lock with etcd's own CLI, `etcdctl lock --ttl N LOCK -- sh -c WORK` ([`Agent`]),
//! whose work prints its start time and then a heartbeat, both on the wall clock the leasehold
//! hosts' log timestamps use.
//!
//! How `etcdctl lock` (3.4.23) behaves, verified by hand with a work command running:
//! - SIGTERM (or SIGINT) to etcdctl alone does nothing visible: etcdctl catches it, but while its
//!   command runs it only waits for that command, so the lock stays held and the work goes on.
//! - When the command exits, for whatever reason, etcdctl deletes its lock key (the next waiter
//!   takes the lock within milliseconds) and exits; it does not revoke its session's lease, which
//!   is left to expire.
//! - SIGKILL to etcdctl alone leaves the work running, reparented to init and still printing as
//!   if it held the lock, while the next waiter takes the lock once the lease expires (≈ ttl).
//!
//! So an agent is signalled as a service manager stops a service: the signal goes to etcdctl
//! and to its work together ([`Agent::signal`]). A graceful stop (SIGTERM) ends the work, and
//! etcdctl then unlocks; a crash (SIGKILL) takes both down, and the lock passes when the lease
//! expires.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use rustix::process::{Pid, Signal, kill_process, kill_process_group};
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::process::{Child, Command};
use tokio::task::JoinHandle;

use crate::pg::free_port;

/// The work an agent runs while it holds the lock: one line `start PID SECONDS` as soon as it
/// starts (its own pid, so that it can be signalled with etcdctl, and the Unix time), then the
/// Unix time every 20 ms. The loop ends when a line cannot be written, so that a work left
/// behind by a bench that died stops by itself.
const WORK: &str = "echo \"start $$ $(date +%s.%N)\"; while date +%s.%N; do sleep 0.02; done";

/// The paths of `etcd` and `etcdctl` on `PATH`, or an error saying which is missing.
pub fn binaries() -> anyhow::Result<(PathBuf, PathBuf)> {
    let find = |name: &str| {
        std::env::var_os("PATH")
            .and_then(|path| {
                std::env::split_paths(&path)
                    .map(|dir| dir.join(name))
                    .find(|candidate| candidate.is_file())
            })
            .with_context(|| {
                format!("`{name}` is not on PATH (scripts/install-deps.sh --bench installs it)")
            })
    };
    Ok((find("etcd")?, find("etcdctl")?))
}

/// A single-node etcd server on free loopback ports, its data in a temporary directory. Killed,
/// with every agent started from it, when dropped; a watchdog does the same if this process
/// dies without dropping it.
#[derive(Debug)]
pub struct Etcd {
    /// `etcdctl`.
    etcdctl: PathBuf,
    /// `http://127.0.0.1:PORT`, the client URL.
    endpoint: String,
    /// The server's version, e.g. `3.4.23`.
    version: String,
    /// The server, leader of the process group every agent joins.
    server: Child,
    /// The server's process group: one kill ends the server and all its agents.
    group: Pid,
    /// Kills the group if this process dies first (SIGKILL, Ctrl-C), when no drop runs.
    _watchdog: Child,
    /// The data directory and the server's log.
    dir: tempfile::TempDir,
}

impl Etcd {
    /// Starts the server and waits until `etcdctl endpoint health` says it serves.
    pub async fn start() -> anyhow::Result<Etcd> {
        let (etcd, etcdctl) = binaries()?;
        let version = Command::new(&etcd)
            .arg("--version")
            .output()
            .await
            .context("running etcd --version")?;
        // "etcd Version: 3.4.23" on the first line.
        let version = String::from_utf8_lossy(&version.stdout)
            .lines()
            .next()
            .and_then(|line| line.strip_prefix("etcd Version:"))
            .unwrap_or("unknown")
            .trim()
            .to_string();
        // A free port can be taken before etcd binds it: try a few pairs.
        let mut last_err = None;
        for _ in 0..5 {
            match Etcd::start_once(&etcd, &etcdctl, &version).await {
                Ok(server) => return Ok(server),
                Err(e) => last_err = Some(e),
            }
        }
        Err(last_err.unwrap_or_else(|| anyhow::anyhow!("etcd did not start")))
    }

    async fn start_once(etcd: &Path, etcdctl: &Path, version: &str) -> anyhow::Result<Etcd> {
        let dir = tempfile::tempdir()?;
        let (client, peer) = (free_port()?, free_port()?);
        let endpoint = format!("http://127.0.0.1:{client}");
        let peer_url = format!("http://127.0.0.1:{peer}");
        let log = std::fs::File::create(dir.path().join("etcd.log"))?;
        let server = Command::new(etcd)
            .arg("--name=bench")
            .arg(format!("--data-dir={}", dir.path().join("data").display()))
            .arg(format!("--listen-client-urls={endpoint}"))
            .arg(format!("--advertise-client-urls={endpoint}"))
            .arg(format!("--listen-peer-urls={peer_url}"))
            .arg(format!("--initial-advertise-peer-urls={peer_url}"))
            .arg(format!("--initial-cluster=bench={peer_url}"))
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            // A group of its own that the agents join: out of reach of a Ctrl-C meant for the
            // bench (the watchdog cleans up then), and one kill ends them all.
            .process_group(0)
            .kill_on_drop(true)
            .spawn()
            .context("starting etcd")?;
        let (group, watchdog) = crate::reaper::watch_group(&server, "etcd", dir.path())?;
        let mut etcd = Etcd {
            etcdctl: etcdctl.to_path_buf(),
            endpoint,
            version: version.to_string(),
            server,
            group,
            _watchdog: watchdog,
            dir,
        };
        etcd.wait_healthy(Duration::from_secs(30)).await?;
        Ok(etcd)
    }

    /// Polls `etcdctl endpoint health` until it succeeds; fails at once if the server exits.
    async fn wait_healthy(&mut self, timeout: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.server.try_wait()? {
                bail!("etcd exited ({status}); its log:\n{}", self.log());
            }
            let health = self
                .etcdctl()
                .args(["endpoint", "health"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .await?;
            if health.success() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                bail!(
                    "etcd not healthy within {timeout:?}; its log:\n{}",
                    self.log()
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// `etcdctl --endpoints=URL`, in the server's process group, ready for more arguments.
    fn etcdctl(&self) -> Command {
        let mut cmd = Command::new(&self.etcdctl);
        cmd.arg(format!("--endpoints={}", self.endpoint))
            // The v3 API (3.4's default, said anyway), and no endpoints from the environment
            // beside the flag.
            .env("ETCDCTL_API", "3")
            .env_remove("ETCDCTL_ENDPOINTS")
            .stdin(Stdio::null())
            .process_group(self.group.as_raw_nonzero().get())
            .kill_on_drop(true);
        cmd
    }

    /// The client URL, `http://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// The server's version, e.g. `3.4.23`.
    pub fn version(&self) -> &str {
        &self.version
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("etcd.log")).unwrap_or_default()
    }

    /// How many agents hold or wait for `lock`: the keys under `LOCK/`, one per agent that has
    /// joined the lock's queue.
    pub async fn lock_keys(&self, lock: &str) -> anyhow::Result<usize> {
        let out = self
            .etcdctl()
            .args(["get", "--prefix", "--keys-only", &format!("{lock}/")])
            .output()
            .await?;
        anyhow::ensure!(
            out.status.success(),
            "etcdctl get failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| !l.trim().is_empty())
            .count())
    }

    /// Starts `etcdctl lock --ttl TTL_SECS LOCK -- sh -c WORK`: an agent that waits for `lock`
    /// and runs its work while it holds it.
    pub fn agent(&self, name: &str, lock: &str, ttl_secs: u64) -> anyhow::Result<Agent> {
        let mut child = self
            .etcdctl()
            .arg("lock")
            .arg(format!("--ttl={ttl_secs}"))
            .args([lock, "--", "sh", "-c", WORK])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .context("starting etcdctl lock")?;
        let pid = child.id().context("etcdctl has no pid")?;
        let output = Arc::new(Mutex::new(Output::default()));
        let stdout = child.stdout.take().context("no stdout")?;
        let stderr = child.stderr.take().context("no stderr")?;
        let readers = vec![
            tokio::spawn(read_lines(stdout, output.clone(), false)),
            tokio::spawn(read_lines(stderr, output.clone(), true)),
        ];
        Ok(Agent {
            name: name.to_string(),
            child,
            pid,
            output,
            readers,
        })
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        // The whole group: the server and any agent still running, with its work.
        let _ = kill_process_group(self.group, Signal::KILL);
    }
}

/// What an agent's work printed, as the agent's reader parsed it.
#[derive(Debug, Default)]
struct Output {
    /// The work's pid and start time (seconds since midnight UTC), once it has started.
    start: Option<(u32, f64)>,
    /// The time of its last heartbeat.
    last_beat: Option<f64>,
    /// Any other line, from stdout or stderr (etcdctl's errors), for messages.
    other: Vec<String>,
}

/// One `etcdctl lock … -- sh -c WORK` process; killed, with its work, when dropped.
#[derive(Debug)]
pub struct Agent {
    /// A name for messages.
    pub name: String,
    /// etcdctl.
    child: Child,
    /// Kept apart from `child`, which forgets its id once the exit is collected.
    pid: u32,
    /// What it printed so far.
    output: Arc<Mutex<Output>>,
    /// The tasks reading its stdout and stderr; they end when the pipes close.
    readers: Vec<JoinHandle<()>>,
}

impl Agent {
    /// When its work started (seconds since midnight UTC, from the work's own clock reading),
    /// or `None` while it waits for the lock.
    pub fn started(&self) -> Option<f64> {
        self.output.lock().unwrap().start.map(|(_, t)| t)
    }

    /// The time of its work's last heartbeat (seconds since midnight UTC), if any.
    pub fn last_beat(&self) -> Option<f64> {
        self.output.lock().unwrap().last_beat
    }

    /// Everything it printed but timestamps: etcdctl's errors, for messages.
    pub fn messages(&self) -> String {
        self.output.lock().unwrap().other.join("\n")
    }

    /// Sends `signal` to etcdctl and to its work if that has started: a graceful stop
    /// (SIGTERM) or a crash (SIGKILL) of the whole agent. etcdctl alone would not do: it
    /// ignores SIGTERM while its work runs, and SIGKILL would leave the work running (see the
    /// module's doc). By pid, not by process group: every agent shares the server's group, the
    /// one that clean-up kills.
    pub fn signal(&self, signal: Signal) -> anyhow::Result<()> {
        let work = self.output.lock().unwrap().start.map(|(pid, _)| pid);
        for pid in work.into_iter().chain([self.pid]) {
            let target = i32::try_from(pid)
                .ok()
                .and_then(Pid::from_raw)
                .context("no such pid")?;
            kill_process(target, signal).with_context(|| format!("kill {signal:?} {pid}"))?;
        }
        Ok(())
    }

    /// Sends `signal` to etcdctl alone, not its work: a client frozen or killed by itself, as a
    /// leasehold host alone is in the exec benchmark.
    pub fn signal_client(&self, signal: Signal) -> anyhow::Result<()> {
        let target = i32::try_from(self.pid)
            .ok()
            .and_then(Pid::from_raw)
            .context("no such pid")?;
        kill_process(target, signal).with_context(|| format!("kill {signal:?} {}", self.pid))
    }

    /// Waits up to `timeout` for etcdctl to exit and its output to end (the work, and any
    /// `sleep` of its loop, closing the pipe).
    pub async fn wait_exit(&mut self, timeout: Duration) -> anyhow::Result<()> {
        let deadline = tokio::time::Instant::now() + timeout;
        tokio::time::timeout_at(deadline, self.child.wait())
            .await
            .with_context(|| format!("{} did not exit within {timeout:?}", self.name))??;
        for reader in self.readers.drain(..) {
            tokio::time::timeout_at(deadline, reader)
                .await
                .with_context(|| {
                    format!("{}'s output still open after {timeout:?}", self.name)
                })??;
        }
        Ok(())
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        // etcdctl is killed by `kill_on_drop`; its work must go too, or it would print on. Only
        // while etcdctl runs is the work's pid surely still the work's (not reaped and reused).
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.signal(Signal::KILL);
        }
    }
}

/// Reads `pipe` line by line into `output`: the work's start line, its heartbeats, and anything
/// else (always so for stderr).
async fn read_lines(pipe: impl AsyncRead + Unpin, output: Arc<Mutex<Output>>, stderr: bool) {
    let mut lines = BufReader::new(pipe).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        let mut out = output.lock().unwrap();
        if !stderr {
            if let Some(rest) = line.strip_prefix("start ") {
                let mut fields = rest.split_whitespace();
                let pid = fields.next().and_then(|p| p.parse().ok());
                let time = fields.next().and_then(unix_time_of_day);
                if let (Some(pid), Some(time)) = (pid, time) {
                    out.start.get_or_insert((pid, time));
                    continue;
                }
            } else if let Some(time) = unix_time_of_day(&line) {
                out.last_beat = Some(time);
                continue;
            }
        }
        out.other.push(line);
    }
}

/// Seconds since midnight UTC of a Unix time printed by `date +%s.%N`: the time base of
/// [`crate::host::now_time_of_day`] and of the hosts' log timestamps. The whole seconds are
/// reduced before the fraction is added, so that no nanosecond digit is lost to an `f64`.
pub fn unix_time_of_day(text: &str) -> Option<f64> {
    let (secs, frac) = text.trim().split_once('.')?;
    let secs: u64 = secs.parse().ok()?;
    let frac: f64 = format!("0.{frac}").parse().ok()?;
    Some((secs % 86_400) as f64 + frac)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unix_time_of_day_keeps_the_fraction() {
        let t = unix_time_of_day("1795476521.818954930").unwrap();
        assert!((t - (1795476521 % 86_400) as f64 - 0.818954930).abs() < 1e-9);
        assert_eq!(unix_time_of_day("start"), None);
        assert_eq!(unix_time_of_day("12"), None);
    }
}
