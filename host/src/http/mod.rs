//! The HTTP endpoint: `/healthz` (the process runs), `/readyz` (the store answers and the plugins
//! are loaded), `/status` (this replica's view of each lease and plugin), `/metrics`
//! (Prometheus), the live page at `/`, the lease API for apps beside the host and the admin API.
//! The JSON field names of `/status` and the metric names are a contract for other tooling: keep
//! them. It runs on a thread of its own, so that no number of watchers can hold up the lease loop.
//!
//! Order (each module may use only those listed before it; `host/tests/layers.rs` checks):
//!
//! 1. [`metrics`]: what the lease API's watchers cost;
//! 2. [`status`]: `/status` in the host's types, read from the store or from this replica alone;
//! 3. [`bridge`]: the one bridge from the HTTP thread to the lease loop, where whatever the
//!    endpoint asks of the store runs;
//! 4. [`snapshot`]: what `/status` and `/readyz` know of the store: one shared read, refreshed at
//!    most every 250 ms on connections of its own;
//! 5. [`admin`]: the admin API (`POST /v1/admin/leases/{name}/handoff`), answering only when an
//!    admin token is configured, and only to requests that carry it;
//! 6. [`state`]: what the handlers read;
//! 7. [`readiness`]: `/readyz/leases/{name}`, ready only while this replica holds that lease;
//! 8. [`api`]: the lease API (`/v1/leases`, `/v1/leases/{name}`) for apps beside the host;
//! 9. [`watch`]: `/v1/leases/{name}/watch`, a stream of a lease's terms;
//! 10. [`guard`]: the server, bounded, answering only to its own names;
//! 11. [`page`]: the live page, drawn from `/status`;
//! 12. [`routes`]: the routes, and `/healthz`, `/readyz`, `/status` and `/metrics`;
//! 13. [`thread`]: the endpoint's own thread and runtime.

pub mod admin;
pub mod api;
pub(crate) mod bridge;
pub mod guard;
pub mod metrics;
pub mod page;
pub mod readiness;
pub(crate) mod routes;
pub mod snapshot;
pub mod state;
pub mod status;
pub mod thread;
pub mod watch;

pub use metrics::{EndpointMetrics, HttpMetrics};
pub use routes::{router, serve};
pub use state::AppState;
pub use status::{LeaseStatus, Status};
