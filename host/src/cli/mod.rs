//! The command line. This is the edge of the program: errors become one line on stderr and an
//! exit code here.
//!
//! - this file: the parser, `run` and `check`;
//! - [`admin`]: `leases list`, `leases handoff`, `leases release --force`, `status --url`,
//!   `migrate`;
//! - [`groups`]: `leases groups`, the lease groups' members as the database has them;
//! - [`new`]: `new`, a plugin project to start from;
//! - [`dev`]: `dev`, a project rebuilt, checked and copied into a plugin directory on each change;
//! - [`log`]: the text log's fields, control characters escaped;
//! - `config check`: [`admin::config_check`].

pub mod admin;
pub mod dev;
pub mod groups;
pub mod log;
pub mod new;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use tokio::signal::unix::{SignalKind, signal};
use tracing::{error, info, warn};

use crate::app::App;
use crate::config::{Config, Layer};
use crate::lease::RawUrl;

/// The version `leasehold --version` prints: the release, and the commit checked out when it was
/// built, so that a binary names its source (`unknown` when the build script could not say).
pub fn version() -> &'static str {
    static VERSION: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
        let commit = option_env!("LEASEHOLD_COMMIT").unwrap_or("unknown");
        format!("{} ({commit})", env!("CARGO_PKG_VERSION"))
    });
    &VERSION
}

/// leasehold: replicas compete for named leases; the holder runs the work bound to each lease.
#[derive(Debug, Parser)]
#[command(name = "leasehold", version = version(), about)]
pub struct Cli {
    /// Log format on stderr, text or json [default: log_format of the config file, else text];
    /// under json a fatal error is a JSON line too.
    #[arg(long, global = true, env = "LEASEHOLD_LOG_FORMAT", value_enum)]
    pub log_format: Option<LogFormat>,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

pub use crate::config::LogFormat;

/// The exit code of a `run` that stopped but left some leases to expire by their ttl (a release
/// failed, or the shutdown grace ran out first): not 0, which says every lease was handed over,
/// nor 1, which says the host could not start (or run) at all.
pub const EXIT_LEFT_TO_EXPIRE: u8 = 3;

/// The exit code of a `run` ended at once by a second signal, or a signal while it started:
/// 128 + SIGINT, as a shell reports an interrupted command.
pub const EXIT_SECOND_SIGNAL: u8 = 130;

/// A repeated signal within this time of the first counts as the same request to stop. `timeout`
/// signals the host and then its own process group, the host included; a supervisor may signal
/// the whole process group and the host's own pid: one request arrives twice within
/// microseconds. A second request meant to force the exit comes from a person or a supervisor's
/// kill timer, a second or more later.
pub const REPEATED_SIGNAL_WINDOW: Duration = Duration::from_secs(1);

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Campaign for leases and hold them until stopped (SIGTERM/SIGINT release them in order).
    Run(RunArgs),
    /// Run a command under a lease: started when this replica takes the lease, stopped (its
    /// whole process tree) before any other replica can take it over.
    Exec(ExecArgs),
    /// Validate a plugin: compile it and report the world it implements, or what is wrong.
    Check(CheckArgs),
    /// Inspect the lease table, or break a lease's hold by hand.
    #[command(subcommand)]
    Leases(LeasesCommand),
    /// Pretty-print a running host's /status.
    Status(admin::StatusArgs),
    /// Create or upgrade the lease schema and exit: for a deployment whose hosts run as a role
    /// without DDL rights, run this as the schema owner first.
    Migrate(admin::MigrateArgs),
    /// Configuration tools.
    #[command(subcommand)]
    Config(ConfigCommand),
    /// Write a new plugin project (Rust, Python or JavaScript) that builds, tests and loads as it
    /// is: source, manifest, WIT, README, build and test scripts.
    New(new::NewArgs),
    /// A plugin project's loop: on each change of its sources, run ./build.sh, check NAME.wasm
    /// as `check` does, and copy it with NAME.toml into the plugin directory if it passes.
    Dev(dev::DevArgs),
    /// The keeper of one process under a lease: started by the host, never by hand.
    #[command(hide = true)]
    Keeper(KeeperArgs),
}

/// `leasehold config …`.
#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Validate a config file (with LEASEHOLD_* variables and flags applied) and print the
    /// effective configuration, password redacted; exit 1 when it is invalid.
    Check(admin::ConfigCheckArgs),
}

/// Flags of the hidden `leasehold keeper` ([`crate::process::keeper`]).
#[derive(Debug, Args)]
pub struct KeeperArgs {
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
pub struct CheckArgs {
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
pub struct RunArgs {
    /// TOML config file.
    #[arg(long, env = "LEASEHOLD_CONFIG")]
    pub config: Option<PathBuf>,
    /// The settings given as flags and `LEASEHOLD_*` variables: the same keys as the file.
    #[command(flatten)]
    pub settings: Layer,
}

/// Flags of `leasehold exec`: those of `run`, the way to stop the command, and the command.
#[derive(Debug, Args)]
pub struct ExecArgs {
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

/// `leasehold leases …`.
#[derive(Debug, Subcommand)]
pub enum LeasesCommand {
    /// List lease rows in name order, page by page.
    List(ListArgs),
    /// List the live members of every lease group, as the database has them: the shard count
    /// each is configured with, the shards it holds, and a line for a group whose members
    /// disagree on the count.
    Groups(groups::GroupsArgs),
    /// Ask the holder of a lease to hand it over now: it stops the lease's plugins, releases it
    /// and wakes the standbys (with --to, one replica takes it); waits and prints old holder and
    /// epoch -> new.
    Handoff(admin::HandoffArgs),
    /// Break-glass, for a holder that is gone: expire a lease now whoever holds it, keeping its
    /// epoch. A holder still running keeps running the lease's plugins beside the next holder's
    /// until its next renewal is refused (within ttl/3); its fenced writes are refused at once.
    /// For a live holder use `leases handoff`.
    Release(admin::ReleaseArgs),
}

/// Flags of `leasehold leases list`.
#[derive(Debug, Args)]
pub struct ListArgs {
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

/// Parses the command line, runs it and turns the outcome into an exit code.
pub fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => match from_variable(&e, std::env::args_os()) {
            Some(line) => {
                eprintln!("{}", crate::report::escape_controls(&line));
                return ExitCode::from(2);
            }
            None => e.exit(),
        },
    };
    // The keeper logs nothing and needs no async runtime: it keeps time on threads of its own.
    if let Command::Keeper(args) = cli.command {
        return keeper(args);
    }
    let format = cli
        .log_format
        .or_else(|| file_log_format(&cli.command))
        .unwrap_or(LogFormat::Text);
    // A check's output is its verdict alone: what `run` logs on the way (a relative SQLite path
    // made absolute) shows in the verdict's effective configuration instead. Warnings still show.
    let filter = match cli.command {
        Command::Check(_) | Command::Config(ConfigCommand::Check(_)) => CHECK_LOG_FILTER,
        _ => DEFAULT_LOG_FILTER,
    };
    let (log_writer, log_dropped) = init_logging(format, filter);
    undumpable();
    if password_on_command_line(std::env::args_os()) {
        warn!(
            "the database URL given with --database-url holds a password, which every user of this machine can read in the process list (ps, /proc/PID/cmdline): give it in LEASEHOLD_DATABASE_URL or the config file's database_url instead"
        );
    }
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("leasehold: error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let outcome = runtime.block_on(async {
        match cli.command {
            Command::Run(args) => run(args).await,
            Command::Exec(args) => exec(args).await,
            Command::Check(args) => check(args),
            Command::Leases(LeasesCommand::List(args)) => {
                admin::list(args).await.map(|()| ExitCode::SUCCESS)
            }
            Command::Leases(LeasesCommand::Release(args)) => admin::release(args).await,
            Command::Leases(LeasesCommand::Handoff(args)) => admin::handoff(args).await,
            Command::Leases(LeasesCommand::Groups(args)) => groups::groups(args).await,
            Command::Status(args) => admin::status(args).await,
            Command::Migrate(args) => admin::migrate(args).await,
            Command::Config(ConfigCommand::Check(args)) => admin::config_check(args),
            Command::New(args) => new::run(args),
            Command::Dev(args) => dev::run(args).await,
            Command::Keeper(_) => Ok(ExitCode::FAILURE),
        }
    });
    // Store calls abandoned at a timeout may still be parked on a socket: do not wait for them.
    runtime.shutdown_timeout(Duration::from_millis(100));
    // Through the queue too: a direct write to a stderr still not read would never return.
    let dropped = log_dropped.dropped_lines();
    if dropped > 0 {
        warn!(
            dropped,
            "log lines were dropped: stderr was not read fast enough"
        );
    }
    if let (Err(e), LogFormat::Json) = (&outcome, format) {
        // One line in the shape of every other: a log collector reading JSON takes it whole.
        let line = crate::report::chain(e.as_ref());
        let causes = crate::report::causes(e.as_ref());
        error!(error_chain = ?causes, "{line}");
        drop(log_writer);
        return ExitCode::FAILURE;
    }
    // Writes out every queued line (waiting 1.1 s at most), before an error below is printed.
    drop(log_writer);
    match outcome {
        Ok(code) => code,
        Err(e) => {
            // An error may quote a value from outside (a flag, a file, a row): one line, inert.
            let line = crate::report::chain(e.as_ref());
            eprintln!(
                "leasehold: error: {}",
                crate::report::escape_controls(&line)
            );
            ExitCode::FAILURE
        }
    }
}

/// Makes this process undumpable (`PR_SET_DUMPABLE` 0), before it starts anything. Its
/// environment and memory hold the database URL, password included, and every process it runs
/// under a lease runs as its user: to a dumpable host's other processes of that user,
/// `/proc/HOST/environ` and `mem` are open, and so is `ptrace`. Undumpable, its `/proc/HOST`
/// files belong to root, and only root (`CAP_SYS_PTRACE`) reads its environment, memory and
/// descriptors or attaches a debugger; what is readable by all stays so (`cmdline`, `stat`,
/// `status`). The cost: no core dump of a crash, and `gdb -p`, `strace -p` or `perf` on the host
/// need root. What it starts is dumpable again from its `exec`, and holds nothing of the
/// host's ([`crate::process::handle::is_hosts_alone`]).
fn undumpable() {
    #[cfg(target_os = "linux")]
    if let Err(error) =
        rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::NotDumpable)
    {
        warn!(
            %error,
            "cannot make this process undumpable: other processes of its user, those it runs among them, may read its environment and memory"
        );
    }
}

/// Whether `argv` gives `--database-url` a value that holds a password: every user of the
/// machine can read a process's arguments. What follows `--` is `exec`'s command, not ours.
fn password_on_command_line(argv: impl IntoIterator<Item = std::ffi::OsString>) -> bool {
    let mut argv = argv.into_iter().skip(1);
    while let Some(arg) = argv.next() {
        let arg = arg.to_string_lossy();
        let value = match arg.as_ref() {
            "--" => return false,
            "--database-url" => argv.next().map(|v| v.to_string_lossy().into_owned()),
            other => other.strip_prefix("--database-url=").map(str::to_string),
        };
        if value.is_some_and(|v| crate::lease::url::holds_password(&v)) {
            return true;
        }
    }
    false
}

/// `leasehold exec`: `run` with one `[[process]]` table made of its flags.
async fn exec(args: ExecArgs) -> anyhow::Result<ExitCode> {
    let ExecArgs {
        mut run,
        stop_signal,
        grace,
        on_exit,
        max_failures,
        command,
    } = args;
    let lease = match run.settings.leases.as_deref() {
        Some([one]) => one.clone(),
        _ => anyhow::bail!(
            "leasehold exec runs its command under one lease: give --lease NAME once (a config file's [[process]] tables bind several)"
        ),
    };
    let on_exit = on_exit.map(|o| match o.as_str() {
        "restart" => crate::process::bound::OnExit::Restart,
        _ => crate::process::bound::OnExit::Release,
    });
    run.settings
        .process
        .push(crate::config::process::ProcessLayer {
            name: None,
            lease: Some(lease),
            group: None,
            command,
            stop_signal,
            grace,
            on_exit,
            max_failures,
        });
    self::run(run).await
}

/// `leasehold keeper`: the keeper itself, or, with `--child-of`, its child's own start.
fn keeper(args: KeeperArgs) -> ExitCode {
    use crate::process::keeper;
    if let Some(parent) = args.child_of {
        return keeper::exec_child(parent, &args.command);
    }
    let Some(signal) = rustix::process::Signal::from_named_raw(args.signal) else {
        eprintln!("leasehold keeper: no signal numbered {}", args.signal);
        return ExitCode::from(2);
    };
    let Some(mode) = crate::process::protocol::Mode::parse(&args.mode) else {
        eprintln!("leasehold keeper: no mode named {:?}", args.mode);
        return ExitCode::from(2);
    };
    keeper::run(keeper::Settings {
        signal,
        grace: Duration::from_millis(args.grace_ms),
        until: args.until,
        mode,
        command: args.command,
    })
}

/// For a value clap refused that came from a `LEASEHOLD_*` variable rather than the flag it
/// stands for, clap's first line naming the variable: clap names only the flag, which the
/// operator did not write and will not find on the command line.
fn from_variable(
    error: &clap::Error,
    argv: impl IntoIterator<Item = std::ffi::OsString>,
) -> Option<String> {
    use clap::CommandFactory;
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    if !matches!(
        error.kind(),
        ErrorKind::InvalidValue | ErrorKind::ValueValidation
    ) {
        return None;
    }
    let ContextValue::String(arg) = error.get(ContextKind::InvalidArg)? else {
        return None;
    };
    let long = arg
        .strip_prefix("--")?
        .split([' ', '='])
        .next()?
        .to_string();
    let flag = format!("--{long}");
    let given = argv.into_iter().any(|a| {
        let a = a.to_string_lossy();
        a == flag || a.starts_with(&format!("{flag}="))
    });
    if given {
        return None;
    }
    fn find(command: &clap::Command, long: &str) -> Option<String> {
        command
            .get_arguments()
            .find(|a| a.get_long() == Some(long))
            .and_then(|a| a.get_env())
            .map(|v| v.to_string_lossy().into_owned())
            .or_else(|| command.get_subcommands().find_map(|c| find(c, long)))
    }
    let variable = find(&Cli::command(), &long)?;
    let first = error.to_string();
    let first = first.lines().next().unwrap_or_default();
    Some(format!(
        "{first} (the value is that of the environment variable {variable}, which stands for {flag})"
    ))
}

/// The `log_format` of the config file a command reads, if it names one. A file that cannot be
/// read says so later, in the format of the flags.
fn file_log_format(command: &Command) -> Option<LogFormat> {
    let path = match command {
        Command::Run(args) | Command::Exec(ExecArgs { run: args, .. }) => args.config.as_ref(),
        Command::Config(ConfigCommand::Check(args)) => {
            args.file.as_ref().or(args.run.config.as_ref())
        }
        _ => None,
    }?;
    Layer::load(path).ok()?.log_format
}

/// Logs to stderr from a thread of its own; the returned guard writes out what is queued when
/// dropped. A lease loop that logs never waits on stderr: a log reader that falls behind (a full
/// pipe to a container runtime) would otherwise stall renewals, and every line's write was a
/// system call on the handoff's path. Lines beyond the queue's 8,192 are dropped, not waited for,
/// and counted by the returned counter, which the last line logged reports.
/// The log filter without `RUST_LOG`.
pub const DEFAULT_LOG_FILTER: &str =
    "info,sqlx::postgres::notice=warn,sqlx_core::pool::connection=error";

/// The log filter of `check` and `config check` without `RUST_LOG`.
const CHECK_LOG_FILTER: &str = "warn";

fn init_logging(
    format: LogFormat,
    default_filter: &str,
) -> (
    tracing_appender::non_blocking::WorkerGuard,
    tracing_appender::non_blocking::ErrorCounter,
) {
    let filter = std::env::var(tracing_subscriber::EnvFilter::DEFAULT_ENV)
        .ok()
        .and_then(|directives| {
            tracing_subscriber::EnvFilter::try_new(log::lease_targets(&directives)).ok()
        })
        // PostgreSQL's NOTICEs ("relation … already exists, skipping" on every start) are noise
        // at info; warnings and errors from the server still show. The pool's own warnings about
        // a connection found dead on its way back ("error occurred while testing the connection
        // on-release") come in twos and threes with every outage, which the lease loop's account
        // already tells.
        .unwrap_or_else(|| tracing_subscriber::EnvFilter::new(default_filter));
    use std::io::IsTerminal;
    let (writer, guard) = tracing_appender::non_blocking::NonBlockingBuilder::default()
        .lossy(true)
        // Its slots are allocated up front (32 bytes each): 8,192 lines are a burst of ~1.6 MB
        // of log for 256 KiB, where the crate's default of 128,000 cost 4 MiB of RSS.
        .buffered_lines_limit(8_192)
        .thread_name("leasehold-log")
        .finish(std::io::stderr());
    let dropped = writer.error_counter();
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer)
        .with_ansi(std::io::stderr().is_terminal());
    match format {
        LogFormat::Text => builder.fmt_fields(log::EscapedFields).init(),
        LogFormat::Json => builder.json().init(),
    }
    (guard, dropped)
}

/// `leasehold run`: the app until SIGTERM or SIGINT, then its ordered shutdown. A second signal
/// exits at once, unless it repeats the first within [`REPEATED_SIGNAL_WINDOW`]. Exits 0 when
/// every lease held was released, [`EXIT_LEFT_TO_EXPIRE`] when some were left to expire, and
/// [`EXIT_SECOND_SIGNAL`] when a second signal cut the shutdown short; the last line logged
/// says what became of each lease.
pub async fn run(args: RunArgs) -> anyhow::Result<ExitCode> {
    let file = match &args.config {
        Some(path) => Layer::load(path)?,
        None => Layer::default(),
    };
    let config = Config::resolve(file, args.settings)?;
    let grace = config.shutdown_grace;
    // Installed before the app starts, so a signal sent as soon as "http listening" is logged is
    // already ours; one that comes while it starts (nothing is held yet) exits at once.
    let mut sigterm = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    let mut sigint = signal(SignalKind::interrupt()).context("installing the SIGINT handler")?;
    let mut app = tokio::select! {
        app = App::start(config) => app?,
        _ = sigterm.recv() => { warn!("signal during start-up: exiting at once"); return Ok(ExitCode::from(EXIT_SECOND_SIGNAL)) }
        _ = sigint.recv() => { warn!("signal during start-up: exiting at once"); return Ok(ExitCode::from(EXIT_SECOND_SIGNAL)) }
    };
    tokio::select! {
        _ = sigterm.recv() => info!("SIGTERM received"),
        _ = sigint.recv() => info!("SIGINT received"),
        e = app.failed() => return Err(e.into()),
    }
    let first = tokio::time::Instant::now();
    let shutdown = app.shutdown(grace);
    tokio::pin!(shutdown);
    loop {
        let name = tokio::select! {
            r = &mut shutdown => {
                let report = r?;
                let summary = report.summary();
                return Ok(if report.all_released() {
                    info!("{summary}; exit 0");
                    ExitCode::SUCCESS
                } else {
                    error!("{summary}; exit {EXIT_LEFT_TO_EXPIRE}");
                    ExitCode::from(EXIT_LEFT_TO_EXPIRE)
                });
            }
            _ = sigterm.recv() => "SIGTERM",
            _ = sigint.recv() => "SIGINT",
        };
        if first.elapsed() < REPEATED_SIGNAL_WINDOW {
            info!(
                signal = name,
                window = %crate::report::duration(REPEATED_SIGNAL_WINDOW),
                "signal repeated within the window: the same request to stop, counted once"
            );
            continue;
        }
        warn!(
            signal = name,
            "second signal: exiting at once; the leases not yet released expire by their ttl; exit {EXIT_SECOND_SIGNAL}"
        );
        return Ok(ExitCode::from(EXIT_SECOND_SIGNAL));
    }
}

/// `leasehold check`: exit 0 only for a plugin the host would load, under a name the plugin
/// directory takes and with its manifest (the one beside it, or `--manifest`).
pub fn check(args: CheckArgs) -> anyhow::Result<ExitCode> {
    use crate::runtime::WIT_PACKAGE;
    // `check NAME.toml` checks NAME.wasm beside it with that manifest.
    let (wasm, manifest) = match (args.file.extension(), &args.manifest) {
        (Some(ext), None) if ext == "toml" => {
            (args.file.with_extension("wasm"), Some(args.file.clone()))
        }
        (Some(ext), Some(_)) if ext == "toml" => {
            anyhow::bail!("give the component (NAME.wasm) with --manifest, not a second manifest")
        }
        _ => (args.file.clone(), args.manifest.clone()),
    };
    let file = crate::report::escape_controls(&wasm.display().to_string()).into_owned();
    match crate::app::check_plugin(&wasm, manifest.as_deref())? {
        Ok(checked) => {
            let world = checked.loaded.prepared.world();
            let binding = checked.manifest.binding.to_string();
            let manifest_shown = checked
                .manifest_path
                .as_ref()
                .map(|p| crate::report::escape_controls(&p.display().to_string()).into_owned());
            if args.json {
                let report = serde_json::json!({
                    "file": file, "ok": true, "package": WIT_PACKAGE, "world": world,
                    "manifest": manifest_shown, "binding": binding,
                    "imports": checked.loaded.imports, "exports": checked.loaded.exports,
                });
                println!("{report}");
            } else {
                println!("{file}: ok: {WIT_PACKAGE} world {}", world.name());
                match &manifest_shown {
                    Some(path) => println!("  manifest: {path}, bound to {binding}"),
                    None => println!("  manifest: none (the defaults: bound to {binding})"),
                }
                println!("  imports: {}", checked.loaded.imports.join(", "));
                println!("  exports: {}", checked.loaded.exports.join(", "));
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(error) => {
            let explanation = match &error {
                crate::plugin::LoadError::Component(e) => e.explain(),
                _ => None,
            };
            Ok(check_failed(&file, &error, explanation, args.json))
        }
    }
}

/// Reports why `file` does not load: one error line (and an explanation, if any) on stderr, or
/// a JSON report on stdout.
fn check_failed(
    file: &str,
    error: &(dyn std::error::Error + 'static),
    explanation: Option<String>,
    json: bool,
) -> ExitCode {
    let line = crate::report::chain(error);
    if json {
        let causes = crate::report::causes(error);
        let report = serde_json::json!({
            "file": file, "ok": false, "error": line, "causes": causes,
        });
        println!("{report}");
    } else {
        eprintln!(
            "leasehold: error: {}",
            crate::report::escape_controls(&line)
        );
        if let Some(explanation) = explanation {
            eprintln!("{explanation}");
        }
    }
    ExitCode::FAILURE
}

#[cfg(test)]
mod tests {
    use clap::{CommandFactory, Parser};

    use super::*;

    #[test]
    fn the_command_line_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn a_bad_value_from_a_variable_names_the_variable() {
        let e = Cli::try_parse_from(["leasehold", "run", "--ttl", "soon"]).unwrap_err();
        let args = ["leasehold", "run"].map(std::ffi::OsString::from);
        let line = from_variable(&e, args).unwrap();
        assert!(
            line.contains("'soon'") && line.contains("environment variable LEASEHOLD_TTL"),
            "{line}"
        );
        let args = ["leasehold", "run", "--ttl", "soon"].map(std::ffi::OsString::from);
        assert_eq!(from_variable(&e, args), None, "given as the flag");
    }

    #[test]
    fn a_password_in_database_url_on_the_command_line_is_noticed_in_either_form() {
        let argv = |args: &[&str]| -> Vec<std::ffi::OsString> {
            std::iter::once("leasehold")
                .chain(args.iter().copied())
                .map(Into::into)
                .collect()
        };
        for args in [
            &["run", "--database-url", "postgres://u:pw@h/db"][..],
            &["exec", "--database-url=postgres://u:pw@h/db", "--", "sh"],
            &[
                "leases",
                "list",
                "--database-url",
                "postgres://h/db?password=pw",
            ],
        ] {
            assert!(password_on_command_line(argv(args)), "{args:?}");
        }
        for args in [
            &["run", "--database-url", "postgres://u@h/db"][..],
            &[
                "run",
                "--database-url",
                "sqlite:/var/lib/leasehold/leases.db",
            ],
            // The command's own arguments, after `--`.
            &[
                "exec",
                "--lease",
                "a",
                "--",
                "psql",
                "--database-url",
                "postgres://u:pw@h/db",
            ],
            &["run"],
        ] {
            assert!(!password_on_command_line(argv(args)), "{args:?}");
        }
    }

    #[test]
    fn run_flags_fill_the_layer_a_config_file_fills() {
        let cli = Cli::try_parse_from([
            "leasehold",
            "run",
            "--lease",
            "a,b",
            "--lease",
            "c",
            "--ttl",
            "6s",
            "--shutdown-grace",
            "1m",
        ])
        .unwrap();
        let Command::Run(args) = cli.command else {
            panic!("parsed as {:?}", cli.command)
        };
        let layer = args.settings;
        assert_eq!(layer.leases, Some(vec!["a".into(), "b".into(), "c".into()]));
        assert_eq!(layer.timing.ttl, Some(Duration::from_secs(6)));
        assert_eq!(layer.shutdown_grace, Some(Duration::from_secs(60)));
        // File-only keys have no flag: clap leaves them unset.
        assert_eq!(layer.timing.renew_interval, None);
        assert_eq!(layer.runtime.fuel, None);
    }
}
