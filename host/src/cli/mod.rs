//! The command line. This is the edge of the program: errors become one line on stderr and an
//! exit code here.
//!
//! Order (each module may use only those listed before it; `host/tests/layers.rs` checks):
//!
//! 1. [`args`]: the flags several commands share, the version, and the exit codes;
//! 2. [`log`]: the text log's fields, control characters escaped;
//! 3. [`check`]: `check`, whether the host would load a plugin file;
//! 4. [`admin`]: `leases list`, `leases handoff`, `leases release --force`, `status --url`,
//!    `migrate`, `config check`;
//! 5. [`groups`]: `leases groups`, the lease groups' members as the database has them;
//! 6. [`peers`]: `leases check`, every replica behind one name asked who holds each lease;
//! 7. [`new`]: `new`, a plugin project to start from;
//! 8. [`dev`]: `dev`, a project rebuilt, checked and copied into a plugin directory on each
//!    change;
//! 9. [`command`]: `leasehold` and its subcommands, as clap reads them;
//! 10. [`run`]: the program's entry (parse, log, run, exit code) and `run`, the host until a
//!     signal.

mod admin;
mod args;
mod check;
mod command;
mod dev;
mod groups;
pub mod log;
mod new;
mod peers;
pub mod run;

pub use run::{DEFAULT_LOG_FILTER, main};
