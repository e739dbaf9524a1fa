//! A deterministic simulator of leasehold's lease layer (docs/ARCHITECTURE.md §12): several
//! replicas of the real driver, coordinator, group runner and term work that `leasehold run`
//! runs, against the in-memory store behind a seeded fault layer
//! (`leasehold_lease::memory::faults`), each replica on a paused
//! single-threaded runtime of its own, and one world loop that picks by seed what happens and who
//! runs next while it moves one true clock on. Every run is judged by an oracle; a seed replays
//! a run exactly, event log and hash alike.
//!
//! # Order
//!
//! Each module may use the modules listed before it and never one listed after it
//! (`host/tests/layers.rs` checks it):
//!
//! 1. [`history`]: the true clock, the event log and what the oracle reads;
//! 2. [`work`]: the work of a term, as a recorder of side effects;
//! 3. [`replica`]: one replica on its own paused runtime;
//! 4. [`plan`]: a run's scenario, drawn from its seed;
//! 5. [`oracle`]: the promises every run is held to;
//! 6. [`run`](mod@run): the world loop of one seeded run.

pub mod history;
pub mod oracle;
pub mod plan;
pub mod replica;
pub mod run;
pub mod work;

pub use leasehold_lease_core::buggify::Planted;
pub use run::{Outcome, run};
