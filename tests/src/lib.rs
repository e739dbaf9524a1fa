//! The test harness of leasehold: a real PostgreSQL started on demand ([`pg`]), and PgBouncer
//! in front of it ([`pgbouncer`]); hosts started as
//! real `leasehold` processes ([`host`]), in containers of the project's image ([`containers`]) or
//! in the test's process ([`in_process`]), asked through
//! one [`endpoint`] that reads `/status` in the host's own types ([`status`]), their pages
//! opened in a headless browser that reports the console's errors ([`browser`]); the store
//! backends opened fresh for each test ([`stores`]); shared trials of fencing ([`fencing`]) and
//! of frozen holders ([`freeze`]), lease groups seen from outside ([`groups`]) and of attacks on the host's memory ([`memory`]); a flood of watchers on a host holding many leases ([`flood`]); a wall clock tests can step ([`faketime`]); one way to wait
//! for a condition ([`eventually`]); a TCP proxy that injects network faults between a host and
//! its database ([`proxy`]), what a process costs in CPU and memory ([`procstat`]), a watchdog that ends a test's process groups with it ([`reaper`]), the witness and history checker of fault trials ([`chaos`]), and etcd's lock CLI,
//! the reference the handoff benchmark compares against ([`etcd`]).
//! The lease API's contract is read in [`openapi`], its watch streams in [`sse`]. The admin API's token files and requests are in [`admin`]; the worker `leasehold exec` runs in
//! the tests and the bench, and the history it writes, in [`exec`].
//! Integration tests live in `tests/`; the benchmarks are binaries in `src/bin/`.
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
pub mod pg;
pub mod pgbouncer;
pub mod procstat;
pub mod proxy;
pub mod reaper;
pub mod sse;
pub mod stats;
pub mod status;
pub mod stores;
