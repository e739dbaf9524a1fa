//! What the coordinator does with renewal answers (docs/ARCHITECTURE.md §5.3, §3.5): the batch's
//! landed, busy and refused leases, the lone renewal of a busy one, and the database clock's
//! reading that comes with every answer.

use std::time::Duration;

use crate::instant::Instant;

use super::{Announcement, Coordinator, Effect, EndReason, Phase, after};
use crate::buggify::{Planted, planted};
use crate::clock::Reading;
use crate::record::{DbMillis, Epoch, RenewRequest, Renewed, RenewedOne};

impl Coordinator {
    pub(super) fn on_renew(
        &mut self,
        result: Result<Renewed, String>,
        now: Instant,
        fx: &mut Vec<Effect>,
    ) {
        let Some((sent, batch)) = self.renewal.in_flight.take() else {
            return;
        };
        let timing = self.timing;
        match result {
            Ok(renewed) => {
                self.observe_clock(sent, now, renewed.db_now, fx);
                let again = std::mem::take(&mut self.renewal.again);
                let due = sent + timing.renew_interval;
                self.renewal.next_at = Some(if again {
                    self.notice_renewal(now, Some(due))
                } else {
                    due
                });
                let landed: std::collections::BTreeSet<&str> =
                    renewed.landed.iter().map(String::as_str).collect();
                let busy: std::collections::BTreeSet<&str> =
                    renewed.busy.iter().map(String::as_str).collect();
                let handoffs: std::collections::BTreeSet<&str> =
                    renewed.handoffs.iter().map(String::as_str).collect();
                for (name, epoch) in batch {
                    if landed.contains(name.as_str()) {
                        self.renewal_landed(&name, epoch, sent, now, fx);
                        if handoffs.contains(name.as_str()) {
                            self.hand_over(&name, epoch, fx);
                        }
                    } else if busy.contains(name.as_str()) {
                        self.renew_alone(&name, epoch, now, fx);
                    } else {
                        self.renewal_rejected(&name, epoch, now, fx);
                    }
                }
            }
            Err(error) => {
                self.renewal.again = false;
                self.renewal.next_at = Some(now + timing.retry_interval);
                let failing: Vec<(String, Epoch)> = batch
                    .into_iter()
                    .filter(|(name, epoch)| self.mark_failing(name, *epoch))
                    .collect();
                if !failing.is_empty() {
                    fx.push(Effect::Announce(Announcement::RenewFailing {
                        leases: failing,
                        error,
                    }));
                }
            }
        }
    }

    pub(super) fn on_renew_one(
        &mut self,
        lease: &str,
        result: Result<RenewedOne, String>,
        now: Instant,
        fx: &mut Vec<Effect>,
    ) {
        let Some((sent, epoch)) = self.leases.get_mut(lease).and_then(|s| s.solo.take()) else {
            return;
        };
        match result {
            Ok(one) => {
                self.observe_clock(sent, now, one.db_now, fx);
                if one.landed {
                    self.renewal_landed(lease, epoch, sent, now, fx);
                    if one.handoff {
                        self.hand_over(lease, epoch, fx);
                    }
                } else {
                    self.renewal_rejected(lease, epoch, now, fx);
                }
            }
            Err(error) => {
                // Back into the batch soon: a row stays locked only while a lock holder commits.
                let retry = now + self.timing.retry_interval;
                self.renewal.next_at = Some(self.renewal.next_at.map_or(retry, |n| n.min(retry)));
                if self.mark_failing(lease, epoch) {
                    fx.push(Effect::Announce(Announcement::RenewFailing {
                        leases: vec![(lease.to_string(), epoch)],
                        error,
                    }));
                }
            }
        }
    }

    /// A lease the batch found busy (its row locked by another session) is renewed alone, waiting
    /// for the lock no longer than its own time left, so the others do not wait with it.
    fn renew_alone(&mut self, name: &str, epoch: Epoch, now: Instant, fx: &mut Vec<Effect>) {
        let ttl = self.timing.ttl;
        let Some(state) = self.leases.get_mut(name) else {
            return;
        };
        let left = match state.phase {
            Phase::Held {
                epoch: held,
                safe_until,
                expires_by,
                term,
                ..
            } if held == epoch => {
                if term {
                    safe_until
                } else {
                    expires_by
                }
            }
            Phase::Stopping {
                epoch: held,
                expires_by,
                ..
            } if held == epoch => expires_by,
            _ => return,
        };
        state.solo = Some((now, epoch));
        fx.push(Effect::RenewOne {
            request: RenewRequest {
                name: name.to_string(),
                epoch,
                ttl,
            },
            // A floor keeps the call meaningful; past `left` the tick has acted already.
            timeout: left
                .saturating_duration_since(now)
                .max(Duration::from_millis(1)),
        });
    }

    /// A renewal of `name` at `epoch`, sent at `sent`, landed.
    fn renewal_landed(
        &mut self,
        name: &str,
        epoch: Epoch,
        sent: Instant,
        now: Instant,
        fx: &mut Vec<Effect>,
    ) {
        let timing = self.timing;
        let quiet = self.quiet_until.is_some();
        let Some(state) = self.leases.get_mut(name) else {
            return;
        };
        match &mut state.phase {
            Phase::Held {
                epoch: held,
                safe_until,
                expires_by,
                term,
                failing,
            } if *held == epoch => {
                let from = match planted(Planted::DeadlineFromReply) {
                    true => now,
                    false => sent,
                };
                *safe_until = from + timing.ttl - timing.margin;
                *expires_by = now + timing.ttl + timing.margin;
                let was_failing = std::mem::replace(failing, false);
                if *term {
                    fx.push(Effect::ExtendTerm {
                        lease: name.to_string(),
                        safe_until: *safe_until,
                    });
                } else if *safe_until > now && !quiet {
                    *term = true;
                    fx.push(Effect::StartTerm {
                        lease: name.to_string(),
                        epoch,
                        safe_until: *safe_until,
                    });
                }
                if was_failing {
                    fx.push(Effect::Announce(Announcement::Recovered {
                        lease: name.to_string(),
                        epoch,
                    }));
                }
            }
            Phase::Stopping {
                epoch: held,
                expires_by,
                ..
            } if *held == epoch => {
                *expires_by = now + timing.ttl + timing.margin;
            }
            _ => {}
        }
    }

    /// A renewal of `name` at `epoch` was refused: the lease is someone else's, or expired.
    fn renewal_rejected(&mut self, name: &str, epoch: Epoch, now: Instant, fx: &mut Vec<Effect>) {
        let Some(state) = self.leases.get_mut(name) else {
            return;
        };
        match &mut state.phase {
            Phase::Held {
                epoch: held, term, ..
            } if *held == epoch => {
                if *term {
                    fx.push(Effect::EndTerm {
                        lease: name.to_string(),
                        epoch,
                        reason: EndReason::Lost,
                        confirm: false,
                    });
                }
                fx.push(Effect::Announce(Announcement::Lost {
                    lease: name.to_string(),
                    epoch,
                    rejected: true,
                }));
                state.phase = Phase::Standby { next_campaign: now };
            }
            Phase::Stopping {
                epoch: held, then, ..
            } if *held == epoch => {
                // Nothing left to release: the lease is already gone.
                let then = *then;
                fx.push(Effect::Announce(Announcement::Lost {
                    lease: name.to_string(),
                    epoch,
                    rejected: true,
                }));
                state.phase = after(then, now);
            }
            _ => {}
        }
    }

    /// Marks `name` at `epoch` as failing to renew; true if it was not failing before.
    fn mark_failing(&mut self, name: &str, epoch: Epoch) -> bool {
        match self.leases.get_mut(name).map(|l| &mut l.phase) {
            Some(Phase::Held {
                epoch: held,
                failing,
                ..
            }) if *held == epoch => !std::mem::replace(failing, true),
            _ => false,
        }
    }

    /// Compares a reading of the database's clock with the monotonic clock; after a forward step
    /// beyond the margin, ends every term and stays quiet for a ttl (docs/ARCHITECTURE.md §3.5):
    /// every holder that counted on the old clock reaches its `safe_until` within a ttl of its last
    /// renewal, and a renewal that lands after the step runs on the new clock.
    pub(super) fn observe_clock(
        &mut self,
        sent: Instant,
        received: Instant,
        db: Option<DbMillis>,
        fx: &mut Vec<Effect>,
    ) {
        let Some(db) = db else {
            return;
        };
        let reading = Reading { sent, received, db };
        let Some(step) = self.clock.observe(reading, self.timing.margin) else {
            // Slow calls can hide a step beyond the margin: no new term until what they could
            // hide has passed (see `ClockWatch::unsure`); running terms go on.
            let unsure = self.clock.unsure();
            if !unsure.is_zero() {
                let until = received + unsure;
                self.quiet_until = Some(self.quiet_until.map_or(until, |q| q.max(until)));
            }
            return;
        };
        let quiet = self.timing.ttl;
        let until = received + quiet;
        self.quiet_until = Some(self.quiet_until.map_or(until, |q| q.max(until)));
        for (name, state) in self.leases.iter_mut() {
            if let Phase::Held { epoch, term, .. } = &mut state.phase
                && std::mem::replace(term, false)
            {
                // Ended before its deadline: its work may drain until then, and a release of
                // the lease meanwhile waits for it.
                state.draining = Some(*epoch);
                fx.push(Effect::EndTerm {
                    lease: name.clone(),
                    epoch: *epoch,
                    reason: EndReason::ClockStep,
                    confirm: true,
                });
            }
        }
        fx.push(Effect::Announce(Announcement::ClockStepped {
            ahead: step.ahead,
            quiet,
        }));
    }
}
