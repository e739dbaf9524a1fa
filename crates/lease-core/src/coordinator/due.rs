//! What the coordinator does when time passes (docs/ARCHITECTURE.md §5): a held lease's term
//! starts once a clock step no longer holds it back and ends at `safe_until`, a lease that
//! expired meanwhile is let go, the standby leases that are due campaign together, and the held
//! ones renew in one batch.

use crate::instant::Instant;

use super::{Announcement, Coordinator, Effect, EndReason, LeaseState, Phase, after};
use crate::record::{Epoch, RenewRequest};

impl Coordinator {
    /// Emits whatever is due at `now`: term deadlines, expiries, the renewal, campaigns.
    pub(super) fn run_due(&mut self, now: Instant, fx: &mut Vec<Effect>) {
        if self.quiet_until.is_some_and(|q| now >= q) {
            self.quiet_until = None;
        }
        let quiet = self.quiet_until.is_some();
        let margin = self.timing.margin;
        let mut batch = Vec::new();
        // Standby leases go in one campaign once any is due, with every other lease due within
        // the margin: the leases of one holder expire together (one renewal statement), and a
        // lease taken a few milliseconds early only reports its expiry again.
        let may_campaign = self.campaigning.in_flight.is_none() && !self.shutting_down && !quiet;
        let mut due_campaign = false;
        let mut candidates = Vec::new();
        for (name, state) in self.leases.iter_mut() {
            // A lease being renewed alone stays out of the batch until that answer is in.
            let solo = state.solo.is_some();
            let renew = match state.phase {
                Phase::Held { .. } => state.held_due(name, now, quiet, fx),
                Phase::Stopping { .. } => state.stopping_due(name, now, fx),
                Phase::Standby { next_campaign } => {
                    if may_campaign
                        && !state.gated()
                        && !state.unassigned
                        && state.claiming.is_none()
                        && next_campaign <= now + margin
                    {
                        due_campaign |= now >= next_campaign;
                        candidates.push(name.clone());
                    }
                    None
                }
                Phase::Releasing { .. } | Phase::Done => None,
            };
            if let Some(epoch) = renew
                && !solo
            {
                batch.push((name.clone(), epoch));
            }
        }
        if due_campaign {
            self.send_campaign(now, candidates, fx);
        }
        self.renew_if_due(now, batch, fx);
    }

    /// Sends one campaign for `leases`, the standby leases due within the margin.
    fn send_campaign(&mut self, now: Instant, leases: Vec<String>, fx: &mut Vec<Effect>) {
        self.campaigning.in_flight = Some((now, leases.clone()));
        fx.push(Effect::Campaign {
            leases,
            timeout: self.timing.store_timeout,
        });
    }

    /// Sends the renewal of `batch`, the held and stopping leases not renewed alone, when it is
    /// due and none is in flight.
    fn renew_if_due(&mut self, now: Instant, batch: Vec<(String, Epoch)>, fx: &mut Vec<Effect>) {
        let due = self.renewal.next_at.is_some_and(|at| now >= at);
        if !due || self.renewal.in_flight.is_some() || batch.is_empty() {
            return;
        }
        let requests = batch
            .iter()
            .map(|(name, epoch)| RenewRequest {
                name: name.clone(),
                epoch: *epoch,
                ttl: self.timing.ttl,
            })
            .collect();
        self.renewal.in_flight = Some((now, batch));
        fx.push(Effect::Renew {
            batch: requests,
            timeout: self.timing.store_timeout,
        });
    }
}

impl LeaseState {
    /// A held lease at `now`: its term starts once a clock step (`quiet`) no longer holds it back and
    /// the last landed renewal still covers it, ends at `safe_until`, and with no term running the
    /// lease is let go once it has expired. The epoch to renew it at, unless it was let go.
    fn held_due(
        &mut self,
        name: &str,
        now: Instant,
        quiet: bool,
        fx: &mut Vec<Effect>,
    ) -> Option<Epoch> {
        let Phase::Held {
            epoch,
            safe_until,
            expires_by,
            term,
            ..
        } = &mut self.phase
        else {
            return None;
        };
        let epoch = *epoch;
        if !*term && !quiet && now < *safe_until {
            // Held back by a clock step; the last landed renewal still covers it.
            *term = true;
            fx.push(Effect::StartTerm {
                lease: name.to_string(),
                epoch,
                safe_until: *safe_until,
            });
        }
        if *term && now >= *safe_until {
            *term = false;
            fx.push(Effect::EndTerm {
                lease: name.to_string(),
                epoch,
                reason: EndReason::SafeUntil,
                confirm: false,
            });
            fx.push(Effect::Announce(Announcement::SafeUntilReached {
                lease: name.to_string(),
                epoch,
            }));
        }
        if !*term && now >= *expires_by {
            fx.push(Effect::Announce(Announcement::Lost {
                lease: name.to_string(),
                epoch,
                rejected: false,
            }));
            self.phase = Phase::Standby { next_campaign: now };
            return None;
        }
        Some(epoch)
    }

    /// A lease whose term is draining for a release, at `now`: let go if it lapsed meanwhile, else
    /// the epoch to keep renewing it at until the release.
    fn stopping_due(&mut self, name: &str, now: Instant, fx: &mut Vec<Effect>) -> Option<Epoch> {
        let Phase::Stopping {
            epoch,
            expires_by,
            then,
        } = self.phase
        else {
            return None;
        };
        if now >= expires_by {
            // The lease has lapsed while the term drained: no release needed.
            fx.push(Effect::Announce(Announcement::Lost {
                lease: name.to_string(),
                epoch,
                rejected: false,
            }));
            self.phase = after(then, now);
            return None;
        }
        Some(epoch)
    }
}
