//! OpenTelemetry trace export of real `leasehold` processes on a real PostgreSQL, read by a real
//! OTLP/HTTP receiver (`leasehold_tests::otlp`). One test binary, a module per file:
//!
//! - `terms`: a handoff's two terms arrive linked, with their attributes; the acquisition within
//!   seconds, the whole term at a graceful stop; its ordered stop and plugin under it; a `/v1`
//!   request under the caller's `traceparent`; the log's level keeps no span from the export.
//! - `collector`: a collector that never answers, or is down, costs a host of 1,000 leases none
//!   of them, and the spans it could not send, or that overflowed the queue, are counted.
//! - `settings`: `config check` shows the `[telemetry]` table and where spans would go.

#![allow(clippy::unwrap_used, missing_docs)]

mod collector;
mod settings;
mod terms;
