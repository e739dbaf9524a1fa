//! The admin API: `POST /v1/admin/leases/{name}/handoff`, the graceful step-down of
//! `leasehold leases handoff` ([`crate::lease::handoff`]) asked of a running host over HTTP.
//!
//! The HTTP port asks no credentials for what it shows, and is reached by more than its
//! operator: a container's `0.0.0.0`, any web page the operator opens (a form posted to
//! `127.0.0.1:9464`). So the whole `/v1/admin/` tree answers 404 unless an admin token is
//! configured ([`AdminToken`], read from `admin_token_file`), and then only to a request that
//! carries it as `Authorization: Bearer TOKEN`, compared in constant time. A browser cannot
//! send that header across origins without a CORS preflight, which this server never answers.
//!
//! The handoff's wait runs on the HTTP thread's runtime; each store call it makes runs on the
//! lease loop's runtime, whose connections the store's pools hold, through the store's
//! operators' connections (`get`, `request_handoff`, `terms`, `list`), never the ones the lease
//! loop renews on. At most [`MAX_IN_FLIGHT`] admin requests run at once.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tokio::sync::Semaphore;
use tracing::warn;

use super::bridge::{LeaseLoop, OnLoop};
use crate::lease::handoff::{self, HandoffError, Outcome};
use crate::lease::{LeaseName, StoreError};
use crate::report::escape_controls;

/// The admin API's path; everything under it is the admin tree.
pub const PREFIX: &str = "/v1/admin";

/// Admin requests answered at once; more get 503. A handoff is an operator's act, one at a time
/// in practice: four leave room for a script handing several leases over, while a flood with a
/// stolen token can hold at most four of the store's operator connections' turns.
pub(crate) const MAX_IN_FLIGHT: usize = 4;

/// The longest `timeout_ms` a handoff may wait for. A handoff takes milliseconds; its default
/// wait is twice the ttl, at least 10 s. A minute covers that at a ttl of up to 30 s and keeps
/// a request, and its slot, from being held for longer than a client would sit on it.
pub(crate) const MAX_TIMEOUT: Duration = Duration::from_secs(60);

/// The longest the store calls that ask for a handoff may take together (a read, the request,
/// and a listing for the names close to a missing one): three store timeouts, 9 s at the
/// default ttl, and no more than this whatever the timing.
const ASK_BOUND: Duration = Duration::from_secs(10);

/// The longest the wait may overrun its timeout by: one read of the row under way then.
const WAIT_OVERRUN: Duration = Duration::from_secs(5);

/// How long an admin request may take in all, the guard's deadline for the tree: its body, the
/// asking, and the longest wait with its overrun.
pub(crate) const DEADLINE: Duration = BODY_TIMEOUT
    .saturating_add(ASK_BOUND)
    .saturating_add(MAX_TIMEOUT)
    .saturating_add(WAIT_OVERRUN);

/// The most bytes an admin request's body may have: `{"to": "REPLICA", "timeout_ms": N}` with a
/// replica id of 200 characters is under 300.
pub(crate) const MAX_BODY_BYTES: usize = 1024;

/// How long a client may take to send the body: 1 KiB at most, which any working link sends in
/// far less; as long as the guard gives a request's head.
const BODY_TIMEOUT: Duration = Duration::from_secs(5);

/// The fewest characters an admin token may have: 32 characters of `base64` or hex carry at
/// least 128 bits, beyond guessing over a network.
pub(crate) const MIN_TOKEN_CHARS: usize = 32;

/// The most bytes an admin token file may hold: a token is a line, and a file pointed at a
/// device or a log must not be read whole.
const MAX_TOKEN_FILE_BYTES: u64 = 4096;

/// The setting, flag and variable that turn the admin API on, for messages.
pub(crate) const TOKEN_SETTING: &str =
    "admin_token_file (--admin-token-file, LEASEHOLD_ADMIN_TOKEN_FILE)";

/// How to make a token file that is accepted, for messages.
const TOKEN_HOWTO: &str =
    "(umask 077; head -c 32 /dev/urandom | base64 > FILE), then point admin_token_file at FILE";

/// How often the refusals of one address are logged after its first: each is counted, and the
/// count logged once per interval, so that a client asking without the token in a loop (5,700
/// requests in 5 s on one kept-alive connection) writes a line every 10 s, not one per request.
pub(crate) const REFUSALS_LOGGED_EVERY: Duration = Duration::from_secs(10);

/// Addresses whose refusals are counted one by one; those of any further address are counted
/// together, so that clients of many addresses cannot grow the counts without bound.
const COUNTED_ADDRESSES: usize = 1024;

/// Refused admin requests, by the caller's address (`None`: unknown, or beyond
/// [`COUNTED_ADDRESSES`]): when the count began, and how many came since.
#[derive(Debug, Default)]
struct RefusalCounts {
    /// Each address refused within its interval.
    by_address: HashMap<Option<IpAddr>, (Instant, u64)>,
    /// Whether a task is logging the counts (it ends once none is left).
    logging: bool,
}

/// The refused admin requests, for a log that says an address's first refusal in full and then,
/// every [`REFUSALS_LOGGED_EVERY`], how many more came from it.
#[derive(Debug, Default)]
struct Refusals(std::sync::Mutex<RefusalCounts>);

impl Refusals {
    fn lock(&self) -> std::sync::MutexGuard<'_, RefusalCounts> {
        // Counts only: a poisoned lock is taken over.
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Counts a refusal of a request from `from` at `now`: true when it is the first from there
    /// since the address was last quiet for a whole interval, to log in full.
    fn count(&self, from: Option<IpAddr>, now: Instant) -> bool {
        let mut counts = self.lock();
        let key = match from {
            Some(ip)
                if counts.by_address.len() >= COUNTED_ADDRESSES
                    && !counts.by_address.contains_key(&Some(ip)) =>
            {
                None
            }
            other => other,
        };
        match counts.by_address.entry(key) {
            std::collections::hash_map::Entry::Occupied(mut counted) => {
                counted.get_mut().1 += 1;
                false
            }
            std::collections::hash_map::Entry::Vacant(first) => {
                first.insert((now, 0));
                true
            }
        }
    }

    /// True when no task logs the counts yet: the caller starts one.
    fn start_logging(&self) -> bool {
        let mut counts = self.lock();
        !std::mem::replace(&mut counts.logging, true)
    }

    /// The counts whose interval has ended at `now` (address, refusals, over how long), to log;
    /// each begins again. An address refused nothing more in its interval is forgotten, so that
    /// its next refusal is logged in full. `None` when nothing is left to count: the logging task
    /// ends.
    fn due(&self, now: Instant) -> Option<Vec<(Option<IpAddr>, u64, Duration)>> {
        let mut counts = self.lock();
        let mut due = Vec::new();
        counts.by_address.retain(|from, (since, refused)| {
            let over = now.saturating_duration_since(*since);
            if over < REFUSALS_LOGGED_EVERY {
                return true;
            }
            if *refused > 0 {
                due.push((*from, *refused, over));
            }
            let kept = *refused > 0;
            (*since, *refused) = (now, 0);
            kept
        });
        if counts.by_address.is_empty() && due.is_empty() {
            counts.logging = false;
            return None;
        }
        Some(due)
    }
}

/// Logs the refusals [`Refusals::due`] gives, once a second, until none is left to count.
async fn log_refusals(admin: Arc<Admin>) {
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let Some(due) = admin.refusals.due(Instant::now()) else {
            return;
        };
        for (from, refused, over) in due {
            let from = from.map_or_else(|| "other addresses".to_string(), |ip| ip.to_string());
            warn!(
                from = %from,
                refused,
                "admin requests refused: {refused} more from {from} in the last {}, without the admin token",
                crate::report::duration(Duration::from_secs(over.as_secs().max(1)))
            );
        }
    }
}

/// An admin token file that cannot be used: the file and what to do about it. The token itself
/// is never part of it.
#[derive(Debug, thiserror::Error)]
#[error("admin_token_file {}: {reason}", file.display())]
pub struct AdminTokenError {
    /// The file as configured.
    pub file: PathBuf,
    /// What is wrong with it, and the fix.
    pub reason: String,
}

/// The admin token, read from its file at start-up. Only its SHA-256 digest is kept, which is
/// what a presented token is compared with; `Debug` shows the file alone.
#[derive(Clone, PartialEq, Eq)]
pub struct AdminToken {
    /// The file it was read from.
    file: PathBuf,
    /// The SHA-256 digest of the token.
    digest: [u8; 32],
}

impl std::fmt::Debug for AdminToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdminToken")
            .field("file", &self.file)
            .field("token", &"<redacted>")
            .finish()
    }
}

impl AdminToken {
    /// Reads the token from `file`: a regular file of at most a few KiB that no one but its owner
    /// may read or write, holding one token of at least [`MIN_TOKEN_CHARS`] printable ASCII
    /// characters (surrounding white space, a trailing newline, is not part of it).
    pub fn read(file: &Path) -> Result<AdminToken, AdminTokenError> {
        use std::os::unix::fs::PermissionsExt;
        let refuse = |reason: String| AdminTokenError {
            file: file.to_path_buf(),
            reason,
        };
        let meta = std::fs::metadata(file).map_err(|e| refuse(format!("cannot read it: {e}")))?;
        if !meta.is_file() {
            return Err(refuse(format!(
                "not a regular file; put the token in one: {TOKEN_HOWTO}"
            )));
        }
        check_mode(meta.permissions().mode())
            .map_err(|reason| refuse(reason.replace("FILE", &file.display().to_string())))?;
        if meta.len() > MAX_TOKEN_FILE_BYTES {
            return Err(refuse(format!(
                "{} bytes; a token file holds one token (at most {MAX_TOKEN_FILE_BYTES} bytes)",
                meta.len()
            )));
        }
        let text = std::fs::read(file).map_err(|e| refuse(format!("cannot read it: {e}")))?;
        let token = check_token(&text).map_err(refuse)?;
        Ok(AdminToken {
            file: file.to_path_buf(),
            digest: Sha256::digest(token).into(),
        })
    }

    /// The file the token was read from.
    pub fn file(&self) -> &Path {
        &self.file
    }

    /// Whether `presented` is the token. Both sides are hashed first and the digests compared
    /// byte for byte without an early exit, so the time taken says nothing of how much of a
    /// guess was right, nor of the token's length.
    pub fn admits(&self, presented: &[u8]) -> bool {
        let presented: [u8; 32] = Sha256::digest(presented).into();
        let diff = presented
            .iter()
            .zip(self.digest.iter())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b));
        std::hint::black_box(diff) == 0
    }
}

/// Refuses a file mode that lets anyone but the owner read or write the token; the reason's
/// `FILE` stands for the file.
fn check_mode(mode: u32) -> Result<(), String> {
    match mode & 0o077 {
        0 => Ok(()),
        _ => Err(format!(
            "others than its owner may read or write it (mode {:04o}); the admin token must be private to the host's user: chmod 600 FILE (in Kubernetes, mount the Secret with defaultMode 0400 and no fsGroup)",
            mode & 0o7777
        )),
    }
}

/// The token in a token file's bytes: trimmed, at least [`MIN_TOKEN_CHARS`] characters, all
/// printable ASCII (what a header can carry). The reason never shows the text.
fn check_token(text: &[u8]) -> Result<&[u8], String> {
    let token = text.trim_ascii();
    if !token.iter().all(u8::is_ascii_graphic) {
        return Err(format!(
            "the token has a character that is not printable ASCII (a space, a control character, a non-ASCII letter), which an Authorization header cannot carry: {TOKEN_HOWTO}"
        ));
    }
    if token.len() < MIN_TOKEN_CHARS {
        return Err(format!(
            "the token has {} characters, fewer than the {MIN_TOKEN_CHARS} that make it unguessable: {TOKEN_HOWTO}",
            token.len()
        ));
    }
    Ok(token)
}

/// Whether `path` is in the admin tree, which the guard gives a body and a longer deadline.
pub(crate) fn is_admin_path(path: &str) -> bool {
    path == PREFIX
        || path
            .strip_prefix(PREFIX)
            .is_some_and(|rest| rest.starts_with('/'))
}

/// The admin API of a replica whose token is configured.
#[derive(Debug)]
pub(crate) struct Admin {
    /// The token every request must carry.
    token: AdminToken,
    /// One permit per request answered at once.
    slots: Semaphore,
    /// The lease store, its calls run on the lease loop's runtime.
    store: OnLoop,
    /// The longest a store call of the lease protocol may take: bounds each of the API's.
    store_timeout: Duration,
    /// Requests refused for want of the token, counted for the log.
    refusals: Refusals,
}

impl Admin {
    /// The admin API of the replica `lease_loop` serves, with `token`: its store calls run on
    /// the lease loop.
    pub fn new(token: AdminToken, lease_loop: &LeaseLoop) -> Admin {
        Admin {
            token,
            slots: Semaphore::new(MAX_IN_FLIGHT),
            store: lease_loop.store(),
            store_timeout: lease_loop.leases().timing().store_timeout,
            refusals: Refusals::default(),
        }
    }
}

/// The body of a handoff request; every field optional, an empty body too.
#[derive(Debug, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct HandoffBody {
    /// The replica to hand the lease to: a replica id, or a holder id.
    to: Option<String>,
    /// How long to wait for the lease to change hands, in ms [default: twice the lease's ttl,
    /// at least 10 s, at most [`MAX_TIMEOUT`]].
    timeout_ms: Option<u64>,
}

/// An answer of the admin API: a JSON object with `no-store`, so that no cache keeps it.
fn answer(status: StatusCode, body: Value) -> Response {
    (
        status,
        [
            (header::CONTENT_TYPE, "application/json"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        format!("{body}\n"),
    )
        .into_response()
}

/// An error answer: `{"error": why}`.
fn error(status: StatusCode, why: impl std::fmt::Display) -> Response {
    answer(status, json!({ "error": why.to_string() }))
}

/// Every request to the admin tree.
pub(crate) async fn serve(State(admin): State<Option<Arc<Admin>>>, request: Request) -> Response {
    let Some(admin) = admin else {
        return error(
            StatusCode::NOT_FOUND,
            format!(
                "the admin API is off: it answers only when an admin token is configured, as it can move leases; to turn it on, set {TOKEN_SETTING} to a file holding a token of at least {MIN_TOKEN_CHARS} characters, readable by the host's user alone (README, Operations, \"The admin API\")"
            ),
        );
    };
    let (parts, body) = request.into_parts();
    let peer = parts
        .extensions
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0);
    let from = peer.map_or_else(|| "an unknown address".to_string(), |p| p.to_string());
    let path = parts.uri.path();
    if let Err(why) = authorize(&admin.token, &parts.headers) {
        // The first refusal of an address in full; then how many more, every 10 s.
        if admin
            .refusals
            .count(peer.map(|p| p.ip().to_canonical()), Instant::now())
        {
            warn!(from = %from, path = %escape_controls(path), "admin request refused: {why}; more refusals from this address are counted, and logged every {}", crate::report::duration(REFUSALS_LOGGED_EVERY));
        }
        if admin.refusals.start_logging() {
            tokio::spawn(log_refusals(admin.clone()));
        }
        let mut refused = error(StatusCode::UNAUTHORIZED, why);
        refused.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static("Bearer realm=\"leasehold-admin\""),
        );
        return refused;
    }
    let Some(raw_name) = handoff_lease(path) else {
        return error(
            StatusCode::NOT_FOUND,
            format!(
                "no admin route {:?}: the admin API has POST {PREFIX}/leases/NAME/handoff",
                escape_controls(path)
            ),
        );
    };
    if parts.method != Method::POST {
        let mut refused = error(
            StatusCode::METHOD_NOT_ALLOWED,
            "a handoff is asked for with POST",
        );
        refused
            .headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static("POST"));
        return refused;
    }
    let Ok(_slot) = admin.slots.try_acquire() else {
        return error(
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "{MAX_IN_FLIGHT} admin requests are being answered already; ask again when one is done"
            ),
        );
    };
    let body = match tokio::time::timeout(BODY_TIMEOUT, axum::body::to_bytes(body, MAX_BODY_BYTES))
        .await
    {
        Ok(Ok(body)) => body,
        Ok(Err(_)) => {
            return error(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("the body could not be read whole within {MAX_BODY_BYTES} bytes"),
            );
        }
        Err(_) => {
            return error(
                StatusCode::REQUEST_TIMEOUT,
                format!("the body did not arrive within {BODY_TIMEOUT:?}"),
            );
        }
    };
    let asked = match parse_request(raw_name, &body) {
        Ok(asked) => asked,
        Err(why) => return error(StatusCode::BAD_REQUEST, why),
    };
    handoff(&admin, asked, &from).await
}

/// Checks the request's `Authorization: Bearer TOKEN`; the reason for a refusal, which never
/// shows what was sent.
fn authorize(token: &AdminToken, headers: &HeaderMap) -> Result<(), &'static str> {
    let Some(value) = headers.get(header::AUTHORIZATION) else {
        return Err(
            "no Authorization header: send `Authorization: Bearer TOKEN`, the token in the host's admin_token_file",
        );
    };
    let value = value.as_bytes();
    let presented = value
        .get(..7)
        .filter(|scheme| scheme.eq_ignore_ascii_case(b"bearer "))
        .and_then(|_| value.get(7..))
        .map(<[u8]>::trim_ascii)
        .ok_or("the Authorization header is not `Bearer TOKEN`")?;
    match token.admits(presented) {
        true => Ok(()),
        false => Err("the bearer token is not the admin token"),
    }
}

/// The lease of a handoff route, `/v1/admin/leases/{name}/handoff`, as sent (percent-encoded);
/// `None` for another path. A lease name may have `/` in it (a group's shard, `orders/3`).
fn handoff_lease(path: &str) -> Option<&str> {
    path.strip_prefix(PREFIX)?
        .strip_prefix("/leases/")?
        .strip_suffix("/handoff")
        .filter(|name| !name.is_empty())
}

/// A handoff request, checked.
#[derive(Debug, PartialEq, Eq)]
struct Asking {
    /// The lease.
    lease: LeaseName,
    /// The replica to hand it to.
    to: Option<String>,
    /// How long to wait; `None` for the lease's default.
    timeout: Option<Duration>,
}

/// Checks a handoff request: the lease's name from the path (percent-decoded) and the body.
fn parse_request(raw_name: &str, body: &[u8]) -> Result<Asking, String> {
    let name = percent_decode(raw_name).ok_or_else(|| {
        format!(
            "the lease name {:?} is not percent-encoded UTF-8",
            escape_controls(raw_name)
        )
    })?;
    let lease = LeaseName::parse(&name).map_err(|e| e.to_string())?;
    let body: HandoffBody = match body.trim_ascii() {
        [] => HandoffBody::default(),
        json => serde_json::from_slice(json).map_err(|e| {
            format!(
                "the body is not {{\"to\": \"REPLICA\", \"timeout_ms\": N}} (both optional): {e}"
            )
        })?,
    };
    if let Some(to) = &body.to {
        handoff::check_to(to).map_err(|e| e.to_string())?;
    }
    let timeout = match body.timeout_ms {
        None => None,
        Some(ms) if (1..=MAX_TIMEOUT.as_millis()).contains(&u128::from(ms)) => {
            Some(Duration::from_millis(ms))
        }
        Some(ms) => {
            return Err(format!(
                "timeout_ms {ms}: give 1 to {} ms",
                MAX_TIMEOUT.as_millis()
            ));
        }
    };
    Ok(Asking {
        lease,
        to: body.to,
        timeout,
    })
}

/// `%XX` sequences decoded; `None` for a broken one or text that is not UTF-8.
fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        if b == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// Asks for the handoff and waits for it, logging who asked and what came of it.
async fn handoff(admin: &Admin, asked: Asking, from: &str) -> Response {
    let Asking { lease, to, timeout } = asked;
    let bound = admin.store_timeout.saturating_mul(3).min(ASK_BOUND);
    let requested =
        tokio::time::timeout(bound, handoff::request(&admin.store, &lease, to.as_deref()))
            .await
            .unwrap_or_else(|_| {
                Err(HandoffError::Store(StoreError::Timeout {
                    op: "request handoff",
                    after: bound,
                }))
            });
    let asked = match requested {
        Ok(asked) => asked,
        Err(e) => {
            let status = match &e {
                HandoffError::NoSuchLease { .. } => StatusCode::NOT_FOUND,
                HandoffError::NotHeld { .. } | HandoffError::AlreadyHeldByTo { .. } => {
                    StatusCode::CONFLICT
                }
                HandoffError::InvalidTo { .. } => StatusCode::BAD_REQUEST,
                HandoffError::Store(_) => StatusCode::SERVICE_UNAVAILABLE,
            };
            warn!(lease = %lease, from = %from, to = to.as_deref().map(escape_controls).as_deref(), status = status.as_u16(), "handoff over the admin API refused: {e}");
            return error(status, e);
        }
    };
    let holder = escape_controls(&asked.holder).into_owned();
    let timeout = timeout.unwrap_or_else(|| asked.default_timeout().min(MAX_TIMEOUT));
    warn!(lease = %lease, holder = %holder, epoch = asked.epoch.get(), to = to.as_deref(), from = %from, "handoff requested by an operator over the admin API");
    // The wait reads the row every few ms; each read is bounded on its own by the store, and
    // the whole by the timeout and one slow read past it.
    let waited = tokio::time::timeout(
        timeout + admin.store_timeout.min(WAIT_OVERRUN),
        handoff::wait(&admin.store, &asked, timeout),
    )
    .await
    .unwrap_or(Ok(Outcome::Kept));
    let outcome = match waited {
        Ok(outcome) => outcome,
        Err(e) => {
            warn!(lease = %lease, holder = %holder, epoch = asked.epoch.get(), from = %from, error = %e, "handoff over the admin API: the store could not be read while waiting");
            return error(
                StatusCode::SERVICE_UNAVAILABLE,
                format!(
                    "the handoff was asked for, but the store could not be read while waiting for it: {e}"
                ),
            );
        }
    };
    let waited_for = humantime::format_duration(timeout);
    let (status, body) = match &outcome {
        Outcome::Moved {
            holder: new,
            epoch,
            ended,
        } => {
            let mut body = json!({
                "lease": lease.as_str(),
                "from": asked.holder,
                "from_epoch": asked.epoch,
                "to": new,
                "to_epoch": epoch,
                "ended": ended.map(|e| e.as_str()),
            });
            match (outcome.missed(&asked), &to) {
                (true, Some(to)) => {
                    body["error"] = json!(format!(
                        "{lease} went to {}, not to {}: the reservation lapsed before that replica campaigned (is it running, and does it campaign for {lease}?)",
                        escape_controls(new),
                        escape_controls(to)
                    ));
                    (StatusCode::CONFLICT, body)
                }
                _ => (StatusCode::OK, body),
            }
        }
        Outcome::Released { ended } => (
            StatusCode::GATEWAY_TIMEOUT,
            json!({
                "error": format!("{holder} gave {lease} up at epoch {}, but no replica took it within {waited_for}; a replica that campaigns for it will", asked.epoch),
                "lease": lease.as_str(),
                "from": asked.holder,
                "from_epoch": asked.epoch,
                "ended": ended.map(|e| e.as_str()),
            }),
        ),
        Outcome::Kept => (
            StatusCode::GATEWAY_TIMEOUT,
            json!({
                "error": format!("{holder} did not hand {lease} over within {waited_for}; is it running? For a holder that is gone, `leasehold leases release {lease} --force`"),
                "lease": lease.as_str(),
                "from": asked.holder,
                "from_epoch": asked.epoch,
            }),
        ),
    };
    warn!(lease = %lease, from = %from, holder = %holder, epoch = asked.epoch.get(), status = status.as_u16(), outcome = %body["to"].as_str().map_or_else(|| "not handed over".to_string(), |to| format!("to {} at epoch {}", escape_controls(to), body["to_epoch"])), "handoff over the admin API answered");
    answer(status, body)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token_file(dir: &Path, text: &str, mode: u32) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let file = dir.join("token");
        std::fs::write(&file, text).unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(mode)).unwrap();
        file
    }

    const TOKEN: &str = "0123456789abcdefghijklmnopqrstuvwxyzABCD";

    #[test]
    fn refusals_are_logged_once_per_address_then_counted_every_interval() {
        let refusals = Refusals::default();
        let (a, b) = (
            Some(IpAddr::from([127, 0, 0, 1])),
            Some(IpAddr::from([127, 0, 0, 2])),
        );
        let t0 = Instant::now();
        assert!(refusals.count(a, t0), "the first in full");
        assert!(refusals.start_logging());
        assert!(!refusals.start_logging(), "one task logs them");
        for _ in 0..5_700 {
            assert!(!refusals.count(a, t0));
        }
        assert!(refusals.count(b, t0), "another address's first in full");
        assert_eq!(refusals.due(t0 + Duration::from_secs(1)), Some(vec![]));
        let later = t0 + REFUSALS_LOGGED_EVERY;
        assert_eq!(
            refusals.due(later),
            Some(vec![(a, 5_700, REFUSALS_LOGGED_EVERY)])
        );
        // Quiet for an interval: forgotten, and its next refusal is logged in full again.
        assert_eq!(refusals.due(later + REFUSALS_LOGGED_EVERY), None);
        assert!(
            refusals.start_logging(),
            "the task ended: the next starts one"
        );
        assert!(refusals.count(a, later + REFUSALS_LOGGED_EVERY * 2));
    }

    #[test]
    fn refusals_from_more_addresses_than_are_counted_apart_are_counted_together() {
        let refusals = Refusals::default();
        let now = Instant::now();
        for i in 0..COUNTED_ADDRESSES as u32 {
            assert!(refusals.count(Some(IpAddr::from(((10 << 24) | i).to_be_bytes())), now));
        }
        assert!(refusals.count(Some(IpAddr::from([192, 168, 0, 1])), now));
        assert!(!refusals.count(Some(IpAddr::from([192, 168, 0, 2])), now));
        assert_eq!(refusals.lock().by_address.len(), COUNTED_ADDRESSES + 1);
        let due = refusals.due(now + REFUSALS_LOGGED_EVERY).unwrap();
        assert_eq!(due, vec![(None, 1, REFUSALS_LOGGED_EVERY)]);
    }

    #[test]
    fn a_private_token_file_gives_a_token_that_admits_only_itself_and_never_shows() {
        let dir = tempfile::tempdir().unwrap();
        let file = token_file(dir.path(), &format!("{TOKEN}\n"), 0o600);
        let token = AdminToken::read(&file).unwrap();
        assert!(token.admits(TOKEN.as_bytes()));
        for wrong in ["", "0123456789abcdefghijklmnopqrstuvwxyzABC", "x"] {
            assert!(!token.admits(wrong.as_bytes()), "{wrong}");
        }
        assert!(!token.admits(format!("{TOKEN}\n").as_bytes()));
        let shown = format!("{token:?}");
        assert!(
            shown.contains("redacted") && !shown.contains(TOKEN),
            "{shown}"
        );
        assert_eq!(token.file(), file);
    }

    #[test]
    fn a_token_file_others_may_read_or_write_is_refused_naming_the_file_and_chmod() {
        let dir = tempfile::tempdir().unwrap();
        for mode in [0o644, 0o640, 0o604, 0o620] {
            let file = token_file(dir.path(), TOKEN, mode);
            let e = AdminToken::read(&file).unwrap_err().to_string();
            assert!(
                e.contains(&file.display().to_string())
                    && e.contains(&format!("chmod 600 {}", file.display()))
                    && e.contains(&format!("{mode:04o}"))
                    && !e.contains(TOKEN),
                "{e}"
            );
        }
        assert!(AdminToken::read(&token_file(dir.path(), TOKEN, 0o400)).is_ok());
    }

    #[test]
    fn a_short_or_unsendable_token_is_refused_without_showing_it() {
        let e = check_token(b"short-token\n").unwrap_err();
        assert!(
            e.contains("11 characters") && e.contains("32") && !e.contains("short-token"),
            "{e}"
        );
        let e = check_token(format!("{TOKEN} {TOKEN}").as_bytes()).unwrap_err();
        assert!(e.contains("printable ASCII") && !e.contains(TOKEN), "{e}");
        assert_eq!(
            check_token(format!("  {TOKEN}\r\n").as_bytes()).unwrap(),
            TOKEN.as_bytes()
        );
        let dir = tempfile::tempdir().unwrap();
        let e = AdminToken::read(&dir.path().join("missing"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("missing: cannot read it"), "{e}");
        let e = AdminToken::read(dir.path()).unwrap_err().to_string();
        assert!(e.contains("not a regular file"), "{e}");
    }

    #[test]
    fn the_bearer_token_is_taken_from_the_authorization_header_alone() {
        let dir = tempfile::tempdir().unwrap();
        let token = AdminToken::read(&token_file(dir.path(), TOKEN, 0o600)).unwrap();
        let headers = |value: Option<String>| {
            let mut h = HeaderMap::new();
            if let Some(v) = value {
                h.insert(header::AUTHORIZATION, HeaderValue::from_str(&v).unwrap());
            }
            h
        };
        assert!(authorize(&token, &headers(Some(format!("Bearer {TOKEN}")))).is_ok());
        assert!(authorize(&token, &headers(Some(format!("bearer  {TOKEN}")))).is_ok());
        let e = authorize(&token, &headers(None)).unwrap_err();
        assert!(e.contains("no Authorization header"), "{e}");
        let e = authorize(&token, &headers(Some(format!("Basic {TOKEN}")))).unwrap_err();
        assert!(e.contains("not `Bearer TOKEN`"), "{e}");
        let e = authorize(&token, &headers(Some("Bearer nope".into()))).unwrap_err();
        assert!(e.contains("not the admin token"), "{e}");
        assert!(authorize(&token, &headers(Some("Bearer".into()))).is_err());
    }

    #[test]
    fn the_handoff_route_names_its_lease_slashes_and_percent_escapes_included() {
        assert_eq!(
            handoff_lease("/v1/admin/leases/leader/handoff"),
            Some("leader")
        );
        assert_eq!(
            handoff_lease("/v1/admin/leases/orders/3/handoff"),
            Some("orders/3")
        );
        for other in [
            "/v1/admin/leases//handoff",
            "/v1/admin/leases/leader",
            "/v1/admin/leader/handoff",
            "/v1/admin",
        ] {
            assert_eq!(handoff_lease(other), None, "{other}");
        }
        assert!(is_admin_path("/v1/admin") && is_admin_path("/v1/admin/x"));
        assert!(!is_admin_path("/v1/administrator") && !is_admin_path("/status"));
        assert_eq!(percent_decode("orders%2F3").as_deref(), Some("orders/3"));
        assert_eq!(percent_decode("a%2").as_deref(), None);
        assert_eq!(percent_decode("%ff").as_deref(), None);
    }

    #[test]
    fn a_handoff_body_is_optional_and_checked_field_by_field() {
        let lease = LeaseName::parse("leader").unwrap();
        assert_eq!(
            parse_request("leader", b"").unwrap(),
            Asking {
                lease: lease.clone(),
                to: None,
                timeout: None
            }
        );
        assert_eq!(
            parse_request("leader", br#"{"to": "b", "timeout_ms": 1500}"#).unwrap(),
            Asking {
                lease,
                to: Some("b".into()),
                timeout: Some(Duration::from_millis(1500))
            }
        );
        for (name, body, says) in [
            ("no%20such", &b""[..], "invalid lease name \"no such\""),
            ("leader", br#"{"to": "b c"}"#, "\"b c\""),
            ("leader", br#"{"timeout_ms": 0}"#, "1 to 60000"),
            ("leader", br#"{"timeout_ms": 60001}"#, "1 to 60000"),
            (
                "leader",
                br#"{"timout_ms": 10}"#,
                "unknown field `timout_ms`",
            ),
            ("leader", b"to=b", "is not {\"to\""),
        ] {
            let e = parse_request(name, body).unwrap_err();
            assert!(e.contains(says), "{name} {body:?}: {e}");
        }
    }
}
