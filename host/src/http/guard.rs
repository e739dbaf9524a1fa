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
//!   request in flight, but not one in its first second that has not asked yet, unless that one
//!   has sent nothing and its address has too many new ones, [`NEW_PER_ADDRESS`], or all have,
//!   [`NEW_IN_ALL`]: with none to close, the next client waits, accepted),
//!   [`HEADER_READ_TIMEOUT`] for a request's head (and between requests on a kept-alive
//!   connection), [`MAX_HEADER_BYTES`] of head; graceful shutdown. A connection that asks for a
//!   watch stream leaves those slots for [`MAX_WATCHERS`] of its own, a quarter of them at most
//!   for one address ([`watchers_per_address`]); a stream whose events stay unsent for
//!   [`STALLED_HEARTBEATS`] heartbeats is dropped, and any client that stops reading is cut off
//!   after [`STALLED_CLIENT_TIMEOUT`].

use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, SocketAddr};
use std::pin::{Pin, pin};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, ready};
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
pub(crate) const MAX_CONNECTIONS: usize = 256;

/// Watch streams (`/v1/leases/NAME/watch`) served at once, apart from [`MAX_CONNECTIONS`]: a
/// watch holds its connection for as long as its client follows the lease, so watchers have a
/// bound of their own and never take the room of probes, scrapers and `leasehold status`. Each
/// costs a file descriptor and tens of KB (`make bench` prints the figures); lower when the
/// process's open-file limit leaves less room ([`watcher_limit`]).
pub(crate) const MAX_WATCHERS: usize = 4096;

/// Open files kept for everything but watchers: the other connections, the store's pools, the
/// plugin directory, the compile cache, processes' pipes and the log.
const OTHER_FILES: u64 = MAX_CONNECTIONS as u64 + 512;

/// How long data sent to a client may wait unacknowledged, or unsent because the client's window
/// is closed (it does not read), before the kernel drops the connection (`TCP_USER_TIMEOUT`).
/// Nothing is queued for a watcher in the host, so a client that never reads costs at most the
/// socket's buffers, and for this long: a live client acknowledges within a round trip, and a
/// watcher's client that has heard nothing for longer has stopped its leader-only work anyway.
pub(crate) const STALLED_CLIENT_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a client may take to send a request's head, and the longest a kept-alive connection
/// may sit idle. Probes, scrapers and the page send a request in one packet; 5 s is far above a
/// slow link's round trip and cuts off a client trickling its head (slowloris).
pub(crate) const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(5);

/// The most bytes a request's head (request line and headers) may take: 431 beyond. Twice what
/// a browser sends with a few cookies (which on `localhost` come from every local app, whatever
/// its port); hyper's own bound is about 400 KiB.
pub(crate) const MAX_HEADER_BYTES: usize = 16 * 1024;

/// How long a request may take before it is answered 503. The handlers bound their own waits to
/// a second (the store read of `/status` and `/readyz`); a request still running at five has
/// lost its client already (a Kubernetes probe gives up after one).
pub(crate) const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

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
/// that sends nothing is closed after it as before, and by [`HEADER_READ_TIMEOUT`] anyway. The
/// grace is bounded ([`NEW_PER_ADDRESS`], [`NEW_IN_ALL`]): else a flood of connections that
/// never ask would hold every slot in its grace, and everyone else in the kernel's backlog.
const FIRST_REQUEST_GRACE: Duration = Duration::from_secs(1);

/// New connections (in their [`FIRST_REQUEST_GRACE`]) that one address may have before those of
/// its connections that have sent nothing keep only [`SILENT_GRACE`], and give way at once to a
/// newcomer from an address with fewer: a quarter of the slots, far more than any client opens
/// at once but a burst of watchers (whose requests, once in the socket, keep the whole grace).
pub(crate) const NEW_PER_ADDRESS: usize = MAX_CONNECTIONS / 4;

/// New connections, over every address, beyond which those that have sent nothing keep only
/// [`SILENT_GRACE`]: half the slots, so that a flood spread over many addresses cannot hold them
/// all in their grace either.
pub(crate) const NEW_IN_ALL: usize = MAX_CONNECTIONS / 2;

/// How long a connection that has sent nothing keeps its grace once its address has more than
/// [`NEW_PER_ADDRESS`] new connections, or all have more than [`NEW_IN_ALL`]. A client sends its
/// request right behind its handshake; a quarter of a second leaves room for one slowed down by
/// a busy machine (a burst of 750 clients of one address on two cores is), while the slots still
/// turn over 1,024 times a second, as fast as a flood of 1,000 silent connections a second comes
/// from one address, and a newcomer from another address does not wait for it at all.
const SILENT_GRACE: Duration = Duration::from_millis(250);

/// How often the accept loop looks again while it waits for room: requests arrive in sockets,
/// and answers end, without a wake-up of their own.
const RECHECK: Duration = Duration::from_millis(50);

/// Heartbeats in a row ([`Options::heartbeat`]) at which a watch stream's data was still unsent
/// before the stream is dropped. A client that reads takes its events as they come, and the
/// kernel sends them within a round trip; one whose window stays closed that long has stopped
/// reading, and holds a slot of the watchers' bound for nothing (its own deadline has told it
/// to stop work already). Three, so that one slow moment of a live client is not taken for it.
pub(crate) const STALLED_HEARTBEATS: u32 = 3;

/// A client's address as the bounds count it: an IPv4 client reaching an IPv6 socket counts as
/// its IPv4 address.
fn address(peer: SocketAddr) -> IpAddr {
    peer.ip().to_canonical()
}

/// One open connection.
#[derive(Debug)]
struct Slot {
    /// Requests being answered on it (0 or 1: HTTP/1.1 answers in order).
    in_flight: AtomicUsize,
    /// Cancelled to close it, to make room for a newer one.
    evicted: CancellationToken,
    /// Set once it asked for a watch stream: it counts among the watchers from then on.
    watching: AtomicBool,
    /// Cancelled when it starts serving a watch stream: its stall check starts then.
    watch_began: CancellationToken,
    /// Set once it sent a request.
    asked: AtomicBool,
    /// When it was accepted.
    born: std::time::Instant,
    /// The client's address.
    peer: IpAddr,
    /// Its socket, to ask the kernel whether a request waits in it; none in unit tests.
    stream: Option<Arc<TcpStream>>,
}

impl Slot {
    /// A connection from `peer`, accepted now.
    fn new(peer: IpAddr, stream: Option<Arc<TcpStream>>) -> Slot {
        Slot {
            in_flight: AtomicUsize::new(0),
            evicted: CancellationToken::new(),
            watching: AtomicBool::new(false),
            watch_began: CancellationToken::new(),
            asked: AtomicBool::new(false),
            born: std::time::Instant::now(),
            peer,
            stream,
        }
    }

    /// Whether it is within its [`FIRST_REQUEST_GRACE`] at `now`, its first request not yet sent.
    fn is_new(&self, now: std::time::Instant) -> bool {
        !self.asked.load(Ordering::Acquire) && now.duration_since(self.born) < FIRST_REQUEST_GRACE
    }

    /// Whether nothing waits in its socket to be read: a new connection that is silent has not
    /// sent its request, where one with bytes waiting only has not been read yet.
    fn is_silent(&self) -> bool {
        self.stream
            .as_ref()
            .is_none_or(|s| rustix::io::ioctl_fionread(&**s).is_ok_and(|n| n == 0))
    }
}

/// Why a watch stream was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum WatchRefused {
    /// As many streams as this replica serves are open.
    Full {
        /// The most it serves.
        max: usize,
    },
    /// The client's address holds as many as one address may.
    Address {
        /// Its address.
        peer: IpAddr,
        /// The most one address may hold.
        max: usize,
    },
}

/// The most watch streams one address may hold: a quarter of `max_watchers`, the process's bound,
/// so that clients that never read, or hold streams open for nothing, from one pod or one local
/// user cannot take every stream from the apps that need one.
pub(crate) fn watchers_per_address(max_watchers: usize) -> usize {
    (max_watchers / 4).max(1)
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
    /// Those, by their client's address.
    watchers_of: HashMap<IpAddr, usize>,
    /// The most of those at once.
    max_watchers: usize,
    /// Where the count of watchers, and of those refused or dropped, is shown.
    metrics: Option<Arc<super::metrics::HttpMetrics>>,
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
            watchers_of: HashMap::new(),
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
            m.watchers
                .set(i64::try_from(self.watching).unwrap_or(i64::MAX));
        }
    }

    /// Moves connection `id` among the watchers, if there is room for it: below `max_watchers`,
    /// and below [`watchers_per_address`] of its client's address. A stream over the bound is
    /// refused, rather than one of the address's taken from it: a client that holds its stream
    /// keeps it, whatever others from its address do.
    fn watch(&mut self, id: u64, slot: &Slot) -> Result<(), WatchRefused> {
        if slot.watching.load(Ordering::Acquire) {
            return Ok(());
        }
        let per_address = watchers_per_address(self.max_watchers);
        let refused = if self.watching >= self.max_watchers {
            Some(WatchRefused::Full {
                max: self.max_watchers,
            })
        } else if self.watchers_of.get(&slot.peer).copied().unwrap_or(0) >= per_address {
            Some(WatchRefused::Address {
                peer: slot.peer,
                max: per_address,
            })
        } else {
            None
        };
        if let Some(refused) = refused {
            if let Some(m) = &self.metrics {
                m.watchers_refused.inc();
            }
            return Err(refused);
        }
        self.open.remove(&id);
        self.watching += 1;
        *self.watchers_of.entry(slot.peer).or_default() += 1;
        self.show_watchers();
        self.freed.notify_one();
        slot.watching.store(true, Ordering::Release);
        slot.watch_began.cancel();
        Ok(())
    }

    /// Where a new connection from `peer` goes at `now`: `Ok(None)` below [`MAX_CONNECTIONS`],
    /// `Ok(Some(id))` to take the slot of connection `id`, `Err(when)` when none may be closed for
    /// it yet (look again then; the client waits meanwhile, accepted).
    ///
    /// The connection closed is the oldest with no request in flight that is not new; else the
    /// oldest new one that has sent nothing and has lost its grace: after [`SILENT_GRACE`] when
    /// its address has more than [`NEW_PER_ADDRESS`] new connections or all have more than
    /// [`NEW_IN_ALL`], and at once for a newcomer from another address with fewer than
    /// [`NEW_PER_ADDRESS`] of its own. A connection whose request waits in its socket keeps its
    /// grace: only the server is behind with it.
    fn room(
        &self,
        peer: IpAddr,
        now: std::time::Instant,
    ) -> Result<Option<u64>, std::time::Instant> {
        if self.open.len() < MAX_CONNECTIONS {
            return Ok(None);
        }
        if let Some(id) = self.closable(now) {
            return Ok(Some(id));
        }
        let mut new_of: HashMap<IpAddr, usize> = HashMap::new();
        for slot in self.open.values().filter(|s| s.is_new(now)) {
            *new_of.entry(slot.peer).or_default() += 1;
        }
        let new_from = |p: &IpAddr| new_of.get(p).copied().unwrap_or(0);
        let crowded = new_of.values().sum::<usize>() > NEW_IN_ALL;
        let newcomer_is_light = new_from(&peer) < NEW_PER_ADDRESS;
        let mut again = now + RECHECK;
        for (id, slot) in &self.open {
            if !slot.is_new(now) {
                continue; // answering a request, as `closable` found
            }
            let heavy = new_from(&slot.peer) > NEW_PER_ADDRESS;
            if !heavy && !crowded {
                again = again.min(slot.born + FIRST_REQUEST_GRACE);
                continue;
            }
            let yields_to_newcomer = heavy && newcomer_is_light && slot.peer != peer;
            let silent_too_long = now.duration_since(slot.born) >= SILENT_GRACE;
            if !yields_to_newcomer && !silent_too_long {
                again = again.min(slot.born + SILENT_GRACE);
                continue;
            }
            if slot.is_silent() {
                return Ok(Some(*id));
            }
        }
        Err(again)
    }

    /// The oldest connection that may be closed to make room: none in flight, not new.
    fn closable(&self, now: std::time::Instant) -> Option<u64> {
        self.open
            .iter()
            .find(|(_, slot)| slot.in_flight.load(Ordering::Acquire) == 0 && !slot.is_new(now))
            .map(|(id, _)| *id)
    }

    /// A slot for a new connection from `peer` on `stream`, accepted at `now`, where
    /// [`Slots::room`] finds one: the connection it names is closed for it (a client with one
    /// open loses only a kept-alive socket, and clients that connect and send nothing, or
    /// trickle, cannot keep newcomers out). `Err(when)` to look again then.
    fn admit(
        &mut self,
        peer: IpAddr,
        stream: Option<Arc<TcpStream>>,
        now: std::time::Instant,
    ) -> Result<(u64, Arc<Slot>), std::time::Instant> {
        if let Some(closed) = self.room(peer, now)?
            && let Some(slot) = self.open.remove(&closed)
        {
            slot.evicted.cancel();
        }
        let id = self.next;
        self.next += 1;
        let slot = Arc::new(Slot::new(peer, stream));
        self.open.insert(id, slot.clone());
        Ok((id, slot))
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
            if let Some(n) = slots.watchers_of.get_mut(&self.slot.peer) {
                *n -= 1;
                if *n == 0 {
                    slots.watchers_of.remove(&self.slot.peer);
                }
            }
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
pub(crate) fn watcher_limit() -> usize {
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

/// 503 for a watch beyond the bounds.
fn too_many_watchers(refused: WatchRefused) -> Response {
    let text = match refused {
        WatchRefused::Full { max } => format!(
            "leasehold: {max} watch streams already follow this replica's leases, the most it serves at once; close one, or follow /readyz/leases/NAME instead\n"
        ),
        WatchRefused::Address { peer, max } => format!(
            "leasehold: {max} watch streams from {peer} already follow this replica's leases, the most one address may hold; close one, or follow /readyz/leases/NAME instead\n"
        ),
    };
    let mut response = (StatusCode::SERVICE_UNAVAILABLE, text).into_response();
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

/// What [`serve`] is given besides its listener and router.
#[derive(Debug, Clone)]
pub(crate) struct Options {
    /// The names answered besides `localhost` and IP addresses.
    pub allowed: AllowedHosts,
    /// Where the watchers are counted.
    pub metrics: Option<Arc<super::metrics::HttpMetrics>>,
    /// The longest a watch stream goes without an event ([`super::watch::heartbeat_every`]): its
    /// stall check looks every heartbeat ([`STALLED_HEARTBEATS`]).
    pub heartbeat: Duration,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            allowed: AllowedHosts::default(),
            metrics: None,
            heartbeat: super::watch::MAX_HEARTBEAT,
        }
    }
}

/// Serves `router` on `listener`, behind `check` and within the bounds above, until `shutdown`
/// is cancelled; then stops accepting and lets each connection finish its request.
pub(crate) async fn serve(
    listener: TcpListener,
    router: Router,
    options: Options,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    let Options {
        allowed,
        metrics,
        heartbeat,
    } = options;
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
    'accept: loop {
        // Every connection is taken from the kernel's backlog as it comes, whoever sent it, and
        // waits for its slot here: the backlog is one queue for every client, so a flood left
        // in it would keep everyone behind it out.
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
        // A client that stops reading (or a path gone dead) is dropped by the kernel, whatever
        // the server is sending it; without it, a stalled watcher would be kept for ever.
        let ms = u32::try_from(STALLED_CLIENT_TIMEOUT.as_millis()).unwrap_or(u32::MAX);
        if let Err(e) = rustix::net::sockopt::set_tcp_user_timeout(&stream, ms) {
            debug!(%peer, error = %e, "cannot set TCP_USER_TIMEOUT");
        }
        let stream = Arc::new(stream);
        let (id, slot) = loop {
            let admitted = lock(&slots).admit(
                address(peer),
                Some(stream.clone()),
                std::time::Instant::now(),
            );
            match admitted {
                Ok(admitted) => break admitted,
                Err(until) => tokio::select! {
                    _ = shutdown.cancelled() => break 'accept,
                    _ = freed.notified() => {}
                    _ = tokio::time::sleep_until(until.into()) => {}
                },
            }
        };
        let release = Release {
            slots: slots.clone(),
            id,
            slot: slot.clone(),
        };
        connections.spawn(connection(
            stream,
            router.clone(),
            (release, heartbeat),
            shutdown.clone(),
            peer,
        ));
    }
    drop(listener);
    connections.close();
    connections.wait().await;
    Ok(())
}

/// Serves one connection until it closes, is evicted, its watch stream stalls, or the server
/// stops.
async fn connection(
    stream: Arc<TcpStream>,
    router: Router,
    (release, heartbeat): (Release, Duration),
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
            true => lock(&slots).watch(id, &counted).err(),
            false => None,
        };
        counted.asked.store(true, Ordering::Release);
        let in_flight = InFlight::enter(&counted);
        let call = match refused {
            None => Ok(tower.call(request)),
            Some(refused) => Err(refused),
        };
        async move {
            let response = match call {
                Ok(call) => call.await,
                Err(refused) => Ok(too_many_watchers(refused)),
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
    let written = Arc::new(AtomicU64::new(0));
    let io = TokioIo::new(SharedStream(stream.clone(), written.clone()));
    let mut conn = pin!(builder.serve_connection(io, service));
    tokio::select! {
        served = conn.as_mut() => {
            if let Err(e) = served {
                debug!(%peer, error = %e, "http connection ended");
            }
        }
        _ = slot.evicted.cancelled() => {
            debug!(%peer, "http connection closed to make room for a newer one");
        }
        unsent = stalled((&stream, &written), &slot, heartbeat) => {
            debug!(%peer, unsent, "watch stream dropped: its client has left its events unread for {STALLED_HEARTBEATS} heartbeats");
            if let Some(m) = &lock(&release.slots).metrics {
                m.watchers_stalled.inc();
            }
            // Reset rather than closed: the kernel would otherwise keep trying to deliver what
            // the client does not read.
            let _ = rustix::net::sockopt::set_socket_linger(&*stream, Some(Duration::ZERO));
        }
        _ = shutdown.cancelled() => {
            conn.as_mut().graceful_shutdown();
            let _ = tokio::time::timeout(SHUTDOWN_DRAIN, conn).await;
        }
    }
}

/// Resolves, with the bytes left unsent, once `slot` serves a watch stream whose data the kernel
/// held back, and of which it sent nothing more, over [`STALLED_HEARTBEATS`] intervals in a row,
/// `every` apart: the client's window stayed closed, so it has stopped reading. Never otherwise.
/// `written` counts the bytes written to `stream`. Data held back for a moment (a small write
/// waiting for the acknowledgement of the one before) is sent by the next look, so a client that
/// reads is never taken for one that stopped.
async fn stalled(
    (stream, written): (&TcpStream, &AtomicU64),
    slot: &Slot,
    every: Duration,
) -> usize {
    slot.watch_began.cancelled().await;
    let mut looks = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    looks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let (mut in_a_row, mut sent_before) = (0, None);
    loop {
        looks.tick().await;
        let written = written.load(Ordering::Acquire);
        let Some(unsent) = unsent(stream) else {
            (in_a_row, sent_before) = (0, None);
            continue;
        };
        let sent = written.saturating_sub(u64::try_from(unsent).unwrap_or(u64::MAX));
        in_a_row = match unsent > 0 && sent_before == Some(sent) {
            true => in_a_row + 1,
            false => 0,
        };
        if in_a_row >= STALLED_HEARTBEATS {
            return unsent;
        }
        sent_before = Some(sent);
    }
}

/// The bytes written to `stream` that the kernel has not sent yet (`SIOCOUTQNSD`), for want of
/// room in the client's window; `None` when it cannot say (the stream is then left to
/// [`STALLED_CLIENT_TIMEOUT`]). Bytes sent and not yet acknowledged are not counted: a live
/// client on a slow link has those, one that stopped reading has these.
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
fn unsent(stream: &TcpStream) -> Option<usize> {
    /// `linux/sockios.h`; the same on every architecture, unlike `SIOCOUTQ`.
    const SIOCOUTQNSD: rustix::ioctl::Opcode = 0x894B;
    // SAFETY: SIOCOUTQNSD is a valid request on a TCP socket, and it writes one `int` through its
    // argument, which is what the getter provides.
    let unsent = unsafe {
        rustix::ioctl::ioctl(
            stream,
            rustix::ioctl::Getter::<SIOCOUTQNSD, std::ffi::c_int>::new(),
        )
    };
    unsent.ok().and_then(|n| usize::try_from(n).ok())
}

/// Elsewhere the kernel cannot say: a stalled client is left to [`STALLED_CLIENT_TIMEOUT`].
#[cfg(not(target_os = "linux"))]
fn unsent(_stream: &TcpStream) -> Option<usize> {
    None
}

/// A connection's socket, shared by hyper, which reads and writes it, and the guard, which asks
/// the kernel what waits in its queues ([`Slot::is_silent`], [`unsent`]).
/// The second field counts the bytes written to it.
struct SharedStream(Arc<TcpStream>, Arc<AtomicU64>);

impl SharedStream {
    /// Counts what a write wrote, and passes its result on.
    fn count(&self, written: std::io::Result<usize>) -> std::io::Result<usize> {
        if let Ok(n) = written {
            self.1
                .fetch_add(u64::try_from(n).unwrap_or(u64::MAX), Ordering::AcqRel);
        }
        written
    }
}

impl tokio::io::AsyncRead for SharedStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        if buf.remaining() == 0 {
            return Poll::Ready(Ok(()));
        }
        loop {
            ready!(self.0.poll_read_ready(cx))?;
            match self.0.try_read(buf.initialize_unfilled()) {
                Ok(n) => {
                    buf.advance(n);
                    return Poll::Ready(Ok(()));
                }
                // The readiness was stale: cleared now, the next poll waits for the next.
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }
}

impl tokio::io::AsyncWrite for SharedStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        loop {
            ready!(self.0.poll_write_ready(cx))?;
            match self.0.try_write(buf) {
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                written => return Poll::Ready(self.count(written)),
            }
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        loop {
            ready!(self.0.poll_write_ready(cx))?;
            match self.0.try_write_vectored(bufs) {
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                written => return Poll::Ready(self.count(written)),
            }
        }
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let shut = rustix::net::shutdown(&*self.0, rustix::net::Shutdown::Write);
        Poll::Ready(shut.map_err(std::io::Error::from))
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

    /// Two clients' addresses.
    const A: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(127, 0, 0, 2));
    const B: IpAddr = IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);

    /// A connection from `peer` without a socket (nothing waits in it), if there is room now.
    fn admit(slots: &mut Slots, peer: IpAddr, now: std::time::Instant) -> Option<(u64, Arc<Slot>)> {
        slots.admit(peer, None, now).ok()
    }

    /// Fills every slot with new connections from `peer`, none of which has sent anything.
    fn burst(slots: &mut Slots, peer: IpAddr) -> Vec<(u64, Arc<Slot>)> {
        (0..MAX_CONNECTIONS)
            .map(|_| admit(slots, peer, std::time::Instant::now()).unwrap())
            .collect()
    }

    #[test]
    fn a_new_connection_takes_the_oldest_idle_slot_and_none_that_is_answering() {
        let mut slots = Slots::default();
        let all = burst(&mut slots, B);
        for (_, slot) in &all {
            slot.asked.store(true, Ordering::Release);
        }
        let now = std::time::Instant::now();
        let busy: Vec<InFlight> = all.iter().map(|(_, s)| InFlight::enter(s)).collect();
        assert!(
            admit(&mut slots, A, now).is_none(),
            "every slot is answering a request"
        );
        // The second and third go idle: the second, the older, gives way.
        drop(busy);
        let _answering: Vec<InFlight> = all
            .iter()
            .enumerate()
            .filter(|(i, _)| ![1, 2].contains(i))
            .map(|(_, (_, s))| InFlight::enter(s))
            .collect();
        let (id, _) = admit(&mut slots, A, now).unwrap();
        assert_eq!(id, MAX_CONNECTIONS as u64);
        assert!(all[1].1.evicted.is_cancelled() && !all[2].1.evicted.is_cancelled());
        assert!(!all[0].1.evicted.is_cancelled());
        assert_eq!(slots.open.len(), MAX_CONNECTIONS);
    }

    #[test]
    fn a_burst_from_one_address_is_not_pushed_out_by_its_own_next_connection_at_once() {
        let mut slots = Slots::default();
        let burst = burst(&mut slots, A);
        let now = std::time::Instant::now();
        let again = slots
            .admit(A, None, now)
            .expect_err("no room: the next waits");
        assert!(again > now && again <= burst[0].1.born + SILENT_GRACE);
        assert!(burst.iter().all(|(_, s)| !s.evicted.is_cancelled()));
        // Once one has asked and gone idle, it gives way.
        burst[5].1.asked.store(true, Ordering::Release);
        assert!(admit(&mut slots, A, now).is_some());
        assert!(burst[5].1.evicted.is_cancelled());
        assert_eq!(slots.open.len(), MAX_CONNECTIONS);
        // A silent one keeps its slot for a moment only, its address holding every new one.
        let later = burst[0].1.born + SILENT_GRACE;
        assert!(admit(&mut slots, A, later).is_some());
        assert!(burst[0].1.evicted.is_cancelled() && !burst[1].1.evicted.is_cancelled());
        assert_eq!(slots.open.len(), MAX_CONNECTIONS);
    }

    #[test]
    fn silent_connections_of_an_address_with_many_new_ones_give_way_at_once_to_another_address() {
        let mut slots = Slots::default();
        let flood = burst(&mut slots, A);
        let now = std::time::Instant::now();
        // A client from elsewhere is let in at once, in the place of the flood's oldest.
        let (_, probe) = admit(&mut slots, B, now).expect("room for another address");
        assert!(flood[0].1.evicted.is_cancelled() && !flood[1].1.evicted.is_cancelled());
        // And a second one from there too: the flood's next oldest.
        let (_, second) = admit(&mut slots, B, now).unwrap();
        assert!(flood[1].1.evicted.is_cancelled());
        // The flood's own next connection cannot take theirs: they are not over the bound.
        assert!(slots.admit(A, None, now).is_err());
        assert!(!probe.evicted.is_cancelled() && !second.evicted.is_cancelled());
        assert_eq!(slots.open.len(), MAX_CONNECTIONS);
    }

    #[test]
    fn new_connections_of_a_few_clients_keep_their_whole_grace_while_others_answer() {
        let mut slots = Slots::default();
        // Most slots answer requests; the rest are new, a few from each of four addresses.
        let answering: Vec<InFlight> = (0..MAX_CONNECTIONS - 56)
            .map(|_| {
                let (_, slot) = admit(&mut slots, B, std::time::Instant::now()).unwrap();
                slot.asked.store(true, Ordering::Release);
                InFlight::enter(&slot)
            })
            .collect();
        let new: Vec<(u64, Arc<Slot>)> = (0..56u8)
            .map(|i| {
                let peer = IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, i % 4));
                admit(&mut slots, peer, std::time::Instant::now()).unwrap()
            })
            .collect();
        let halfway = new[0].1.born + FIRST_REQUEST_GRACE / 2;
        let again = slots.admit(A, None, halfway).expect_err("no room");
        assert!(again <= halfway + RECHECK, "{again:?}");
        assert!(new.iter().all(|(_, s)| !s.evicted.is_cancelled()));
        // Past its grace the oldest gives way.
        assert!(admit(&mut slots, A, new[0].1.born + FIRST_REQUEST_GRACE).is_some());
        assert!(new[0].1.evicted.is_cancelled());
        drop(answering);
    }

    #[tokio::test]
    async fn a_new_connection_whose_request_waits_in_its_socket_keeps_its_grace() {
        use tokio::io::AsyncWriteExt;
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut client = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (accepted, _) = listener.accept().await.unwrap();
        client
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
            .await
            .unwrap();
        let accepted = Arc::new(accepted);
        for _ in 0..100 {
            if rustix::io::ioctl_fionread(&*accepted).unwrap() > 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let mut slots = Slots::default();
        let (_, asking) = slots
            .admit(A, Some(accepted), std::time::Instant::now())
            .unwrap();
        assert!(!asking.is_silent());
        let silent: Vec<(u64, Arc<Slot>)> = (1..MAX_CONNECTIONS)
            .map(|_| admit(&mut slots, A, std::time::Instant::now()).unwrap())
            .collect();
        // The oldest, its request waiting to be read, keeps its slot; the next oldest gives way.
        let later = asking.born + SILENT_GRACE * 2;
        assert!(admit(&mut slots, B, later).is_some());
        assert!(!asking.evicted.is_cancelled());
        assert!(silent[0].1.evicted.is_cancelled());
    }

    #[test]
    fn watch_streams_beyond_an_address_s_share_are_refused_and_other_addresses_served() {
        let slots = Arc::new(Mutex::new(Slots {
            max_watchers: 8,
            ..Slots::default()
        }));
        assert_eq!(watchers_per_address(8), 2);
        let now = std::time::Instant::now();
        let watch = |peer: IpAddr| {
            let mut locked = lock(&slots);
            let (id, slot) = locked.admit(peer, None, now).unwrap();
            let watched = locked.watch(id, &slot);
            let release = Release {
                slots: slots.clone(),
                id,
                slot,
            };
            (watched, release)
        };
        let (first, first_release) = watch(A);
        let (second, _second) = watch(A);
        let (third, _third) = watch(A);
        assert_eq!((first, second), (Ok(()), Ok(())));
        assert_eq!(third, Err(WatchRefused::Address { peer: A, max: 2 }));
        let (other, _other) = watch(B);
        assert_eq!(other, Ok(()));
        // One of the address's streams ends: it may open another.
        drop(first_release);
        let (again, _again) = watch(A);
        assert_eq!(again, Ok(()));
        assert_eq!(lock(&slots).watching, 3);
        // And the process's own bound holds whatever the addresses.
        let (_, _c) = watch(IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 1)));
        let (_, _d) = watch(IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 2)));
        let (_, _e) = watch(IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 2)));
        let (_, _f) = watch(IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 3)));
        let (_, _g) = watch(IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 3)));
        let (full, _h) = watch(IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 4)));
        assert_eq!(full, Err(WatchRefused::Full { max: 8 }));
    }

    #[tokio::test]
    async fn data_a_client_does_not_read_is_reported_unsent_and_none_once_it_reads() {
        use tokio::io::AsyncReadExt;
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut client = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (server, _) = listener.accept().await.unwrap();
        assert_eq!(unsent(&server), Some(0));
        // Written until the kernel takes no more and holds some back: the client's window is
        // closed.
        let chunk = vec![b'x'; 64 * 1024];
        let mut written = 0;
        for _ in 0..1_000 {
            match server.try_write(&chunk) {
                Ok(n) => written += n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    if unsent(&server).is_some_and(|n| n > 0) {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                Err(e) => panic!("{e}"),
            }
        }
        let left = unsent(&server).unwrap();
        assert!(left > 0, "{written} bytes written, none unsent");
        // The client reads it all: nothing is left unsent.
        let mut read = 0;
        let mut buf = vec![0; 64 * 1024];
        while read < written {
            read += client.read(&mut buf).await.unwrap();
        }
        assert_eq!(unsent(&server), Some(0), "{written} bytes written and read");
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
        let server = tokio::spawn(serve(listener, router, Options::default(), stop.clone()));
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
