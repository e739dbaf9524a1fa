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
use crate::capability::Capabilities;
use crate::lease::memory::{Health, MemoryStore};
use crate::lease::{DatabaseUrl, Driver, Leases, Role, Timing};
use crate::lease::{Epoch, LeaseStore};
use crate::plugin::PluginSet;
use crate::runtime::PluginMetrics;
use crate::runtime::Runtime;
use crate::runtime::engine::EngineOptions;
use crate::supervisor::{PluginStatus, StatusBoard};

/// A replica in one process: driver, runtime and supervisor over a plugin directory.
struct Replica {
    leases: Arc<Leases>,
    store: Arc<MemoryStore>,
    board: StatusBoard,
    root: CancellationToken,
    /// The plugin set, as the directory watcher would publish it.
    set: tokio::sync::watch::Sender<Arc<PluginSet>>,
    runtime: Arc<Runtime>,
    capabilities: Arc<Capabilities>,
    plugins: PathBuf,
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
    let metrics = PluginMetrics::new();
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
    let (set_tx, set_rx) = tokio::sync::watch::channel(Arc::new(set));
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
    let supervisor = Supervisor::new(
        runtime.clone(),
        leases.clone(),
        capabilities.clone(),
        set_rx,
    );
    let board = supervisor.board().clone();
    tokio::spawn(supervisor.run(root.clone()));
    Replica {
        leases,
        store,
        board,
        root,
        set: set_tx,
        runtime,
        capabilities,
        plugins: plugins.path().to_path_buf(),
        _dirs: vec![plugins, scratch],
    }
}

impl Replica {
    /// Loads the plugin directory again and publishes it, as the watcher does after a change.
    fn rescan(&self) {
        let previous = self.set.borrow().clone();
        let set = crate::plugin::scan(&self.plugins, &self.runtime, &self.capabilities, &previous)
            .unwrap();
        self.set.send_replace(Arc::new(set));
    }

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

fn health_check(fail: &str) -> String {
    format!("lease = \"leader\"\n[schedule]\ninterval = \"100ms\"\n[config]\nfail = \"{fail}\"\n")
}

#[tokio::test(start_paused = true)]
async fn a_replica_whose_health_check_fails_from_the_start_never_leads_even_alone() {
    // Alone, the lease is free from the first campaign on, which comes before the check has run
    // once: its gate must be shut by then.
    let r = replica(
        "flaky-health",
        &health_check("always"),
        Duration::from_secs(2),
    )
    .await;
    let until = Instant::now() + Duration::from_secs(5);
    while Instant::now() < until {
        assert_eq!(r.role(), Role::Standby);
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let status = r.status("flaky-health");
    assert!(status.errors >= 10, "{status:?}");
    let rows = r.store.get(&["leader".to_string()]).await.unwrap();
    assert!(rows.is_empty(), "the lease was won: {rows:?}");
}

#[tokio::test(start_paused = true)]
async fn a_replica_whose_health_check_passes_leads_once_it_has_passed() {
    let r = replica(
        "flaky-health",
        &health_check("never"),
        Duration::from_secs(2),
    )
    .await;
    r.run_until("leading", Duration::from_secs(5), |r| {
        r.role() == Role::Leader
    })
    .await;
    let status = r.status("flaky-health");
    assert!(status.calls >= 2, "init and a check: {status:?}");
    assert_eq!(status.last_error, None);
}

#[tokio::test(start_paused = true)]
async fn a_failing_health_check_keeps_the_gate_shut_across_reloads_of_its_file_and_its_removal_opens_it()
 {
    // A new file's task starts once the old one's has ended: were the gate opened in between,
    // this lone replica would campaign for the free lease then.
    let r = replica(
        "flaky-health",
        &health_check("always"),
        Duration::from_secs(2),
    )
    .await;
    r.run_until("the check to fail", Duration::from_secs(5), |r| {
        r.status("flaky-health").errors >= 3
    })
    .await;
    for round in 0..5 {
        let manifest = format!("{}# file {round}\n", health_check("always"));
        std::fs::write(r.plugins.join("flaky-health.toml"), manifest).unwrap();
        r.rescan();
        let until = Instant::now() + Duration::from_millis(500);
        while Instant::now() < until {
            assert_eq!(r.role(), Role::Standby, "file {round}");
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
    let rows = r.store.get(&["leader".to_string()]).await.unwrap();
    assert!(rows.is_empty(), "the lease was won: {rows:?}");
    // With the check gone, nothing holds the replica back.
    std::fs::remove_file(r.plugins.join("flaky-health.wasm")).unwrap();
    r.rescan();
    r.run_until("leading", Duration::from_secs(5), |r| {
        r.role() == Role::Leader
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn a_health_check_added_on_the_holder_that_fails_only_there_gives_the_lease_up_then_takes_it_back()
 {
    // Added while this replica leads, the check shuts the gate before it has passed, and its
    // active failures step down before any pass: its standby pass must still open the gate.
    let r = replica("hello-reconciler", HELLO, Duration::from_secs(2)).await;
    r.run_until("leading", Duration::from_secs(5), |r| {
        r.role() == Role::Leader
    })
    .await;
    std::fs::copy(guest("flaky-health"), r.plugins.join("flaky-health.wasm")).unwrap();
    std::fs::write(r.plugins.join("flaky-health.toml"), health_check("active")).unwrap();
    r.rescan();
    r.run_until("stepped down", Duration::from_secs(5), |r| {
        r.role() == Role::Standby
    })
    .await;
    r.run_until("leading again", Duration::from_secs(10), |r| {
        let l = r.leases.leadership("leader").unwrap();
        l.role == Role::Leader && l.epoch == Some(Epoch::new(2))
    })
    .await;
}
