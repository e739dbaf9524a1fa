#![allow(clippy::unwrap_used)]
//! Transitions of the pure coordinator, with hand-made instants. Timing throughout is
//! `Timing::from_ttl(3s)`: renew every 1 s, retry every 200 ms, poll at most every 3 s (+ up to
//! 20% jitter), margin 250 ms, store calls time out after 600 ms.
//!
//! This file holds what the tests share: the clock they start from, the coordinators they build (a
//! standby of some leases, a leader of one or two), the answers they feed in and the effects they
//! pick out. The tests are in modules by what a lease goes through, not by the coordinator's files:
//! most cross `coordinator.rs`, `coordinator/due.rs` and `coordinator/renewal.rs`.
//!
//! - `campaign`: standbys campaigning: won, lost, failed, held off, jittered, locked out;
//! - `notices`: another replica's release notice, and a resubscribed listener;
//! - `gates`: campaign gates shut by health checks and services;
//! - `shards`: lease groups' shards, campaigned for only while assigned here;
//! - `renewal`: the batched renewal: `safe_until`, failures, recovery, rejection, stale answers;
//! - `busy`: the batch's timeout, and a busy lease renewed alone;
//! - `clock_step`: a forward step of the database's clock, the quiet after it, the drain;
//! - `release`: shutdown and step-down: the drain, the ordered release, and what follows it;
//! - `handoff`: handoff notices and requests, and the ordered release they start.

use super::*;
use crate::DbMillis;

mod busy;
mod campaign;
mod clock_step;
mod gates;
mod grants;
mod handoff;
mod notices;
mod release;
mod renewal;
mod shards;

/// Where a test's clock starts: far enough from the origin that instants before it still exist.
fn start() -> Instant {
    Instant::from_origin(Duration::from_secs(1_000))
}

const TTL: Duration = Duration::from_secs(3);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn timing() -> Timing {
    let t = Timing::from_ttl(TTL);
    assert_eq!(
        (
            t.renew_interval,
            t.retry_interval,
            t.poll_interval,
            t.margin,
            t.store_timeout
        ),
        (ms(1000), ms(200), ms(3000), ms(250), ms(600)),
        "the numbers these tests are written with"
    );
    t
}

fn coordinator(leases: &[&str], t0: Instant) -> Coordinator {
    Coordinator::new(timing(), leases.iter().map(|s| s.to_string()), t0, 7)
}

/// The leases of every campaign among `fx`, in order.
fn campaigns(fx: &[Effect]) -> Vec<&str> {
    fx.iter()
        .filter_map(|e| match e {
            Effect::Campaign { leases, .. } => Some(leases.iter().map(String::as_str)),
            _ => None,
        })
        .flatten()
        .collect()
}

fn renewals(fx: &[Effect]) -> Vec<(Vec<RenewRequest>, Duration)> {
    fx.iter()
        .filter_map(|e| match e {
            Effect::Renew { batch, timeout } => Some((batch.clone(), *timeout)),
            _ => None,
        })
        .collect()
}

/// The single renewal among `fx`.
fn renewal(fx: &[Effect]) -> (Vec<RenewRequest>, Duration) {
    let mut all = renewals(fx);
    assert_eq!(all.len(), 1, "expected exactly one renewal in {fx:?}");
    all.remove(0)
}

/// Epochs as bare numbers in the three projections below, so the expected tables stay readable.
fn releases(fx: &[Effect]) -> Vec<(&str, i64)> {
    fx.iter()
        .filter_map(|e| match e {
            Effect::Release { lease, epoch, .. } => Some((lease.as_str(), epoch.get())),
            _ => None,
        })
        .collect()
}

fn end_terms(fx: &[Effect]) -> Vec<(&str, i64, EndReason, bool)> {
    fx.iter()
        .filter_map(|e| match e {
            Effect::EndTerm {
                lease,
                epoch,
                reason,
                confirm,
            } => Some((lease.as_str(), epoch.get(), *reason, *confirm)),
            _ => None,
        })
        .collect()
}

fn start_terms(fx: &[Effect]) -> Vec<(&str, i64, Instant)> {
    fx.iter()
        .filter_map(|e| match e {
            Effect::StartTerm {
                lease,
                epoch,
                safe_until,
            } => Some((lease.as_str(), epoch.get(), *safe_until)),
            _ => None,
        })
        .collect()
}

fn extensions(fx: &[Effect]) -> Vec<(&str, Instant)> {
    fx.iter()
        .filter_map(|e| match e {
            Effect::ExtendTerm { lease, safe_until } => Some((lease.as_str(), *safe_until)),
            _ => None,
        })
        .collect()
}

fn announced(fx: &[Effect], want: &Announcement) -> bool {
    fx.contains(&Effect::Announce(want.clone()))
}

fn req(name: &str, epoch: Epoch) -> RenewRequest {
    RenewRequest {
        name: name.to_string(),
        epoch,
        ttl: TTL,
    }
}

/// The answer to a campaign for `lease` alone, without a reading of the database clock (the
/// `clock_step` tests build those); lost without a known wait.
fn campaign_done(lease: &str, result: Result<Option<Epoch>, String>) -> Event {
    Event::CampaignDone {
        result: result.map(|epoch| match epoch {
            Some(epoch) => campaigned_many(&[(lease, epoch)], &[]),
            None => campaigned_many(&[], &[(lease, None)]),
        }),
    }
}

fn campaigned_many(won: &[(&str, Epoch)], lost: &[(&str, Option<Duration>)]) -> CampaignedMany {
    CampaignedMany {
        won: won.iter().map(|(n, e)| (n.to_string(), *e)).collect(),
        lost: lost.iter().map(|(n, w)| (n.to_string(), *w)).collect(),
        locked: Vec::new(),
        granted: Vec::new(),
        gave: Vec::new(),
        asked: Vec::new(),
        db_now: None,
        held_off_for: None,
    }
}

/// The answer to a campaign for several leases: those won with their epochs, those lost with how
/// long until they can be won.
fn campaigned(won: &[(&str, Epoch)], lost: &[(&str, Option<Duration>)]) -> Event {
    Event::CampaignDone {
        result: Ok(campaigned_many(won, lost)),
    }
}

fn names(names: &[&str]) -> Vec<String> {
    names.iter().map(|s| s.to_string()).collect()
}

fn renew_done(landed: &[&str]) -> Event {
    Event::RenewDone {
        result: Ok(Renewed {
            landed: names(landed),
            busy: Vec::new(),
            db_now: None,
            handoffs: Vec::new(),
        }),
    }
}

fn renew_failed() -> Event {
    Event::RenewDone {
        result: Err("store unavailable".into()),
    }
}

/// A coordinator for `lease` alone that campaigned at `t0` and won `epoch` at `t0 + took`.
fn leader(lease: &str, epoch: Epoch, t0: Instant, took: Duration) -> Coordinator {
    let mut c = coordinator(&[lease], t0);
    assert_eq!(campaigns(&c.step(Event::Tick, t0)), [lease]);
    let fx = c.step(campaign_done(lease, Ok(Some(epoch))), t0 + took);
    assert_eq!(start_terms(&fx).len(), 1, "{fx:?}");
    assert_eq!(c.view(lease), Some((Role::Leader, Some(epoch))));
    c
}

/// Steps through every deadline before `until`, failing each renewal at once; returns the last
/// deadline stepped, checking along the way that no term ends before `safe_until`.
fn fail_renewals_before(c: &mut Coordinator, until: Instant, safe_until: Instant) -> Instant {
    let mut last = None;
    while let Some(at) = c.next_deadline().filter(|&at| at < until) {
        let fx = c.step(Event::Tick, at);
        if at < safe_until {
            assert!(end_terms(&fx).is_empty(), "{fx:?}");
        }
        renewal(&fx);
        c.step(renew_failed(), at);
        last = Some(at);
    }
    last.unwrap()
}

fn renewed(landed: &[&str], busy: &[&str], db_now: Option<DbMillis>) -> Event {
    Event::RenewDone {
        result: Ok(Renewed {
            landed: names(landed),
            busy: names(busy),
            db_now,
            handoffs: Vec::new(),
        }),
    }
}

fn lone_renewals(fx: &[Effect]) -> Vec<(RenewRequest, Duration)> {
    fx.iter()
        .filter_map(|e| match e {
            Effect::RenewOne { request, timeout } => Some((request.clone(), *timeout)),
            _ => None,
        })
        .collect()
}

/// Leader of `a` (epoch 1) and `b` (epoch 2), both won at `t0`.
fn leader_of_two(t0: Instant) -> Coordinator {
    let mut c = coordinator(&["a", "b"], t0);
    c.step(Event::Tick, t0);
    c.step(
        campaigned(&[("a", Epoch::new(1)), ("b", Epoch::new(2))], &[]),
        t0,
    );
    c
}
