//! What keeps the HTTP port, which asks for no credentials, from being read by a web page or
//! worn down by its clients.
//!
//! - [`AllowedHosts`]: the names, besides `localhost` and IP addresses, whose `Host` the server
//!   answers (`http_allowed_hosts`). A page that rebinds its own name to 127.0.0.1 sends that
//!   name, so any other name is refused with 421: the page cannot read `/status` across origins
//!   by DNS rebinding. The check is the same on every bind: a container's `0.0.0.0` is reached
//!   from the machine's loopback when its port is published there (as the compose file does),
//!   and so is a pod's through `kubectl port-forward`.
//! - `check`: the layer every request goes through: the Host check, no request bodies (every
//!   route but the admin API's is a GET), a deadline per request (longer for the admin API, whose
//!   handoff waits for the lease to change hands), and `X-Content-Type-Options: nosniff` on
//!   every response.
//! - [`serve`]: the accept loop, in place of `axum::serve`, which sets none of hyper's bounds:
//!   at most [`MAX_CONNECTIONS`] connections (a new one takes the slot of the oldest with no
//!   request in flight, but not one in its first second that has not asked yet: with none to
//!   close, the next client waits in the kernel's backlog), [`HEADER_READ_TIMEOUT`] for a
//!   request's head (and between requests on a kept-alive connection), [`MAX_HEADER_BYTES`] of
//!   head; graceful shutdown. A connection
//!   that asks for a watch stream leaves those slots for [`MAX_WATCHERS`] of its own, and a
//!   client that stops reading is cut off after [`STALLED_CLIENT_TIMEOUT`].

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::pin::pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use hyper::service::Service;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, warn};

/// Connections served at once. Probes, a scraper or two, a few open pages and `leasehold status`
/// need a handful; every connection is a file descriptor, and the lease store, the plugin
/// directory and the compile cache need theirs from the same limit (often 1,024).
pub const MAX_CONNECTIONS: usize = 256;

/// Watch streams (`/v1/leases/NAME/watch`) served at once, apart from [`MAX_CONNECTIONS`]: a
/// watch holds its connection for as long as its client follows the lease, so watchers have a
/// bound of their own and never take the room of probes, scrapers and `leasehold status`. Each
/// costs a file descriptor and tens of KB (`make bench` prints the figures); lower when the
/// process's open-file limit leaves less room ([`watcher_limit`]).
pub const MAX_WATCHERS: usize = 4096;

/// Open files kept for everything but watchers: the other connections, the store's pools, the
/// plugin directory, the compile cache, processes' pipes and the log.
const OTHER_FILES: u64 = MAX_CONNECTIONS as u64 + 512;

/// How long data sent to a client may wait unacknowledged, or unsent because the client's window
/// is closed (it does not read), before the kernel drops the connection (`TCP_USER_TIMEOUT`).
/// Nothing is queued for a watcher in the host, so a client that never reads costs at most the
/// socket's buffers, and for this long: a live client acknowledges within a round trip, and a
/// watcher's client that has heard nothing for longer has stopped its leader-only work anyway.
pub const STALLED_CLIENT_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a client may take to send a request's head, and the longest a kept-alive connection
/// may sit idle. Probes, scrapers and the page send a request in one packet; 5 s is far above a
/// slow link's round trip and cuts off a client trickling its head (slowloris).
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(5);

/// The most bytes a request's head (request line and headers) may take: 431 beyond. Twice what
/// a browser sends with a few cookies (which on `localhost` come from every local app, whatever
/// its port); hyper's own bound is about 400 KiB.
pub const MAX_HEADER_BYTES: usize = 16 * 1024;

/// How long a request may take before it is answered 503. The handlers bound their own waits to
/// a second (the store read of `/status` and `/readyz`); a request still running at five has
/// lost its client already (a Kubernetes probe gives up after one).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a connection may take to finish its request once the server stops: the app waits
/// a second for the whole server.
const SHUTDOWN_DRAIN: Duration = Duration::from_millis(500);

/// A name in `http_allowed_hosts` that is not a host name.
#[derive(Debug, thiserror::Error)]
#[error("invalid http_allowed_hosts entry {name:?}: {reason}")]
pub struct HostNameError {
    /// The entry as given.
    pub name: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

/// The names the server answers to besides `localhost` and IP addresses: DNS names, lowercase,
/// without a port (any port is accepted with them).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AllowedHosts {
    /// The names, lowercase, without a trailing dot.
    names: Vec<String>,
}

impl AllowedHosts {
    /// Checks each name: letters, digits, `-`, `_` and dots between non-empty labels, at most
    /// 253 characters; no scheme, port, path or wildcard.
    pub fn new(names: impl IntoIterator<Item = String>) -> Result<AllowedHosts, HostNameError> {
        let names = names
            .into_iter()
            .map(|given| {
                let name = given.trim().trim_end_matches('.').to_ascii_lowercase();
                let refuse = |reason| HostNameError {
                    name: given.clone(),
                    reason,
                };
                if name.is_empty() || name.len() > 253 {
                    return Err(refuse("a host name has 1 to 253 characters"));
                }
                if name.contains([':', '/', '*', '[', ']']) {
                    return Err(refuse(
                        "give the bare name (e.g. leasehold.internal): no scheme, port, path or wildcard",
                    ));
                }
                let label_ok = |l: &str| {
                    !l.is_empty()
                        && l.len() <= 63
                        && l.bytes()
                            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
                };
                if !name.split('.').all(label_ok) {
                    return Err(refuse(
                        "a host name is dot-separated labels of letters, digits, - and _",
                    ));
                }
                Ok(name)
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(AllowedHosts { names })
    }

    /// The names, as checked.
    pub fn names(&self) -> &[String] {
        &self.names
    }
}

impl AllowedHosts {
    /// Whether a request whose authority is `host` (the `Host` header, or the request target's
    /// authority) is answered. A request without one (HTTP/1.0) is: no browser sends it.
    fn admits(&self, host: Option<&str>) -> bool {
        let Some(host) = host else { return true };
        let name = host_name(host);
        // A browser sends an IP address only to the server at that address, whatever DNS says,
        // so no rebinding can make one (kubelet probes and Prometheus' pod discovery send one);
        // browsers resolve `localhost` themselves.
        name.parse::<std::net::IpAddr>().is_ok()
            || name == "localhost"
            || self.names.contains(&name)
    }
}

/// The name of an authority (`name`, `name:port`, `[v6]`, `[v6]:port`), lowercase, without the
/// port, the brackets or a trailing dot.
fn host_name(authority: &str) -> String {
    let name = match authority.strip_prefix('[') {
        Some(rest) => rest.split(']').next().unwrap_or_default(),
        None => match authority.rsplit_once(':') {
            Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
            _ => authority,
        },
    };
    name.trim_end_matches('.').to_ascii_lowercase()
}

/// The layer every request goes through: the Host check (421), no body outside the admin tree
/// (413; the admin API bounds its own), the deadline (503), and `nosniff` on every response,
/// refusals included.
async fn check(State(hosts): State<Arc<AllowedHosts>>, request: Request, next: Next) -> Response {
    let authority = request
        .uri()
        .authority()
        .map(|a| a.as_str().to_string())
        .or_else(|| {
            let host = request.headers().get(header::HOST)?;
            Some(String::from_utf8_lossy(host.as_bytes()).into_owned())
        });
    let admin = super::admin::is_admin_path(request.uri().path());
    let mut response = if !hosts.admits(authority.as_deref()) {
        let shown: String = authority.unwrap_or_default().chars().take(100).collect();
        (
            StatusCode::MISDIRECTED_REQUEST,
            format!(
                "leasehold: this server answers to localhost, IP addresses and the names in http_allowed_hosts, not {shown:?}; to reach it by that name, add it there (--http-allowed-host, LEASEHOLD_HTTP_ALLOWED_HOSTS)\n"
            ),
        )
            .into_response()
    } else if has_body(&request) && !admin {
        (
            StatusCode::PAYLOAD_TOO_LARGE,
            "leasehold: every route but the admin API is a GET; a request body is refused\n",
        )
            .into_response()
    } else {
        let deadline = match admin {
            true => super::admin::DEADLINE,
            false => REQUEST_TIMEOUT,
        };
        match tokio::time::timeout(deadline, next.run(request)).await {
            Ok(response) => response,
            Err(_) => (
                StatusCode::SERVICE_UNAVAILABLE,
                format!("leasehold: no answer within {deadline:?}\n"),
            )
                .into_response(),
        }
    };
    response.headers_mut().insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    response
}

/// Whether `request` announces a body: a chunked one, or a length above 0.
fn has_body(request: &Request) -> bool {
    let headers = request.headers();
    headers.contains_key(header::TRANSFER_ENCODING)
        || headers
            .get(header::CONTENT_LENGTH)
            .is_some_and(|length| length.as_bytes() != b"0")
}

/// How long a new connection may wait for its first request before it can be closed to make
/// room: a burst of clients connecting at once (watchers reconnecting to a restarted host)
/// arrives faster than their requests are read, and must not push each other out. A client
/// that sends nothing is closed after it as before, and by [`HEADER_READ_TIMEOUT`] anyway.
const FIRST_REQUEST_GRACE: Duration = Duration::from_secs(1);

/// One open connection.
#[derive(Debug)]
struct Slot {
    /// Requests being answered on it (0 or 1: HTTP/1.1 answers in order).
    in_flight: AtomicUsize,
    /// Cancelled to close it, to make room for a newer one.
    evicted: CancellationToken,
    /// Set once it asked for a watch stream: it counts among the watchers from then on.
    watching: AtomicBool,
    /// Set once it sent a request.
    asked: AtomicBool,
    /// When it was accepted.
    born: std::time::Instant,
}

impl Default for Slot {
    fn default() -> Slot {
        Slot {
            in_flight: AtomicUsize::new(0),
            evicted: CancellationToken::new(),
            watching: AtomicBool::new(false),
            asked: AtomicBool::new(false),
            born: std::time::Instant::now(),
        }
    }
}

impl Slot {
    /// Whether it is within its [`FIRST_REQUEST_GRACE`] at `now`, its first request not yet sent.
    fn is_new(&self, now: std::time::Instant) -> bool {
        !self.asked.load(Ordering::Acquire) && now.duration_since(self.born) < FIRST_REQUEST_GRACE
    }
}

/// The open connections, by the order they were accepted.
#[derive(Debug)]
struct Slots {
    /// The id the next connection gets.
    next: u64,
    /// Each open connection by its id, watchers' connections apart.
    open: BTreeMap<u64, Arc<Slot>>,
    /// Connections serving a watch stream.
    watching: usize,
    /// The most of those at once.
    max_watchers: usize,
    /// Where the count of watchers, and of those refused, is shown.
    metrics: Option<Arc<crate::metrics::Metrics>>,
    /// Woken when a slot frees (a connection ends or becomes a watcher's), for an accept loop
    /// waiting for room.
    freed: Arc<tokio::sync::Notify>,
}

impl Default for Slots {
    fn default() -> Slots {
        Slots {
            next: 0,
            open: BTreeMap::new(),
            watching: 0,
            max_watchers: MAX_WATCHERS,
            metrics: None,
            freed: Arc::new(tokio::sync::Notify::new()),
        }
    }
}

impl Slots {
    /// Shows the count of watchers in the metrics.
    fn show_watchers(&self) {
        if let Some(m) = &self.metrics {
            m.http_watchers
                .set(i64::try_from(self.watching).unwrap_or(i64::MAX));
        }
    }

    /// Moves connection `id` among the watchers, if there is room: false when
    /// `max_watchers` already watch.
    fn watch(&mut self, id: u64, slot: &Slot) -> bool {
        if slot.watching.load(Ordering::Acquire) {
            return true;
        }
        if self.watching >= self.max_watchers {
            if let Some(m) = &self.metrics {
                m.http_watchers_refused.inc();
            }
            return false;
        }
        self.open.remove(&id);
        self.watching += 1;
        self.show_watchers();
        self.freed.notify_one();
        slot.watching.store(true, Ordering::Release);
        true
    }

    /// Whether a connection can be admitted now: below [`MAX_CONNECTIONS`], or with one to close
    /// for it (the oldest without a request in flight that is not new, [`FIRST_REQUEST_GRACE`]).
    /// `None` when it can; else when to look again (the first new connection's grace ending), the
    /// next client waiting meanwhile in the kernel's backlog.
    fn room(&self, now: std::time::Instant) -> Option<std::time::Instant> {
        if self.open.len() < MAX_CONNECTIONS || self.closable(now).is_some() {
            return None;
        }
        let graces = self.open.values().filter(|s| s.is_new(now));
        let next = graces.map(|s| s.born + FIRST_REQUEST_GRACE).min();
        Some(next.unwrap_or(now + Duration::from_millis(50)))
    }

    /// The oldest connection that may be closed to make room: none in flight, not new.
    fn closable(&self, now: std::time::Instant) -> Option<u64> {
        self.open
            .iter()
            .find(|(_, slot)| slot.in_flight.load(Ordering::Acquire) == 0 && !slot.is_new(now))
            .map(|(id, _)| *id)
    }

    /// A slot for a new connection. At [`MAX_CONNECTIONS`] the oldest connection without a
    /// request in flight is closed for it (a client with one open loses only a kept-alive socket,
    /// and clients that connect and send nothing, or trickle, cannot keep newcomers out), unless
    /// it is new ([`FIRST_REQUEST_GRACE`]): a burst of clients connecting at once must not push
    /// each other out before their requests are read. `None` when every connection is answering
    /// a request or new ([`Slots::room`] says when to try again).
    fn admit(&mut self) -> Option<(u64, Arc<Slot>)> {
        if self.open.len() >= MAX_CONNECTIONS {
            let closable = self.closable(std::time::Instant::now())?;
            if let Some(slot) = self.open.remove(&closable) {
                slot.evicted.cancel();
            }
        }
        let id = self.next;
        self.next += 1;
        let slot = Arc::new(Slot::default());
        self.open.insert(id, slot.clone());
        Some((id, slot))
    }
}

/// The slots, locked. Nothing panics while holding them, and their map stays whole if anything
/// did: a poisoned lock is taken over rather than refusing every connection from then on.
fn lock(slots: &Mutex<Slots>) -> std::sync::MutexGuard<'_, Slots> {
    slots
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Frees a connection's slot when its task ends.
struct Release {
    /// The slots.
    slots: Arc<Mutex<Slots>>,
    /// The connection's id.
    id: u64,
    /// Its slot.
    slot: Arc<Slot>,
}

impl Drop for Release {
    fn drop(&mut self) {
        let mut slots = lock(&self.slots);
        slots.open.remove(&self.id);
        slots.freed.notify_one();
        if self.slot.watching.load(Ordering::Acquire) {
            slots.watching -= 1;
            slots.show_watchers();
        }
    }
}

/// Whether `path` asks for a watch stream.
fn is_watch(path: &str) -> bool {
    path.starts_with(super::api::PREFIX) && path.ends_with(super::api::WATCH)
}

/// The most watchers this process can serve: [`MAX_WATCHERS`], or fewer when its open-file
/// limit (raised to its hard limit first) leaves less room beside [`OTHER_FILES`].
pub fn watcher_limit() -> usize {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let limit = getrlimit(Resource::Nofile);
    let mut soft = limit.current;
    if soft < limit.maximum {
        // Raising the soft limit to the hard one is any process's right: servers do it at start.
        if setrlimit(
            Resource::Nofile,
            Rlimit {
                current: limit.maximum,
                maximum: limit.maximum,
            },
        )
        .is_ok()
        {
            soft = limit.maximum;
        }
    }
    match soft {
        None => MAX_WATCHERS,
        Some(files) => usize::try_from(files.saturating_sub(OTHER_FILES))
            .map_or(MAX_WATCHERS, |room| room.min(MAX_WATCHERS)),
    }
}

/// 503 for a watch beyond `max`.
fn too_many_watchers(max: usize) -> Response {
    let mut response = (
        StatusCode::SERVICE_UNAVAILABLE,
        format!(
            "leasehold: {max} watch streams already follow this replica's leases, the most it serves at once; close one, or follow /readyz/leases/NAME instead\n"
        ),
    )
        .into_response();
    response.headers_mut().insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("5"));
    response
}

/// Counts a request in flight on a connection while it lives.
struct InFlight(Arc<Slot>);

impl InFlight {
    fn enter(slot: &Arc<Slot>) -> InFlight {
        slot.in_flight.fetch_add(1, Ordering::AcqRel);
        InFlight(slot.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Serves `router` on `listener`, behind `check` and within the bounds above, until `shutdown`
/// is cancelled; then stops accepting and lets each connection finish its request.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    (allowed, metrics): (AllowedHosts, Option<Arc<crate::metrics::Metrics>>),
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    let router = router.layer(axum::middleware::from_fn_with_state(
        Arc::new(allowed),
        check,
    ));
    let max_watchers = watcher_limit();
    if max_watchers < MAX_WATCHERS {
        warn!(
            max_watchers,
            "the open-file limit leaves room for {max_watchers} watch streams (of {MAX_WATCHERS}): raise it (ulimit -n, LimitNOFILE) to serve more"
        );
    }
    let slots = Arc::new(Mutex::new(Slots {
        max_watchers,
        metrics,
        ..Slots::default()
    }));
    let connections = TaskTracker::new();
    let freed = lock(&slots).freed.clone();
    loop {
        let wait = lock(&slots).room(std::time::Instant::now());
        if let Some(until) = wait {
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = freed.notified() => {}
                _ = tokio::time::sleep_until(until.into()) => {}
            }
            continue;
        }
        let (stream, peer) = tokio::select! {
            _ = shutdown.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of descriptors, or a connection reset before it was accepted: wait a
                    // little rather than spin on the error.
                    debug!(error = %e, "http accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let admitted = lock(&slots).admit();
        let Some((id, slot)) = admitted else {
            warn!(%peer, "http connection refused: all {MAX_CONNECTIONS} connections are answering requests");
            continue;
        };
        // A client that stops reading (or a path gone dead) is dropped by the kernel, whatever
        // the server is sending it; without it, a stalled watcher would be kept for ever.
        let ms = u32::try_from(STALLED_CLIENT_TIMEOUT.as_millis()).unwrap_or(u32::MAX);
        if let Err(e) = rustix::net::sockopt::set_tcp_user_timeout(&stream, ms) {
            debug!(%peer, error = %e, "cannot set TCP_USER_TIMEOUT");
        }
        let release = Release {
            slots: slots.clone(),
            id,
            slot: slot.clone(),
        };
        connections.spawn(connection(
            stream,
            router.clone(),
            release,
            shutdown.clone(),
            peer,
        ));
    }
    drop(listener);
    connections.close();
    connections.wait().await;
    Ok(())
}

/// Serves one connection until it closes, is evicted, or the server stops.
async fn connection(
    stream: TcpStream,
    router: Router,
    release: Release,
    shutdown: CancellationToken,
    peer: SocketAddr,
) {
    let tower = TowerToHyperService::new(router);
    let slot = release.slot.clone();
    let (slots, id) = (release.slots.clone(), release.id);
    let counted = slot.clone();
    let service = hyper::service::service_fn(move |mut request: Request<_>| {
        // Who asked, for the admin API's log.
        request
            .extensions_mut()
            .insert(axum::extract::ConnectInfo(peer));
        let refused = match is_watch(request.uri().path()) {
            true => {
                let mut slots = lock(&slots);
                (!slots.watch(id, &counted)).then_some(slots.max_watchers)
            }
            false => None,
        };
        counted.asked.store(true, Ordering::Release);
        let in_flight = InFlight::enter(&counted);
        let response = refused.is_none().then(|| tower.call(request));
        async move {
            let response = match (response, refused) {
                (Some(response), _) => response.await,
                (None, max) => Ok(too_many_watchers(max.unwrap_or_default())),
            };
            drop(in_flight);
            response
        }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT)
        .max_header_size(MAX_HEADER_BYTES);
    let mut conn = pin!(builder.serve_connection(TokioIo::new(stream), service));
    let _release = release;
    tokio::select! {
        served = conn.as_mut() => {
            if let Err(e) = served {
                debug!(%peer, error = %e, "http connection ended");
            }
        }
        _ = slot.evicted.cancelled() => {
            debug!(%peer, "http connection closed to make room for a newer one");
        }
        _ = shutdown.cancelled() => {
            conn.as_mut().graceful_shutdown();
            let _ = tokio::time::timeout(SHUTDOWN_DRAIN, conn).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allowed(names: &[&str]) -> AllowedHosts {
        AllowedHosts::new(names.iter().map(|n| n.to_string())).unwrap()
    }

    #[test]
    fn the_server_answers_localhost_ip_addresses_and_listed_names_only() {
        let c = allowed(&["Leasehold.Internal."]);
        for host in [
            "localhost",
            "localhost:9464",
            "LOCALHOST.",
            "127.0.0.1",
            "127.0.0.1:9464",
            "[::1]",
            "[::1]:9464",
            "10.244.1.7:9464",
            "leasehold.internal",
            "leasehold.internal:80",
        ] {
            assert!(c.admits(Some(host)), "{host}");
        }
        assert!(c.admits(None), "HTTP/1.0 without Host");
        for host in [
            "evil.example",
            "evil.example:9464",
            "localhost.evil.example",
            "127.0.0.1.nip.io",
            "leasehold.internal.evil.example",
            "leasehold.default.svc:9464",
            "",
        ] {
            assert!(!c.admits(Some(host)), "{host}");
        }
        assert!(!allowed(&[]).admits(Some("leasehold.internal")));
    }

    #[test]
    fn a_new_connection_takes_the_oldest_idle_slot_and_none_that_is_answering() {
        let mut slots = Slots::default();
        let all: Vec<(u64, Arc<Slot>)> = (0..MAX_CONNECTIONS)
            .map(|_| slots.admit().unwrap())
            .collect();
        for (_, slot) in &all {
            slot.asked.store(true, Ordering::Release);
        }
        let busy: Vec<InFlight> = all.iter().map(|(_, s)| InFlight::enter(s)).collect();
        assert!(slots.admit().is_none(), "every slot is answering a request");
        // The second and third go idle: the second, the older, gives way.
        drop(busy);
        let _answering: Vec<InFlight> = all
            .iter()
            .enumerate()
            .filter(|(i, _)| ![1, 2].contains(i))
            .map(|(_, (_, s))| InFlight::enter(s))
            .collect();
        let (id, _) = slots.admit().unwrap();
        assert_eq!(id, MAX_CONNECTIONS as u64);
        assert!(all[1].1.evicted.is_cancelled() && !all[2].1.evicted.is_cancelled());
        assert!(!all[0].1.evicted.is_cancelled());
        assert_eq!(slots.open.len(), MAX_CONNECTIONS);
    }

    #[test]
    fn a_burst_of_new_connections_is_not_pushed_out_and_the_next_waits_for_room() {
        let mut slots = Slots::default();
        // A burst: every connection new, none has sent its request yet.
        let burst: Vec<(u64, Arc<Slot>)> = (0..MAX_CONNECTIONS)
            .map(|_| slots.admit().unwrap())
            .collect();
        let now = std::time::Instant::now();
        let again = slots.room(now).expect("no room: the next waits");
        assert!(again > now && again <= burst[0].1.born + FIRST_REQUEST_GRACE);
        assert!(slots.admit().is_none(), "the bound holds");
        assert!(burst.iter().all(|(_, s)| !s.evicted.is_cancelled()));
        // Once one has asked and gone idle, it gives way.
        burst[5].1.asked.store(true, Ordering::Release);
        assert_eq!(slots.room(now), None);
        assert!(slots.admit().is_some());
        assert!(burst[5].1.evicted.is_cancelled());
        assert_eq!(slots.open.len(), MAX_CONNECTIONS);
        // Past their grace, the oldest silent one gives way too.
        let later = now + FIRST_REQUEST_GRACE * 2;
        assert_eq!(slots.room(later), None);
    }

    #[tokio::test]
    async fn a_request_still_running_at_its_deadline_is_answered_503() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let router = Router::new().route(
            "/slow",
            axum::routing::get(|| async {
                tokio::time::sleep(Duration::from_secs(60)).await;
                "late"
            }),
        );
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let stop = CancellationToken::new();
        let server = tokio::spawn(serve(
            listener,
            router,
            (AllowedHosts::default(), None),
            stop.clone(),
        ));
        let started = tokio::time::Instant::now();
        let mut stream = TcpStream::connect(addr).await.unwrap();
        stream
            .write_all(b"GET /slow HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut answer = String::new();
        tokio::time::timeout(REQUEST_TIMEOUT * 3, stream.read_to_string(&mut answer))
            .await
            .unwrap()
            .unwrap();
        assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
        assert!(answer.contains("nosniff"), "{answer}");
        assert!(
            started.elapsed() >= REQUEST_TIMEOUT,
            "{:?}",
            started.elapsed()
        );
        stop.cancel();
        tokio::time::timeout(Duration::from_secs(2), server)
            .await
            .unwrap()
            .unwrap()
            .unwrap();
    }

    #[test]
    fn allowed_names_are_bare_host_names() {
        for bad in [
            "",
            "http://x",
            "x:9464",
            "*.example",
            "a..b",
            "a b",
            "[::1]",
        ] {
            let e = AllowedHosts::new([bad.to_string()]).unwrap_err();
            assert!(e.to_string().contains("http_allowed_hosts"), "{e}");
        }
        let ok = AllowedHosts::new(["Status.Example.".to_string()]).unwrap();
        assert_eq!(ok.names(), ["status.example"]);
    }
}
