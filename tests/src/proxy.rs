//! A TCP proxy the test controls, to put network faults between a host and its database: each
//! host reaches PostgreSQL through a [`Proxy`] of its own (its database URL names the proxy, see
//! [`Proxy::url`]), so one host can be cut off alone.
//!
//! A [`Fault`] applies at once to every open connection and to new ones. A black hole is a
//! partition as TCP sees it: the proxy stops reading from the sending side, so the sender's
//! kernel buffers fill and it blocks, as with dropped packets that TCP retransmits; lifting the
//! fault resumes where it stopped, as retransmission would. Nothing is closed and nothing is lost.
//!
//! The proxy runs on a thread with its own runtime, so it keeps forwarding whatever the test's
//! runtime does (a current-thread test runtime blocked on a query included); it stops when dropped.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread::JoinHandle;

use anyhow::Context;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// What the proxy does to the traffic it forwards.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Forward both ways.
    None,
    /// Hold the bytes of the blocked direction(s) without closing or losing anything, until the
    /// fault is lifted. While any direction is blocked a new connection is accepted but not
    /// connected upstream: a TCP handshake needs both directions, and the server then holds no
    /// half-open session of it (its authentication timeout would otherwise end it).
    BlackHole {
        /// Bytes from the client to the server are held.
        to_server: bool,
        /// Bytes from the server to the client are held.
        to_client: bool,
    },
    /// Abort every open connection on both sides (RST, as a crashed peer or a middlebox would),
    /// then forward new connections normally.
    Reset,
}

/// The direction of a byte stream through the proxy.
#[derive(Debug, Clone, Copy)]
enum Direction {
    ToServer,
    ToClient,
}

/// What every connection task watches.
#[derive(Debug, Clone)]
struct State {
    to_server_blocked: bool,
    to_client_blocked: bool,
    /// Bumped by each reset: a connection older than the newest reset aborts.
    resets: u64,
    /// Where new connections go.
    upstream: SocketAddr,
    /// Set when the proxy is dropped.
    stopping: bool,
}

impl State {
    fn blocked(&self, direction: Direction) -> bool {
        match direction {
            Direction::ToServer => self.to_server_blocked,
            Direction::ToClient => self.to_client_blocked,
        }
    }
}

/// A TCP proxy on 127.0.0.1 forwarding to an upstream the test chooses, under a [`Fault`] the
/// test sets. Stops, closing its connections, when dropped.
#[derive(Debug)]
pub struct Proxy {
    addr: SocketAddr,
    state: watch::Sender<State>,
    open: Arc<AtomicUsize>,
    /// Client connections accepted since the start: the connection attempts clients made.
    accepted: Arc<AtomicUsize>,
    thread: Option<JoinHandle<()>>,
}

impl Proxy {
    /// Binds 127.0.0.1 on a free port and forwards each accepted connection to `upstream`.
    pub fn start(upstream: SocketAddr) -> anyhow::Result<Proxy> {
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let (state, watcher) = watch::channel(State {
            to_server_blocked: false,
            to_client_blocked: false,
            resets: 0,
            upstream,
            stopping: false,
        });
        let open = Arc::new(AtomicUsize::new(0));
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let counter = open.clone();
        let accepted = Arc::new(AtomicUsize::new(0));
        let accept_counter = accepted.clone();
        let thread = std::thread::Builder::new()
            .name(format!("proxy-{}", addr.port()))
            .spawn(move || {
                runtime.block_on(async move {
                    let Ok(listener) = TcpListener::from_std(listener) else {
                        return;
                    };
                    accept_loop(listener, watcher, counter, accept_counter).await;
                });
                // Dropping the runtime drops every connection task, closing their sockets.
            })
            .context("starting the proxy thread")?;
        Ok(Proxy {
            addr,
            state,
            open,
            accepted,
            thread: Some(thread),
        })
    }

    /// The address clients connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The port clients connect to.
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// `url` (a `postgres://` URL) with its host and port replaced by the proxy's.
    pub fn url(&self, url: &str) -> anyhow::Result<String> {
        let (start, end) = authority_host(url)?;
        Ok(format!("{}{}{}", &url[..start], self.addr, &url[end..]))
    }

    /// Applies `fault` to open and new connections.
    pub fn set(&self, fault: Fault) {
        self.state.send_modify(|s| match fault {
            Fault::None => (s.to_server_blocked, s.to_client_blocked) = (false, false),
            Fault::BlackHole {
                to_server,
                to_client,
            } => (s.to_server_blocked, s.to_client_blocked) = (to_server, to_client),
            Fault::Reset => {
                (s.to_server_blocked, s.to_client_blocked) = (false, false);
                s.resets += 1;
            }
        });
    }

    /// Aborts every open connection and forwards new ones normally: [`Fault::Reset`].
    pub fn reset_all(&self) {
        self.set(Fault::Reset);
    }

    /// Sends new connections to `upstream` (a promoted primary); open ones stay where they are.
    pub fn route_to(&self, upstream: SocketAddr) {
        self.state.send_modify(|s| s.upstream = upstream);
    }

    /// How many client connections it has accepted since it started.
    pub fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }

    /// How many client connections are open.
    pub fn connections(&self) -> usize {
        self.open.load(Ordering::SeqCst)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.state.send_modify(|s| s.stopping = true);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The address of the `host:port` part of a URL such as `postgres://user@127.0.0.1:5432/db`.
pub fn upstream_of(url: &str) -> anyhow::Result<SocketAddr> {
    let (start, end) = authority_host(url)?;
    url[start..end]
        .parse()
        .with_context(|| format!("{:?} is not an IP address and port", &url[start..end]))
}

/// The byte range of `host:port` in `url`: after `scheme://` and any `user@`, up to the path.
fn authority_host(url: &str) -> anyhow::Result<(usize, usize)> {
    let start = url.find("://").context("no scheme:// in the URL")? + 3;
    let end = url[start..]
        .find(['/', '?'])
        .map_or(url.len(), |i| start + i);
    let host = url[start..end]
        .rfind('@')
        .map_or(start, |at| start + at + 1);
    Ok((host, end))
}

async fn accept_loop(
    listener: TcpListener,
    state: watch::Receiver<State>,
    open: Arc<AtomicUsize>,
    accepted_total: Arc<AtomicUsize>,
) {
    let mut stop = state.clone();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((client, _)) = accepted else { continue };
                accepted_total.fetch_add(1, Ordering::SeqCst);
                let guard = OpenGuard::new(open.clone());
                tokio::spawn(connection(client, state.clone(), guard));
            }
            _ = stop.wait_for(|s| s.stopping) => return,
        }
    }
}

/// Counts one open client connection while it lives.
struct OpenGuard(Arc<AtomicUsize>);

impl OpenGuard {
    fn new(open: Arc<AtomicUsize>) -> OpenGuard {
        open.fetch_add(1, Ordering::SeqCst);
        OpenGuard(open)
    }
}

impl Drop for OpenGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// One client connection: waits until both directions are open, connects upstream, then
/// forwards until either side closes or a reset aborts it.
async fn connection(client: TcpStream, mut state: watch::Receiver<State>, _guard: OpenGuard) {
    let born = state.borrow().resets;
    let resets = state.clone();
    let upstream = tokio::select! {
        ready = state.wait_for(|s| !s.to_server_blocked && !s.to_client_blocked) => match ready {
            Ok(s) => s.upstream,
            Err(_) => return,
        },
        _ = reset_after(resets, born) => return abort(&client),
    };
    let Ok(mut server) = TcpStream::connect(upstream).await else {
        // As the client would see a refused connection: a reset, not an orderly close.
        return abort(&client);
    };
    let mut client = client;
    let (client_read, client_write) = client.split();
    let (server_read, server_write) = server.split();
    let forward = async {
        tokio::try_join!(
            pump(
                client_read,
                server_write,
                Direction::ToServer,
                state.clone()
            ),
            pump(
                server_read,
                client_write,
                Direction::ToClient,
                state.clone()
            ),
        )
    };
    let clean = tokio::select! {
        done = forward => done.is_ok(),
        _ = reset_after(state.clone(), born) => false,
    };
    if !clean {
        // A reset, or one side aborted: abort the other side too rather than close it politely.
        abort(&client);
        abort(&server);
    }
}

/// Returns once a reset newer than `born` happens (or the proxy stops).
async fn reset_after(mut state: watch::Receiver<State>, born: u64) {
    let _ = state.wait_for(|s| s.resets > born || s.stopping).await;
}

/// Makes the socket's close send RST instead of FIN; it closes when dropped.
fn abort(stream: &TcpStream) {
    let _ = stream.set_zero_linger();
}

/// Forwards one direction, reading only while the direction is open, so a black hole leaves the
/// bytes in the sender's buffers. Ends at the sender's EOF, passing it on as a half-close.
async fn pump(
    mut from: impl AsyncRead + Unpin,
    mut to: impl AsyncWrite + Unpin,
    direction: Direction,
    mut state: watch::Receiver<State>,
) -> std::io::Result<()> {
    let closed = |_| std::io::Error::other("proxy stopped");
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        state
            .wait_for(|s| !s.blocked(direction))
            .await
            .map_err(closed)?;
        let n = tokio::select! {
            n = from.read(&mut buf) => n?,
            // A read is cancel-safe: nothing was taken from the socket.
            _ = state.wait_for(|s| s.blocked(direction)) => continue,
        };
        if n == 0 {
            return to.shutdown().await;
        }
        // Bytes read just as the fault began are held until it is lifted, not dropped.
        state
            .wait_for(|s| !s.blocked(direction))
            .await
            .map_err(closed)?;
        to.write_all(&buf[..n]).await?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rewrites_a_database_url_to_the_proxy_and_reads_its_upstream() {
        let url = "postgres://postgres@127.0.0.1:5432/lh_1?sslmode=prefer";
        assert_eq!(upstream_of(url).unwrap(), "127.0.0.1:5432".parse().unwrap());
        let proxy = Proxy::start("127.0.0.1:5432".parse().unwrap()).unwrap();
        let port = proxy.port();
        assert_eq!(
            proxy.url(url).unwrap(),
            format!("postgres://postgres@127.0.0.1:{port}/lh_1?sslmode=prefer")
        );
        assert_eq!(
            proxy.url("postgres://127.0.0.1:1").unwrap(),
            format!("postgres://127.0.0.1:{port}")
        );
    }
}
