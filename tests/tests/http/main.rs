//! The HTTP port of real hosts from outside: the admin and lease APIs, watch streams and their
//! clients, readiness, metrics, the status page, and floods and attacks on the port. One test
//! binary, a module per file:
//!
//! - `admin`: the admin commands as processes: `leases release --force`, `status --url`,
//!   `config check`.
//! - `admin_api`: the admin API of real processes: off without a token file, every answer as
//!   due.
//! - `flood`: watching never costs a lease: 1,000 shards kept under hundreds of clients and
//!   streams.
//! - `http_surface`: the HTTP port attacked: rebinding, idle and silent connections, oversized
//!   heads.
//! - `lease_api`: the lease API answers as `docs/api/openapi.yaml` says.
//! - `lease_client`: the example clients of the watch stream beside real hosts.
//! - `lease_readiness`: `GET /readyz/leases/NAME` and `leasehold status --holds NAME`.
//! - `lease_watch`: the watch stream attacked: handoffs, reconnects, clients that never read.
//! - `metrics`: `/metrics` scraped from real processes.
//! - `monitoring`: the Prometheus rules and the Grafana dashboard held to `/metrics`.
//! - `page`: the status page at `/`, in a real headless Chromium.

mod admin;
mod admin_api;
mod flood;
mod http_surface;
mod lease_api;
mod lease_client;
mod lease_readiness;
mod lease_watch;
mod metrics;
mod monitoring;
mod page;
