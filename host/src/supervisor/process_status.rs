//! What `/status` shows of each OS process bound to a lease (`leasehold exec`, `[[process]]`):
//! one [`ProcessStatus`] per process and lease it runs under, kept on the [`StatusBoard`] beside
//! the plugins' cards and written through a [`ProcessCard`] by the task that runs the process
//! ([`super::exec`]). Each change is counted in [`ProcessMetrics`] at the same call, so `/status`
//! and `/metrics` show the same figures.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use super::status::StatusBoard;
use crate::metrics::{Metrics, ProcessMetrics};

/// A process's state on this replica.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ProcessState {
    /// Not running here: the lease is held elsewhere, or not at all.
    Idle,
    /// Running under a term of this replica.
    Running,
    /// Asked to stop (its stop signal sent), not gone yet.
    Stopping,
    /// Exited; waiting to start again (`on_exit = "restart"`).
    Backoff,
    /// Exited as often as its `on_exit` allows: this replica gave the lease up.
    GaveUp,
}

/// One process under one lease, in `/status`.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct ProcessStatus {
    /// The process's name (its table's `name`, or its command's file name).
    pub name: String,
    /// The lease it runs under (a shard's lease for a process bound to a group).
    pub lease: String,
    /// Its state here.
    pub state: ProcessState,
    /// The process id while it runs.
    pub pid: Option<u32>,
    /// The epoch of the term it last started in.
    pub epoch: Option<i64>,
    /// Starts on this replica: `leasehold_process_starts_total`.
    pub starts: u64,
    /// Exits by how the process ended (`code 0`, `signal TERM`):
    /// `leasehold_process_exits_total`.
    pub exits: BTreeMap<String, u64>,
    /// Stops that needed SIGKILL of the tree: `leasehold_process_forced_kills_total`.
    pub forced_kills: u64,
    /// From the stop signal to no process of the tree left, the last time it was stopped.
    pub last_stop_ms: Option<f64>,
    /// Stops not confirmed by the term's deadline: `leasehold_process_unconfirmed_stops_total`.
    pub unconfirmed_stops: u64,
    /// How it ended last, and why it did not start, if so.
    pub last_exit: Option<String>,
}

/// Where the task running one process under one lease writes what it does.
#[derive(Debug, Clone)]
pub struct ProcessCard {
    /// The board the card is on.
    board: StatusBoard,
    /// The counts behind `/metrics`.
    metrics: Arc<Metrics>,
    /// The process's name.
    name: String,
    /// The lease it runs under.
    lease: String,
}

impl ProcessCard {
    /// Puts an idle card for `name` under `lease` on `board` (keeping one already there: a
    /// process follows its lease's terms for the host's life).
    pub fn new(board: &StatusBoard, metrics: Arc<Metrics>, name: &str, lease: &str) -> Self {
        board.put_process(ProcessStatus {
            name: name.to_string(),
            lease: lease.to_string(),
            state: ProcessState::Idle,
            pid: None,
            epoch: None,
            starts: 0,
            exits: BTreeMap::new(),
            forced_kills: 0,
            last_stop_ms: None,
            unconfirmed_stops: 0,
            last_exit: None,
        });
        ProcessCard {
            board: board.clone(),
            metrics,
            name: name.to_string(),
            lease: lease.to_string(),
        }
    }

    fn update(&self, f: impl FnOnce(&mut ProcessStatus)) {
        self.board.update_process(&self.name, &self.lease, f);
    }

    fn label(&self) -> crate::metrics::ProcessLabel {
        ProcessMetrics::label(&self.name, &self.lease)
    }

    /// The process started as `pid` in the term of `epoch`.
    pub fn started(&self, pid: u32, epoch: i64) {
        self.metrics
            .process
            .starts
            .get_or_create(&self.label())
            .inc();
        self.metrics
            .process
            .running
            .get_or_create(&self.label())
            .set(1);
        self.update(|s| {
            s.state = ProcessState::Running;
            s.pid = Some(pid);
            s.epoch = Some(epoch);
            s.starts += 1;
        });
    }

    /// It could not start: `why`.
    pub fn not_started(&self, why: &str) {
        self.update(|s| s.last_exit = Some(format!("did not start: {why}")));
    }

    /// The process itself exited (its tree may live on until the stop): `ended` is `code N` or
    /// `signal NAME`.
    pub fn exited(&self, ended: &str) {
        let label = ProcessMetrics::end_label(&self.name, &self.lease, ended);
        self.metrics.process.exits.get_or_create(&label).inc();
        self.update(|s| {
            *s.exits.entry(ended.to_string()).or_default() += 1;
            s.last_exit = Some(ended.to_string());
            s.pid = None;
        });
    }

    /// Its tree was killed with SIGKILL.
    pub fn killed(&self) {
        self.metrics
            .process
            .forced_kills
            .get_or_create(&self.label())
            .inc();
        self.update(|s| s.forced_kills += 1);
    }

    /// Its stop began.
    pub fn stopping(&self) {
        self.update(|s| s.state = ProcessState::Stopping);
    }

    /// Its stop is over after `took`; `confirmed` when no process of its tree was left by the
    /// term's deadline, as its keeper reported.
    pub fn stopped(&self, took: Duration, confirmed: bool) {
        let label = self.label();
        self.metrics.process.running.get_or_create(&label).set(0);
        self.metrics
            .process
            .last_stop_seconds
            .get_or_create(&label)
            .set(took.as_secs_f64());
        if !confirmed {
            self.metrics
                .process
                .unconfirmed_stops
                .get_or_create(&label)
                .inc();
        }
        self.update(|s| {
            s.state = ProcessState::Idle;
            s.pid = None;
            s.last_stop_ms = Some(took.as_secs_f64() * 1000.0);
            s.unconfirmed_stops += u64::from(!confirmed);
        });
    }

    /// Shows `state` (backoff, gave-up, idle) without anything else changing.
    pub fn show(&self, state: ProcessState) {
        self.update(|s| s.state = state);
    }
}

/// How a process that ran when the host began to stop ended, for the host's last line: `before`
/// is its card then, `after` its card once the host has waited for it.
pub fn how_it_ended(before: &ProcessStatus, after: &ProcessStatus) -> String {
    let who = format!("{} ({})", after.name, after.lease);
    if after.state == ProcessState::Stopping || after.state == ProcessState::Running {
        return format!("{who} was still stopping when the host stopped waiting");
    }
    if after.unconfirmed_stops > before.unconfirmed_stops {
        return format!("{who}: stop unconfirmed, its keeper did not report the tree gone");
    }
    let ended = if after.forced_kills > before.forced_kills {
        "was killed (SIGKILL of its tree) when its grace ran out".to_string()
    } else {
        match after.last_exit.as_deref() {
            Some(code) if code.starts_with("code ") => format!("exited with {code}"),
            Some(signal) if signal.starts_with("signal ") => format!("ended by {signal}"),
            _ => "ended".to_string(),
        }
    };
    match after.last_stop_ms {
        Some(ms) => format!("{who} {ended}, stopped in {ms:.0} ms"),
        None => format!("{who} {ended}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(state: ProcessState) -> ProcessStatus {
        ProcessStatus {
            name: "worker".into(),
            lease: "orders".into(),
            state,
            pid: None,
            epoch: Some(1),
            starts: 1,
            exits: BTreeMap::new(),
            forced_kills: 0,
            last_stop_ms: None,
            unconfirmed_stops: 0,
            last_exit: None,
        }
    }

    #[test]
    fn the_last_line_says_how_each_process_ended_and_how_long_its_stop_took() {
        let before = status(ProcessState::Running);
        let clean = ProcessStatus {
            last_exit: Some("code 0".into()),
            last_stop_ms: Some(12.4),
            ..status(ProcessState::Idle)
        };
        assert_eq!(
            how_it_ended(&before, &clean),
            "worker (orders) exited with code 0, stopped in 12 ms"
        );
        let killed = ProcessStatus {
            last_exit: Some("signal KILL".into()),
            forced_kills: 1,
            last_stop_ms: Some(5_003.0),
            ..status(ProcessState::Idle)
        };
        assert_eq!(
            how_it_ended(&before, &killed),
            "worker (orders) was killed (SIGKILL of its tree) when its grace ran out, stopped in 5003 ms"
        );
        let lost = ProcessStatus {
            unconfirmed_stops: 1,
            ..status(ProcessState::Idle)
        };
        assert!(how_it_ended(&before, &lost).contains("stop unconfirmed"));
        let late = status(ProcessState::Stopping);
        assert!(how_it_ended(&before, &late).contains("still stopping"));
    }
}
