//! leasehold: replicas of one host binary compete for named leases in PostgreSQL (or an embedded
//! SQLite file); the holder of a lease runs the work bound to it, and stops it before any other
//! replica can take the lease over.
//!
//! The crate is a map of the design (DESIGN.md):
//! - [`lease`]: lease rows, the stores that keep them, the coordinator state machine and its driver;
//! - [`config`]: the settings of `leasehold run`, from file, environment and flags;
//! - [`plugin`]: plugin files and their manifests;
//! - [`runtime`]: the WebAssembly engine, compiled components, stores and guarded calls;
//! - [`capability`]: what plugins may be granted: fenced kv, sql, events;
//! - [`supervisor`]: plugins bound to the lifecycle of their lease;
//! - [`http`]: `/healthz`, `/readyz`, `/status` and `/metrics`;
//! - [`metrics`]: the Prometheus metrics the lease driver and the runtime record;
//! - [`cli`]: the command line (`run`, `check`, `leases list`).

pub mod capability;
pub mod cli;
pub mod config;
pub mod http;
pub mod lease;
pub mod manifest;
pub mod metrics;
pub mod plugin;
pub mod runtime;
pub mod supervisor;
