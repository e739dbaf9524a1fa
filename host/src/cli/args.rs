//! The command line as clap reads it: every command, its flags and their defaults; and the exit
//! codes a command may end with besides 0 and 1.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use crate::config::Layer;
pub(crate) use crate::config::LogFormat;
use crate::lease::RawUrl;

/// The version `leasehold --version` prints: the release, and the commit checked out when it was
/// built, so that a binary names its source (`unknown` when the build script could not say).
pub(crate) fn version() -> &'static str {
    static VERSION: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
        let commit = option_env!("LEASEHOLD_COMMIT").unwrap_or("unknown");
        format!("{} ({commit})", env!("CARGO_PKG_VERSION"))
    });
    &VERSION
}

/// The exit code of a `run` that stopped but left some leases to expire by their ttl (a release
/// failed, or the shutdown grace ran out first): not 0, which says every lease was handed over,
/// nor 1, which says the host could not start (or run) at all.
pub(crate) const EXIT_LEFT_TO_EXPIRE: u8 = 3;

/// The exit code of a `run` ended at once by a second signal, or a signal while it started:
/// 128 + SIGINT, as a shell reports an interrupted command.
pub(crate) const EXIT_SECOND_SIGNAL: u8 = 130;

/// A repeated signal within this time of the first counts as the same request to stop. `timeout`
/// signals the host and then its own process group, the host included; a supervisor may signal
/// the whole process group and the host's own pid: one request arrives twice within
/// microseconds. A second request meant to force the exit comes from a person or a supervisor's
/// kill timer, a second or more later.
pub(crate) const REPEATED_SIGNAL_WINDOW: Duration = Duration::from_secs(1);

/// Flags of the hidden `leasehold keeper` ([`crate::process::keeper`]).
#[derive(Debug, Args)]
pub(crate) struct KeeperArgs {
    /// The stop signal's number.
    #[arg(long, default_value_t = 15)]
    pub signal: i32,
    /// Milliseconds between the stop signal and SIGKILL.
    #[arg(long, default_value_t = 0)]
    pub grace_ms: u64,
    /// The first deadline: a reading of CLOCK_MONOTONIC in nanoseconds.
    #[arg(long, default_value_t = 0)]
    pub until: u64,
    /// What becomes of what the child leaves behind, and when it starts: `own`, `leave` or
    /// `deferred` ([`crate::process::protocol::Mode`]).
    #[arg(long, default_value = "own")]
    pub mode: String,
    /// Start as the keeper's child: become the command (the keeper's pid).
    #[arg(long)]
    pub child_of: Option<u32>,
    /// The command and its arguments.
    #[arg(last = true, required = true)]
    pub command: Vec<std::ffi::OsString>,
}

/// Flags of `leasehold check`.
#[derive(Debug, Args)]
pub(crate) struct CheckArgs {
    /// The component to check (`NAME.wasm`), or its manifest (`NAME.toml`, with `NAME.wasm`
    /// beside it).
    pub file: PathBuf,
    /// The manifest to check the component with; by default `NAME.toml` beside it, if any.
    #[arg(long)]
    pub manifest: Option<PathBuf>,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Flags of `leasehold run`; each overrides the config file.
#[derive(Debug, Args, Default)]
pub(crate) struct RunArgs {
    /// TOML config file.
    #[arg(long, env = "LEASEHOLD_CONFIG")]
    pub config: Option<PathBuf>,
    /// The settings given as flags and `LEASEHOLD_*` variables: the same keys as the file.
    #[command(flatten)]
    pub settings: Layer,
}

/// Flags of `leasehold exec`: those of `run`, the way to stop the command, and the command.
#[derive(Debug, Args)]
pub(crate) struct ExecArgs {
    /// Everything `run` takes; give --lease once: the lease the command runs under.
    #[command(flatten)]
    pub run: RunArgs,
    /// The signal that asks the command to stop [default: SIGTERM].
    #[arg(long)]
    pub stop_signal: Option<String>,
    /// How long the command has between that signal and SIGKILL of its process tree, e.g. 5s
    /// [default: half of what the lease timing allows, at most 10s].
    #[arg(long, value_parser = humantime::parse_duration)]
    pub grace: Option<Duration>,
    /// What the command's own exit means: release (another replica may run it) or restart
    /// [default: release].
    #[arg(long, value_parser = ["release", "restart"])]
    pub on_exit: Option<String>,
    /// With --on-exit restart: exits in a row before the lease is given up [default: 5].
    #[arg(long)]
    pub max_failures: Option<u32>,
    /// The command and its arguments, after `--`.
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<String>,
}

/// Flags of `leasehold leases list`.
#[derive(Debug, Args)]
pub(crate) struct ListArgs {
    /// postgres://USER@HOST/DB or sqlite:PATH [default: sqlite:./leasehold.db].
    #[arg(long, env = "LEASEHOLD_DATABASE_URL", hide_env_values = true)]
    pub database_url: Option<RawUrl>,
    /// Print a JSON array instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Start after this lease name (the last name of a previous page).
    #[arg(long)]
    pub after: Option<String>,
    /// Print at most this many rows [default: all]; when more follow, stderr says how to go on.
    #[arg(long)]
    pub limit: Option<u64>,
    /// Only the leases held now. Rows are never deleted (a lease's epoch must never restart:
    /// fenced systems remember it), so names no longer used, such as a shrunk group's shards,
    /// stay in the table; this leaves them out.
    #[arg(long)]
    pub held: bool,
    /// Rows fetched per query; memory stays bounded however large the table is.
    #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub page_size: u32,
}
