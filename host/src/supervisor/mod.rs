//! The supervisor (docs/ARCHITECTURE.md §7): the work bound to the lifecycle of a lease. Plugins
//! and processes each have their quarters; what they share sits here: the failure they speak,
//! the policy that judges it, one driver for every kind of work, the board `/status` reads, and
//! following a lease's terms.
//!
//! Order (each module may use only those listed before it; `host/tests/layers.rs` checks):
//!
//! 1. [`failure`]: how bound work ends when it is not a success: a plugin's failed call, a
//!    process's exit, a cancellation;
//! 2. [`policy`]: what an outcome means: backoff, a fresh start, quarantine;
//! 3. [`status`]: what `/status` shows of each plugin, process and service, and the board;
//! 4. [`work`]: one driver for every kind of bound work (start, outcome, policy, backoff, stop),
//!    and the `Work` trait each kind implements;
//! 5. [`terms`]: following one lease's terms on this replica;
//! 6. [`plugin`]: reconcilers on each term, health checks throughout, following the plugin set;
//! 7. [`process`]: processes and services under a keeper, following their lease.

pub mod failure;
pub mod plugin;
pub mod policy;
pub mod process;
pub mod status;
pub mod terms;
pub mod work;

pub use plugin::Supervisor;
pub use process::{ProcessContext, ProcessMetrics, start as start_processes};
pub use status::{
    PluginCard, PluginState, PluginStatus, ProcessState, ProcessStatus, StatusBoard, how_it_ended,
};
