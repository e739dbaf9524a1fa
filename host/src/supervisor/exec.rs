//! OS processes bound to leases: on each term of a lease (or of each shard of a group held
//! here), the process runs under a keeper ([`crate::process`]) as a [`Work`]. Every renewal's
//! deadline goes to the keeper, less [`KILL_MARGIN`]; the term's end stops the process in order
//! (its stop signal, SIGKILL of its tree after the grace) before the term's tracker lets the
//! release go ahead. The [`drive`] loop's policy treats an exit as a failure: with
//! `on_exit = "release"` the lease is given up at the first, with `"restart"` the process starts
//! again after a backoff and the lease is given up after `max_failures` in a row.

use std::path::PathBuf;
use std::sync::Arc;

use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, info, info_span, warn};

use super::policy::{BACKOFF_BASE, BACKOFF_MAX, Failures, Policy, Step};
use super::process_card::ProcessCard;
use super::process_status::{ProcessKind, ProcessState};
use super::status::StatusBoard;
use super::terms::each_term;
use super::work::{Work, drive};
use crate::lease::{Leases, Term};
use crate::manifest::Binding;
use crate::metrics::Metrics;
use crate::process::bound::{BoundProcess, KILL_MARGIN, OnExit, signal_name};
use crate::process::handle::Kept;
use crate::process::protocol::{Ended, Report, Why};
use crate::runtime::rate::PluginRate;
use crate::runtime::{CallFailure, Cancel};

/// Runs `bound` on every term of its lease (or of each shard of its group) until `shutdown`.
/// Its output goes to the log at a plugin's rate, one bucket for all of its runs.
pub async fn follow(
    bound: Arc<BoundProcess>,
    leases: Arc<Leases>,
    keeper: PathBuf,
    board: StatusBoard,
    metrics: Arc<Metrics>,
    shutdown: CancellationToken,
) {
    let rate = Arc::new(PluginRate::for_process(&bound.name, &metrics));
    let names: Vec<String> = match &bound.binding {
        Binding::Lease(lease) => vec![lease.to_string()],
        Binding::Group(_) => leases
            .lease_names()
            .filter(|l| bound.binding.covers(l))
            .map(str::to_string)
            .collect(),
    };
    let tasks = tokio_util::task::TaskTracker::new();
    for lease in names {
        let card = ProcessCard::new(
            &board,
            metrics.clone(),
            (&bound.name, ProcessKind::Process),
            &lease,
        );
        let (bound, leases, keeper, board, rate, stop) = (
            bound.clone(),
            leases.clone(),
            keeper.clone(),
            board.clone(),
            rate.clone(),
            shutdown.clone(),
        );
        tasks.spawn(async move {
            follow_lease(bound, &lease, leases, keeper, (board, card), rate, stop).await
        });
    }
    tasks.close();
    tasks.wait().await;
}

/// Runs `bound` on each term of `lease`, one after another.
async fn follow_lease(
    bound: Arc<BoundProcess>,
    lease: &str,
    leases: Arc<Leases>,
    keeper: PathBuf,
    (board, card): (StatusBoard, ProcessCard),
    rate: Arc<PluginRate>,
    shutdown: CancellationToken,
) {
    let Some(leadership) = leases.subscribe(lease) else {
        return;
    };
    let on_term = |term: Term| {
        let span = info_span!("process", process = %bound.name, lease = %lease, epoch = term.epoch);
        let exec = Exec::new(
            bound.clone(),
            term,
            leases.clone(),
            keeper.clone(),
            rate.clone(),
            card.clone(),
        );
        // Under the term's tracker: the release waits until the process is gone.
        exec.run(board.clone()).instrument(span)
    };
    each_term(leadership, &shutdown, on_term, std::future::pending::<()>).await;
}

/// Logs a line a child under a keeper wrote (a process's, a service script's) in the span it
/// runs in, if `rate` allows: escaped to one line, saying how much the keeper cut of it.
pub(super) fn log_output(rate: &PluginRate, err: bool, text: &str, cut: u64) {
    let written = text.len() + usize::try_from(cut).unwrap_or(usize::MAX);
    if !rate.admit(text.len(), written) {
        return;
    }
    let stream = if err { "stderr" } else { "stdout" };
    let text = crate::report::escape_controls(text);
    match cut {
        0 => info!(stream, "{text}"),
        cut => info!(stream, cut, "{text} … ({cut} bytes cut)"),
    }
}

/// One process in one term.
struct Exec {
    /// What to run.
    bound: Arc<BoundProcess>,
    /// The term it runs under.
    term: Term,
    /// The term's deadline as renewals move it.
    deadlines: watch::Receiver<Instant>,
    /// To give the lease up when the process says so.
    leases: Arc<Leases>,
    /// This binary, run as the keeper.
    keeper: PathBuf,
    /// The environment the child gets on top of the host's (less the host's settings).
    env: Vec<(&'static str, String)>,
    /// What its output may cost the log.
    rate: Arc<PluginRate>,
    /// What `/status` and `/metrics` show of it.
    card: ProcessCard,
    /// What its card shows once the stop under way is over: backoff before a restart.
    after_stop: ProcessState,
}

impl Exec {
    fn new(
        bound: Arc<BoundProcess>,
        term: Term,
        leases: Arc<Leases>,
        keeper: PathBuf,
        rate: Arc<PluginRate>,
        card: ProcessCard,
    ) -> Self {
        let mut env = vec![
            ("LEASEHOLD_LEASE", term.lease.clone()),
            ("LEASEHOLD_EPOCH", term.epoch.to_string()),
            ("LEASEHOLD_HOLDER", leases.holder().to_string()),
        ];
        if let (Binding::Group(group), Some(shard)) = (
            &bound.binding,
            term.lease
                .rsplit_once('/')
                .map(|(_, shard)| shard.to_string()),
        ) {
            env.push(("LEASEHOLD_GROUP", group.clone()));
            env.push(("LEASEHOLD_SHARD", shard));
        }
        Exec {
            deadlines: term.deadlines(),
            bound,
            term,
            leases,
            keeper,
            env,
            rate,
            card,
            after_stop: ProcessState::Idle,
        }
    }

    /// Drives the process until the term ends, or its exits give the lease up.
    async fn run(mut self, board: StatusBoard) {
        let policy = match self.bound.on_exit {
            OnExit::Release => Policy {
                quarantine_after: Some(1),
                backoff_base: BACKOFF_BASE,
                backoff_max: BACKOFF_MAX,
            },
            OnExit::Restart => Policy {
                quarantine_after: Some(self.bound.max_failures),
                backoff_base: BACKOFF_BASE,
                backoff_max: BACKOFF_MAX,
            },
        };
        let mut failures = Failures::new(policy);
        let name = self.bound.name.clone();
        drive(&mut self, &mut failures, &board, &name).await;
        if !failures.quarantined() {
            self.card.show(ProcessState::Idle);
        } else if !self.term.is_cancelled() {
            self.card.show(ProcessState::GaveUp);
            warn!(
                exits = failures.count(),
                on_exit = %self.bound.on_exit,
                "giving the lease up: another replica may run the process"
            );
            self.leases.step_down(&self.term.lease);
        }
    }

    /// The keeper's deadline: the term's, less the time its kill takes.
    fn kill_at(&self) -> Instant {
        let safe_until = *self.deadlines.borrow();
        safe_until.checked_sub(KILL_MARGIN).unwrap_or(safe_until)
    }

    /// Logs a line the child wrote, if its rate allows.
    fn output(&self, err: bool, text: &str, cut: u64) {
        log_output(&self.rate, err, text, cut);
    }

    /// Logs what the keeper did.
    fn keeper_said(&self, report: &Report) {
        let signal = signal_name(self.bound.spec.signal);
        match report {
            Report::Signalled(Why::Deadline) => warn!(
                signal = %signal,
                "renewals have not landed: the process was sent its stop signal ahead of the lease's deadline"
            ),
            Report::Signalled(_) => info!(signal = %signal, "process asked to stop"),
            Report::Killed(why) => {
                self.card.killed();
                warn!(%why, "process tree killed");
            }
            _ => {}
        }
    }
}

impl Work for Exec {
    type Running = Kept;

    async fn start(&mut self) -> Result<Kept, CallFailure> {
        let until = self.kill_at();
        if self.term.is_cancelled() || Instant::now() >= until {
            return Err(CallFailure::Cancelled {
                reason: if self.term.is_cancelled() {
                    Cancel::TermEnded
                } else {
                    Cancel::Deadline
                },
                entered: false,
            });
        }
        self.card.starting();
        let mut kept =
            Kept::spawn(&self.keeper, &self.bound.spec, &self.env, until).map_err(|e| {
                self.card.not_started(&e.to_string());
                CallFailure::Exited(e.to_string())
            })?;
        match kept.report().await {
            Some(Report::Started(pid)) => {
                info!(pid, "process started");
                self.card.started(Some(pid), self.term.epoch);
                Ok(kept)
            }
            Some(Report::NotStarted(why)) => {
                self.card.not_started(&why);
                Err(CallFailure::Exited(format!("cannot start: {why}")))
            }
            other => {
                let why = format!("the keeper ended before the process started ({other:?})");
                self.card.not_started(&why);
                Err(CallFailure::Exited(why))
            }
        }
    }

    async fn next(&mut self, kept: &mut Kept) -> Option<Result<(), CallFailure>> {
        let mut deadline_stopped = false;
        loop {
            tokio::select! {
                biased;
                _ = self.term.cancelled() => return None,
                changed = self.deadlines.changed() => {
                    if changed.is_ok() {
                        let until = self.kill_at();
                        if let Err(e) = kept.extend(until).await {
                            warn!("cannot pass the new deadline on: {e}");
                        }
                    }
                }
                report = kept.report() => match report {
                    Some(Report::Output { err, text, cut }) => self.output(err, &text, cut),
                    Some(Report::Exited(ended)) => {
                        info!(%ended, "process exited");
                        self.card.exited(&ended.to_string());
                        // Stopped at the deadline a renewal did not move: the term's to resume.
                        if deadline_stopped {
                            return Some(Err(CallFailure::Cancelled {
                                reason: Cancel::Deadline,
                                entered: true,
                            }));
                        }
                        return Some(Err(CallFailure::Exited(match ended {
                            Ended::Code(code) => format!("exited with code {code}"),
                            Ended::Signal(signal) => format!("ended by signal {signal}"),
                        })));
                    }
                    Some(report) => {
                        // Stopped for want of a renewal, not by its own fault: whether it
                        // ended on the signal or the kill, the term's to resume.
                        deadline_stopped |= matches!(
                            report,
                            Report::Signalled(Why::Deadline) | Report::Killed(Why::Deadline)
                        );
                        self.keeper_said(&report);
                    }
                    None => {
                        return Some(Err(CallFailure::Exited("its keeper ended".to_string())));
                    }
                },
            }
        }
    }

    fn judged(&mut self, _: Step, outcome: Result<(), &CallFailure>, failures: &mut Failures) {
        if let Err(failure @ CallFailure::Exited(_)) = outcome {
            warn!(exits = failures.count(), "process {failure}");
            if !failures.quarantined() {
                self.after_stop = ProcessState::Backoff;
            }
        }
    }

    /// The exits the policy allows are spent: [`Exec::run`] gives the lease up and says so.
    fn quarantined(&mut self, _: u32) {}

    async fn over(&mut self) {
        self.term.cancelled().await;
    }

    async fn resumed(&mut self) -> bool {
        self.term.resumed().await
    }

    /// The ordered stop: the stop signal, SIGKILL of the tree after the grace; the keeper's
    /// reports are logged until it is gone. The keeper keeps its deadline meanwhile, so even a
    /// host that stalls here has the tree dead by `safe_until`.
    async fn stop(&mut self, mut kept: Kept) {
        let asked = Instant::now();
        self.card.stopping();
        if kept.stop().await.is_err() {
            kept.kill();
        }
        let mut gone = false;
        while let Some(report) = kept.report().await {
            match report {
                Report::Output { err, text, cut } => self.output(err, &text, cut),
                Report::Exited(ended) => {
                    info!(%ended, "process exited");
                    self.card.exited(&ended.to_string());
                }
                Report::Gone => {
                    gone = true;
                    info!(took = ?asked.elapsed(), "process stopped: no process of its tree is left");
                }
                report => self.keeper_said(&report),
            }
        }
        let _ = kept.wait().await;
        // Without the keeper's word, nothing says the tree is gone: the stop is unconfirmed.
        if !gone {
            warn!("the process's keeper ended without reporting its tree gone: stop unconfirmed");
        }
        self.card.stopped(asked.elapsed(), gone);
        self.card
            .show(std::mem::replace(&mut self.after_stop, ProcessState::Idle));
    }
}
