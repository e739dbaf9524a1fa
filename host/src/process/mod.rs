//! Any OS process under a lease: the keeper that runs it and holds its deadline apart from the
//! host, so that the process is stopped before another replica can take the lease over even when
//! the host is frozen or killed.
//!
//! Order (each module may use only those listed before it; `host/tests/layers.rs` checks):
//!
//! 1. [`protocol`]: the lines the host and a keeper exchange: orders, reports, output;
//! 2. [`tree`]: the keeper's process tree, found through `/proc` and killed without cgroups;
//! 3. [`outbox`]: a keeper's reports on their way to the host, control before output, output
//!    bounded;
//! 4. [`keeper`]: the keeper process itself, and the child's own start under it;
//! 5. [`adopted`]: the host as subreaper of its keepers' trees: a dead keeper's orphans killed,
//!    adopted children reaped;
//! 6. [`handle`]: the host's side of a keeper: start it, send deadlines and the stop, read
//!    reports;
//! 7. [`bound`]: a process the operator bound to a lease: its command, stop signal, grace and
//!    what its own exit means, and the graces the lease timing allows;
//! 8. [`service`]: a service leasehold does not own, with its activate, deactivate and health
//!    checks (scripts, or an HTTP probe of the app for health), each optional.

pub mod adopted;
pub mod bound;
pub mod handle;
pub mod keeper;
pub(crate) mod outbox;
pub mod protocol;
pub mod service;
pub mod tree;
