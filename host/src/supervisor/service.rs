//! Services leasehold does not own, following their lease with putex's scripts
//! ([`BoundService`]): while this replica is a standby, `health standby` every interval, whose
//! failure keeps it from campaigning; on a term, `activate`, then `health active` every interval
//! (the lease given up after `failure_threshold` failures in a row); when the term ends, or
//! early enough before its deadline when renewals fail, `deactivate`. Every script runs under a
//! keeper ([`crate::process`]) and is killed at its deadline: `activate` and `health active` at
//! the term's, `deactivate` at the term's or after its grace, whichever comes first. A
//! `deactivate` that did not finish (exit 0) by the lease's deadline is an unconfirmed stop.
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

use super::exec::log_output;
use super::probe::Probe;
use super::process_card::ProcessCard;
use super::process_status::ProcessKind;
use super::status::StatusBoard;
use super::terms::each_term;
use crate::lease::{Leases, Term};
use crate::metrics::Metrics;
use crate::process::bound::KILL_MARGIN;
use crate::process::handle::{Kept, Spec};
use crate::process::protocol::{Ended, Report};
use crate::process::service::{BoundService, Health};
use crate::runtime::rate::PluginRate;

/// Follows `service`'s lease until `shutdown`.
pub async fn follow(
    service: Arc<BoundService>,
    leases: Arc<Leases>,
    keeper: PathBuf,
    board: StatusBoard,
    metrics: Arc<Metrics>,
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
        rate: Arc::new(PluginRate::for_process(&service.name, &metrics)),
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
        let span = info_span!("service", service = %scripts.service.name, lease = %lease, epoch = term.epoch);
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
        scripts.leases.allow_campaigns(&lease, true);
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
    rate: Arc<PluginRate>,
    /// The HTTP probe, when `health` is a URL.
    probe: Option<Probe>,
}

/// How one run of a script ended.
struct Ran {
    /// Its exit; `None` when it did not start or its keeper was lost.
    ended: Option<Ended>,
    /// Whether its tree was killed at the deadline.
    killed: bool,
}

impl Ran {
    fn passed(&self) -> bool {
        self.ended == Some(Ended::Code(0)) && !self.killed
    }

    /// How it ended, for a warning that does not say it already (`code 1`).
    fn said(&self) -> String {
        match (&self.ended, self.killed) {
            (_, true) => "killed at its deadline".to_string(),
            (Some(ended), false) => ended.to_string(),
            (None, false) => "did not run".to_string(),
        }
    }
}

impl Scripts {
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
            let lease = self.service.lease.as_str();
            match (checked, gated.load(Ordering::Relaxed) && said) {
                (Err(why), false) => {
                    said = true;
                    warn!("standby health {noun} fails ({why}): not campaigning until it passes");
                    self.leases.allow_campaigns(lease, false);
                    gated.store(true, Ordering::Relaxed);
                }
                (Ok(()), _) if gated.load(Ordering::Relaxed) => {
                    info!("standby health {noun} passes: campaigning allowed");
                    self.leases.allow_campaigns(lease, true);
                    gated.store(false, Ordering::Relaxed);
                }
                _ => {}
            }
            tokio::time::sleep_until(until).await;
        }
    }

    /// One term: `activate`, `health active` until the term ends (or must be let go early), then
    /// `deactivate`.
    async fn active(self, term: Term) {
        let deadlines = term.deadlines();
        let kill_at = || {
            let safe_until = *deadlines.borrow();
            safe_until.checked_sub(KILL_MARGIN).unwrap_or(safe_until)
        };
        let service = &self.service;
        let lease = service.lease.as_str();
        self.card.starting();
        let activated = match &service.activate {
            Some(activate) => {
                let ran = self
                    .run("activate", activate, None, Some(&term), kill_at())
                    .await;
                ran.passed().then_some("service activated")
            }
            // Nothing to start: the app beside the host follows the lease itself.
            None => Some("service activated (no activate script)"),
        };
        if let Some(said) = activated {
            self.card.started(None, term.epoch);
            info!("{said}");
            self.hold(&term, &deadlines).await;
        } else if !term.is_cancelled() {
            warn!("activate failed: deactivating, and giving the lease up");
            self.leases.step_down(lease);
        }
        // Deactivate: its grace, and never past the term's deadline while there is one to keep.
        // Past it already (the host was frozen), the service must still be stopped: late, and
        // unconfirmed, but with its whole grace.
        self.card.stopping();
        let asked = Instant::now();
        let Some(deactivate) = &service.deactivate else {
            // Nothing to stop: the app follows the lease on its own.
            info!("service deactivated (no deactivate script)");
            self.card.stopped(asked.elapsed(), true);
            return;
        };
        let by = kill_at();
        let until = match by > asked {
            true => (asked + service.grace).min(by),
            false => asked + service.grace,
        };
        let ran = self
            .run("deactivate", deactivate, None, Some(&term), until)
            .await;
        let confirmed = ran.passed() && Instant::now() <= *deadlines.borrow();
        if confirmed {
            info!(took = ?asked.elapsed(), "service deactivated");
        } else {
            warn!(
                took = ?asked.elapsed(),
                "deactivate did not finish with exit 0 by the lease's deadline: the service may still run; counted as an unconfirmed stop"
            );
        }
        self.card.stopped(asked.elapsed(), confirmed);
    }

    /// While the term lasts: `health active` every interval. Returns when the term ends, when the
    /// lease is given up after failures, or when renewals have failed for so long that
    /// `deactivate` must begin to finish by the deadline.
    async fn hold(&self, term: &Term, deadlines: &tokio::sync::watch::Receiver<Instant>) {
        let service = &self.service;
        let mut deadlines = deadlines.clone();
        let mut failures = 0;
        let noun = service.health.as_ref().map_or("check", Health::noun);
        let mut next_check = Instant::now() + service.health_interval;
        loop {
            let safe_until = *deadlines.borrow_and_update();
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
        let ran = self.run("health", command, Some(role), term, until).await;
        match ran.passed() {
            true => Ok(()),
            false => Err(ran.said()),
        }
    }

    /// Runs `script` (`activate`, `deactivate`, `health`) to its end under a keeper, killed at
    /// `until`; `role` is appended as its last argument.
    async fn run(
        &self,
        script: &'static str,
        command: &[OsString],
        role: Option<&str>,
        term: Option<&Term>,
        until: Instant,
    ) -> Ran {
        // Every line of the run, its output among them, says which script it is.
        self.run_in_span(script, command, role, term, until)
            .instrument(info_span!("script", script))
            .await
    }

    async fn run_in_span(
        &self,
        script: &'static str,
        command: &[OsString],
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
        };
        let mut env = vec![
            ("LEASEHOLD_LEASE", self.service.lease.to_string()),
            ("LEASEHOLD_HOLDER", self.leases.holder().to_string()),
        ];
        if let Some(term) = term {
            env.push(("LEASEHOLD_EPOCH", term.epoch.to_string()));
        }
        let mut ran = Ran {
            ended: None,
            killed: false,
        };
        let mut kept = match Kept::spawn(&self.keeper, &spec, &env, until) {
            Ok(kept) => kept,
            Err(e) => {
                warn!("cannot run the {script} script: {e}");
                return ran;
            }
        };
        while let Some(report) = kept.report().await {
            match report {
                Report::NotStarted(why) => {
                    warn!("the {script} script did not start: {why}");
                    self.card.not_started(&why);
                }
                Report::Output { err, text, cut } => log_output(&self.rate, err, &text, cut),
                Report::Exited(ended) => {
                    // A health script's runs show in its card and its role's warnings.
                    if script != "health" {
                        info!(%ended, "{script} script exited");
                    }
                    if ended != Ended::Code(0) {
                        self.card.exited(&format!("{script} {ended}"));
                    }
                    ran.ended = Some(ended);
                }
                Report::Killed(why) => {
                    warn!(%why, "the {script} script was killed at its deadline");
                    self.card.killed();
                    ran.killed = true;
                }
                Report::Started(_) | Report::Signalled(_) | Report::Gone => {}
            }
        }
        let _ = kept.wait().await;
        ran
    }
}
