//! leasehold: replicas of one host binary compete for named leases in PostgreSQL (or an embedded
//! SQLite file); the holder of a lease runs the work bound to it, and stops it before any other
//! replica can take the lease over.
//!
//! `docs/ARCHITECTURE.md` explains the design: why the holder's plugins stop before any other
//! replica can take its lease, what fences their writes, what failures are tolerated, and where
//! each part lives.
//!
//! # Layers
//!
//! Each module may use the modules listed before it and never one listed after it, so the
//! dependencies run one way (`host/tests/layers.rs` fails on an upward import):
//!
//! 1. [`report`]: one line from an error and its causes, and outside text escaped for showing;
//! 2. [`metrics`]: what every layer's metrics share (labels, the exposition `/metrics` encodes);
//! 3. [`output_rate`]: what bound work (a plugin, a process) may write to the host's log over
//!    time, and the report of what it dropped;
//! 4. [`lease`]: lease rows and names, the stores that keep them, the coordinator state machine
//!    and its driver;
//! 5. [`telemetry`]: OpenTelemetry trace export, off unless an OTLP endpoint is set: a span per
//!    leadership term, the host's `tracing` spans under it, a bounded queue to the collector;
//! 6. [`manifest`]: what a plugin's `NAME.toml` declares (lease, schedule, limits, grants);
//! 7. [`capability`]: what plugins may be granted: fenced kv, sql, events;
//! 8. [`runtime`]: the WebAssembly engine, compiled components, stores and guarded calls;
//! 9. [`plugin`]: the plugin directory: plugin names, loading files and watching for changes;
//! 10. [`process`]: OS processes under a lease, run by a keeper process that holds their deadline
//!     apart from the host;
//! 11. [`supervisor`]: the work bound to the lifecycle of a lease: plugins, processes, services;
//! 12. [`http`]: `/healthz`, `/readyz`, `/status`, `/metrics` and the page, from one snapshot of
//!     the store, on a thread of its own, bounded and answering only to its own names;
//! 13. [`config`]: the settings of `leasehold run`, from file, environment and flags;
//! 14. [`app`]: the composition root: one running host, started from a config and shut down in
//!     order;
//! 15. [`cli`]: the command line (`run`, `check`, `leases`, …): flags, signals and exit codes;
//! 16. [`testing`](#layers) (with the `testing` feature only, which the test suite turns on): the
//!     host's bounds, named once so that tests check the figures the host enforces.

pub mod app;
pub mod capability;
pub mod cli;
pub mod config;
pub mod http;
pub mod lease;
pub mod manifest;
pub mod metrics;
pub mod output_rate;
pub mod plugin;
pub mod process;
pub mod report;
pub mod runtime;
pub mod supervisor;
pub mod telemetry;
#[cfg(feature = "testing")]
pub mod testing;
