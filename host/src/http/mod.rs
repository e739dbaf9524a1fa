//! The HTTP endpoint: `/healthz` (the process runs), `/readyz` (the store answers and the plugins
//! are loaded), `/status` (this replica's view of each lease and plugin), `/metrics`
//! (Prometheus) and `/` (a live page drawn from `/status`, in [`page`]). The JSON field names of
//! `/status` and the metric names are a contract for other tooling: keep them. What `/status`
//! and `/readyz` know of the store is one shared [`snapshot`], refreshed at most every 250 ms on
//! connections of its own, and the endpoint runs on a [`thread`] of its own, so that no number of
//! watchers can hold up the lease loop; [`guard`] bounds the server and checks who it answers.
//! The [`admin`] API (`POST /v1/admin/leases/{name}/handoff`) answers only when an admin token
//! is configured, and only to requests that carry it. `/readyz/leases/{name}` ([`readiness`]) is
//! ready only while this replica holds that lease. The lease [`api`] (`/v1/leases`, and
//! `/v1/leases/{name}/watch`, a [`watch`] stream of its terms) is for apps beside the host.

pub mod admin;
pub mod api;
pub mod guard;
pub mod page;
pub mod readiness;
pub mod snapshot;
pub mod thread;
pub mod watch;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::{any, get};
use serde::Serialize;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::lease::groups::GroupStatus;
use crate::lease::health::CallsFailing;
use crate::lease::history::{self, Handoff, RecordedTerm};
use crate::lease::{Epoch, Leases, Role};
use crate::metrics::{LeaseMetrics, Metrics};
use crate::supervisor::process_status::ProcessStatus;
use crate::supervisor::status::{PluginStatus, StatusBoard};
use snapshot::Snapshots;

/// What the handlers read.
#[derive(Debug, Clone)]
pub struct AppState {
    /// The leases of this replica.
    pub leases: Arc<Leases>,
    /// The plugin statuses, when plugins are enabled.
    pub plugins: Option<StatusBoard>,
    /// The metrics `/metrics` shows.
    pub metrics: Arc<Metrics>,
    /// What `/status` and `/readyz` show of the store, shared by every request.
    pub snapshots: Snapshots,
    /// The admin API, when an admin token is configured; `None` answers 404 to its whole tree.
    pub admin: Option<Arc<admin::Admin>>,
}

impl AppState {
    /// The state of a replica's endpoint. Call it on the runtime the lease loop runs on: the
    /// snapshots' refreshes run there.
    pub fn new(
        leases: Arc<Leases>,
        plugins: Option<StatusBoard>,
        metrics: Arc<Metrics>,
    ) -> AppState {
        AppState {
            snapshots: Snapshots::new(leases.clone(), plugins.clone()),
            leases,
            plugins,
            metrics,
            admin: None,
        }
    }

    /// Turns the admin API on, answering requests that carry `token`. Call it on the runtime
    /// the lease loop runs on, as [`AppState::new`]: the API's store calls run there.
    pub fn with_admin(mut self, token: admin::AdminToken) -> AppState {
        self.admin = Some(Arc::new(admin::Admin::new(token, &self.leases)));
        self
    }
}

/// `/status`: who this replica is and what it knows of each lease.
#[derive(Debug, Serialize, serde::Deserialize)]
pub struct Status {
    /// How long ago, in ms, the store was read for this answer (and the roles with it): at most
    /// [`snapshot::MAX_AGE`] while the store answers, more while a read is slow. Groups and
    /// plugins are as they are at the answer. First, because a snapshot is served as bytes
    /// serialised once, with this in front ([`snapshot`]).
    #[serde(default)]
    pub snapshot_age_ms: u64,
    /// This process's holder id.
    pub replica: String,
    /// The store backend (`postgres`, `sqlite`).
    pub store: String,
    /// Set when the store could not be read; holder and expiry then come from local knowledge.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub store_error: Option<String>,
    /// One entry per lease this replica campaigns for, the shards of its groups among them.
    pub leases: Vec<LeaseStatus>,
    /// One entry per lease group this replica takes part in.
    #[serde(default)]
    pub groups: Vec<GroupStatus>,
    /// One entry per plugin file.
    pub plugins: Vec<PluginStatus>,
    /// One entry per OS process bound to a lease, and lease it runs under.
    #[serde(default)]
    pub processes: Vec<ProcessStatus>,
    /// Set while the lease loop's own store calls fail (the last campaign, renewal, release or
    /// group heartbeat did): this replica cannot campaign, and `/readyz` is 503. As it is at the
    /// answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_calls_failing: Option<CallsFailing>,
}

/// One lease in `/status`.
#[derive(Debug, Serialize, serde::Deserialize)]
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
    /// This replica's ttl in milliseconds: the most `expires_in_ms` can be after a renewal.
    #[serde(default)]
    pub ttl_ms: u64,
    /// The lease's recent terms as the cluster recorded them, newest first, at most
    /// [`TERMS_SHOWN`] (two past [`MANY_LEASES`] leases); empty when the store could not be read.
    #[serde(default)]
    pub terms: Vec<RecordedTerm>,
    /// The newest change of holder among `terms`, and why the term before it ended.
    #[serde(default)]
    pub last_handoff: Option<Handoff>,
}

/// How many terms of each lease `/status` shows: a page's timeline, and the last few handoffs
/// for someone asking why a lease keeps moving. The stores keep more (`TERMS_KEPT`).
pub const TERMS_SHOWN: u32 = 10;

/// Above this many leases `/status` shows two terms of each, enough for the last handoff: a page
/// polls twice a second, and ten terms of a thousand leases would make every poll read and send
/// ten thousand rows where the lease rows themselves are a thousand.
pub const MANY_LEASES: usize = 100;

/// How many terms of each lease `/status` shows for a replica of `leases` leases.
fn terms_shown(leases: usize) -> u32 {
    if leases <= MANY_LEASES {
        TERMS_SHOWN
    } else {
        2
    }
}

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
        .with_state(state)
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
        metrics: Some(state.metrics.clone()),
        heartbeat: watch::heartbeat_every(state.leases.timing()),
    };
    guard::serve(listener, router(state), options, shutdown).await
}

/// Builds the status: roles from the coordinator, holders and expiry from the database.
pub async fn status_of(replica: &Leases) -> Status {
    let names: Vec<String> = replica.lease_names().map(str::to_string).collect();
    // A status page must answer even when the store hangs: bound the read well below a scrape timeout.
    let timeout = replica.timing().store_timeout.min(Duration::from_secs(1));
    let store = replica.store();
    let read = async {
        tokio::try_join!(
            store.get(&names),
            store.terms(&names, terms_shown(names.len()))
        )
    };
    let (rows, terms) = match tokio::time::timeout(timeout, read).await {
        Ok(Ok((rows, terms))) => (Ok(rows), terms),
        Ok(Err(e)) => (Err(e.to_string()), Vec::new()),
        Err(_) => (
            Err(format!(
                "reading the lease table timed out after {timeout:?}"
            )),
            Vec::new(),
        ),
    };
    status_from(replica, &names, rows, terms)
}

/// The status from this replica's own knowledge alone, `why` the store was not read: roles,
/// and the holder and epoch of the leases this replica holds.
pub fn local_status(replica: &Leases, why: String) -> Status {
    let names: Vec<String> = replica.lease_names().map(str::to_string).collect();
    status_from(replica, &names, Err(why), Vec::new())
}

/// The status of `names` from what the store read (`rows`, or why it could not) and `terms`;
/// roles from the coordinator, read now.
fn status_from(
    replica: &Leases,
    names: &[String],
    rows: Result<Vec<crate::lease::LeaseRecord>, String>,
    terms: Vec<history::TermRecord>,
) -> Status {
    let mut terms_of: std::collections::HashMap<String, Vec<RecordedTerm>> = Default::default();
    for record in terms {
        terms_of.entry(record.lease).or_default().push(record.term);
    }
    let me = replica.holder().to_string();
    let ttl_ms = u64::try_from(replica.timing().ttl.as_millis()).unwrap_or(u64::MAX);
    let leases = names
        .iter()
        .map(|name| {
            let leadership = replica.leadership(name);
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
            let terms = history::complete(terms_of.remove(name).unwrap_or_default());
            LeaseStatus {
                name: name.clone(),
                role,
                holder,
                epoch,
                expires_in_ms,
                ttl_ms,
                last_handoff: history::last_handoff(&terms),
                terms,
            }
        })
        .collect();
    Status {
        snapshot_age_ms: 0,
        replica: me,
        store: replica.store().backend().to_string(),
        store_error: rows.err(),
        leases,
        groups: replica.groups(),
        plugins: Vec::new(),
        processes: Vec::new(),
        lease_calls_failing: None,
    }
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
        state.metrics.encode(),
    )
}
