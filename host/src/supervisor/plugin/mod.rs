//! A replica's plugins, bound to the lifecycle of their lease: on each term, every reconciler
//! bound to the lease is instantiated, `init` called, then `reconcile` on the schedule, one call at
//! a time; every health check runs whatever the role and gates the campaigns of its lease or
//! group.
//!
//! Who stops a plugin: the runtime ([`crate::runtime::store`]). Each store is built for a term
//! and refuses, or interrupts, any call once the term's deadline has passed on the monotonic
//! clock or the term has ended; the supervisor only reads the outcome and follows its
//! [`policy`](super::policy).
//!
//! Order (each module may use only those listed before it; `host/tests/layers.rs` checks):
//!
//! 1. [`view`]: what the plugins' tasks read of this replica, and the lease as a guest sees it;
//! 2. [`instance`]: the one way guest code is started: a store, the instance, `init`, recorded;
//! 3. [`workers`]: one task per plugin file, in step with the plugin set;
//! 4. [`reconcile`]: one reconciler for one term, as a `Work`;
//! 5. [`health`]: one health check, following the role of its lease (or group) on this
//!    replica; each role a `Work`;
//! 6. [`lifecycle`]: the [`Supervisor`]: reconcilers on each term, health checks throughout.

mod health;
mod instance;
mod lifecycle;
mod reconcile;
mod view;
mod workers;

pub use lifecycle::Supervisor;
