//! `GET /readyz/leases/NAME` from outside: ready on the holder alone (and `leasehold status
//! --holds NAME` exits 0 there alone), flipping to the next holder within milliseconds of a
//! handoff; 404 naming the known leases for any other name; a
//! group's shard named with its slash; `--holds` against a host that is down exits 2 naming why.

#![allow(clippy::unwrap_used, missing_docs)]

use std::time::{Duration, Instant};

use leasehold_tests::eventually::{eventually, when};
use leasehold_tests::host::{HostBuilder, binary};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_is_ready_on_its_holder_alone_and_flips_within_milliseconds_of_a_handoff() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite:{}", dir.path().join("leases.db").display());
    let mut a = HostBuilder::new("a")
        .database_url(&url)
        .spawn_leading("leader")
        .await
        .unwrap();
    let b = HostBuilder::new("b")
        .database_url(&url)
        .spawn()
        .await
        .unwrap();
    let (code, body) = a.get("/readyz/leases/leader").await.unwrap();
    assert_eq!(code, 200, "{body}");
    assert!(
        body.starts_with("ready: this replica holds leader at epoch 1; stop within "),
        "{body}"
    );
    let (code, body) = b.get("/readyz/leases/leader").await.unwrap();
    assert_eq!(code, 503, "{body}");
    assert_eq!(body, "not ready: this replica does not hold leader\n");

    // The same from the command line, for a container's health check: 0 holder, 1 standby,
    // 2 for a lease the host does not know.
    for (host, lease, code, said) in [
        (&a, "leader", 0, "ready: this replica holds leader"),
        (
            &b,
            "leader",
            1,
            "not ready: this replica does not hold leader",
        ),
        (&b, "nope", 2, "no lease named \"nope\" here"),
    ] {
        let url = host.addr().to_string();
        let out = tokio::process::Command::new(binary().unwrap())
            .args(["status", "--url", &url, "--holds", lease])
            .output()
            .await
            .unwrap();
        let told = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(out.status.code(), Some(code), "{told}");
        assert!(told.contains(said), "{told}");
    }

    let signalled = Instant::now();
    a.signal("TERM").unwrap();
    eventually("b ready for leader", Duration::from_secs(10), async || {
        when(b.get("/readyz/leases/leader").await.unwrap().0, |c| {
            *c == 200
        })
    })
    .await
    .unwrap();
    let flipped = signalled.elapsed();
    eprintln!("SIGTERM to a → b's /readyz/leases/leader 200: {flipped:?}");
    // A handoff, not an expiry: well under the ttl (15 s).
    assert!(flipped < Duration::from_secs(2), "{flipped:?}");
    a.wait_exit(Duration::from_secs(20)).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_lease_is_404_naming_the_known_ones_and_a_shard_is_named_with_its_slash() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite:{}", dir.path().join("leases.db").display());
    let host = HostBuilder::new("solo")
        .database_url(&url)
        .args(&["--group", "orders=2", "--lease", "leader"])
        .spawn_leading("leader")
        .await
        .unwrap();
    let (code, body) = host.get("/readyz/leases/nope").await.unwrap();
    assert_eq!(code, 404, "{body}");
    assert_eq!(
        body,
        "no lease named \"nope\" here; this replica campaigns for: leader, orders/0, orders/1\n"
    );
    eventually(
        "the shard orders/1 ready here",
        Duration::from_secs(20),
        async || {
            when(
                host.get("/readyz/leases/orders/1").await.unwrap(),
                |(c, _)| *c == 200,
            )
        },
    )
    .await
    .unwrap();
}

#[tokio::test]
async fn status_holds_against_a_host_that_is_down_exits_2_naming_the_cause() {
    // A port nobody listens on: bound, then let go.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let out = tokio::process::Command::new(binary().unwrap())
        .args([
            "status",
            "--url",
            &format!("127.0.0.1:{port}"),
            "--holds",
            "web",
        ])
        .env_remove("RUST_LOG")
        .env_remove("LEASEHOLD_STATUS_URL")
        .output()
        .await
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        out.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(
        err.contains("cannot say whether the host holds web")
            && err.contains(&format!("GET http://127.0.0.1:{port}/readyz/leases/web"))
            && err.contains("Connection refused"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
}
