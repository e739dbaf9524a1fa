//! The HTTP port of a real `leasehold run` process, attacked from outside: a page that rebinds
//! its own name to 127.0.0.1 is refused (an allowed name is not), every response says `nosniff`,
//! thousands of idle connections on a host limited to 1,024 descriptors do not keep a client from
//! `/healthz`, nor does a flood of a thousand silent connections a second from one address keep
//! a probe from another out for a second, a client trickling its request head is cut off, an oversized head or a request
//! body is refused, and the SQLite lease file the host creates, with its `-wal` and `-shm`, is
//! readable by its owner alone, a plugin's kv writes to it included.
//!
//! Requests are written by hand on raw sockets to 127.0.0.1, so the test chooses every byte
//! (the `Host` header above all); each read is bounded in time.

#![allow(clippy::unwrap_used, missing_docs)]

use std::net::SocketAddr;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;
use std::time::{Duration, Instant};

use leasehold::testing::{HEADER_READ_TIMEOUT, MAX_CONNECTIONS};
use leasehold_tests::eventually::{eventually, when};
use leasehold_tests::host::{HostBuilder, binary, guests_dist, plugin_dir};
use leasehold_tests::log::Logged;
use leasehold_tests::status::Role;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A host on a SQLite file of its own in `dir` (no PostgreSQL needed to attack its port).
fn on_sqlite(name: &str, dir: &Path) -> HostBuilder {
    let url = format!("sqlite:{}", dir.join("leases.db").display());
    HostBuilder::new(name).database_url(&url)
}

/// What the server answered on one connection.
#[derive(Debug)]
struct Answer {
    /// The status code, 0 when the server closed without answering.
    status: u16,
    /// The status line and headers.
    head: String,
    /// The body.
    body: String,
}

impl Answer {
    /// The value of header `name`, if sent.
    fn header(&self, name: &str) -> Option<&str> {
        self.head.lines().skip(1).find_map(|line| {
            let (n, v) = line.split_once(':')?;
            n.eq_ignore_ascii_case(name).then_some(v.trim())
        })
    }
}

/// Sends `request` on a new connection and reads until the server closes it, at most 10 s.
async fn raw(addr: SocketAddr, request: &[u8]) -> Answer {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.write_all(request).await.unwrap();
    let mut bytes = Vec::new();
    // A reset after a refusal is an answer too: keep what arrived before it.
    let _ = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut bytes))
        .await
        .expect("the server neither answered nor closed within 10 s");
    let text = String::from_utf8_lossy(&bytes).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    Answer {
        status,
        head: head.to_string(),
        body: body.to_string(),
    }
}

/// `GET path` with `Host: host` (none when `None`), closing after the answer.
async fn get(addr: SocketAddr, path: &str, host: Option<&str>) -> Answer {
    let host = host.map_or(String::new(), |h| format!("Host: {h}\r\n"));
    raw(
        addr,
        format!("GET {path} HTTP/1.1\r\n{host}Connection: close\r\n\r\n").as_bytes(),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_rebinding_its_name_to_loopback_cannot_read_status_and_an_allowed_name_can() {
    let dir = tempfile::tempdir().unwrap();
    let host = on_sqlite("rebind", dir.path())
        .env("LEASEHOLD_HTTP_ALLOWED_HOSTS", "leasehold.internal")
        .spawn()
        .await
        .unwrap();
    let addr = host.addr();
    let port = addr.port();
    for path in ["/status", "/metrics", "/", "/healthz"] {
        let refused = get(addr, path, Some(&format!("evil.example:{port}"))).await;
        assert_eq!(refused.status, 421, "{path}: {refused:?}");
        assert!(
            refused.body.contains("http_allowed_hosts") && !refused.body.contains("rebind"),
            "{path}: the refusal names the setting and shows nothing of the host: {refused:?}"
        );
    }
    // A name that only starts like an allowed one, or like loopback, is another name.
    for name in ["leasehold.internal.evil.example", "localhost.evil.example"] {
        assert_eq!(get(addr, "/status", Some(name)).await.status, 421, "{name}");
    }
    for name in [
        format!("localhost:{port}"),
        format!("127.0.0.1:{port}"),
        "[::1]".to_string(),
        format!("leasehold.internal:{port}"),
        "LEASEHOLD.INTERNAL".to_string(),
    ] {
        let answer = get(addr, "/status", Some(&name)).await;
        assert_eq!(answer.status, 200, "{name}: {answer:?}");
        assert!(answer.body.contains("\"replica\""), "{name}: {answer:?}");
    }
    // HTTP/1.0 without a Host header: no browser sends it, `curl -0` and old probes do.
    let answer = raw(addr, b"GET /healthz HTTP/1.0\r\n\r\n").await;
    assert_eq!(answer.status, 200, "{answer:?}");

    // The request target may name the host too (absolute form, as to a proxy): it is checked
    // the same, and `leasehold status` shows the refusal's line, which names the setting.
    let proxy = format!("http://{addr}");
    let out = tokio::process::Command::new(binary().unwrap())
        .args(["status", "--url", &format!("http://evil.example:{port}")])
        .env("HTTP_PROXY", &proxy)
        .env("http_proxy", &proxy)
        .env_remove("NO_PROXY")
        .env_remove("no_proxy")
        .output();
    let out = tokio::time::timeout(Duration::from_secs(20), out)
        .await
        .unwrap()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("421") && stderr.contains("http_allowed_hosts"),
        "{stderr}"
    );

    // Bound to every interface, as in a container whose port is published on the machine's
    // loopback, the check is the same; an address is answered whatever it is.
    let exposed = on_sqlite("exposed", dir.path())
        .args(&["--http", "0.0.0.0:0"])
        .spawn()
        .await
        .unwrap();
    let on_loopback = SocketAddr::from(([127, 0, 0, 1], exposed.addr().port()));
    let answer = get(on_loopback, "/status", Some("evil.example:9464")).await;
    assert_eq!(answer.status, 421, "{answer:?}");
    let answer = get(on_loopback, "/status", Some("10.244.1.7:9464")).await;
    assert_eq!(answer.status, 200, "a kubelet probe's Host: {answer:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_response_tells_the_browser_not_to_sniff_its_type() {
    let dir = tempfile::tempdir().unwrap();
    let host = on_sqlite("nosniff", dir.path()).spawn().await.unwrap();
    let addr = host.addr();
    let local = format!("127.0.0.1:{}", addr.port());
    for (path, status) in [
        ("/status", 200),
        ("/metrics", 200),
        ("/", 200),
        ("/healthz", 200),
        ("/readyz", 200),
        ("/nothing-here", 404),
    ] {
        let answer = get(addr, path, Some(&local)).await;
        assert_eq!(answer.status, status, "{path}: {answer:?}");
        assert_eq!(
            answer.header("x-content-type-options"),
            Some("nosniff"),
            "{path}: {}",
            answer.head
        );
    }
    let page = get(addr, "/", Some(&local)).await;
    assert!(
        page.header("content-security-policy")
            .is_some_and(|csp| csp.contains("script-src 'self'")),
        "the page keeps its policy: {}",
        page.head
    );
    let refused = get(addr, "/status", Some("evil.example")).await;
    assert_eq!(refused.header("x-content-type-options"), Some("nosniff"));
}

/// Raises this process's descriptor limit to what the attack needs (the attacker's sockets are
/// the test's own), or fails saying so. Raised to the hard limit, not just to `wanted`: the other
/// tests of this binary (the floods of watchers among them) share the process's descriptors.
fn allow_descriptors(wanted: u64) {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let limit = getrlimit(Resource::Nofile);
    if limit.current.is_some_and(|c| c >= wanted) {
        return;
    }
    let raised = Rlimit {
        current: limit.maximum,
        maximum: limit.maximum,
    };
    setrlimit(Resource::Nofile, raised).unwrap();
    let now = getrlimit(Resource::Nofile).current;
    assert!(
        now.is_some_and(|c| c >= wanted),
        "this test needs {wanted} descriptors; the hard limit allows {now:?}"
    );
}

/// The descriptors process `pid` holds open. A host's `/proc/PID/fd` is root's alone (the host
/// makes itself undumpable): these tests run as root.
fn descriptors(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_thousand_idle_connections_do_not_keep_a_client_from_healthz() {
    const IDLE: usize = 2_000;
    allow_descriptors(IDLE as u64 + 512);
    let dir = tempfile::tempdir().unwrap();
    // The common soft limit of a service: 2,000 idle sockets are more than the whole process has.
    let host = on_sqlite("crowded", dir.path())
        .under_shell("ulimit -n 1024")
        .spawn()
        .await
        .unwrap();
    let addr = host.addr();
    let before = descriptors(host.pid());

    let started = Instant::now();
    let mut idle = Vec::with_capacity(IDLE);
    // In batches, each given time to be accepted: the kernel completes a handshake the host
    // cannot take in yet only on its retries, and the attack is connections the host holds.
    for _ in 0..IDLE / 100 {
        let mut connecting = tokio::task::JoinSet::new();
        for _ in 0..100 {
            // A connection that sends nothing. Bounded: a host that stops accepting leaves it in
            // the listen backlog, or unanswered once that is full.
            connecting.spawn(tokio::time::timeout(
                Duration::from_secs(3),
                TcpStream::connect(addr),
            ));
        }
        let opened = idle.len();
        while let Some(joined) = connecting.join_next().await {
            if let Ok(Ok(stream)) = joined.unwrap() {
                idle.push(stream);
            }
        }
        if idle.len() == opened {
            break; // the host takes no more
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    println!(
        "{} of {IDLE} idle connections opened in {:?}",
        idle.len(),
        started.elapsed()
    );
    // Let the host take in what it will of them.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let held = descriptors(host.pid());

    let asked = Instant::now();
    let answer = tokio::time::timeout(
        Duration::from_secs(3),
        get(addr, "/healthz", Some("127.0.0.1")),
    )
    .await;
    let took = asked.elapsed();
    println!(
        "descriptors of the host: {before} before, {held} with the idle connections open; \
         /healthz answered in {took:?}"
    );
    let answer = answer.unwrap_or_else(|_| {
        panic!(
            "no answer to /healthz within 3 s behind {} idle connections; log:\n{}",
            idle.len(),
            host.log_text()
        )
    });
    assert_eq!(answer.status, 200, "{answer:?}");
    assert!(took < Duration::from_secs(1), "/healthz took {took:?}");
    assert!(
        held <= before + MAX_CONNECTIONS + 8,
        "the host holds {held} descriptors ({before} before the attack): more than its {MAX_CONNECTIONS} connections"
    );
    drop(idle);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_trickling_its_request_head_or_sending_nothing_is_cut_off() {
    let dir = tempfile::tempdir().unwrap();
    let host = on_sqlite("slowloris", dir.path()).spawn().await.unwrap();
    let addr = host.addr();
    let started = Instant::now();
    let mut silent = TcpStream::connect(addr).await.unwrap();
    let mut trickling = TcpStream::connect(addr).await.unwrap();
    trickling
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
        .await
        .unwrap();
    let bound = HEADER_READ_TIMEOUT * 3;
    let mut silent_closed = None;
    let mut trickling_closed = None;
    let mut byte = [0u8; 64];
    // One byte of the header every 200 ms, until the server closes both or `bound` passes.
    while started.elapsed() < bound && (silent_closed.is_none() || trickling_closed.is_none()) {
        if trickling_closed.is_none() {
            let wrote = trickling.write_all(b"a").await;
            let read = tokio::time::timeout(Duration::from_millis(100), trickling.read(&mut byte));
            if wrote.is_err() || matches!(read.await, Ok(Ok(0) | Err(_))) {
                trickling_closed = Some(started.elapsed());
            }
        }
        if silent_closed.is_none() {
            let read = tokio::time::timeout(Duration::from_millis(100), silent.read(&mut byte));
            if matches!(read.await, Ok(Ok(0) | Err(_))) {
                silent_closed = Some(started.elapsed());
            }
        }
    }
    println!(
        "header read timeout {HEADER_READ_TIMEOUT:?}: trickling client cut off after {trickling_closed:?}, silent one after {silent_closed:?}"
    );
    for (who, closed) in [("trickling", trickling_closed), ("silent", silent_closed)] {
        let closed = closed
            .unwrap_or_else(|| panic!("the {who} client was still connected after {bound:?}"));
        assert!(
            closed >= HEADER_READ_TIMEOUT - Duration::from_millis(500)
                && closed < HEADER_READ_TIMEOUT * 2,
            "the {who} client was cut off after {closed:?}"
        );
    }
    // And the host still answers.
    assert_eq!(get(addr, "/healthz", None).await.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_request_head_or_a_request_body_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let host = on_sqlite("oversized", dir.path()).spawn().await.unwrap();
    let addr = host.addr();
    let big = "a".repeat(100 * 1024);
    let answer = raw(
        addr,
        format!(
            "GET /status HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: {big}\r\nConnection: close\r\n\r\n"
        )
        .as_bytes(),
    )
    .await;
    assert_eq!(answer.status, 431, "a 100 KiB header: {}", answer.head);
    let body = "x".repeat(1024);
    let answer = raw(
        addr,
        format!(
            "GET /status HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
        .as_bytes(),
    )
    .await;
    assert_eq!(answer.status, 413, "a request with a body: {}", answer.head);
    assert_eq!(get(addr, "/healthz", Some("127.0.0.1")).await.status, 200);
}

/// The permission bits of `path`.
fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lease_file_the_host_creates_and_its_wal_shm_and_event_files_are_private() {
    let dir = tempfile::tempdir().unwrap();
    // A plugin writing kv, whose pool opens the same file on its own connections.
    let manifest = std::fs::read_to_string(guests_dist().join("hello-rust.toml")).unwrap();
    let plugins = plugin_dir(&[("hello-rust", &manifest)]).unwrap();
    // The usual umask, which would leave a new file readable by every user.
    let host = on_sqlite("private", dir.path())
        .plugins(plugins.path())
        .under_shell("umask 022")
        .spawn()
        .await
        .unwrap();
    eventually("the host leading", Duration::from_secs(10), async || {
        when(host.role("leader").await, |r| *r == Some(Role::Leader))
    })
    .await
    .unwrap();
    host.wait_for_plugin("hello-rust", "a kv write", Duration::from_secs(30), |p| {
        p.calls >= 1 && p.errors == 0
    })
    .await
    .unwrap();
    for suffix in ["", "-wal", "-shm", "-events"] {
        let path = dir.path().join(format!("leases.db{suffix}"));
        assert!(path.exists(), "{} missing", path.display());
        assert_eq!(mode(&path), 0o600, "{}: {:o}", path.display(), mode(&path));
    }
    drop(host);

    // A file that exists keeps its mode (replicas of several users may share it through its
    // group), and a mode open to everyone is warned about.
    let shared = tempfile::tempdir().unwrap();
    let open = shared.path().join("leases.db");
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .open(&open)
        .unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o644)).unwrap();
    let host = on_sqlite("open", shared.path()).spawn().await.unwrap();
    host.wait_for_log("chmod 600", Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(mode(&open), 0o644, "{}", open.display());
}

/// The attack: a thousand connections a second from one address (127.0.0.2), each sending
/// nothing and held for 1.5 s, for 5 s. Meanwhile a probe from another address (127.0.0.1)
/// asks for `/healthz` every 100 ms, as a kubelet with a 1 s timeout would: every one is
/// answered within that second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_silent_connections_from_one_address_leaves_healthz_answering_another() {
    const PER_SECOND: u64 = 1_000;
    const FLOOD: Duration = Duration::from_secs(5);
    const HELD: Duration = Duration::from_millis(1_500);
    const PROBE_EVERY: Duration = Duration::from_millis(100);
    const PROBE_TIMEOUT: Duration = Duration::from_secs(1);
    // The flood's sockets are the test's own: at most 1.5 s worth open at once.
    allow_descriptors(PER_SECOND * 2 + 512);
    let dir = tempfile::tempdir().unwrap();
    let host = on_sqlite("silent-flood", dir.path()).spawn().await.unwrap();
    let addr = host.addr();
    let attacker = std::net::IpAddr::from([127, 0, 0, 2]);

    let started = Instant::now();
    let flood = tokio::spawn(async move {
        let mut held = tokio::task::JoinSet::new();
        let mut ticks = tokio::time::interval(Duration::from_millis(10));
        let batch = PER_SECOND / 100;
        let (mut opened, mut failed) = (0u64, 0u64);
        for _ in 0..FLOOD.as_millis() / 10 {
            ticks.tick().await;
            for _ in 0..batch {
                held.spawn(async move {
                    let connect = async {
                        let socket = tokio::net::TcpSocket::new_v4()?;
                        socket.bind(SocketAddr::new(attacker, 0))?;
                        socket.connect(addr).await
                    };
                    let began = tokio::time::Instant::now();
                    let stream = tokio::time::timeout(HELD, connect).await;
                    tokio::time::sleep_until(began + HELD).await;
                    matches!(stream, Ok(Ok(_)))
                });
            }
            while let Some(done) = held.try_join_next() {
                match done.unwrap() {
                    true => opened += 1,
                    false => failed += 1,
                }
            }
        }
        while let Some(done) = held.join_next().await {
            match done.unwrap() {
                true => opened += 1,
                false => failed += 1,
            }
        }
        (opened, failed)
    });

    let mut took = Vec::new();
    let mut missed = Vec::new();
    let mut probes = tokio::time::interval(PROBE_EVERY);
    while started.elapsed() < FLOOD {
        probes.tick().await;
        let asked = Instant::now();
        match tokio::time::timeout(PROBE_TIMEOUT, get(addr, "/healthz", Some("127.0.0.1"))).await {
            Ok(answer) if answer.status == 200 => took.push(asked.elapsed()),
            Ok(answer) => missed.push(format!("{:?}: {}", asked - started, answer.head)),
            Err(_) => missed.push(format!("{:?}: no answer within 1 s", asked - started)),
        }
    }
    let (opened, failed) = flood.await.unwrap();
    took.sort();
    println!(
        "{opened} silent connections from {attacker} opened in {:?} ({failed} not within {HELD:?}); \
         /healthz from 127.0.0.1: {} answered (median {:?}, slowest {:?}), {} missed: {missed:?}",
        started.elapsed(),
        took.len(),
        took.get(took.len() / 2).copied().unwrap_or_default(),
        took.last().copied().unwrap_or_default(),
        missed.len(),
    );
    assert!(
        opened >= PER_SECOND * FLOOD.as_secs() / 2,
        "the flood did not happen: {opened} opened, {failed} failed"
    );
    assert!(
        missed.is_empty() && took.len() >= 25,
        "/healthz missed its second {} times of {}: {missed:?}",
        missed.len(),
        took.len() + missed.len()
    );
}
