//! Processes: real `leasehold run` processes, and the programs they run under a lease
//! (`leasehold exec`, `[[process]]`, `[[service]]`) with their keepers and the process fence. One
//! test binary, a module per file:
//!
//! - `exec`: `leasehold exec` between two real hosts: no line of an epoch after the next one's
//!   first.
//! - `exec_fence`: the process fence `leasehold_fence(lease, epoch)` from the examples' workers.
//! - `exec_service`: `[[service]]` scripts and apps that lend their health to the lease.
//! - `exec_status`: what a host shows of the processes it runs: `/status`, `/metrics`, `status`.
//! - `fence_callers`: the lease database's callers as attackers of the process fence.
//! - `keeper`: the keeper of a process under a lease, this test playing its host.
//! - `keeper_attacks`: the keeper attacked on real hosts: a flooding child, a keeper killed alone.
//! - `processes`: real `leasehold run` processes on PostgreSQL and SQLite: elections, signals,
//!   settings.
//! - `real_programs`: redis as a `[[service]]` and nginx under `leasehold exec`.

mod exec;
mod exec_fence;
mod exec_service;
mod exec_status;
mod fence_callers;
mod keeper;
mod keeper_attacks;
mod processes;
mod real_programs;
