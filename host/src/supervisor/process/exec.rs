//! OS processes bound to leases: on each term of a lease (or of each shard of a group held
//! here), the process runs under a keeper ([`crate::process`]) as a [`Work`]. Every renewal's
//! deadline goes to the keeper, less [`KILL_MARGIN`]; the term's end stops the process in order
//! (its stop signal, SIGKILL of its tree after the grace) before the term's tracker lets the
//! release go ahead. The [`drive`] loop's policy treats an exit as a failure: with
//! `on_exit = "release"` the lease is given up at the first, with `"restart"` the process starts
//! again after a backoff and the lease is given up after `max_failures` in a row.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, info, info_span, warn};

use super::card::ProcessCard;
use super::metrics::ProcessMetrics;
use crate::lease::{Leases, Term};
use crate::manifest::Binding;
use crate::output_rate::{DroppedLines, OutputRate};
use crate::process::bound::{BoundProcess, KILL_MARGIN, OnExit, signal_name};
use crate::process::handle::{Kept, LATE_READ, monotonic_ns_at, since};
use crate::process::protocol::{Ended, Report, Timed, Why};
use crate::supervisor::failure::{Cancel, Failure};
use crate::supervisor::policy::{BACKOFF, Churn, Failures, Policy, Step};
use crate::supervisor::status::process::ProcessKind;
use crate::supervisor::terms::each_term;
use crate::supervisor::work::{Work, drive};
use crate::supervisor::{ProcessState, StatusBoard};

/// Runs `bound` on every term of its lease (or of each shard of its group) until `shutdown`.
/// Its output goes to the log at a plugin's rate, one bucket for all of its runs.
pub async fn follow(
    bound: Arc<BoundProcess>,
    leases: Arc<Leases>,
    keeper: PathBuf,
    board: StatusBoard,
    (metrics, dropped): (Arc<ProcessMetrics>, DroppedLines),
    shutdown: CancellationToken,
) {
    let rate = Arc::new(OutputRate::for_process(&bound.name, &dropped));
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
    rate: Arc<OutputRate>,
    shutdown: CancellationToken,
) {
    let Some(leadership) = leases.subscribe(lease) else {
        return;
    };
    // Kept across terms: how often the work gave its term up soon after it began, and whether
    // the daemonizing hint was given (once for the host's life is enough).
    let across = Across {
        churn: Arc::new(Mutex::new(Churn::default())),
        hinted: Arc::new(AtomicBool::new(false)),
    };
    let on_term = |term: Term| {
        let span =
            info_span!("process", process = %bound.name, lease = %lease, epoch = term.epoch.get());
        crate::telemetry::within_term(&span, &term.lease, term.epoch);
        let exec = Exec::new(
            bound.clone(),
            term,
            leases.clone(),
            keeper.clone(),
            rate.clone(),
            (card.clone(), across.clone()),
        );
        // Under the term's tracker: the release waits until the process is gone.
        exec.run(board.clone()).instrument(span)
    };
    each_term(leadership, &shutdown, on_term, std::future::pending::<()>).await;
}

/// Logs a line a child under a keeper wrote (a process's, a service script's) in the span it
/// runs in, if `rate` allows: escaped to one line, saying how much the keeper cut of it.
pub(super) fn log_output(rate: &OutputRate, err: bool, text: &str, cut: u64) {
    let written = text.len() + usize::try_from(cut).unwrap_or(usize::MAX);
    if !rate.admit(text.len(), written) {
        return;
    }
    let stream = if err { "stderr" } else { "stdout" };
    let text = crate::report::escape_controls(text);
    match cut {
        0 => info!(target: OUTPUT_TARGET, stream, "{text}"),
        cut => info!(target: OUTPUT_TARGET, stream, cut, "{text} … ({cut} bytes cut)"),
    }
}

/// The target of a process's own lines in the host's log, as it was before the process wing had
/// a home of its own: log filters name it.
const OUTPUT_TARGET: &str = "leasehold::supervisor::exec";

/// What one process under one lease keeps from term to term.
#[derive(Clone)]
struct Across {
    /// Terms given up soon after they began, in a row.
    churn: Arc<Mutex<Churn>>,
    /// Whether the hint to run it in the foreground was given.
    hinted: Arc<AtomicBool>,
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
    rate: Arc<OutputRate>,
    /// What `/status` and `/metrics` show of it.
    card: ProcessCard,
    /// What its card shows once the stop under way is over: backoff before a restart.
    after_stop: ProcessState,
    /// What it keeps from term to term.
    across: Across,
    /// When the term began here.
    began: Instant,
    /// When its keeper stopped it on its own (the deadline came with no later one), on the
    /// keeper's clock: its first signal or kill for that reason.
    keeper_stopped: Option<u64>,
    /// How the process last ended.
    ended: Option<Ended>,
}

impl Exec {
    fn new(
        bound: Arc<BoundProcess>,
        term: Term,
        leases: Arc<Leases>,
        keeper: PathBuf,
        rate: Arc<OutputRate>,
        (card, across): (ProcessCard, Across),
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
            across,
            began: Instant::now(),
            keeper_stopped: None,
            ended: None,
        }
    }

    /// Drives the process until the term ends, or its exits give the lease up.
    async fn run(mut self, board: StatusBoard) {
        let policy = match self.bound.on_exit {
            OnExit::Release => Policy {
                quarantine_after: Some(1),
                backoff: BACKOFF,
            },
            OnExit::Restart => Policy {
                quarantine_after: Some(self.bound.max_failures),
                backoff: BACKOFF,
            },
        };
        let mut failures = Failures::new(policy);
        let name = self.bound.name.clone();
        drive(&mut self, &mut failures, &board, &name).await;
        if !failures.quarantined() {
            self.card.show(ProcessState::Idle);
        } else if !self.term.is_cancelled() {
            self.card.show(ProcessState::GaveUp);
            let held = self.began.elapsed();
            let wait = match self.across.churn.lock() {
                Ok(mut churn) => churn.gave_up(held),
                Err(_) => Duration::ZERO,
            };
            warn!(
                exits = failures.count(),
                on_exit = %self.bound.on_exit,
                held = ?held,
                backoff = ?wait,
                "giving the lease up: another replica may run the process; this one waits {} beyond its poll before campaigning again",
                humantime::format_duration(wait)
            );
            self.leases.step_down_backing_off(&self.term.lease, wait);
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

    /// Logs what the keeper did; a report read late (this host was frozen) says how long ago
    /// the keeper did it, by its own clock.
    fn keeper_said(&mut self, timed: &Timed) {
        let signal = signal_name(self.bound.spec.signal);
        let ago = late(timed);
        match &timed.report {
            Report::Signalled(Why::Deadline) => {
                self.keeper_stopped = self.keeper_stopped.or(timed.at);
                warn!(
                    signal = %signal,
                    ago,
                    "renewals have not landed: the process was sent its stop signal ahead of the lease's deadline, by its keeper{}",
                    ago_said(ago)
                )
            }
            Report::Signalled(_) => info!(signal = %signal, "process asked to stop"),
            Report::Killed(why) => {
                if matches!(why, Why::Deadline | Why::HostGone) {
                    self.keeper_stopped = self.keeper_stopped.or(timed.at);
                }
                self.card.killed();
                warn!(%why, ago, "process tree killed{}", ago_said(ago));
            }
            Report::Left { count, .. } => self.left_behind(*count),
            _ => {}
        }
    }

    /// The process exited and left `count` processes behind, which its keeper kills: says what
    /// that likely means, once for the host's life.
    fn left_behind(&self, count: u32) {
        if self.across.hinted.swap(true, Ordering::Relaxed) {
            return;
        }
        let ended = self
            .ended
            .map_or_else(|| "exited".to_string(), |e| format!("ended with {e}"));
        warn!(
            left = count,
            "the process {ended} and left {count} process(es) behind, which are killed with it: did it daemonize? Under a lease a program must stay in the foreground, or leasehold cannot stop it: run it so (e.g. nginx -g 'daemon off;', redis-server --daemonize no, memcached without -d)"
        );
    }

    /// Logs the process's exit; read late, with how long ago it was by the keeper's clock.
    fn exited(&mut self, timed: &Timed, ended: Ended) {
        let ago = late(timed);
        info!(%ended, ago, "process exited{}", ago_said(ago));
        self.ended = Some(ended);
        self.card.exited(&ended.to_string());
    }
}

/// How many milliseconds before its reading the keeper stamped `timed`, when that is long
/// enough to say this host was not reading as it came ([`LATE_READ`]); else 0.
fn late(timed: &Timed) -> u64 {
    match timed.at.map(since) {
        Some(ago) if ago > LATE_READ => u64::try_from(ago.as_millis()).unwrap_or(u64::MAX),
        _ => 0,
    }
}

/// The words a line read late ends with.
fn ago_said(ago: u64) -> String {
    match ago {
        0 => String::new(),
        ago => format!(
            ", {ago} ms before this host read of it (by the keeper's clock: this host was not running)"
        ),
    }
}

impl Work for Exec {
    type Running = Kept;

    async fn start(&mut self) -> Result<Kept, Failure> {
        let until = self.kill_at();
        if self.term.is_cancelled() || Instant::now() >= until {
            return Err(Failure::Cancelled {
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
                Failure::Exited(e.to_string())
            })?;
        match kept.report().await {
            Some(Report::Started(pid)) => {
                info!(pid, "process started");
                self.card.started(Some(pid), self.term.epoch);
                Ok(kept)
            }
            Some(Report::NotStarted(why)) => {
                self.card.not_started(&why);
                Err(Failure::Exited(format!("cannot start: {why}")))
            }
            other => {
                let why = format!("the keeper ended before the process started ({other:?})");
                self.card.not_started(&why);
                Err(Failure::Exited(why))
            }
        }
    }

    async fn next(&mut self, kept: &mut Kept) -> Option<Result<(), Failure>> {
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
                timed = kept.timed() => match timed.as_ref().map(|t| (t, &t.report)) {
                    Some((_, Report::Output { err, text, cut })) => self.output(*err, text, *cut),
                    Some((_, &Report::Dropped { lines, bytes })) => {
                        self.rate.dropped_before(lines, bytes);
                    }
                    Some((timed, &Report::Exited(ended))) => {
                        self.exited(timed, ended);
                        // Stopped at the deadline a renewal did not move: the term's to resume.
                        if deadline_stopped {
                            return Some(Err(Failure::Cancelled {
                                reason: Cancel::Deadline,
                                entered: true,
                            }));
                        }
                        return Some(Err(Failure::Exited(match ended {
                            Ended::Code(code) => format!("exited with code {code}"),
                            Ended::Signal(signal) => format!("ended by signal {signal}"),
                        })));
                    }
                    Some((timed, report)) => {
                        // Stopped for want of a renewal, not by its own fault: whether it
                        // ended on the signal or the kill, the term's to resume.
                        deadline_stopped |= matches!(
                            report,
                            Report::Signalled(Why::Deadline) | Report::Killed(Why::Deadline)
                        );
                        self.keeper_said(timed);
                    }
                    None => {
                        return Some(Err(Failure::Exited("its keeper ended".to_string())));
                    }
                },
            }
        }
    }

    fn judged(&mut self, _: Step, outcome: Result<(), &Failure>, failures: &mut Failures) {
        if let Err(failure @ Failure::Exited(_)) = outcome {
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
    /// host that stalls here has the tree dead by `safe_until`. How long the stop took is read
    /// on the keeper's clock, from the first of this host's ask and the keeper's own stop: a host
    /// resumed from a freeze says when the keeper stopped the process, not when it read of it.
    async fn stop(&mut self, mut kept: Kept) {
        let asked = Instant::now();
        self.card.stopping();
        if kept.stop().await.is_err() {
            kept.kill();
        }
        let mut gone_at = None;
        let mut gone = false;
        while let Some(timed) = kept.timed().await {
            match timed.report {
                Report::Output { err, ref text, cut } => self.output(err, text, cut),
                Report::Dropped { lines, bytes } => self.rate.dropped_before(lines, bytes),
                Report::Exited(ended) => self.exited(&timed, ended),
                Report::Gone => {
                    gone = true;
                    gone_at = timed.at;
                }
                _ => self.keeper_said(&timed),
            }
        }
        // A keeper that ended without its word (killed on its own) left its tree to this
        // host: what is left of it is killed before the work starts again or the lease goes.
        if gone {
            let _ = kept.wait().await;
        } else {
            let swept = kept.sweep().await;
            let killed = swept.killed.len();
            if swept.clean {
                warn!(
                    killed,
                    "the process's keeper ended without reporting its tree gone (killed on its own?): killed {killed} process(es) left of its tree; none is left"
                );
            }
            gone = swept.clean;
        }
        self.rate.run_ended();
        let start = monotonic_ns_at(asked).min(self.keeper_stopped.unwrap_or(u64::MAX));
        let took = match gone_at {
            Some(at) => Duration::from_nanos(at.saturating_sub(start)),
            None => asked.elapsed(),
        };
        if let Some(at) = gone_at {
            let ago = since(at);
            match (self.keeper_stopped.is_some(), ago > LATE_READ) {
                (true, true) => warn!(
                    took = ?took,
                    "process stopped by its keeper on its own at the lease's deadline: no process of its tree was left {} ms before this host resumed",
                    ago.as_millis()
                ),
                (true, false) => {
                    warn!(took = ?took, "process stopped by its keeper on its own at the lease's deadline: no process of its tree is left")
                }
                (false, _) => {
                    info!(took = ?took, "process stopped: no process of its tree is left")
                }
            }
        }
        if self.keeper_stopped.take().is_some() {
            self.card.stopped_by_keeper();
        }
        // Neither the keeper's word nor the sweep says the tree is gone: the stop is
        // unconfirmed.
        if !gone {
            warn!(
                "the process's keeper ended without reporting its tree gone, and what is left of it could not all be killed: stop unconfirmed"
            );
        }
        self.card.stopped(took, gone);
        self.card
            .show(std::mem::replace(&mut self.after_stop, ProcessState::Idle));
    }
}
