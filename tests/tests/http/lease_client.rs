//! The example clients of the lease API's watch stream (`examples/watch/`) beside real hosts on
//! a real PostgreSQL: each follows its host's `/v1/leases/leader/watch`, works (a row every
//! ~100 ms through `leasehold_fence`) only while its host holds the lease, and stops at once on
//! `ended`, or by its deadline (its last event's arrival + its `stop_within_ms`) when the stream
//! goes silent. A graceful handoff: no write of the old epoch lands after its client said it
//! stopped or after the new epoch's first (whether the old client stops before the new one starts
//! is a race of a few ms, printed: see [`handoff`]). A frozen host: its client stops by its
//! deadline, before the lease can expire and move. A client told by a lying stream that it leads
//! at an epoch that has moved on: the fence refuses its writes, and it stops writing.

#![allow(clippy::unwrap_used, missing_docs)]

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use leasehold_tests::eventually::{Text, eventually, when};
use leasehold_tests::exec::{descendants, signal};
use leasehold_tests::host::{Host, HostBuilder, wait_for_single_leader};
use leasehold_tests::log::{Log, Logged};
use leasehold_tests::status::Role;
use rustix::process::Signal;
use sqlx::{Connection, PgConnection};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, Command};

const LEASE: &str = "leader";
const TTL: Duration = Duration::from_secs(2);
const WAIT: Duration = Duration::from_secs(15);
/// How late past its deadline a client may notice it: a timer, a process's wake-up, the wait
/// for a transaction under way.
const SLACK_MS: u64 = 300;

fn example(name: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../examples/watch")
        .join(name)
        .to_string_lossy()
        .into_owned()
}

/// The system interpreter: the one Debian's python3-psycopg is installed for.
fn python_client() -> Vec<String> {
    vec!["/usr/bin/python3".into(), example("follow_lease.py")]
}

fn shell_client() -> Vec<String> {
    vec!["bash".into(), example("follow-lease.sh")]
}

/// Whether the shell client's tools are installed; if not, says the test is skipped.
fn shell_tools() -> bool {
    ["curl", "psql"].into_iter().all(|tool| {
        let found = std::process::Command::new(tool)
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !found {
            eprintln!(
                "SKIPPED: examples/watch/follow-lease.sh needs {tool}, which is not installed"
            );
        }
        found
    })
}

/// A lease database, and a role for the clients that may call the fence (EXECUTE, as an operator
/// grants it) and owns its table, `lease_writes`, and nothing of the lease tables.
struct Database {
    owner: String,
    client: String,
}

impl Database {
    async fn new() -> Database {
        let pg = leasehold_tests::pg::server();
        let owner = pg.fresh_lease_database().await.unwrap();
        let client = pg.plugin_role(&owner, "watcher").await.unwrap();
        let role = leasehold_tests::pg::user_of(&client).to_string();
        let mut conn = PgConnection::connect(&owner).await.unwrap();
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "GRANT EXECUTE ON FUNCTION leasehold_fence(text, bigint) TO {role}"
        )))
        .execute(&mut conn)
        .await
        .unwrap();
        // Made before the clients start, so that two of them never race to create it.
        let mut conn = PgConnection::connect(&client).await.unwrap();
        sqlx::raw_sql(
            "CREATE TABLE lease_writes (epoch bigint NOT NULL,
                 at timestamptz NOT NULL DEFAULT clock_timestamp())",
        )
        .execute(&mut conn)
        .await
        .unwrap();
        Database { owner, client }
    }

    /// Every committed write, `(epoch, at in ms since the Unix epoch)`, by the rows' own
    /// `clock_timestamp()`.
    async fn writes(&self) -> Vec<(i64, f64)> {
        let mut conn = PgConnection::connect(&self.owner).await.unwrap();
        sqlx::query_as(
            "SELECT epoch, (extract(epoch FROM at) * 1000)::float8 FROM lease_writes ORDER BY at",
        )
        .fetch_all(&mut conn)
        .await
        .unwrap()
    }
}

fn replica(name: &str, db: &Database) -> HostBuilder {
    HostBuilder::new(name)
        .database_url(&db.owner)
        .lease(LEASE)
        .ttl(TTL)
}

/// An example client following one host; its stdout lines in `log`, its stderr's too, marked
/// `! `. Killed with whatever it started when dropped.
struct Client {
    name: String,
    child: Child,
    log: Log,
}

impl Client {
    async fn start(name: &str, command: &[String], host: SocketAddr, db: &Database) -> Client {
        let mut child = Command::new(&command[0])
            .args(&command[1..])
            .env("LEASEHOLD_URL", format!("http://{host}"))
            .env("LEASE", LEASE)
            .env("DATABASE_URL", &db.client)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let log = Log::new(name);
        tokio::spawn(read_lines(child.stdout.take().unwrap(), log.clone(), ""));
        tokio::spawn(read_lines(child.stderr.take().unwrap(), log.clone(), "! "));
        Client {
            name: name.to_string(),
            child,
            log,
        }
    }

    /// The first stdout line that starts with `prefix`, waited for up to `timeout`.
    async fn line(&self, prefix: &str, timeout: Duration) -> String {
        self.line_from(0, prefix, timeout).await
    }

    /// [`Client::line`] among the lines from line `offset` on.
    async fn line_from(&self, offset: usize, prefix: &str, timeout: Duration) -> String {
        eventually(
            format!("{} to print {prefix:?}", self.name),
            timeout,
            async || {
                let lines = self.log.lines_from(offset);
                match lines.iter().find(|l| l.starts_with(prefix)) {
                    Some(line) => Ok(line.clone()),
                    None => Err(Text(lines.join("\n"))),
                }
            },
        )
        .await
        .unwrap()
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        // The shell client's curl and worker first: they would outlive it.
        if let Some(pid) = self.child.id() {
            for p in descendants(pid) {
                signal(p, Signal::KILL);
            }
        }
        let _ = self.child.start_kill();
    }
}

impl Logged for Client {
    fn log(&self) -> &Log {
        &self.log
    }
}

async fn read_lines(from: impl AsyncRead + Unpin, log: Log, mark: &'static str) {
    let mut lines = BufReader::new(from).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        log.push(format!("{mark}{line}"));
    }
}

/// The `at=` of a client's line: wall-clock ms since the Unix epoch.
fn at(line: &str) -> u64 {
    number_after(line, " at=")
}

/// The number right after `key` in `line`.
fn number_after(line: &str, key: &str) -> u64 {
    let rest = &line[line
        .find(key)
        .unwrap_or_else(|| panic!("{key:?} in {line:?}"))
        + key.len()..];
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits
        .parse()
        .unwrap_or_else(|_| panic!("no number after {key:?} in {line:?}"))
}

/// Wall-clock ms since the Unix epoch now.
fn now_ms() -> u64 {
    u64::try_from(leasehold_tests::exec::now_ns() / 1_000_000).unwrap()
}

/// A graceful handoff from host a to host b, each followed by a client running `command`: a's
/// client stops on `ended` (released) and b's starts at epoch 2; the writes of epoch 1 all land
/// before its client says it stopped, and before the first of epoch 2. Whether a's client has
/// said so before b's client starts is printed, not asserted: the host releases the lease a moment
/// after it sends `ended` and waits for no watcher (a client that stops within a few ms usually
/// wins); the fence is what orders the writes.
async fn handoff(command: &[String]) {
    let db = Database::new().await;
    let mut a = replica("a", &db).spawn_leading(LEASE).await.unwrap();
    let b = replica("b", &db).spawn().await.unwrap();
    let on_a = Client::start("a's client", command, a.addr(), &db).await;
    let on_b = Client::start("b's client", command, b.addr(), &db).await;
    let started = on_a.line("started epoch=1 ", WAIT).await;
    assert!(number_after(&started, "stop_within_ms=") > 0, "{started}");
    on_a.line("wrote epoch=1", WAIT).await;
    on_b.line("connected role=standby", WAIT).await;
    // A replica that has just started hears of releases once its LISTEN connection is up, a
    // moment after its lease loop: before that it would take the lease at its expiry instead.
    leasehold_tests::pg::wait_for_listeners(&db.owner, 2, WAIT)
        .await
        .unwrap();

    let term = now_ms();
    a.signal("TERM").unwrap();
    let stopped = on_a.line("stopped epoch=1 ", WAIT).await;
    let started = on_b.line("started epoch=2 ", WAIT).await;
    on_b.line("wrote epoch=2", WAIT).await;
    let (stopped_at, started_at) = (at(&stopped), at(&started));
    eprintln!(
        "handoff: a's client stopped {} ms after the SIGTERM; b's client started {} ms after a's \
         client stopped",
        stopped_at.saturating_sub(term),
        started_at as i64 - stopped_at as i64,
    );
    assert!(
        stopped.contains(" why=ended:released "),
        "{stopped}\n{}",
        on_a.log_text()
    );

    let rows = db.writes().await;
    let of = |epoch: i64| rows.iter().filter(move |r| r.0 == epoch).map(|r| r.1);
    let last_1 = of(1).fold(f64::MIN, f64::max);
    let first_2 = of(2).fold(f64::MAX, f64::min);
    eprintln!(
        "writes: {} of epoch 1, {} of epoch 2; epoch 1's last {:.1} ms before a's client said \
         stopped; {:.1} ms from it to epoch 2's first",
        of(1).count(),
        of(2).count(),
        stopped_at as f64 - last_1,
        first_2 - last_1,
    );
    assert!(of(1).count() > 0 && of(2).count() > 0, "{rows:?}");
    assert!(
        rows.windows(2).all(|w| w[0].0 <= w[1].0),
        "a write of epoch 1 after one of epoch 2: {rows:?}"
    );
    // `at=` is cut to the ms.
    assert!(
        last_1 < stopped_at as f64 + 1.0,
        "a write of epoch 1 landed after its client said it stopped: {last_1} > {stopped_at}"
    );
    a.wait_exit(WAIT).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_client_starts_on_started_writes_through_the_fence_and_stops_on_a_handoff() {
    handoff(&python_client()).await;
}

/// The shell client says `stopped` once its psql session has ended (a few ms of process
/// teardown), by when the next holder may well have started: the race is measured, not asserted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shell_client_starts_on_started_writes_through_the_fence_and_stops_on_a_handoff() {
    if !shell_tools() {
        return;
    }
    handoff(&shell_client()).await;
}

/// Resumes a frozen host when dropped, however the test ends.
struct Thaw<'a>(&'a Host);

impl Drop for Thaw<'_> {
    fn drop(&mut self) {
        let _ = self.0.signal("CONT");
    }
}

/// Host a, leading, is frozen while a client running `command` works beside it: the client's
/// stream goes silent, and it stops by its deadline (its last event's arrival + its
/// `stop_within_ms`, plus [`SLACK_MS`]), before epoch 1 expires in the database and before b's
/// client starts at epoch 2.
async fn cut_from_its_stream(command: &[String]) {
    let db = Database::new().await;
    let a = replica("a", &db).spawn_leading(LEASE).await.unwrap();
    let b = replica("b", &db).spawn().await.unwrap();
    let on_a = Client::start("a's client", command, a.addr(), &db).await;
    let on_b = Client::start("b's client", command, b.addr(), &db).await;
    on_a.line("wrote epoch=1", WAIT).await;
    on_b.line("connected role=standby", WAIT).await;
    // A few renewals and heartbeats in, as a running term is.
    tokio::time::sleep(Duration::from_millis(700)).await;

    // Frozen, the host sends nothing more: no heartbeat, no `ended`, no end of the stream.
    let frozen_at = now_ms();
    a.signal("STOP").unwrap();
    let thaw = Thaw(&a);
    let stopped = on_a.line("stopped epoch=1 ", WAIT).await;
    let started = on_b.line("started epoch=2 ", Duration::from_secs(30)).await;
    on_b.line("wrote epoch=2", WAIT).await;

    assert!(
        stopped.contains(" why=deadline "),
        "{stopped}\n{}",
        on_a.log_text()
    );
    let silent = number_after(&stopped, "no news for ");
    let allowed = number_after(&stopped, ", allowed ");
    let (stopped_at, started_at) = (at(&stopped), at(&started));
    let mut owner = PgConnection::connect(&db.owner).await.unwrap();
    let (expired, ended_by): (f64, String) = sqlx::query_as(
        "SELECT (extract(epoch FROM ended_at) * 1000)::float8, ended_by FROM leasehold_terms
          WHERE name = $1 AND epoch = 1",
    )
    .bind(LEASE)
    .fetch_one(&mut owner)
    .await
    .unwrap();
    eprintln!(
        "frozen host: its client's last event allowed {allowed} ms; it stopped after {silent} ms \
         without news, {} ms after the SIGSTOP, {:.0} ms before epoch 1 expired in the database \
         ({ended_by}); b's client started {} ms after it stopped",
        stopped_at.saturating_sub(frozen_at),
        expired - stopped_at as f64,
        started_at.saturating_sub(stopped_at),
    );
    assert!(
        allowed > 0 && allowed <= TTL.as_millis() as u64,
        "{stopped}"
    );
    assert!(
        silent <= allowed + SLACK_MS,
        "stopped {silent} ms after its last event, which allowed {allowed} ms:\n{}",
        on_a.log_text()
    );
    assert_eq!(ended_by, "expired");
    assert!(
        (stopped_at as f64) < expired,
        "the client worked on past epoch 1's expiry:\n{}",
        on_a.log_text()
    );
    assert!(
        stopped_at < started_at,
        "b's client started before a's stopped:\n{}\n{}",
        on_a.log_text(),
        on_b.log_text()
    );
    let rows = db.writes().await;
    let last_1 = rows
        .iter()
        .filter(|r| r.0 == 1)
        .map(|r| r.1)
        .fold(f64::MIN, f64::max);
    assert!(
        last_1 < stopped_at as f64 + 1.0,
        "a write of epoch 1 landed after its client said it stopped: {rows:?}"
    );
    assert!(
        rows.windows(2).all(|w| w[0].0 <= w[1].0),
        "a write of epoch 1 after one of epoch 2: {rows:?}"
    );

    // Resumed, the host finds its deadline long past and the lease gone; its client reconnects,
    // is told so, and starts nothing.
    let from = on_a.log_len();
    drop(thaw);
    let resumed = std::time::Instant::now();
    eventually("a standby once resumed", WAIT, async || {
        when(a.role(LEASE).await, |r| *r == Some(Role::Standby))
    })
    .await
    .unwrap();
    let standby_after = resumed.elapsed();
    // The first `state` may still say leader, of the old epoch, but with no time left.
    let connected = on_a.line_from(from, "connected role=", WAIT).await;
    eprintln!(
        "resumed: a standby {standby_after:.0?} after the SIGCONT; its client reconnected: {connected}"
    );
    assert!(
        !connected.contains("role=leader") || connected.contains(" stop_within_ms=0 "),
        "{}",
        on_a.log_text()
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after = on_a.log_lines_from(from).join("\n");
    assert!(!after.contains("started epoch="), "{after}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_python_client_cut_from_its_stream_stops_by_its_deadline_before_the_lease_can_move() {
    cut_from_its_stream(&python_client()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shell_client_cut_from_its_stream_stops_by_its_deadline_before_the_lease_can_move() {
    if !shell_tools() {
        return;
    }
    cut_from_its_stream(&shell_client()).await;
}

/// A watch stream that lies: served on a free port, it tells every client that this replica leads
/// `lease` at `epoch` with 10 s to go, and repeats it every 300 ms.
async fn lying_stream(epoch: i64) -> (SocketAddr, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut request = [0u8; 4096];
                let _ = conn.read(&mut request).await;
                let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\
                            connection: close\r\n\r\n";
                let mut out = head.to_string();
                for kind in ["state"].into_iter().chain(std::iter::repeat("heartbeat")) {
                    let data = serde_json::json!({
                        "lease": LEASE, "role": "leader", "epoch": epoch,
                        "stop_within_ms": 10_000, "at_ms": now_ms(),
                    });
                    out.push_str(&format!("event: {kind}\ndata: {data}\n\n"));
                    if conn.write_all(out.as_bytes()).await.is_err() {
                        return;
                    }
                    out.clear();
                    tokio::time::sleep(Duration::from_millis(300)).await;
                }
            });
        }
    });
    (addr, server)
}

/// A client misled about its epoch (here by a stream that lies; in life by a host or network
/// stalled in just the wrong way) writes nothing: the fence refuses the epoch that has moved on,
/// and the client stops writing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_python_client_told_it_leads_at_an_epoch_that_has_moved_on_is_refused_by_the_fence() {
    let db = Database::new().await;
    let mut a = replica("a", &db).spawn_leading(LEASE).await.unwrap();
    let b = replica("b", &db).spawn().await.unwrap();
    // b hears of a's release (its LISTEN connection is up), and takes the lease at once.
    leasehold_tests::pg::wait_for_listeners(&db.owner, 2, WAIT)
        .await
        .unwrap();
    a.stop(WAIT).await.unwrap();
    wait_for_single_leader(&[&b], LEASE, WAIT).await.unwrap();
    let (liar, _server) = lying_stream(1).await;
    let misled = Client::start("misled client", &python_client(), liar, &db).await;
    misled.line("started epoch=1 ", WAIT).await;
    let refused = misled.line("refused epoch=1", WAIT).await;
    // Its work has ended: nothing more is tried, let alone written.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let log = misled.log_text();
    eprintln!("misled client: {refused}");
    assert!(!log.contains("wrote epoch=1"), "{log}");
    assert_eq!(log.matches("refused").count(), 1, "{log}");
    assert_eq!(db.writes().await, vec![], "{log}");
}
