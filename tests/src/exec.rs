//! The shell worker that `leasehold exec` runs in the tests and the bench, and the history it
//! writes: the worker and a grandchild it double-forks into a session of its own append
//! `EPOCH HOLDER start|alive|stop NANOS` lines (wall-clock nanoseconds, every 50 ms) to one file
//! that every replica's worker shares. The history says whether two terms' workers ever ran at
//! once.

use std::path::Path;

/// The worker: a start line, then a heartbeat every 50 ms from itself and from a grandchild
/// that left its session; a stop line on SIGTERM. Its one argument is the history file.
pub const WORKER: &str = r#"log=$1
say() { echo "$LEASEHOLD_EPOCH $LEASEHOLD_HOLDER $1 $(date +%s%N)" >> "$log"; }
say start
trap 'say stop; exit 0' TERM
(setsid sh -c 'while :; do echo "$LEASEHOLD_EPOCH $LEASEHOLD_HOLDER alive $(date +%s%N)" >> "$0"; sleep 0.05; done' "$log" &)
while :; do say alive; sleep 0.05; done"#;

/// One line of the history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line {
    /// The epoch of the term the worker ran in.
    pub epoch: i64,
    /// The holder id of the replica it ran under.
    pub holder: String,
    /// `start`, `alive` or `stop`.
    pub what: &'static str,
    /// When, in wall-clock nanoseconds since the epoch.
    pub at: u128,
}

/// The history in `file` (lines cut short by a write under way are skipped).
pub fn history(file: &Path) -> Vec<Line> {
    let text = std::fs::read_to_string(file).unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let mut parts = l.split(' ');
            let epoch = parts.next()?.parse().ok()?;
            let holder = parts.next()?.to_string();
            let what = match parts.next()? {
                "start" => "start",
                "stop" => "stop",
                _ => "alive",
            };
            let at = parts.next()?.parse().ok()?;
            Some(Line {
                epoch,
                holder,
                what,
                at,
            })
        })
        .collect()
}

/// Each line of an epoch written at or after the first line of a later epoch: two terms'
/// workers running at once. Empty when the history is clean.
pub fn overlaps(lines: &[Line]) -> Vec<String> {
    let mut found = Vec::new();
    for later in lines.iter().filter(|l| l.what == "start") {
        for late in lines
            .iter()
            .filter(|l| l.epoch < later.epoch && l.at >= later.at)
        {
            found.push(format!(
                "epoch {} ({}) wrote {} at {} after epoch {} started at {}",
                late.epoch, late.holder, late.what, late.at, later.epoch, later.at
            ));
        }
    }
    found
}

/// Now on the wall clock, in nanoseconds since the epoch: the history's clock.
pub fn now_ns() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0)
}

/// Every process below `pid` (children first, then theirs), from `/proc/PID/task/*/children`:
/// the keeper, the worker and whatever the worker started. Linux only, as the keeper is.
pub fn descendants(pid: u32) -> Vec<u32> {
    let mut found = Vec::new();
    let mut next = vec![pid];
    while let Some(parent) = next.pop() {
        let tasks = std::fs::read_dir(format!("/proc/{parent}/task"))
            .into_iter()
            .flatten();
        for task in tasks.flatten() {
            let children =
                std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
            for child in children.split_whitespace().filter_map(|c| c.parse().ok()) {
                found.push(child);
                next.push(child);
            }
        }
    }
    found
}

/// The command name of process `pid` (`/proc/PID/comm`), empty once it is gone.
pub fn command_name(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|c| c.trim().to_string())
        .unwrap_or_default()
}

/// Sends `signal` to process `pid`, ignoring one that is already gone.
pub fn signal(pid: u32, signal: rustix::process::Signal) {
    if let Some(pid) = rustix::process::Pid::from_raw(pid as i32) {
        let _ = rustix::process::kill_process(pid, signal);
    }
}

/// Whether process `pid` still runs: false once it is gone or has exited and waits, a zombie,
/// for its parent to reap it (a frozen parent never does).
pub fn is_running(pid: u32) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The state follows the command name's closing parenthesis.
    match stat
        .rfind(')')
        .and_then(|i| stat[i + 1..].split_whitespace().next())
    {
        Some(state) => state != "Z" && state != "X",
        None => false,
    }
}
