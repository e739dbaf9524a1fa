//! What `/status` shows of the work bound to leases, and the board its tasks write it on.
//!
//! Order (each module may use only those listed before it; `host/tests/layers.rs` checks):
//!
//! 1. [`process`]: what `/status` shows of each process and service, and how one ended;
//! 2. [`board`]: what it shows of each plugin, and the board that holds every card.

pub mod board;
pub mod process;

pub use board::{PluginCard, PluginState, PluginStatus, StatusBoard};
pub use process::{ProcessState, ProcessStatus, how_it_ended};
