//! The pure core of leasehold's lease protocol: what a lease is, how its timing relates, and the
//! coordinator that decides, for every lease a replica campaigns for, what to do next. Nothing
//! here reads a clock, draws an unseeded random number, does I/O or needs a runtime: the driver in
//! `leasehold-lease` feeds it events and instants and carries out its effects, and the simulator
//! feeds it the same from a seed (docs/ARCHITECTURE.md §3, §10).
//!
//! # Order
//!
//! Each module may use the modules listed before it and never one listed after it
//! (`host/tests/layers.rs` checks it):
//!
//! 1. [`buggify`]: fault points and planted bugs, compiled only for the simulator;
//! 2. [`text`]: durations, driver messages and outside text as people read them;
//! 3. [`backoff`]: the one backoff of every retry, its jitter drawn from a seeded generator;
//! 4. [`epoch`]: the fencing token;
//! 5. [`name`]: lease names;
//! 6. [`timing`]: the ttl and the intervals derived from it, and how they must relate;
//! 7. [`identity`]: the holder id, and the replica id it starts with;
//! 8. [`history`]: the terms of each lease as the cluster recorded them, for display;
//! 9. [`protocol`]: the safety rules this release follows, as a number the schema may require;
//! 10. [`queue`]: the line of standbys for a lease: its order, and when a waiter may preempt;
//! 11. [`record`]: what the stores return: rows, campaign and renewal outcomes, release notices;
//! 12. [`instant`]: the coordinator's instants, plain time since an origin its driver chose;
//! 13. [`clock`]: watching the database's clock for steps;
//! 14. [`role`]: a replica's role in a lease, and why a term ended;
//! 15. [`coordinator`]: the state machine, one `step(event, now)` for all leases;
//! 16. [`groups`]: lease groups' fair shares and who hands which shard to whom.

pub mod backoff;
pub mod buggify;
pub mod clock;
pub mod coordinator;
pub mod epoch;
pub mod groups;
pub mod history;
pub mod identity;
pub mod instant;
pub mod name;
pub mod protocol;
pub mod queue;
pub mod record;
pub mod role;
pub mod text;
pub mod timing;

pub use coordinator::Coordinator;
pub use epoch::Epoch;
pub use identity::HolderId;
pub use instant::Instant;
pub use name::{LeaseName, LeaseNameError};
pub use record::{
    Campaigned, CampaignedMany, DbMillis, GrantSeen, GroupMember, GroupView, LeaseRecord,
    MemberRecord, ReleaseNotice, Released, RenewRequest, Renewed, RenewedOne, WaiterRecord,
};
pub use role::{EndReason, Role};
pub use timing::{Timing, TimingError};
