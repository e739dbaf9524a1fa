//! What the handlers read: the replica's leases, its plugins' board, its metrics, the shared
//! snapshot of the store and the admin API when it is on.

use std::sync::Arc;

use super::admin;
use super::bridge::LeaseLoop;
use super::metrics::EndpointMetrics;
use super::snapshot::Snapshots;
use crate::lease::Leases;
use crate::supervisor::StatusBoard;

/// What the handlers read.
#[derive(Debug, Clone)]
pub struct AppState {
    /// The leases of this replica.
    pub leases: Arc<Leases>,
    /// The plugin statuses, when plugins are enabled.
    pub plugins: Option<StatusBoard>,
    /// The metrics `/metrics` shows, and those the endpoint writes.
    pub metrics: EndpointMetrics,
    /// The lease loop, where whatever the endpoint asks of the store runs.
    pub(crate) lease_loop: LeaseLoop,
    /// What `/status` and `/readyz` show of the store, shared by every request.
    pub(crate) snapshots: Snapshots,
    /// The admin API, when an admin token is configured; `None` answers 404 to its whole tree.
    pub(crate) admin: Option<Arc<admin::Admin>>,
}

impl AppState {
    /// The state of a replica's endpoint. Call it on the runtime the lease loop runs on: the
    /// snapshots' refreshes run there.
    pub fn new(
        leases: Arc<Leases>,
        plugins: Option<StatusBoard>,
        metrics: EndpointMetrics,
    ) -> AppState {
        let lease_loop = LeaseLoop::here(leases.clone());
        AppState {
            snapshots: Snapshots::new(lease_loop.clone(), plugins.clone()),
            lease_loop,
            leases,
            plugins,
            metrics,
            admin: None,
        }
    }

    /// Turns the admin API on, answering requests that carry `token`. Call it on the runtime
    /// the lease loop runs on, as [`AppState::new`]: the API's store calls run there.
    pub fn with_admin(mut self, token: admin::AdminToken) -> AppState {
        self.admin = Some(Arc::new(admin::Admin::new(token, &self.lease_loop)));
        self
    }
}

/// The admin API's handler reads only the API: the rest of the state is none of its business.
impl axum::extract::FromRef<AppState> for Option<Arc<admin::Admin>> {
    fn from_ref(state: &AppState) -> Self {
        state.admin.clone()
    }
}
