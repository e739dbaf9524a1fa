//! The host's side of a tree whose keeper is gone. A keeper killed on its own (`kill -9`, the
//! OOM killer) takes its child with it (the parent-death signal), but what the child started
//! would go to init and run on while the host starts the work again, or lets another replica
//! take the lease, beside it. So the host is the subreaper of its keepers' trees: such orphans
//! become the host's children, and before it restarts or releases anything the host kills every
//! one of them that carries the dead keeper's mark ([`TREE_VAR`] in its environment, which each
//! keeper gives its child and the child's descendants inherit).
//!
//! Being a subreaper, the host also adopts what a service's `activate` leaves running when its
//! keeper exits (the service's daemon), and must reap those when they end: [`reap_loop`] reaps
//! every child that is not a keeper (the keepers are tokio's to wait for).

use std::collections::BTreeSet;
use std::sync::Mutex;
use std::time::Duration;

use rustix::process::{Pid, Signal, WaitOptions, kill_process, kill_process_group};
use tokio_util::sync::CancellationToken;

use super::tree;

/// The environment variable that marks a keeper's tree: the keeper's child, and whatever it
/// starts, carry it, unless one of them clears its environment.
pub(crate) const TREE_VAR: &str = "LEASEHOLD_TREE";

/// How long a sweep may go on killing a dead keeper's orphans: each round kills the processes the
/// last one made the host's children; a tree of a few levels is gone in milliseconds.
const SWEEP_BOUND: Duration = Duration::from_secs(2);

/// Rounds in a row that find no marked process before a sweep is over: a process being killed
/// hands its children to the host a moment later.
const EMPTY_ROUNDS: u32 = 3;

/// Between two rounds of a sweep.
const SWEEP_ROUND: Duration = Duration::from_millis(5);

/// How often adopted children are reaped when no SIGCHLD says so (a signal can be coalesced).
const REAP_FALLBACK: Duration = Duration::from_secs(5);

/// The pids of the keepers that are this host's live children: tokio waits for them, so they
/// are never reaped here.
static KEEPERS: Mutex<BTreeSet<i32>> = Mutex::new(BTreeSet::new());

fn keepers() -> std::sync::MutexGuard<'static, BTreeSet<i32>> {
    KEEPERS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A keeper started as `pid`.
pub(crate) fn keeper_started(pid: u32) {
    if let Ok(pid) = i32::try_from(pid) {
        keepers().insert(pid);
    }
}

/// The keeper `pid` was waited for (or its handle dropped: tokio reaps it then).
pub(crate) fn keeper_ended(pid: u32) {
    if let Ok(pid) = i32::try_from(pid) {
        keepers().remove(&pid);
    }
}

/// Makes this process the subreaper of what it starts: orphans below it come to it rather
/// than to init.
pub fn become_subreaper() -> std::io::Result<()> {
    rustix::process::set_child_subreaper(Some(rustix::process::getpid()))
        .map_err(std::io::Error::from)
}

/// Reaps every child of this process that has ended and is not a keeper; how many.
pub(crate) fn reap_adopted() -> usize {
    let ended: Vec<Pid> = tree::children_with_state()
        .into_iter()
        .filter(|(_, state)| *state == 'Z')
        .map(|(pid, _)| pid)
        .collect();
    let keepers = keepers().clone();
    let mut reaped = 0;
    for pid in ended {
        if keepers.contains(&pid.as_raw_nonzero().get()) {
            continue;
        }
        if let Ok(Some(_)) = rustix::process::waitpid(Some(pid), WaitOptions::NOHANG) {
            reaped += 1;
        }
    }
    reaped
}

/// Reaps adopted children as they end (on SIGCHLD, and every few seconds) until `shutdown`.
pub async fn reap_loop(shutdown: CancellationToken) {
    let Ok(mut sigchld) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::child())
    else {
        return;
    };
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = sigchld.recv() => {}
            _ = tokio::time::sleep(REAP_FALLBACK) => {}
        }
        reap_adopted();
    }
}

/// Whether process `pid` carries `mark` ([`TREE_VAR`]`=mark`) in its environment. One that ended
/// (a zombie has none) or that this host may not read does not.
fn carries(pid: Pid, mark: &str) -> bool {
    let Ok(environ) = std::fs::read(format!("/proc/{}/environ", pid.as_raw_nonzero())) else {
        return false;
    };
    let wanted = format!("{TREE_VAR}={mark}");
    environ
        .split(|&b| b == 0)
        .any(|entry| entry == wanted.as_bytes())
}

/// What a sweep did.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Swept {
    /// The pids it killed.
    pub killed: Vec<i32>,
    /// Whether it found none left at its end (else it ran out of [`SWEEP_BOUND`]).
    pub clean: bool,
}

/// Kills every child of this host that carries `mark`, and whatever each leaves to the host in
/// turn, until none is left (or [`SWEEP_BOUND`] passes).
pub(crate) async fn sweep(mark: &str) -> Swept {
    let until = tokio::time::Instant::now() + SWEEP_BOUND;
    let mut killed = BTreeSet::new();
    let mut empty = 0;
    while empty < EMPTY_ROUNDS && tokio::time::Instant::now() < until {
        let marked: Vec<Pid> = tree::children_with_state()
            .into_iter()
            .filter(|(pid, state)| *state != 'Z' && carries(*pid, mark))
            .map(|(pid, _)| pid)
            .collect();
        if marked.is_empty() {
            empty += 1;
        } else {
            empty = 0;
        }
        for pid in marked {
            let _ = kill_process(pid, Signal::KILL);
            let _ = kill_process_group(pid, Signal::KILL);
            killed.insert(pid.as_raw_nonzero().get());
        }
        reap_adopted();
        tokio::time::sleep(SWEEP_ROUND).await;
    }
    Swept {
        killed: killed.into_iter().collect(),
        clean: empty >= EMPTY_ROUNDS,
    }
}
