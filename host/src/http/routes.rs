//! The routes of the endpoint, and the handlers small enough to live beside them: `/healthz`,
//! `/readyz`, `/status` (the shared snapshot) and `/metrics`; a `/v1` request's trace span.

use axum::Router;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::{any, get};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use super::state::AppState;
use super::{admin, api, guard, page, readiness, watch};
use crate::metrics::LeaseMetrics;

/// The router, for tests that serve it themselves.
pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/readyz/leases/{*name}", get(readiness::lease_ready))
        .route(api::PREFIX, get(api::list))
        .route(&format!("{}/{{*name}}", api::PREFIX), get(lease_path))
        .route("/status", get(status))
        .route("/metrics", get(metrics))
        .route(admin::PREFIX, any(admin::serve))
        .route(&format!("{}/{{*rest}}", admin::PREFIX), any(admin::serve))
        .merge(page::routes())
        .layer(axum::middleware::from_fn(traced))
        .with_state(state)
}

/// A `/v1` request's span, under the caller's W3C `traceparent`, while trace export is on; any
/// other request, or any request with export off, passes untouched.
async fn traced(
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    if !crate::telemetry::enabled() || !request.uri().path().starts_with("/v1/") {
        return next.run(request).await;
    }
    let span = tracing::info_span!(
        "http request",
        method = %request.method(),
        path = %request.uri().path()
    );
    crate::telemetry::request_parent(&span, request.headers());
    tracing::Instrument::instrument(next.run(request), span).await
}

/// `GET /v1/leases/{path}`: one lease, or its watch stream. A lease name may hold `/` (a group's
/// shard, `jobs/3`), so the path is matched whole: a lease's own name first, then with
/// [`api::WATCH`] taken off.
async fn lease_path(
    State(state): State<AppState>,
    Path(path): Path<String>,
    headers: HeaderMap,
) -> axum::response::Response {
    if state.leases.leadership(&path).is_none()
        && let Some(name) = path.strip_suffix(api::WATCH)
        && state.leases.leadership(name).is_some()
    {
        return watch::serve(state, name.to_string(), headers).await;
    }
    api::one(state, path, headers).await
}

/// Serves the router on `listener`, behind [`guard`], until `shutdown` is cancelled.
pub async fn serve(
    listener: TcpListener,
    state: AppState,
    allowed_hosts: guard::AllowedHosts,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    let options = guard::Options {
        allowed: allowed_hosts,
        metrics: Some(state.metrics.http.clone()),
        heartbeat: watch::heartbeat_every(state.leases.timing()),
    };
    guard::serve(listener, router(state), options, shutdown).await
}

/// The shared snapshot, with its age and the groups and plugins as they are now.
async fn status(State(state): State<AppState>) -> axum::response::Response {
    match state.snapshots.get().await {
        Some(snapshot) => (
            [(header::CONTENT_TYPE, "application/json")],
            state.snapshots.body(&snapshot),
        )
            .into_response(),
        None => (
            StatusCode::SERVICE_UNAVAILABLE,
            "the lease store has not been read yet\n",
        )
            .into_response(),
    }
}

/// Ready when the store answered the shared snapshot's read within a second: a fresh one, or else
/// one begun after the probe asked. The plugin directory is loaded before the server starts, so a
/// replica that serves at all has its plugins.
async fn readyz(State(state): State<AppState>) -> (StatusCode, String) {
    // The display's reads may land while every campaign fails (a role that may connect but not
    // write the lease table): ready means the lease loop's own calls land.
    if let Some(failing) = state.leases.health().failing() {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "not ready: this replica cannot campaign: {} failed {} time(s) in a row ({}): {}\n",
                failing.op,
                failing.failures,
                failing.cause.as_str(),
                failing.error
            ),
        );
    }
    match state.snapshots.current().await {
        Some(snapshot) => match snapshot.store_error() {
            None => (StatusCode::OK, "ready\n".into()),
            Some(e) => (
                StatusCode::SERVICE_UNAVAILABLE,
                format!("not ready: the lease store does not answer: {e}\n"),
            ),
        },
        None => (
            StatusCode::SERVICE_UNAVAILABLE,
            "not ready: the lease store has not answered yet\n".into(),
        ),
    }
}

async fn metrics(State(state): State<AppState>) -> impl IntoResponse {
    // Time left is a moving value: computed at scrape time from each term's local deadline.
    let now = tokio::time::Instant::now();
    for name in state.leases.lease_names() {
        let left = state
            .leases
            .leadership(name)
            .and_then(|l| l.term)
            .filter(|t| !t.is_cancelled())
            .map_or(0.0, |t| {
                t.safe_until().saturating_duration_since(now).as_secs_f64()
            });
        state
            .metrics
            .lease
            .expires_in_seconds
            .get_or_create(&LeaseMetrics::lease(name))
            .set(left);
    }
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        state.metrics.exposition.encode(),
    )
}

#[cfg(test)]
mod tests;
