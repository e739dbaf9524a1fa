//! Plugins in running hosts, with real compiled guest components (`make guests`): their
//! capabilities, limits, languages and tooling, and what a hostile one cannot do. One test binary,
//! a module per file:
//!
//! - `capability_plugins`: capabilities seen from real guests in real processes, grants and
//!   credentials.
//! - `compile_cache`: a tampered compile cache is compiled around, never loaded.
//! - `dev_loop`: `leasehold dev` end to end on a tiny project.
//! - `fence_identity`: whether a sql grant reaches the lease database, decided by what no role
//!   can change.
//! - `fencing`: fenced writes between real processes: a holder that lost its lease never commits
//!   after the next.
//! - `freeze`: a frozen and resumed holder starts no guest call after its `safe_until`.
//! - `hostile_sql`: a hostile plugin's sql grant tries to rewrite, lock, stall and forge.
//! - `languages`: plugins in Python and JavaScript, held to what the Rust guests are held to.
//! - `log_flood`: a plugin flooding the host's log is held to its rate across calls.
//! - `memory_attacks`: a hostile plugin cannot blow up the host's memory.
//! - `new_project`: `leasehold new` for each language and world, built and checked.
//! - `plugins`: plugins in running hosts, in-process and as real processes.
//! - `secrets`: database passwords never leave the host, whatever prints them.
//! - `volume`: a plugin that prints, writes or fails without end is held to a budget or a quota.
//!
//! One plugin test stands apart, a binary of its own: `tests/forced_stop.rs` stops and restarts
//! the PostgreSQL server of its test process (`leasehold_tests::pg::server`), which every other
//! test of a binary shares.

mod capability_plugins;
mod compile_cache;
mod dev_loop;
mod fence_identity;
mod fencing;
mod freeze;
mod hostile_sql;
mod languages;
mod log_flood;
mod memory_attacks;
mod new_project;
mod plugins;
mod secrets;
mod volume;
