//! The command line as a whole: `leasehold` and its subcommands, each with the flags its module
//! declares.

use clap::{Parser, Subcommand};

use super::args::*;
use super::{admin, dev, groups, new, peers};

/// leasehold: replicas compete for named leases; the holder runs the work bound to each lease.
#[derive(Debug, Parser)]
#[command(name = "leasehold", version = version(), about)]
pub(crate) struct Cli {
    /// Log format on stderr, text or json [default: log_format of the config file, else text];
    /// under json a fatal error is a JSON line too.
    #[arg(long, global = true, env = "LEASEHOLD_LOG_FORMAT", value_enum)]
    pub log_format: Option<LogFormat>,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
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
pub(crate) enum ConfigCommand {
    /// Validate a config file (with LEASEHOLD_* variables and flags applied) and print the
    /// effective configuration, password redacted; exit 1 when it is invalid.
    Check(admin::ConfigCheckArgs),
}

/// `leasehold leases …`.
#[derive(Debug, Subcommand)]
pub(crate) enum LeasesCommand {
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
    /// Ask every replica behind a name (a headless Service) who holds each lease: exit 0 when
    /// each lease has exactly one holder and every replica names it, 1 with each fault otherwise.
    Check(peers::CheckArgs),
    /// Break-glass, for a holder that is gone: expire a lease now whoever holds it, keeping its
    /// epoch. A holder still running keeps running the lease's plugins beside the next holder's
    /// until its next renewal is refused (within ttl/3); its fenced writes are refused at once.
    /// For a live holder use `leases handoff`.
    Release(admin::ReleaseArgs),
}
