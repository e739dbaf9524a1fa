//! The watch stream (`/v1/leases/NAME/watch`) attacked from outside, on real hosts: a handoff
//! seen on both replicas on PostgreSQL, the old holder's end stamped before the new holder's
//! start, with the time each event took to reach its client; what a reconnect is told; a client
//! that never reads is dropped while the lease goes on; hundreds of them from one address take
//! only that address's share of the streams, and another address is served.

#![allow(clippy::unwrap_used, missing_docs)]

use std::io::Write;
use std::net::SocketAddr;
use std::os::fd::OwnedFd;
use std::time::Duration;

use leasehold_tests::endpoint::sample;
use leasehold_tests::eventually::{eventually, when};
use leasehold_tests::host::HostBuilder;
use leasehold_tests::log::Logged;
use leasehold_tests::sse::Watch;
use serde_json::Value;

const LEASE: &str = "leader";
const WAIT: Duration = Duration::from_secs(10);
/// The handoff test's ttl. A standby's place in line lives ttl/2 from its last campaign (sent
/// every ttl/5): at 4 s, a second of a loaded machine's delay still leaves b its place.
const HANDOFF_TTL: Duration = Duration::from_secs(4);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stream_reports_a_handoff_on_both_replicas_the_old_end_stamped_before_the_new_start() {
    let url = leasehold_tests::pg::server()
        .fresh_database()
        .await
        .unwrap();
    let mut a = HostBuilder::new("a")
        .database_url(&url)
        .ttl(HANDOFF_TTL)
        .spawn_leading(LEASE)
        .await
        .unwrap();
    let b = HostBuilder::new("b")
        .database_url(&url)
        .ttl(HANDOFF_TTL)
        .spawn()
        .await
        .unwrap();
    let mut on_a = Watch::open(a.addr(), LEASE, None).await.unwrap().follow();
    let mut on_b = Watch::open(b.addr(), LEASE, None).await.unwrap().follow();
    let (state_a, _) = on_a.until("state", WAIT).await.unwrap();
    assert_eq!(
        (
            state_a.event.as_str(),
            state_a.field("role"),
            state_a.field("epoch")
        ),
        ("state", Value::from("leader"), Value::from(1))
    );
    let (state_b, _) = on_b.until("state", WAIT).await.unwrap();
    assert_eq!(state_b.field("role"), "standby");
    // A replica that has just started hears of releases once its LISTEN connection is up, a
    // moment after its lease loop: before that it would take the lease at its expiry instead.
    leasehold_tests::pg::wait_for_listeners(&url, 2, WAIT)
        .await
        .unwrap();
    // b is given the lease only from a place in its line, which its campaigns keep.
    a.wait_placed(LEASE, &["b"], WAIT).await.unwrap();

    a.signal("TERM").unwrap();
    let (ended, _) = on_a.until("ended", WAIT).await.unwrap();
    let (started, _) = on_b.until("started", WAIT).await.unwrap();
    let (ended_at, started_at) = (
        ended.field("at_ms").as_u64().unwrap(),
        started.field("at_ms").as_u64().unwrap(),
    );
    eprintln!(
        "handoff: a's term ended at {ended_at}, b's began at {started_at} (+{} ms); events reached their clients {} ms and {} ms after",
        started_at.saturating_sub(ended_at),
        ended.received_ms().saturating_sub(ended_at),
        started.received_ms().saturating_sub(started_at),
    );
    assert!(ended_at <= started_at, "{ended:?} / {started:?}");
    assert_eq!(ended.field("reason"), "released");
    assert_eq!(ended.field("epoch"), 1);
    assert_eq!(started.field("epoch"), 2);
    // b was next in line: the release gave it the lease (its log says granted), and its term
    // ran from the grant (ttl/2, less the margin) until its first renewal, sent at once, made
    // that the ttl less the margin. The stream makes an event when it looks, from the deadline
    // as it is then: on a loaded machine that first renewal has landed by the time `started` is
    // made (2,000 ms of grant showed as 3,749 in one run), so `started` shows either.
    let half = HANDOFF_TTL.as_millis() as u64 / 2;
    let acquired = b.wait_for_log("lease acquired", WAIT).await.unwrap();
    assert!(
        acquired.contains("epoch=2") && acquired.contains("granted=true"),
        "{acquired}"
    );
    let given = started.field("stop_within_ms").as_u64().unwrap();
    assert!(
        given > 0 && given < HANDOFF_TTL.as_millis() as u64,
        "{started:?}"
    );
    let (renewed, _) = on_b.until("renewed", WAIT).await.unwrap();
    assert!(
        renewed.field("stop_within_ms").as_u64().unwrap() > half,
        "{renewed:?}"
    );
    // The ids: one change on each (a: its term's end; b: its term's start).
    let id = |e: &leasehold_tests::sse::SseEvent| e.id.clone().unwrap();
    assert!(id(&state_a).starts_with("1@a-"), "{state_a:?}");
    assert!(id(&ended).starts_with("2@a-"), "{ended:?}");
    assert!(id(&state_b).starts_with("0@b-"), "{state_b:?}");
    assert!(id(&started).starts_with("1@b-"), "{started:?}");
    // The old holder's stream ends with its host.
    a.wait_exit(WAIT).await.unwrap();
    let rest = on_a.until("never", WAIT).await.unwrap_err();
    assert!(
        format!("{rest:#}").contains("the stream ended"),
        "a's stream ended when a stopped: {rest:#}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconnect_with_last_event_id_is_told_whether_it_missed_a_change() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite:{}", dir.path().join("leases.db").display());
    let mut a = HostBuilder::new("a")
        .database_url(&url)
        .ttl(Duration::from_secs(2))
        .spawn_leading(LEASE)
        .await
        .unwrap();
    let b = HostBuilder::new("b")
        .database_url(&url)
        .ttl(Duration::from_secs(2))
        .spawn()
        .await
        .unwrap();
    let state = |addr: SocketAddr, id: Option<String>| async move {
        let mut watch = Watch::open(addr, LEASE, id.as_deref()).await.unwrap();
        watch.next(WAIT).await.unwrap()
    };
    let before = state(b.addr(), None).await;
    assert_eq!(before.field("missed"), Value::Null, "no Last-Event-ID");
    let again = state(b.addr(), before.id.clone()).await;
    assert_eq!(
        (again.field("missed"), again.field("missed_changes")),
        (Value::Bool(false), Value::from(0)),
        "nothing changed: {again:?}"
    );

    // b takes the lease while nobody watches it.
    a.signal("TERM").unwrap();
    eventually("b to lead", WAIT, async || {
        when(b.role(LEASE).await, |r| {
            *r == Some(leasehold::lease::Role::Leader)
        })
    })
    .await
    .unwrap();
    let after = state(b.addr(), before.id.clone()).await;
    assert_eq!(
        (
            after.field("missed"),
            after.field("missed_changes"),
            after.field("role")
        ),
        (Value::Bool(true), Value::from(1), Value::from("leader")),
        "{after:?}"
    );
    assert!(
        after.id.as_deref().unwrap().starts_with("1@b-"),
        "{after:?}"
    );
    // An id of another process (a's), or none of any: missed, and how many cannot be known.
    for id in [before.id.unwrap().replace("@b-", "@a-"), "garbage".into()] {
        let told = state(b.addr(), Some(id.clone())).await;
        assert_eq!(
            (told.field("missed"), told.field("missed_changes")),
            (Value::Bool(true), Value::Null),
            "{id}: {told:?}"
        );
    }
    a.wait_exit(WAIT).await.unwrap();
}

/// A TCP connection to `addr` whose receive buffer is as small as the kernel allows, so that a
/// client that does not read closes its window after a few events.
fn tiny_window_connection(addr: SocketAddr) -> std::net::TcpStream {
    use rustix::net::{AddressFamily, SocketType, connect, socket, sockopt};
    let fd: OwnedFd = socket(AddressFamily::INET, SocketType::STREAM, None).unwrap();
    sockopt::set_socket_recv_buffer_size(&fd, 1).unwrap();
    connect(&fd, &addr).unwrap();
    std::net::TcpStream::from(fd)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watcher_that_never_reads_is_dropped_and_no_lease_is_lost() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite:{}", dir.path().join("leases.db").display());
    let a = HostBuilder::new("a")
        .database_url(&url)
        .ttl(Duration::from_secs(1))
        .spawn_leading(LEASE)
        .await
        .unwrap();
    // One client that reads, three that never do.
    let mut reader = Watch::open(a.addr(), LEASE, None).await.unwrap();
    let mut stalled = Vec::new();
    for _ in 0..3 {
        let mut stream = tiny_window_connection(a.addr());
        write!(
            stream,
            "GET /v1/leases/{LEASE}/watch HTTP/1.1\r\nHost: localhost\r\n\r\n"
        )
        .unwrap();
        stalled.push(stream);
    }
    eventually("four watchers counted", WAIT, async || {
        let m = a.metrics().await.unwrap();
        when(sample(&m, "leasehold_http_watchers"), |n| *n == Some(4.0))
    })
    .await
    .unwrap();
    let epoch = a.status().await.unwrap().leases[0].epoch;
    // Their windows close after a few events; 10 s later the kernel gives up on them.
    let started = tokio::time::Instant::now();
    eventually(
        "the stalled watchers dropped",
        Duration::from_secs(60),
        async || {
            let m = a.metrics().await.unwrap();
            // The reader keeps reading meanwhile.
            reader.next(WAIT).await.unwrap();
            when(sample(&m, "leasehold_http_watchers"), |n| *n == Some(1.0))
        },
    )
    .await
    .unwrap();
    eprintln!(
        "three watchers that never read dropped {:?} after they connected",
        started.elapsed()
    );
    let status = a.status().await.unwrap();
    assert_eq!(status.leases[0].epoch, epoch, "the lease never moved");
    assert!(
        !a.log_text().contains("renewal failing"),
        "renewals landed throughout"
    );
    drop(stalled);
}

/// A connection to `addr` from `from` (any address of 127.0.0.0/8: all of it is loopback) with
/// a receive buffer as small as the kernel allows.
fn tiny_window_connection_from(from: std::net::IpAddr, addr: SocketAddr) -> std::net::TcpStream {
    use rustix::net::{AddressFamily, SocketType, bind, connect, socket, sockopt};
    let fd: OwnedFd = socket(AddressFamily::INET, SocketType::STREAM, None).unwrap();
    sockopt::set_socket_recv_buffer_size(&fd, 1).unwrap();
    bind(&fd, &SocketAddr::new(from, 0)).unwrap();
    connect(&fd, &addr).unwrap();
    std::net::TcpStream::from(fd)
}

/// The attack: 400 watch streams from one address (127.0.0.2) whose client never reads, against
/// a host whose open-file limit leaves room for 332 streams. That address gets its share (a
/// quarter) and is refused beyond it, a watcher from another address (127.0.0.1) is served and
/// never misses a deadline, and the streams that are never read are dropped within a few
/// heartbeats of their windows closing; the lease never moves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn never_reading_watchers_from_one_address_leave_another_served_and_are_dropped() {
    const FLOOD: usize = 400;
    let attacker = std::net::IpAddr::from([127, 0, 0, 2]);
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite:{}", dir.path().join("leases.db").display());
    let a = HostBuilder::new("a")
        .database_url(&url)
        .ttl(Duration::from_secs(2))
        .under_shell("ulimit -n 1100")
        .spawn_leading(LEASE)
        .await
        .unwrap();
    let line = a.wait_for_log("watch streams (of", WAIT).await.unwrap();
    let max: usize = line
        .split("room for ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no bound in {line:?}"));
    let share = leasehold::testing::watchers_per_address(max);
    assert!(share < max && max < FLOOD, "{share} of {max}");
    let epoch = a.status().await.unwrap().leases[0].epoch;

    let addr = a.addr();
    let started = tokio::time::Instant::now();
    let flood = tokio::task::spawn_blocking(move || {
        (0..FLOOD)
            .map(|_| {
                let mut stream = tiny_window_connection_from(attacker, addr);
                write!(
                    stream,
                    "GET /v1/leases/{LEASE}/watch HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
                )
                .unwrap();
                stream
            })
            .collect::<Vec<_>>()
    })
    .await
    .unwrap();
    // Metrics are asked on a kept-alive connection, which the flood's connections may take the
    // slot of: a failed ask is asked again.
    let counted = eventually("the flood's streams counted", WAIT, async || {
        let m = a.metrics().await.unwrap_or_default();
        let open = sample(&m, "leasehold_http_watchers");
        let refused = sample(&m, "leasehold_http_watchers_refused_total");
        when((open, refused), |(open, refused)| {
            *open == Some(share as f64) && *refused >= Some((FLOOD - share) as f64)
        })
    })
    .await;
    println!(
        "{FLOOD} never-reading watchers from {attacker} against room for {max}: {counted:?} (open, refused) after {:?}",
        started.elapsed()
    );
    counted.unwrap();

    // A watcher from another address is served while they hold their share, and reads on while
    // they are dropped.
    let window = Duration::from_secs(30);
    let watched = leasehold_tests::flood::watch_all(addr, vec![LEASE.to_string()], window);
    let dropped = async {
        let waited = eventually("the never-reading streams dropped", window, async || {
            let m = a.metrics().await.unwrap_or_default();
            when(
                (
                    sample(&m, "leasehold_http_watchers"),
                    sample(&m, "leasehold_http_watchers_stalled_total"),
                ),
                |(open, stalled)| *open == Some(1.0) && *stalled >= Some(share as f64),
            )
        })
        .await;
        (waited, started.elapsed())
    };
    let (watched, (dropped, after)) = tokio::join!(watched, dropped);
    let watched = watched.unwrap();
    println!(
        "the other address's watcher: {watched:?}; the never-reading ones: {dropped:?}, {after:?} after they connected"
    );
    dropped.unwrap();
    assert_eq!(
        (watched.open, watched.lost.len(), watched.late),
        (1, 0, 0),
        "{watched:?}"
    );
    assert!(watched.events >= 10, "{watched:?}");
    // The address is not shut out: a new stream from it is served.
    let mut again = tiny_window_connection_from(attacker, addr);
    write!(
        again,
        "GET /v1/leases/{LEASE}/watch HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    )
    .unwrap();
    eventually("a new stream from the address", WAIT, async || {
        let m = a.metrics().await.unwrap_or_default();
        when(sample(&m, "leasehold_http_watchers"), |n| *n == Some(1.0))
    })
    .await
    .unwrap();
    let status = a.status().await.unwrap();
    assert_eq!(status.leases[0].epoch, epoch, "the lease never moved");
    drop((flood, again));
}
