//! OS processes and services bound to leases, each run by a keeper ([`crate::process`]) that
//! holds its deadline apart from the host: a process runs on each term; a service leasehold does
//! not own activates on each term, deactivates at its end and has its health checked between.
//!
//! Order (each module may use only those listed before it; `host/tests/layers.rs` checks):
//!
//! 1. [`metrics`]: their figures, one series per process and lease it runs under;
//! 2. [`card`]: where their tasks write what `/status` shows of them, and count it in the
//!    metrics;
//! 3. [`exec`]: a process bound to a lease, each term's run a `Work`;
//! 4. [`probe`]: a service's health asked over HTTP instead of by a script;
//! 5. [`service`]: a service following its lease with activate, deactivate and health scripts;
//! 6. [`start`](mod@start): starting the processes and services of a host's config.

mod card;
mod exec;
mod metrics;
mod probe;
mod service;
mod start;

pub use metrics::ProcessMetrics;
pub use start::{ProcessContext, start};
