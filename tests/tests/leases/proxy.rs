//! The fault proxy between a client and a real server: a black hole holds bytes without closing
//! or losing anything, in one direction or both; a reset aborts every connection; a new route
//! moves only new connections.

#![allow(clippy::unwrap_used, missing_docs)]

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use leasehold_tests::eventually::{eventually, when};
use leasehold_tests::proxy::{Fault, Proxy, upstream_of};
use sqlx::{Connection, PgConnection};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// How long a held exchange is given to (wrongly) get through.
const HELD: Duration = Duration::from_millis(500);

/// A TCP server that greets each connection with `name` and a newline, then echoes.
async fn echo_server(name: &'static str) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            tokio::spawn(async move {
                socket.write_all(format!("{name}\n").as_bytes()).await?;
                let (mut read, mut write) = socket.split();
                tokio::io::copy(&mut read, &mut write).await?;
                std::io::Result::Ok(())
            });
        }
    });
    addr
}

/// Reads exactly `n` bytes, as text.
async fn read_n(stream: &mut TcpStream, n: usize) -> String {
    let mut buf = vec![0; n];
    stream.read_exact(&mut buf).await.unwrap();
    String::from_utf8(buf).unwrap()
}

const BOTH_WAYS: Fault = Fault::BlackHole {
    to_server: true,
    to_client: true,
};

#[tokio::test]
async fn a_black_hole_holds_bytes_of_open_and_new_connections_until_it_is_lifted() {
    let proxy = Proxy::start(echo_server("echo").await).unwrap();
    let mut open = TcpStream::connect(proxy.addr()).await.unwrap();
    assert_eq!(read_n(&mut open, 5).await, "echo\n");
    open.write_all(b"ping").await.unwrap();
    assert_eq!(read_n(&mut open, 4).await, "ping");

    proxy.set(BOTH_WAYS);
    open.write_all(b"held").await.unwrap();
    let mut late = TcpStream::connect(proxy.addr()).await.unwrap();
    late.write_all(b"late").await.unwrap();
    let mut buf = [0; 1];
    assert!(
        tokio::time::timeout(HELD, open.read(&mut buf))
            .await
            .is_err()
    );
    assert!(
        tokio::time::timeout(HELD, late.read(&mut buf))
            .await
            .is_err()
    );
    assert_eq!(proxy.connections(), 2);

    proxy.set(Fault::None);
    assert_eq!(read_n(&mut open, 4).await, "held");
    assert_eq!(read_n(&mut late, 9).await, "echo\nlate");

    // Dropping the proxy closes its connections.
    drop(proxy);
    let end = tokio::time::timeout(HELD, open.read(&mut buf))
        .await
        .unwrap();
    assert!(matches!(end, Ok(0) | Err(_)), "{end:?}");
}

#[tokio::test]
async fn a_one_way_black_hole_holds_only_that_direction() {
    let proxy = Proxy::start(echo_server("echo").await).unwrap();
    let mut client = TcpStream::connect(proxy.addr()).await.unwrap();
    assert_eq!(read_n(&mut client, 5).await, "echo\n");
    proxy.set(Fault::BlackHole {
        to_server: true,
        to_client: false,
    });
    client.write_all(b"up").await.unwrap();
    let mut buf = [0; 1];
    assert!(
        tokio::time::timeout(HELD, client.read(&mut buf))
            .await
            .is_err()
    );
    // The server's replies are now held instead: "up" reaches it, its echo waits.
    proxy.set(Fault::BlackHole {
        to_server: false,
        to_client: true,
    });
    assert!(
        tokio::time::timeout(HELD, client.read(&mut buf))
            .await
            .is_err()
    );
    proxy.set(Fault::None);
    assert_eq!(read_n(&mut client, 2).await, "up");
}

/// The test server's lease-free database, a direct connection to it and one through a proxy.
async fn pg_through_proxy() -> (Proxy, PgConnection, PgConnection) {
    let url = leasehold_tests::pg::server()
        .fresh_database()
        .await
        .unwrap();
    let proxy = Proxy::start(upstream_of(&url).unwrap()).unwrap();
    let mut direct = PgConnection::connect(&url).await.unwrap();
    sqlx::query("CREATE TABLE marks (n int)")
        .execute(&mut direct)
        .await
        .unwrap();
    let proxied = PgConnection::connect(&proxy.url(&url).unwrap())
        .await
        .unwrap();
    (proxy, direct, proxied)
}

async fn marks(direct: &mut PgConnection) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM marks")
        .fetch_one(direct)
        .await
        .unwrap()
}

#[tokio::test]
async fn a_query_held_by_a_black_hole_completes_on_the_same_connection_once_lifted() {
    let (proxy, mut direct, mut proxied) = pg_through_proxy().await;
    let one: i32 = sqlx::query_scalar("SELECT 1")
        .fetch_one(&mut proxied)
        .await
        .unwrap();
    assert_eq!(one, 1);

    proxy.set(BOTH_WAYS);
    let mut insert = tokio::spawn(async move {
        sqlx::query("INSERT INTO marks VALUES (1)")
            .execute(&mut proxied)
            .await
            .map(|done| done.rows_affected())
    });
    assert!(tokio::time::timeout(HELD, &mut insert).await.is_err());
    assert_eq!(
        marks(&mut direct).await,
        0,
        "the statement reached the server"
    );

    proxy.set(Fault::None);
    assert_eq!(insert.await.unwrap().unwrap(), 1);
    assert_eq!(marks(&mut direct).await, 1);
}

#[tokio::test]
async fn a_black_hole_towards_the_client_holds_the_answer_of_a_statement_the_server_ran() {
    let (proxy, mut direct, mut proxied) = pg_through_proxy().await;
    proxy.set(Fault::BlackHole {
        to_server: false,
        to_client: true,
    });
    // One message (simple query protocol): a prepared statement would wait for the held answer
    // to its Parse before sending its Execute.
    let mut insert = tokio::spawn(async move {
        sqlx::raw_sql("INSERT INTO marks VALUES (1)")
            .execute(&mut proxied)
            .await
            .map(|done| done.rows_affected())
    });
    eventually("the insert to commit", HELD * 4, async || {
        when(marks(&mut direct).await, |n| *n == 1)
    })
    .await
    .unwrap();
    assert!(tokio::time::timeout(HELD, &mut insert).await.is_err());
    proxy.set(Fault::None);
    assert_eq!(insert.await.unwrap().unwrap(), 1);
}

#[tokio::test]
async fn a_reset_makes_the_client_see_a_connection_error_at_once() {
    let (proxy, _direct, mut proxied) = pg_through_proxy().await;
    assert_eq!(proxy.connections(), 1);
    proxy.set(Fault::Reset);
    let started = Instant::now();
    let err = sqlx::query("SELECT 1")
        .execute(&mut proxied)
        .await
        .unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(1), "{err}");
    eprintln!("after a reset: {err}");
    eventually("the proxy to drop the connection", HELD, async || {
        when(proxy.connections(), |n| *n == 0)
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn a_new_route_moves_new_connections_and_leaves_open_ones() {
    let proxy = Proxy::start(echo_server("old").await).unwrap();
    let mut before = TcpStream::connect(proxy.addr()).await.unwrap();
    assert_eq!(read_n(&mut before, 4).await, "old\n");
    proxy.route_to(echo_server("new").await);
    let mut after = TcpStream::connect(proxy.addr()).await.unwrap();
    assert_eq!(read_n(&mut after, 4).await, "new\n");
    before.write_all(b"still").await.unwrap();
    assert_eq!(read_n(&mut before, 5).await, "still");
}
