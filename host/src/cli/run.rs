//! The program's entry: the command line parsed (values from the environment named when they are
//! at fault), the log set up, the command run and its outcome made an exit code; and `run`, the
//! host until a signal, then its ordered shutdown.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use tokio::signal::unix::{SignalKind, signal};
use tracing::{error, info, warn};

use super::args::*;
use super::check::check;
use super::command::*;
use super::{admin, dev, groups, log, new, peers};
use crate::app::App;
use crate::config::error::ConfigError;
use crate::config::{Config, Layer};

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
    let file = config_file(&cli.command);
    let format = cli
        .log_format
        .or_else(|| file.as_ref()?.as_ref().ok()?.log_format)
        .unwrap_or(LogFormat::Text);
    // A check's output is its verdict alone: what `run` logs on the way (a relative SQLite path
    // made absolute) shows in the verdict's effective configuration instead. Warnings still show.
    let filter = match cli.command {
        Command::Check(_) | Command::Config(ConfigCommand::Check(_)) => CHECK_LOG_FILTER,
        _ => DEFAULT_LOG_FILTER,
    };
    // Before the log, whose subscriber carries its layer: off unless an endpoint is set.
    if let Err(e) = start_telemetry(&cli.command, file.as_ref()) {
        eprintln!(
            "leasehold: error: {}",
            crate::report::escape_controls(&crate::report::chain(&e))
        );
        return ExitCode::FAILURE;
    }
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
            Command::Run(args) => on_a_worker(run(args, file)).await,
            Command::Exec(args) => on_a_worker(exec(args, file)).await,
            Command::Check(args) => check(args),
            Command::Leases(LeasesCommand::List(args)) => {
                admin::list(args).await.map(|()| ExitCode::SUCCESS)
            }
            Command::Leases(LeasesCommand::Release(args)) => admin::release(args).await,
            Command::Leases(LeasesCommand::Handoff(args)) => admin::handoff(args).await,
            Command::Leases(LeasesCommand::Groups(args)) => groups::groups(args).await,
            Command::Leases(LeasesCommand::Check(args)) => peers::check(args).await,
            Command::Status(args) => admin::status(args).await,
            Command::Migrate(args) => admin::migrate(args).await,
            Command::Config(ConfigCommand::Check(args)) => admin::config_check(args, file),
            Command::New(args) => new::run(args),
            Command::Dev(args) => dev::run(args).await,
            Command::Keeper(_) => Ok(ExitCode::FAILURE),
        }
    });
    // Store calls abandoned at a timeout may still be parked on a socket: do not wait for them.
    runtime.shutdown_timeout(Duration::from_millis(100));
    // The spans of the terms this stop ended, and whatever else is queued, before the exit.
    if let Some(Err(e)) = crate::telemetry::flush() {
        warn!(error = %e, "trace export: what was queued could not all be sent before the exit");
    }
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
async fn exec(
    args: ExecArgs,
    file: Option<Result<Layer, ConfigError>>,
) -> anyhow::Result<ExitCode> {
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
    self::run(run, file).await
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

/// The config file a command reads, read once: its `log_format` and `[telemetry]` table are
/// needed before the log starts, the rest by the command. A file that cannot be read or parsed
/// is the command's error, which it reports in the log's format (the flags' one, then).
fn config_file(command: &Command) -> Option<Result<Layer, ConfigError>> {
    let path = match command {
        Command::Run(args) | Command::Exec(ExecArgs { run: args, .. }) => args.config.as_ref(),
        Command::Config(ConfigCommand::Check(args)) => {
            args.file.as_ref().or(args.run.config.as_ref())
        }
        _ => None,
    }?;
    Some(Layer::load(path))
}

/// Starts trace export for the commands that hold leases, from the file's `[telemetry]` table
/// and the standard variables.
fn start_telemetry(
    command: &Command,
    file: Option<&Result<Layer, ConfigError>>,
) -> Result<(), crate::telemetry::TelemetryError> {
    if !matches!(command, Command::Run(_) | Command::Exec(_)) {
        return Ok(());
    }
    let settings = file
        .and_then(|file| file.as_ref().ok())
        .map(|layer| layer.telemetry.settings())
        .unwrap_or_default();
    crate::telemetry::start(&settings, |name| std::env::var(name).ok()).map(|_| ())
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
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let lines = tracing_subscriber::fmt::layer()
        .with_writer(writer)
        .with_ansi(std::io::stderr().is_terminal());
    // Layers on a registry rather than fmt's own subscriber, each with a filter of its own: the
    // log's level (`RUST_LOG`) decides its lines alone, not which spans the trace export (`None`
    // when it is off, no layer at all) sends.
    use tracing_subscriber::Layer as _;
    let registry = tracing_subscriber::registry();
    match format {
        LogFormat::Text => registry
            .with(lines.fmt_fields(log::EscapedFields).with_filter(filter))
            .with(crate::telemetry::layer())
            .init(),
        LogFormat::Json => registry
            .with(lines.json().with_filter(filter))
            .with(crate::telemetry::layer())
            .init(),
    }
    (guard, dropped)
}

/// Runs a command that holds leases on a worker of the runtime rather than on the thread that
/// blocks on it. Its signal task then wakes the lease driver and the plugins' tasks into its own
/// worker's queue, where a wake from outside the workers must first unpark one: on an idle
/// machine that took 0.2-1 ms, on the path of every graceful handoff.
async fn on_a_worker<F>(command: F) -> anyhow::Result<ExitCode>
where
    F: Future<Output = anyhow::Result<ExitCode>> + Send + 'static,
{
    tokio::spawn(command)
        .await
        .unwrap_or_else(|e| Err(anyhow::anyhow!("the command's task ended abnormally: {e}")))
}

/// `leasehold run`: the app until SIGTERM or SIGINT, then its ordered shutdown. A second signal
/// exits at once, unless it repeats the first within [`REPEATED_SIGNAL_WINDOW`]. Exits 0 when
/// every lease held was released, [`EXIT_LEFT_TO_EXPIRE`] when some were left to expire, and
/// [`EXIT_SECOND_SIGNAL`] when a second signal cut the shutdown short; the last line logged
/// says what became of each lease.
///
/// `file` is the file `args.config` names, as the entry read it.
pub(crate) async fn run(
    args: RunArgs,
    file: Option<Result<Layer, ConfigError>>,
) -> anyhow::Result<ExitCode> {
    let config = Config::resolve(file.transpose()?.unwrap_or_default(), args.settings)?;
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
