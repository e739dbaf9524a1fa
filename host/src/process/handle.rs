//! The host's side of a keeper: starts `leasehold keeper` for one command, sends it the term's
//! deadlines and the stop, and reads its reports.
//!
//! Dropping a [`Kept`] closes the keeper's stdin, which the keeper takes for the host's death: it
//! kills the tree at once. So a task that is aborted, or a host that panics, leaves nothing
//! running.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use rustix::process::Signal;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout};
use tokio::time::Instant;

use super::adopted;
use super::protocol::monotonic_ns;
use super::protocol::{Mode, Order, Report, Timed};

/// The prefix of the host's own settings among environment variables: a child does not inherit
/// them (the database URL among them carries a password), and gets its lease's own instead.
pub const HOST_PREFIX: &str = "LEASEHOLD_";

/// The PostgreSQL client's variables that hold a credential or name a file of them: a child does
/// not inherit them either. The host's driver reads `PGPASSWORD`, `PGPASSFILE`, `PGSSLCERT` and
/// `PGSSLKEY` for whatever its URL leaves out, so they may be how the host logs in; libpq in a
/// child (psql, psycopg) reads the same, and a service file's passwords through
/// `PGSERVICEFILE`, so a child that inherited them would log in as the host's role without
/// being given its URL, or read its password. The client certificate goes with its key: libpq
/// refuses a certificate whose key it cannot find. The other `PG*` variables (`PGHOST`,
/// `PGUSER`, `PGSSLMODE`, `PGSSLROOTCERT`, …) hold no secret and pass, for a child that connects
/// to the same server as a role of its own.
pub(crate) const CREDENTIAL_VARIABLES: &[&str] = &[
    "PGPASSWORD",
    "PGPASSFILE",
    "PGSERVICEFILE",
    "PGSSLCERT",
    "PGSSLKEY",
];

/// Whether the environment variable `name` is the host's alone: its own settings and the
/// PostgreSQL credentials ([`HOST_PREFIX`], [`CREDENTIAL_VARIABLES`]).
pub(crate) fn is_hosts_alone(name: &std::ffi::OsStr) -> bool {
    let name = name.to_string_lossy();
    name.starts_with(HOST_PREFIX) || CREDENTIAL_VARIABLES.contains(&name.as_ref())
}

/// What to run, and how to stop it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Spec {
    /// The command and its arguments, as the operator wrote them.
    pub command: Vec<OsString>,
    /// The signal that asks it to stop.
    pub signal: Signal,
    /// How long it has between that signal and SIGKILL (a deferred command: how long it may
    /// run once begun).
    pub grace: Duration,
    /// What becomes of what it leaves behind, and when it starts.
    pub mode: Mode,
}

/// Why a keeper could not be started or spoken to.
#[derive(Debug, thiserror::Error)]
pub enum ProcessError {
    /// The keeper (this very binary) could not be started.
    #[error("cannot start the keeper {}: {source}", .program.display())]
    Keeper {
        /// The program run as keeper.
        program: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    /// The keeper stopped reading orders: it is gone, or going.
    #[error("the keeper no longer takes orders: {0}")]
    Orders(std::io::Error),
}

/// One command running under a keeper.
#[derive(Debug)]
pub struct Kept {
    /// The keeper process.
    keeper: Child,
    /// Its stdin: orders. Dropped (closed) to have the tree killed at once.
    orders: Option<ChildStdin>,
    /// Its stdout: reports, one a line.
    reports: Lines<BufReader<ChildStdout>>,
    /// The keeper's pid, while this handle may still wait for it.
    pid: Option<u32>,
    /// The mark its tree carries ([`adopted::TREE_VAR`]), to find what the tree left should
    /// the keeper die on its own.
    mark: String,
}

impl Drop for Kept {
    fn drop(&mut self) {
        // tokio reaps a dropped child: it is no longer a keeper to leave alone.
        if let Some(pid) = self.pid.take() {
            adopted::keeper_ended(pid);
        }
    }
}

/// A mark no other tree of this host carries: this host, its count of keepers, and the time.
fn new_mark() -> String {
    static COUNT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = COUNT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("{}-{n}-{}", std::process::id(), monotonic_ns())
}

/// A tokio instant as a reading of `CLOCK_MONOTONIC` in nanoseconds, the clock a keeper keeps
/// deadlines on (tokio's clock is that clock, unless a test paused it).
pub fn monotonic_ns_at(at: Instant) -> u64 {
    let (now_ns, now) = (monotonic_ns(), Instant::now());
    match at.checked_duration_since(now) {
        Some(ahead) => now_ns.saturating_add(u64::try_from(ahead.as_nanos()).unwrap_or(u64::MAX)),
        None => now_ns.saturating_sub(u64::try_from((now - at).as_nanos()).unwrap_or(u64::MAX)),
    }
}

/// How long ago the keeper's clock reading `at` was ([`Timed::at`]): a report read much later
/// than it was stamped was not read as it came (this host was frozen, or starved).
pub fn since(at: u64) -> Duration {
    Duration::from_nanos(monotonic_ns().saturating_sub(at))
}

/// A report this much older than its reading says its host was not reading as it came (frozen,
/// or starved of the CPU): long against a healthy host's few microseconds, short against a
/// freeze worth reporting.
pub const LATE_READ: Duration = Duration::from_millis(200);

impl Kept {
    /// Starts `keeper` (the path of this binary) as the keeper of `spec`'s command, with the
    /// environment `env` on top of the host's own (less what is the host's alone:
    /// [`is_hosts_alone`]), the command to be killed at `until` unless a later deadline comes.
    pub fn spawn(
        keeper: &Path,
        spec: &Spec,
        env: &[(&str, String)],
        until: Instant,
    ) -> Result<Kept, ProcessError> {
        let mut command = tokio::process::Command::new(keeper);
        command
            .arg("keeper")
            .arg(format!("--signal={}", spec.signal.as_raw()))
            .arg(format!("--grace-ms={}", spec.grace.as_millis()))
            .arg(format!("--until={}", monotonic_ns_at(until)))
            .arg(format!("--mode={}", spec.mode.as_str()))
            .arg("--")
            .args(&spec.command)
            // Its own group: a terminal's Ctrl-C goes to the host's, and must not reach the
            // keeper; the host stops the child in order instead.
            .process_group(0)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        for (name, _) in std::env::vars_os() {
            if is_hosts_alone(&name) {
                command.env_remove(name);
            }
        }
        command.envs(env.iter().map(|(k, v)| (k, v)));
        let mark = new_mark();
        command.env(adopted::TREE_VAR, &mark);
        let mut child = command.spawn().map_err(|source| ProcessError::Keeper {
            program: keeper.to_path_buf(),
            source,
        })?;
        let pid = child.id();
        if let Some(pid) = pid {
            adopted::keeper_started(pid);
        }
        let (Some(orders), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err(ProcessError::Keeper {
                program: keeper.to_path_buf(),
                source: std::io::Error::other("its pipes were not made"),
            });
        };
        Ok(Kept {
            keeper: child,
            orders: Some(orders),
            reports: BufReader::new(stdout).lines(),
            pid,
            mark,
        })
    }

    /// Sends one order.
    async fn order(&mut self, order: Order) -> Result<(), ProcessError> {
        let orders = self
            .orders
            .as_mut()
            .ok_or_else(|| ProcessError::Orders(std::io::ErrorKind::BrokenPipe.into()))?;
        let line = format!("{order}\n");
        orders
            .write_all(line.as_bytes())
            .await
            .map_err(ProcessError::Orders)?;
        orders.flush().await.map_err(ProcessError::Orders)
    }

    /// Moves the deadline: the command may run until `until`, no longer.
    pub async fn extend(&mut self, until: Instant) -> Result<(), ProcessError> {
        self.order(Order::Until(monotonic_ns_at(until))).await
    }

    /// Asks the keeper to stop the command: its signal now, SIGKILL of the tree after the grace.
    pub async fn stop(&mut self) -> Result<(), ProcessError> {
        self.order(Order::Stop).await
    }

    /// Has the tree killed at once, as the host's death would.
    pub fn kill(&mut self) {
        self.orders = None;
    }

    /// The next report; `None` once the keeper has closed its stdout (after [`Report::Gone`],
    /// or because it died). A line that is no report is skipped.
    pub async fn report(&mut self) -> Option<Report> {
        self.timed().await.map(|t| t.report)
    }

    /// The next report with the keeper's clock reading of it, as [`Kept::report`].
    pub async fn timed(&mut self) -> Option<Timed> {
        loop {
            match self.reports.next_line().await {
                Ok(Some(line)) => {
                    if let Some(timed) = Timed::parse(&line) {
                        return Some(timed);
                    }
                }
                Ok(None) | Err(_) => return None,
            }
        }
    }

    /// Waits for the keeper to exit, after its last report.
    pub async fn wait(mut self) -> std::io::Result<std::process::ExitStatus> {
        self.orders = None;
        self.keeper.wait().await
    }

    /// After its keeper ended without reporting its tree gone (killed on its own): waits for
    /// the keeper, then kills what is left of its tree, which came to this host as subreaper
    /// ([`adopted::sweep`]).
    pub(crate) async fn sweep(mut self) -> adopted::Swept {
        self.orders = None;
        // Reaped, the keeper has handed its orphans to this host.
        let _ = self.keeper.wait().await;
        adopted::sweep(&self.mark).await
    }
}
