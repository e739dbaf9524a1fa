//! Services leasehold does not own, following their lease with putex's scripts
//! ([`BoundService`]): while this replica is a standby, `health standby` every interval, whose
//! failure keeps it from campaigning; on a term, `activate`, then `health active` every interval
//! (the lease given up after `failure_threshold` failures in a row); when the term ends, or
//! early enough before its deadline when renewals fail, `deactivate`.
//!
//! Every script runs under a keeper ([`crate::process`]) and is killed, with its tree, if it has
//! not exited by its time limit: `activate` and `health active` the term's deadline,
//! `deactivate` the term's or its grace, whichever comes first. What `activate` leaves running
//! when it exits is the service (a daemon it started), and is left alone.
//!
//! `deactivate` is held ready from the term's start by a keeper of its own, which is given each
//! renewal's deadline: when this host is killed, or frozen past the point where `deactivate` must
//! begin, that keeper runs it on its own clock, so the service is stopped before another replica
//! can take the lease over even when this host cannot stop it. A `deactivate` that did not exit
//! 0 by the lease's deadline is an unconfirmed stop.
//!
//! `health` may be an HTTP probe instead of a script ([`super::probe`]), bounded the same way;
//! without `activate` a term counts as activated at once, without `deactivate` its stop is
//! confirmed at once (an app that follows the lease itself).

use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, info, info_span, warn};

use super::card::ProcessCard;
use super::exec::log_output;
use super::metrics::ProcessMetrics;
use super::probe::Probe;
use crate::lease::{GateSource, Leases, Term};
use crate::output_rate::{DroppedLines, OutputRate};
use crate::process::bound::KILL_MARGIN;
use crate::process::handle::{Kept, LATE_READ, Spec, monotonic_ns_at, since};
use crate::process::protocol::{Ended, Mode, Report, Why};
use crate::process::service::{BoundService, Health};
use crate::supervisor::StatusBoard;
use crate::supervisor::status::process::ProcessKind;
use crate::supervisor::terms::each_term;

/// Follows `service`'s lease until `shutdown`.
pub async fn follow(
    service: Arc<BoundService>,
    leases: Arc<Leases>,
    keeper: PathBuf,
    board: StatusBoard,
    (metrics, dropped): (Arc<ProcessMetrics>, DroppedLines),
    shutdown: CancellationToken,
) {
    let lease = service.lease.to_string();
    let Some(leadership) = leases.subscribe(&lease) else {
        return;
    };
    let scripts = Scripts {
        card: ProcessCard::new(
            &board,
            metrics.clone(),
            (&service.name, ProcessKind::Service),
            &lease,
        ),
        rate: Arc::new(OutputRate::for_process(&service.name, &dropped)),
        probe: match &service.health {
            Some(Health::Probe(url)) => Some(Probe::new(url.clone())),
            _ => None,
        },
        service,
        leases,
        keeper,
    };
    // The host shut the gate of a service with a health check before its first campaign.
    let gated = AtomicBool::new(scripts.service.health.is_some());
    let on_term = |term: Term| {
        let span = info_span!("service", service = %scripts.service.name, lease = %lease, epoch = term.epoch.get());
        crate::telemetry::within_term(&span, &term.lease, term.epoch);
        // Under the term's tracker: the release waits for `deactivate`.
        scripts.clone().active(term).instrument(span)
    };
    let (standing_by, shut) = (&scripts, &gated);
    let between = move || {
        let span = info_span!("service", service = %standing_by.service.name, lease = %standing_by.service.lease);
        standing_by.standby(shut).instrument(span)
    };
    each_term(leadership, &shutdown, on_term, between).await;
    if gated.load(Ordering::Relaxed) {
        scripts.allow_campaigns(true);
    }
}

/// What every run of a service's scripts needs.
#[derive(Clone)]
struct Scripts {
    /// The service.
    service: Arc<BoundService>,
    /// To step down, and to gate campaigns.
    leases: Arc<Leases>,
    /// This binary, run as the keeper.
    keeper: PathBuf,
    /// What `/status` and `/metrics` show of it.
    card: ProcessCard,
    /// What the scripts' output may cost the log.
    rate: Arc<OutputRate>,
    /// The HTTP probe, when `health` is a URL.
    probe: Option<Probe>,
}

/// How one run of a script ended.
#[derive(Default)]
struct Ran {
    /// Its exit; `None` when it did not start or its keeper was lost.
    ended: Option<Ended>,
    /// When it exited, on its keeper's clock.
    exited_at: Option<u64>,
    /// Whether it was killed, with its tree, for not exiting by its time limit.
    killed: bool,
    /// A deferred `deactivate`: why its keeper began it, and when.
    began: Option<(Why, u64)>,
    /// When its keeper reported no process of its tree left.
    gone_at: Option<u64>,
}

impl Ran {
    fn passed(&self) -> bool {
        self.ended == Some(Ended::Code(0)) && !self.killed
    }

    /// How it ended, for a warning that does not say it already (`code 1`).
    fn said(&self) -> String {
        match (&self.ended, self.killed) {
            (_, true) => "did not exit by its time limit: killed".to_string(),
            (Some(ended), false) => ended.to_string(),
            (None, false) => "did not run".to_string(),
        }
    }
}

/// Runs `work` to its end while passing each new deadline of the term on to the keeper holding
/// `deactivate` ready, if there is one: that keeper must never see a deadline older than the
/// term's, or it would stop a service whose lease is healthy.
async fn passing_deadlines_on<T>(
    work: impl std::future::Future<Output = T>,
    ready: &mut Option<Kept>,
    deadlines: &tokio::sync::watch::Receiver<Instant>,
) -> T {
    let Some(keeper) = ready else {
        return work.await;
    };
    let mut deadlines = deadlines.clone();
    let mut open = true;
    tokio::pin!(work);
    loop {
        tokio::select! {
            biased;
            done = &mut work => return done,
            changed = deadlines.changed(), if open => {
                open = changed.is_ok();
                let until = kill_at(*deadlines.borrow_and_update());
                if let Err(e) = keeper.extend(until).await {
                    warn!("cannot pass the new deadline on to the keeper holding deactivate ready: {e}");
                }
            }
        }
    }
}

/// The keeper's deadline for a term whose `safe_until` is this: the time its kill takes before.
fn kill_at(safe_until: Instant) -> Instant {
    safe_until.checked_sub(KILL_MARGIN).unwrap_or(safe_until)
}

impl Scripts {
    /// Opens or shuts the lease's campaign gate on this service's behalf.
    fn allow_campaigns(&self, open: bool) {
        let source = GateSource::Service(self.service.name.clone());
        self.leases
            .allow_campaigns(self.service.lease.as_str(), source, open);
    }

    /// `health standby` every interval for as long as this replica is a standby: closes the
    /// campaign gate while it fails, opens it when it passes again. Never returns by itself.
    async fn standby(&self, gated: &AtomicBool) {
        let Some(health) = &self.service.health else {
            return std::future::pending().await;
        };
        let noun = health.noun();
        // Said once per stretch of standby: the gate may have been shut before the first run.
        let mut said = false;
        loop {
            let until = Instant::now() + self.service.health_interval;
            let checked = self.check(health, "standby", None, until).await;
            match (checked, gated.load(Ordering::Relaxed) && said) {
                (Err(why), false) => {
                    said = true;
                    warn!("standby health {noun} fails ({why}): not campaigning until it passes");
                    self.allow_campaigns(false);
                    gated.store(true, Ordering::Relaxed);
                }
                (Ok(()), _) if gated.load(Ordering::Relaxed) => {
                    info!("standby health {noun} passes: campaigning allowed");
                    self.allow_campaigns(true);
                    gated.store(false, Ordering::Relaxed);
                }
                _ => {}
            }
            tokio::time::sleep_until(until).await;
        }
    }

    /// One term: `activate`, `health active` until the term ends (or must be let go early), then
    /// `deactivate`, held ready by its own keeper from the start.
    async fn active(self, term: Term) {
        let deadlines = term.deadlines();
        let service = &self.service;
        let lease = service.lease.as_str();
        self.card.starting();
        let mut ready = match &service.deactivate {
            Some(deactivate) => self.hold_ready(deactivate, &term, kill_at(*deadlines.borrow())),
            None => None,
        };
        let activated = match &service.activate {
            Some(activate) => {
                let until = kill_at(*deadlines.borrow());
                let run = self.run("activate", activate, Mode::Leave, None, Some(&term), until);
                let ran = passing_deadlines_on(run, &mut ready, &deadlines).await;
                ran.passed().then_some("service activated")
            }
            // Nothing to start: the app beside the host follows the lease itself.
            None => Some("service activated (no activate script)"),
        };
        if let Some(said) = activated {
            self.card.started(None, term.epoch);
            info!("{said}");
            self.hold(&term, &deadlines, &mut ready).await;
        } else if !term.is_cancelled() {
            warn!("activate failed: deactivating, and giving the lease up");
            self.leases.step_down(lease);
        }
        self.card.stopping();
        let asked = Instant::now();
        let Some(deactivate) = &service.deactivate else {
            // Nothing to stop: the app follows the lease on its own.
            info!("service deactivated (no deactivate script)");
            self.card.stopped(asked.elapsed(), true);
            return;
        };
        let ran = match ready {
            Some(keeper) => self.deactivate_held(keeper, deactivate, &term).await,
            None => self.deactivate_now(deactivate, &term, asked).await,
        };
        self.deactivated(&ran, &deadlines, asked);
    }

    /// Starts the keeper that holds `deactivate` ready for the term, with the term's first
    /// deadline; `None` (said) when it cannot start: the host then runs `deactivate` itself.
    fn hold_ready(&self, deactivate: &[OsString], term: &Term, until: Instant) -> Option<Kept> {
        let spec = Spec {
            command: deactivate.to_vec(),
            signal: rustix::process::Signal::TERM,
            grace: self.service.grace,
            mode: Mode::Deferred,
        };
        match Kept::spawn(&self.keeper, &spec, &self.env(Some(term)), until) {
            Ok(kept) => Some(kept),
            Err(e) => {
                warn!(
                    "cannot hold deactivate ready under a keeper of its own ({e}): if this host is killed or frozen, nothing will run it"
                );
                None
            }
        }
    }

    /// Runs `deactivate` through the keeper that held it ready: asks it to begin now (unless it
    /// began on its own, this host being frozen or its renewals failing) and reads to its end.
    async fn deactivate_held(&self, mut keeper: Kept, deactivate: &[OsString], term: &Term) -> Ran {
        // A keeper that already began, and exited, no longer reads: its reports say the rest.
        let _ = keeper.stop().await;
        let ran = self
            .read_run("deactivate", Mode::Deferred, keeper)
            .instrument(info_span!("script", script = "deactivate"))
            .await;
        match ran.began {
            Some((why, at)) if why != Why::Asked => {
                let ago = since(at).as_millis();
                warn!(
                    %why,
                    "the keeper began deactivate on its own {ago} ms ago, when this host had not (renewals had not landed, or this host was frozen)"
                );
                self.card.stopped_by_keeper();
                if let Some(gone) = ran.gone_at.filter(|&g| since(g) > LATE_READ) {
                    info!(
                        "deactivate was over {} ms before this host resumed, by the keeper's clock",
                        since(gone).as_millis()
                    );
                }
                ran
            }
            Some(_) => ran,
            // The keeper died before it began (killed on its own): run it as before.
            None => {
                warn!("the keeper holding deactivate ready is gone: running deactivate now");
                self.deactivate_now(deactivate, term, Instant::now()).await
            }
        }
    }

    /// Runs `deactivate` under a keeper started now: its grace, and never past the term's
    /// deadline while there is one to keep. Past it already (the host was frozen), the service
    /// must still be stopped: late, and unconfirmed, but with its whole grace.
    async fn deactivate_now(&self, deactivate: &[OsString], term: &Term, asked: Instant) -> Ran {
        let by = kill_at(*term.deadlines().borrow());
        let until = match by > asked {
            true => (asked + self.service.grace).min(by),
            false => asked + self.service.grace,
        };
        self.run("deactivate", deactivate, Mode::Own, None, Some(term), until)
            .await
    }

    /// Says how `deactivate` ended and shows it: confirmed when it exited 0, not killed, by the
    /// lease's deadline (on its keeper's clock when the keeper said when).
    fn deactivated(
        &self,
        ran: &Ran,
        deadlines: &tokio::sync::watch::Receiver<Instant>,
        asked: Instant,
    ) {
        let deadline = *deadlines.borrow();
        let in_time = match ran.exited_at {
            Some(at) => at <= monotonic_ns_at(deadline),
            None => Instant::now() <= deadline,
        };
        // From the first of the host's ask and the keeper's own start to the tree's end, on the
        // keeper's clock where it said.
        let took = match (ran.began, ran.gone_at) {
            (Some((_, began)), Some(gone)) => {
                let start = began.min(monotonic_ns_at(asked));
                Duration::from_nanos(gone.saturating_sub(start))
            }
            _ => asked.elapsed(),
        };
        let confirmed = ran.passed() && in_time;
        if confirmed {
            info!(?took, "service deactivated");
        } else {
            let what = match (ran.passed(), &ran.ended, ran.killed) {
                (true, _, _) => "deactivate exited 0, but after the lease's deadline".to_string(),
                (false, _, true) => {
                    "deactivate did not exit by its time limit and was killed".to_string()
                }
                (false, Some(ended), false) => format!("deactivate exited with {ended}"),
                (false, None, false) => "deactivate did not run".to_string(),
            };
            warn!(
                ?took,
                "{what}: the service may still run; counted as an unconfirmed stop"
            );
        }
        self.card.stopped(took, confirmed);
    }

    /// While the term lasts: `health active` every interval, each renewal's deadline passed on
    /// to the keeper holding `deactivate` ready. Returns when the term ends, when the lease is
    /// given up after failures, or when renewals have failed for so long that `deactivate` must
    /// begin to finish by the deadline.
    async fn hold(
        &self,
        term: &Term,
        deadlines: &tokio::sync::watch::Receiver<Instant>,
        ready: &mut Option<Kept>,
    ) {
        let service = &self.service;
        let mut deadlines = deadlines.clone();
        let mut failures = 0;
        let noun = service.health.as_ref().map_or("check", Health::noun);
        let mut next_check = Instant::now() + service.health_interval;
        // The deadline the keeper holding deactivate ready has: passed on once per change.
        let mut passed_on = None;
        loop {
            let safe_until = *deadlines.borrow_and_update();
            if let Some(keeper) = ready.as_mut()
                && passed_on.replace(safe_until) != Some(safe_until)
                && let Err(e) = keeper.extend(kill_at(safe_until)).await
            {
                warn!(
                    "cannot pass the new deadline on to the keeper holding deactivate ready: {e}"
                );
            }
            let stop_at = safe_until
                .checked_sub(service.grace + KILL_MARGIN)
                .unwrap_or(safe_until);
            tokio::select! {
                biased;
                _ = term.cancelled() => return,
                _ = tokio::time::sleep_until(stop_at) => {
                    warn!("renewals have not landed: deactivating ahead of the lease's deadline");
                    return;
                }
                _ = deadlines.changed() => {}
                _ = tokio::time::sleep_until(next_check), if service.health.is_some() => {
                    let Some(health) = &service.health else { continue };
                    let until = (Instant::now() + service.health_interval).min(stop_at);
                    let check = self.check(health, "active", Some(term), until);
                    let check = passing_deadlines_on(check, ready, &deadlines);
                    let checked = match health {
                        // A probe is dropped when the term ends: the stop need not wait for
                        // an answer. (A script runs on to its end under its keeper.)
                        Health::Probe(_) => tokio::select! {
                            biased;
                            _ = term.cancelled() => return,
                            checked = check => checked,
                        },
                        Health::Command(_) => check.await,
                    };
                    next_check = Instant::now() + service.health_interval;
                    let Err(why) = checked else {
                        failures = 0;
                        continue;
                    };
                    failures += 1;
                    warn!(failures, "active health {noun} failed: {why}");
                    if failures >= service.failure_threshold {
                        warn!(failures, "health {noun} failed {failures} times in a row: deactivating, and giving the lease up");
                        self.leases.step_down(service.lease.as_str());
                        return;
                    }
                }
            }
        }
    }

    /// One health check in `role` (`active` or `standby`), given up at `until`: passed, or how
    /// it failed, for the warning. A failure shows in the card's exits (`health code 1`,
    /// `health http 503`).
    async fn check(
        &self,
        health: &Health,
        role: &'static str,
        term: Option<&Term>,
        until: Instant,
    ) -> Result<(), String> {
        let command = match (health, &self.probe) {
            (Health::Command(command), _) => command,
            (Health::Probe(_), Some(probe)) => {
                let lease = self.service.lease.as_str();
                let epoch = term.map(|t| t.epoch);
                return probe
                    .check(role, lease, epoch, until)
                    .await
                    .map_err(|failed| {
                        self.card.exited(&format!("health {}", failed.ended));
                        failed.why
                    });
            }
            // `follow` builds the probe of every URL: not reached.
            (Health::Probe(_), None) => return Err("no probe".to_string()),
        };
        let ran = self
            .run("health", command, Mode::Own, Some(role), term, until)
            .await;
        match ran.passed() {
            true => Ok(()),
            false => Err(ran.said()),
        }
    }

    /// The environment a script gets: its lease, this replica, and the term's epoch.
    fn env(&self, term: Option<&Term>) -> Vec<(&'static str, String)> {
        let mut env = vec![
            ("LEASEHOLD_LEASE", self.service.lease.to_string()),
            ("LEASEHOLD_HOLDER", self.leases.holder().to_string()),
        ];
        if let Some(term) = term {
            env.push(("LEASEHOLD_EPOCH", term.epoch.to_string()));
        }
        env
    }

    /// Runs `script` (`activate`, `deactivate`, `health`) to its end under a keeper in `mode`,
    /// killed at `until` if it has not exited; `role` is appended as its last argument.
    async fn run(
        &self,
        script: &'static str,
        command: &[OsString],
        mode: Mode,
        role: Option<&str>,
        term: Option<&Term>,
        until: Instant,
    ) -> Ran {
        let mut command = command.to_vec();
        command.extend(role.map(OsString::from));
        let spec = Spec {
            command,
            signal: rustix::process::Signal::TERM,
            grace: Duration::ZERO,
            mode,
        };
        // Every line of the run, its output among them, says which script it is.
        let span = info_span!("script", script);
        match Kept::spawn(&self.keeper, &spec, &self.env(term), until) {
            Ok(kept) => self.read_run(script, mode, kept).instrument(span).await,
            Err(e) => {
                span.in_scope(|| warn!("cannot run the {script} script: {e}"));
                Ran::default()
            }
        }
    }

    /// Reads a script's keeper to its end: logs its output and what the keeper did, in words
    /// that say which happened (it exited, it left processes running or behind, it was killed
    /// for not exiting by its time limit).
    async fn read_run(&self, script: &'static str, mode: Mode, mut kept: Kept) -> Ran {
        let mut ran = Ran::default();
        while let Some(timed) = kept.timed().await {
            match timed.report {
                Report::NotStarted(why) => {
                    warn!("the {script} script did not start: {why}");
                    self.card.not_started(&why);
                }
                Report::Output { err, text, cut } => log_output(&self.rate, err, &text, cut),
                Report::Dropped { lines, bytes } => self.rate.dropped_before(lines, bytes),
                Report::Began(why) => ran.began = timed.at.map(|at| (why, at)),
                Report::Exited(ended) => {
                    // A health script's runs show in its card and its role's warnings.
                    if script != "health" {
                        info!(%ended, "{script} script exited");
                    }
                    if ended != Ended::Code(0) {
                        self.card.exited(&format!("{script} {ended}"));
                    }
                    ran.ended = Some(ended);
                    ran.exited_at = timed.at;
                }
                Report::Left { count, output_held } if mode == Mode::Leave => {
                    info!(
                        left = count,
                        "the {script} script left {count} process(es) running: the service, left to run"
                    );
                    if output_held {
                        warn!(
                            "what the {script} script left running still holds its output, which is no longer read: redirect it (e.g. >/dev/null 2>&1, or to a log file), or a write there may end it with SIGPIPE"
                        );
                    }
                }
                Report::Left { count, .. } => {
                    warn!(
                        left = count,
                        "the {script} script left {count} process(es) behind when it exited: killed"
                    );
                }
                Report::Killed(Why::Leftovers) => self.card.killed(),
                Report::Killed(why) => {
                    warn!(%why, "the {script} script did not exit by its time limit: killed with its tree");
                    self.card.killed();
                    ran.killed = true;
                }
                Report::Gone => ran.gone_at = timed.at,
                Report::Started(_) | Report::Signalled(_) => {}
            }
        }
        if ran.gone_at.is_some() {
            let _ = kept.wait().await;
        } else {
            // Its keeper ended without its word (killed on its own): what is left of the
            // script's tree came to this host, and is killed.
            let swept = kept.sweep().await;
            if !swept.killed.is_empty() {
                warn!(
                    killed = swept.killed.len(),
                    "the {script} script's keeper ended without reporting its tree gone: killed what was left of it"
                );
            }
        }
        self.rate.run_ended();
        ran
    }
}
