//! Where the task running a process or a service under one lease writes what it does
//! ([`super::exec`], [`super::service`]): its [`ProcessStatus`] on the board, and at the same
//! call its count in [`ProcessMetrics`], so `/status` and `/metrics` show the same figures.

use crate::lease::Epoch;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use super::metrics::{ProcessLabel, ProcessMetrics};
use crate::supervisor::status::process::ProcessKind;
use crate::supervisor::{ProcessState, ProcessStatus, StatusBoard};

/// Where the task running one process under one lease writes what it does.
#[derive(Debug, Clone)]
pub(crate) struct ProcessCard {
    /// The board the card is on.
    board: StatusBoard,
    /// The counts behind `/metrics`.
    metrics: Arc<ProcessMetrics>,
    /// The process's name.
    name: String,
    /// The lease it runs under.
    lease: String,
}

impl ProcessCard {
    /// Puts an idle card for `name` under `lease` on `board` (keeping one already there: a
    /// process follows its lease's terms for the host's life).
    pub fn new(
        board: &StatusBoard,
        metrics: Arc<ProcessMetrics>,
        (name, kind): (&str, ProcessKind),
        lease: &str,
    ) -> Self {
        board.put_process(ProcessStatus {
            name: name.to_string(),
            lease: lease.to_string(),
            kind,
            state: ProcessState::Idle,
            pid: None,
            epoch: None,
            starts: 0,
            exits: BTreeMap::new(),
            forced_kills: 0,
            keeper_stops: 0,
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

    fn label(&self) -> ProcessLabel {
        ProcessMetrics::label(&self.name, &self.lease)
    }

    /// The process started as `pid` in the term of `epoch`; a service (no pid of leasehold's)
    /// once its `activate` script passed.
    pub fn started(&self, pid: Option<u32>, epoch: Epoch) {
        self.metrics.starts.get_or_create(&self.label()).inc();
        self.metrics.running.get_or_create(&self.label()).set(1);
        self.update(|s| {
            s.state = ProcessState::Running;
            s.pid = pid;
            s.epoch = Some(epoch);
            s.starts += 1;
        });
    }

    /// Its start under a term began.
    pub fn starting(&self) {
        self.update(|s| s.state = ProcessState::Starting);
    }

    /// It could not start: `why`.
    pub fn not_started(&self, why: &str) {
        self.update(|s| {
            s.state = ProcessState::Idle;
            s.last_exit = Some(format!("did not start: {why}"));
        });
    }

    /// The process itself exited (its tree may live on until the stop): `ended` is `code N` or
    /// `signal NAME`.
    pub fn exited(&self, ended: &str) {
        let label = ProcessMetrics::end_label(&self.name, &self.lease, ended);
        self.metrics.exits.get_or_create(&label).inc();
        self.update(|s| {
            *s.exits.entry(ended.to_string()).or_default() += 1;
            s.last_exit = Some(ended.to_string());
            s.pid = None;
        });
    }

    /// Its tree was killed with SIGKILL.
    pub fn killed(&self) {
        self.metrics.forced_kills.get_or_create(&self.label()).inc();
        self.update(|s| s.forced_kills += 1);
    }

    /// Its keeper stopped it on its own (the lease's deadline came without a later one, or the
    /// host was gone): counted apart, so a host resumed from a freeze shows who stopped it.
    pub fn stopped_by_keeper(&self) {
        self.metrics.keeper_stops.get_or_create(&self.label()).inc();
        self.update(|s| s.keeper_stops += 1);
    }

    /// Its stop began.
    pub fn stopping(&self) {
        self.update(|s| s.state = ProcessState::Stopping);
    }

    /// Its stop is over after `took`; `confirmed` when no process of its tree was left by the
    /// term's deadline, as its keeper reported.
    pub fn stopped(&self, took: Duration, confirmed: bool) {
        let label = self.label();
        self.metrics.running.get_or_create(&label).set(0);
        self.metrics
            .last_stop_seconds
            .get_or_create(&label)
            .set(took.as_secs_f64());
        if !confirmed {
            self.metrics.unconfirmed_stops.get_or_create(&label).inc();
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
