//! The test harness of leasehold, one module per need:
//!
//! 1. [`pg`]: a real PostgreSQL, started on demand (one per test process).
//! 2. [`pgbouncer`]: PgBouncer in front of it.
//! 3. [`host`]: hosts started as real `leasehold` processes.
//! 4. [`containers`]: hosts in containers of the project's image.
//! 5. [`in_process`]: hosts in the test's own process.
//! 6. [`endpoint`]: the one way a host is asked, whichever way it runs; it reads `/status` in
//!    the host's own types.
//! 7. [`status`]: those types, `/status` as the host writes it.
//! 8. [`log`]: a host's log as a test reads it, from a process or an in-process host.
//! 9. [`browser`]: a host's pages opened in a headless browser that reports the console's errors.
//! 10. [`stores`]: the store backends, opened fresh for each test.
//! 11. [`leader`]: an in-process lease holder on a real store, for tests of the capabilities
//!     without a `leasehold` process.
//! 12. [`fencing`]: the shared trials of fencing.
//! 13. [`freeze`]: the shared trials of frozen holders.
//! 14. [`groups`]: lease groups seen from outside.
//! 15. [`memory`]: the attacks on the host's memory.
//! 16. [`flood`]: a flood of watchers on a host holding many leases.
//! 17. [`faketime`]: a wall clock tests can step.
//! 18. [`eventually`]: one way to wait for a condition.
//! 19. [`proxy`]: a TCP proxy that injects network faults between a host and its database.
//! 20. [`procstat`]: what a process costs in CPU and memory.
//! 21. [`reaper`]: a watchdog that ends a test's process groups with it.
//! 22. [`chaos`]: the witness and the history checker of fault trials.
//! 23. [`etcd`]: etcd's lock CLI, the reference the handoff benchmark compares against.
//! 24. [`openapi`]: the lease API's contract, read.
//! 25. [`sse`]: the lease API's watch streams, read.
//! 26. [`admin`]: the admin API's token files and requests.
//! 27. [`exec`]: the worker `leasehold exec` runs in the tests and the bench, and the history it
//!     writes.
//! 28. [`stats`]: small statistics for the benchmarks' figures, and the settings they read.
//! 29. [`statement_log`]: PostgreSQL's log of the statements it ran, read by the benchmarks.
//! 30. [`otlp`]: an OTLP/HTTP receiver for the trace export, and collectors that never answer or
//!     are down.
//!
//! The integration tests are in `tests/`, a few test binaries by topic (each topic's `main.rs`
//! maps its modules); the benchmarks are programs of their own crate, `bench/` (`make bench`).
//!
//! A test that cannot run in some setting is ignored there, with the reason, so that the runner
//! counts it as ignored rather than passed: `build.rs` sets `cfg(given_server)` when
//! `DATABASE_URL` names a server (tests that stop the server, start their own or create
//! cluster-wide roles carry `#[cfg_attr(given_server, ignore = "why")]` and call
//! [`pg::needs_own_server`], which fails them if they run there anyway) and `cfg(not_root)` when
//! the tests are built by a user other than root. In the default setting, no `DATABASE_URL` (the
//! harness's own server, as `make test` and CI run), they all run.

#![allow(clippy::unwrap_used)]

pub mod admin;
pub mod browser;
pub mod chaos;
pub mod containers;
pub mod endpoint;
pub mod etcd;
pub mod eventually;
pub mod exec;
pub mod faketime;
pub mod fencing;
pub mod flood;
pub mod freeze;
pub mod groups;
pub mod host;
pub mod in_process;
pub mod leader;
pub mod log;
pub mod memory;
pub mod openapi;
pub mod otlp;
pub mod pg;
pub mod pgbouncer;
pub mod procstat;
pub mod proxy;
pub mod reaper;
pub mod sse;
pub mod statement_log;
pub mod stats;
pub mod status;
pub mod stores;
