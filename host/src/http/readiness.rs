//! `GET /readyz/leases/NAME`: ready only while this replica holds lease NAME, for a probe that
//! routes traffic to the leader alone (a Kubernetes Service over sidecars, a load balancer's
//! health check). Answered from this replica's own leadership, never the store: a flood of
//! probes costs no lease a read, and an answer is as fresh as the lease loop's last step.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use tokio::time::Instant;

use super::AppState;
use crate::lease::Role;
use crate::report::escape_controls;

/// 200 while this replica leads `name` with time left before its deadline, with the epoch and
/// that time; 503 otherwise, saying why; 404 for a lease this replica does not campaign for,
/// naming those it does.
pub(crate) async fn lease_ready(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> (StatusCode, String) {
    let Some(leadership) = state.leases.leadership(&name) else {
        let mut known: Vec<&str> = state.leases.lease_names().collect();
        known.sort_unstable();
        return (
            StatusCode::NOT_FOUND,
            format!(
                "no lease named {:?} here; this replica campaigns for: {}\n",
                escape_controls(&name),
                escape_controls(&known.join(", "))
            ),
        );
    };
    let shown = escape_controls(&name);
    match (leadership.role, &leadership.term) {
        (Role::Leader, Some(term)) if !term.is_cancelled() => {
            let left = term.safe_until().saturating_duration_since(Instant::now());
            if left.is_zero() {
                return (
                    StatusCode::SERVICE_UNAVAILABLE,
                    format!("not ready: {shown}'s term is at its deadline\n"),
                );
            }
            (
                StatusCode::OK,
                format!(
                    "ready: this replica holds {shown} at epoch {}; stop within {} ms without news\n",
                    term.epoch,
                    left.as_millis()
                ),
            )
        }
        (Role::Uncertain, _) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: renewals of {shown} are failing; its term is ending\n"),
        ),
        _ => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: this replica does not hold {shown}\n"),
        ),
    }
}
