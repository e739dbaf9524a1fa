//! Leases: the rows replicas compete for, the stores that keep them, and the coordinator that
//! campaigns, renews and releases them (docs/ARCHITECTURE.md §2–§6). They live in crates of their
//! own, so that the pure core and the simulator build without the plugin runtime:
//! `leasehold-lease-core` (the coordinator, timing, names, epochs, groups' plan) under
//! `leasehold-lease` (stores, driver, terms, handoffs, group runner). The host sees them here, by
//! the same paths as ever (`crate::lease::coordinator`, `crate::lease::Leases`).

pub use leasehold_lease::*;
