//! The HTTP endpoint: `/healthz` (the process runs) and `/status` (this replica's view of each
//! lease). The JSON field names of `/status` are a contract for other tooling: keep them.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::routing::get;
use axum::{Json, Router};
use serde::Serialize;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::lease::{Epoch, LeaseEngine, Role};
use crate::supervisor::status::{PluginStatus, StatusBoard};

/// What the handlers read.
#[derive(Debug, Clone)]
pub struct AppState {
    /// The lease engine.
    pub leases: Arc<LeaseEngine>,
    /// The plugin statuses, when plugins are enabled.
    pub plugins: Option<StatusBoard>,
}

/// `/status`: who this replica is and what it knows of each lease.
#[derive(Debug, Serialize)]
pub struct Status {
    /// This process's holder id.
    pub replica: String,
    /// The store backend (`postgres`, `sqlite`).
    pub store: &'static str,
    /// Set when the store could not be read; holder and expiry then come from local knowledge.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub store_error: Option<String>,
    /// One entry per lease this replica campaigns for.
    pub leases: Vec<LeaseStatus>,
    /// One entry per plugin file.
    pub plugins: Vec<PluginStatus>,
}

/// One lease in `/status`.
#[derive(Debug, Serialize)]
pub struct LeaseStatus {
    /// The lease name.
    pub name: String,
    /// This replica's role.
    pub role: Role,
    /// The current holder by the database, or `null` when nobody holds it.
    pub holder: Option<String>,
    /// The current holder's epoch.
    pub epoch: Option<Epoch>,
    /// Milliseconds until the lease expires by the database clock.
    pub expires_in_ms: Option<i64>,
}

/// The router, for tests that serve it themselves.
pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/status", get(status))
        .with_state(state)
}

/// Serves the router on `listener` until `shutdown` is cancelled.
pub async fn serve(
    listener: TcpListener,
    state: AppState,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    axum::serve(listener, router(state))
        .with_graceful_shutdown(shutdown.cancelled_owned())
        .await
}

/// Builds the status: roles from the coordinator, holders and expiry from the database.
pub async fn status_of(engine: &LeaseEngine) -> Status {
    let names: Vec<String> = engine.lease_names().map(str::to_string).collect();
    // A status page must answer even when the store hangs: bound the read well below a scrape timeout.
    let timeout = engine.timing().store_timeout.min(Duration::from_secs(1));
    let rows = match tokio::time::timeout(timeout, engine.store().get(&names)).await {
        Ok(Ok(rows)) => Ok(rows),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!(
            "reading the lease table timed out after {timeout:?}"
        )),
    };
    let me = engine.holder().to_string();
    let leases = names
        .iter()
        .map(|name| {
            let leadership = engine.leadership(name);
            let role = leadership.as_ref().map_or(Role::Standby, |l| l.role);
            let (holder, epoch, expires_in_ms) = match &rows {
                Ok(rows) => match rows.iter().find(|r| &r.name == name) {
                    Some(r) if r.is_held() => {
                        (Some(r.holder.clone()), Some(r.epoch), Some(r.expires_in_ms))
                    }
                    _ => (None, None, None),
                },
                Err(_) => match leadership.and_then(|l| l.epoch) {
                    Some(epoch) => (Some(me.clone()), Some(epoch), None),
                    None => (None, None, None),
                },
            };
            LeaseStatus {
                name: name.clone(),
                role,
                holder,
                epoch,
                expires_in_ms,
            }
        })
        .collect();
    Status {
        replica: me,
        store: engine.store().backend(),
        store_error: rows.err(),
        leases,
        plugins: Vec::new(),
    }
}

async fn status(State(state): State<AppState>) -> Json<Status> {
    let mut status = status_of(&state.leases).await;
    if let Some(board) = &state.plugins {
        status.plugins = board.snapshot();
    }
    Json(status)
}
