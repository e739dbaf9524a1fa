//! The supervisor driven in-process: a real lease driver on the memory store, the real runtime
//! and real guests from `guests/dist/` (`make guests`), under paused time. Advancing the paused
//! clock past a deadline in one jump is what a frozen and resumed process sees: every timer due
//! at once, the tasks then run in whatever order the scheduler picks.

#![allow(clippy::unwrap_used)]

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::Supervisor;
use super::status::{PluginStatus, StatusBoard};
use crate::capability::Capabilities;
use crate::lease::memory::{Health, MemoryStore};
use crate::lease::{DatabaseUrl, Driver, Leases, Role, Timing};
use crate::metrics::Metrics;
use crate::runtime::Runtime;
use crate::runtime::engine::EngineOptions;

/// A replica in one process: driver, runtime and supervisor over a plugin directory.
struct Replica {
    leases: Arc<Leases>,
    store: Arc<MemoryStore>,
    board: StatusBoard,
    root: CancellationToken,
    _dirs: Vec<tempfile::TempDir>,
}

fn guest(name: &str) -> PathBuf {
    let path =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("../guests/dist/{name}.wasm"));
    assert!(
        path.is_file(),
        "{} is missing: run `make guests` (make test does)",
        path.display()
    );
    path
}

/// Starts a replica leading `leader` on a memory store, running `plugin` with `manifest`.
async fn replica(plugin: &str, manifest: &str, ttl: Duration) -> Replica {
    let plugins = tempfile::tempdir().unwrap();
    let scratch = tempfile::tempdir().unwrap();
    std::fs::copy(guest(plugin), plugins.path().join(format!("{plugin}.wasm"))).unwrap();
    std::fs::write(plugins.path().join(format!("{plugin}.toml")), manifest).unwrap();
    let metrics = Metrics::new();
    let runtime = Runtime::new(
        EngineOptions::default(),
        Some(&scratch.path().join("cache")),
        metrics.clone(),
    )
    .unwrap();
    let capabilities = Capabilities::new(
        DatabaseUrl::Sqlite {
            path: scratch.path().join("unused.db"),
        },
        Duration::from_secs(3),
    );
    let set =
        crate::plugin::scan(plugins.path(), &runtime, &capabilities, &Default::default()).unwrap();
    assert!(
        set[plugin].loaded.is_ok(),
        "{:?}",
        set[plugin].loaded.as_ref().err()
    );
    let (_set_tx, set_rx) = tokio::sync::watch::channel(Arc::new(set));
    std::mem::forget(_set_tx); // the set never changes in these tests
    let store = Arc::new(MemoryStore::new());
    let root = CancellationToken::new();
    let (driver, leases) = Driver::new(
        store.clone(),
        crate::lease::seams::Seams::system().holder_id("sup"),
        Timing::from_ttl(ttl),
        ["leader".to_string()],
        root.clone(),
    );
    tokio::spawn(driver.run());
    let supervisor = Supervisor::new(runtime, leases.clone(), capabilities, set_rx);
    let board = supervisor.board().clone();
    tokio::spawn(supervisor.run(root.clone()));
    Replica {
        leases,
        store,
        board,
        root,
        _dirs: vec![plugins, scratch],
    }
}

impl Replica {
    fn role(&self) -> Role {
        self.leases.leadership("leader").unwrap().role
    }

    fn status(&self, plugin: &str) -> PluginStatus {
        self.board
            .snapshot()
            .into_iter()
            .find(|s| s.name == plugin)
            .unwrap()
    }

    /// Lets paused time run (in steps, so tasks interleave as in real time) until `done`.
    async fn run_until(&self, what: &str, limit: Duration, done: impl Fn(&Replica) -> bool) {
        let give_up = Instant::now() + limit;
        while !done(self) {
            assert!(
                Instant::now() < give_up,
                "not within {limit:?}: {what}; {:?} {:?}",
                self.leases.leadership("leader").map(|l| (l.role, l.epoch)),
                self.board.snapshot()
            );
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    /// Whether no term runs (the role may still be `uncertain`).
    fn term_ended(&self) -> bool {
        let leadership = self.leases.leadership("leader").unwrap();
        leadership.term.is_none_or(|t| t.is_cancelled())
    }

    /// The running term's deadline.
    fn safe_until(&self) -> Instant {
        self.leases
            .leadership("leader")
            .unwrap()
            .term
            .unwrap()
            .safe_until()
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        self.root.cancel();
    }
}

const HELLO: &str = "lease = \"leader\"\n[schedule]\ninterval = \"20ms\"\n";

#[tokio::test(start_paused = true)]
async fn after_a_freeze_no_guest_call_starts_past_the_deadline_whatever_runs_first() {
    // Many trials: the order in which due tasks run after the jump is the scheduler's.
    for trial in 0..20 {
        let r = replica("hello-reconciler", HELLO, Duration::from_secs(2)).await;
        r.run_until("leading with calls", Duration::from_secs(5), |r| {
            r.role() == Role::Leader && r.status("hello-reconciler").calls >= 3
        })
        .await;
        // The store stops answering, then the process "freezes" past safe_until.
        r.store.set_health(Health::Hanging);
        let calls = r.status("hello-reconciler").calls;
        let frozen_for = r.safe_until() - Instant::now() + Duration::from_millis(2 * trial + 1);
        tokio::time::advance(frozen_for).await;
        r.run_until(
            "the term to end",
            Duration::from_secs(5),
            Replica::term_ended,
        )
        .await;
        tokio::time::sleep(Duration::from_millis(100)).await;
        let status = r.status("hello-reconciler");
        assert_eq!(
            status.calls, calls,
            "trial {trial}: a guest call started after the term's deadline"
        );
        assert_eq!(status.traps, 0, "trial {trial}: {:?}", status.last_error);
        assert_eq!(
            status.last_error, None,
            "trial {trial}: a cancel is not a failure"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_call_spanning_renewals_follows_the_moving_deadline() {
    // Each reconcile blocks in a WASI sleep for 3 s, across several renewals of a 2 s ttl (each
    // moves safe_until forward): the call must not end at the deadline it started under.
    let manifest = "lease = \"leader\"\n[schedule]\ninterval = \"10ms\"\n[limits]\ncall_timeout = \"1m\"\n[config]\nverb = \"sleep\"\nms = \"3000\"\n";
    let r = replica("misbehave", manifest, Duration::from_secs(2)).await;
    r.run_until("three calls done", Duration::from_secs(15), |r| {
        r.status("misbehave").calls >= 4
    })
    .await;
    let status = r.status("misbehave");
    assert_eq!(status.last_error, None, "a call was cut short");
    assert_eq!(r.role(), Role::Leader);
}

#[tokio::test(start_paused = true)]
async fn a_call_in_flight_at_the_deadline_is_cancelled_then_resumes_with_the_next_term() {
    let manifest = "lease = \"leader\"\n[schedule]\ninterval = \"10ms\"\n[limits]\ncall_timeout = \"1m\"\n[config]\nverb = \"sleep\"\nms = \"30000\"\n";
    let r = replica("misbehave", manifest, Duration::from_secs(2)).await;
    r.run_until("inside the long call", Duration::from_secs(5), |r| {
        r.role() == Role::Leader && r.status("misbehave").calls >= 2
    })
    .await;
    r.store.set_health(Health::Hanging);
    let deadline = r.safe_until();
    r.run_until(
        "the term to end",
        Duration::from_secs(5),
        Replica::term_ended,
    )
    .await;
    // The term ended on its deadline, on the paused clock: the call did not hold it up.
    assert!(Instant::now() >= deadline);
    assert!(Instant::now() - deadline < Duration::from_millis(5));
    let status = r.status("misbehave");
    assert_eq!(status.traps, 0);
    assert_eq!(
        status.last_error, None,
        "a cancel is not the plugin's failure"
    );
    // The store answers again: the next term runs the plugin afresh.
    r.store.set_health(Health::Up);
    r.run_until("leading again", Duration::from_secs(10), |r| {
        r.role() == Role::Leader
    })
    .await;
    r.run_until("a call in the new term", Duration::from_secs(5), |r| {
        r.status("misbehave").calls >= 4
    })
    .await;
}
