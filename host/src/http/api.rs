//! The lease API, version 1: `GET /v1/leases`, `GET /v1/leases/NAME` and the watch stream
//! `GET /v1/leases/NAME/watch` ([`super::watch`]), for apps beside the host that ask "am I the
//! leader, and until when?". Read-only. A contract, written down in `docs/api/openapi.yaml` and
//! checked against the server by a test: add fields, never rename or remove them.
//!
//! What this replica holds (role, epoch, `stop_within_ms`) is read from its own leadership at the
//! answer; who holds a lease elsewhere comes from the shared store snapshot ([`super::snapshot`]),
//! so a flood of API calls costs the store no more than a flood of `/status`.

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use super::snapshot::Snapshot;
use super::{AppState, LeaseStatus};
use crate::lease::{Epoch, Leadership, Role, Term};
use crate::report::escape_controls;

/// Where the API lives.
pub const PREFIX: &str = "/v1/leases";

/// The suffix of a lease's path that asks for its watch stream.
pub(crate) const WATCH: &str = "/watch";

/// `GET /v1/leases`: every lease this replica campaigns for.
#[derive(Debug, Serialize, Deserialize)]
pub struct LeaseList {
    /// This process's holder id: what `holder` says when this replica holds a lease.
    pub replica: String,
    /// The leases, in name order.
    pub leases: Vec<LeaseView>,
}

/// One lease as the API shows it.
#[derive(Debug, Serialize, Deserialize)]
pub struct LeaseView {
    /// The lease name.
    pub name: String,
    /// This replica's role: `leader` (a term runs here), `uncertain` (held, but renewals fail and
    /// the term ends by `stop_within_ms`), `standby`.
    pub role: Role,
    /// The current holder: this replica's id while it holds the lease, else the store's last
    /// reading (`holder_read_ms_ago`); `null` when nobody holds it, or not known yet.
    pub holder: Option<String>,
    /// The holder's fencing epoch, as `holder`.
    pub epoch: Option<Epoch>,
    /// How long, in ms, this replica's leader-only work may go on without further news: the
    /// time left until this replica's deadline for the lease (`safe_until`). 0 unless a term of
    /// it runs here. An app that hears nothing more must have stopped by then.
    pub stop_within_ms: u64,
    /// The lease's ttl on this replica, in ms: about the most `stop_within_ms` can be.
    pub ttl_ms: u64,
    /// How long ago, in ms, the store was read for `holder` and `epoch` when this replica does
    /// not hold the lease (0 when it does: it knows).
    pub holder_read_ms_ago: u64,
    /// Why the store's last reading failed, if it did: `holder` is then this replica's own
    /// knowledge only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub store_error: Option<String>,
    /// The standbys waiting in the lease's line at the store's last reading, the next holder
    /// first: each one's holder id, priority and how long it has waited.
    #[serde(default)]
    pub line: Vec<super::status::Waiting>,
}

/// An API error: a message naming what was wrong, and for an unknown lease the names there are.
#[derive(Debug, Serialize, Deserialize)]
pub struct ApiError {
    /// What went wrong, in one line.
    pub error: String,
    /// For an unknown lease: the leases this replica campaigns for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leases: Option<Vec<String>>,
}

/// An error answer with `status`.
pub fn error(status: StatusCode, error: String, leases: Option<Vec<String>>) -> Response {
    (status, Json(ApiError { error, leases })).into_response()
}

/// Whether the request's `Accept` admits `offered` (`type/subtype`): no header, `*/*`, `type/*`
/// or the type itself, with a quality above 0.
pub fn accepts(headers: &HeaderMap, offered: &str) -> bool {
    let Some((kind, _)) = offered.split_once('/') else {
        return false;
    };
    let values: Vec<&str> = headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .collect();
    if values.is_empty() {
        return true;
    }
    values.iter().flat_map(|v| v.split(',')).any(|range| {
        let mut parts = range.split(';').map(str::trim);
        let media = parts.next().unwrap_or_default().to_ascii_lowercase();
        let refused = parts.any(|p| {
            p.strip_prefix("q=")
                .and_then(|q| q.parse::<f32>().ok())
                .is_some_and(|q| q <= 0.0)
        });
        !refused && (media == "*/*" || media == format!("{kind}/*") || media == offered)
    })
}

/// 406 naming what the endpoint answers and what was asked.
pub(crate) fn not_acceptable(headers: &HeaderMap, offered: &str) -> Response {
    let asked: String = headers
        .get(header::ACCEPT)
        .map(|v| {
            String::from_utf8_lossy(v.as_bytes())
                .chars()
                .take(200)
                .collect()
        })
        .unwrap_or_default();
    error(
        StatusCode::NOT_ACCEPTABLE,
        format!(
            "this endpoint answers {offered} only; Accept was {:?}",
            escape_controls(&asked)
        ),
        None,
    )
}

/// 404 for `name`, naming the leases there are.
pub(crate) fn unknown_lease(state: &AppState, name: &str) -> Response {
    let known: Vec<String> = state.leases.lease_names().map(str::to_string).collect();
    error(
        StatusCode::NOT_FOUND,
        format!(
            "no lease named {:?} here; this replica campaigns for: {}",
            escape_controls(name),
            escape_controls(&known.join(", "))
        ),
        Some(known),
    )
}

/// `GET /v1/leases`.
pub async fn list(State(state): State<AppState>, headers: HeaderMap) -> Response {
    if !accepts(&headers, "application/json") {
        return not_acceptable(&headers, "application/json");
    }
    let snapshot = state.snapshots.get().await;
    // Looked up by name once: a list of 10,000 shards must not search the snapshot per lease.
    let read: std::collections::HashMap<&str, &LeaseStatus> = snapshot
        .as_deref()
        .map(|s| {
            s.status()
                .leases
                .iter()
                .map(|l| (l.name.as_str(), l))
                .collect()
        })
        .unwrap_or_default();
    let leases = state
        .leases
        .lease_names()
        .map(|name| view(&state, name, snapshot.as_deref(), read.get(name).copied()))
        .collect();
    Json(LeaseList {
        replica: state.leases.holder().to_string(),
        leases,
    })
    .into_response()
}

/// `GET /v1/leases/NAME` (the parent routes `NAME/watch` to [`super::watch`] first).
pub async fn one(state: AppState, path: String, headers: HeaderMap) -> Response {
    if state.leases.leadership(&path).is_none() {
        // `x/watch` of an unknown `x` is a watch of `x`: the answer names `x`.
        let name = path.strip_suffix(WATCH).unwrap_or(&path);
        return unknown_lease(&state, name);
    }
    if !accepts(&headers, "application/json") {
        return not_acceptable(&headers, "application/json");
    }
    let snapshot = state.snapshots.get().await;
    let read = snapshot
        .as_deref()
        .and_then(|s| s.status().leases.iter().find(|l| l.name == path));
    Json(view(&state, &path, snapshot.as_deref(), read)).into_response()
}

/// The role the API shows for `role` with `left` ms on the term: a leader whose term is at its
/// deadline (a host just resumed from a freeze, before its lease loop has ended the term) is
/// `uncertain`, since no leader-only work may run on it.
pub(crate) fn role_at(role: Role, left: u64) -> Role {
    match (role, left) {
        (Role::Leader, 0) => Role::Uncertain,
        (role, _) => role,
    }
}

/// The time left on `term` at `now`, in ms: 0 without a term, or once it has ended.
pub(crate) fn time_left(term: Option<&Term>, now: Instant) -> u64 {
    term.filter(|t| !t.is_cancelled()).map_or(0, |t| {
        u64::try_from(t.safe_until().saturating_duration_since(now).as_millis()).unwrap_or(u64::MAX)
    })
}

/// `name` as this replica knows it now, with the holder elsewhere from `read`, its row in
/// `snapshot`.
fn view(
    state: &AppState,
    name: &str,
    snapshot: Option<&Snapshot>,
    read: Option<&LeaseStatus>,
) -> LeaseView {
    let leadership = state
        .leases
        .leadership(name)
        .unwrap_or_else(Leadership::standby);
    let me = state.leases.holder().to_string();
    let ttl_ms = u64::try_from(state.leases.timing().ttl.as_millis()).unwrap_or(u64::MAX);
    let stop_within_ms = time_left(leadership.term.as_ref(), Instant::now());
    let read = read.zip(snapshot);
    let (holder, epoch, holder_read_ms_ago) = match (leadership.role, leadership.epoch) {
        (Role::Leader | Role::Uncertain, Some(epoch)) => (Some(me.clone()), Some(epoch), 0),
        _ => match read {
            // A reading that still shows this replica predates its release or loss.
            Some((lease, s)) if lease.holder.as_deref() != Some(me.as_str()) => (
                lease.holder.clone(),
                lease.epoch,
                u64::try_from(s.age().as_millis()).unwrap_or(u64::MAX),
            ),
            _ => (None, None, 0),
        },
    };
    LeaseView {
        name: name.to_string(),
        role: role_at(leadership.role, stop_within_ms),
        holder,
        epoch,
        stop_within_ms,
        ttl_ms,
        holder_read_ms_ago,
        store_error: snapshot.and_then(|s| s.store_error().map(str::to_string)),
        line: read
            .map(|(lease, _)| lease.line.clone())
            .unwrap_or_default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_accept(values: &[&str]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for v in values {
            h.append(header::ACCEPT, v.parse().unwrap());
        }
        h
    }

    #[test]
    fn a_leader_at_its_deadline_shows_uncertain_and_no_other_role_changes() {
        assert_eq!(role_at(Role::Leader, 0), Role::Uncertain);
        assert_eq!(role_at(Role::Leader, 1), Role::Leader);
        assert_eq!(role_at(Role::Uncertain, 0), Role::Uncertain);
        assert_eq!(role_at(Role::Standby, 0), Role::Standby);
    }

    #[test]
    fn accept_admits_the_type_its_family_and_anything_and_refuses_the_rest() {
        let json = "application/json";
        for ok in [
            &[][..],
            &["application/json"],
            &["*/*"],
            &["application/*"],
            &["text/html, application/json;q=0.5"],
            &["text/html", "*/*;q=0.1"],
            &["Application/JSON"],
        ] {
            assert!(accepts(&with_accept(ok), json), "{ok:?}");
        }
        for refused in [
            &["text/html"][..],
            &["text/event-stream"],
            &["application/json;q=0"],
            &["application/xml, text/*"],
        ] {
            assert!(!accepts(&with_accept(refused), json), "{refused:?}");
        }
        assert!(accepts(&with_accept(&["text/*"]), "text/event-stream"));
    }
}
