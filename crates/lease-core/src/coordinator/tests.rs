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

use super::*;
use crate::DbMillis;

mod busy;
mod campaign;
mod clock_step;
mod gates;
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

fn releases(fx: &[Effect]) -> Vec<(&str, Epoch)> {
    fx.iter()
        .filter_map(|e| match e {
            Effect::Release { lease, epoch, .. } => Some((lease.as_str(), *epoch)),
            _ => None,
        })
        .collect()
}

fn end_terms(fx: &[Effect]) -> Vec<(&str, Epoch, EndReason, bool)> {
    fx.iter()
        .filter_map(|e| match e {
            Effect::EndTerm {
                lease,
                epoch,
                reason,
                confirm,
            } => Some((lease.as_str(), *epoch, *reason, *confirm)),
            _ => None,
        })
        .collect()
}

fn start_terms(fx: &[Effect]) -> Vec<(&str, Epoch, Instant)> {
    fx.iter()
        .filter_map(|e| match e {
            Effect::StartTerm {
                lease,
                epoch,
                safe_until,
            } => Some((lease.as_str(), *epoch, *safe_until)),
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

/// The answer to a campaign for `lease` alone, without a reading of the database clock (see
/// `clock_*` tests for those); lost without a known wait.
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
    c.step(campaigned(&[("a", 1), ("b", 2)], &[]), t0);
    c
}

/// The ordered release a handoff request starts: the term ends and is awaited, then the release,
/// then a standby that holds off a poll.
fn assert_hands_over(c: &mut Coordinator, fx: &[Effect], lease: &str, epoch: Epoch, at: Instant) {
    assert!(
        announced(
            fx,
            &Announcement::HandoffRequested {
                lease: lease.into(),
                epoch
            }
        ),
        "{fx:?}"
    );
    assert_eq!(end_terms(fx), [(lease, epoch, EndReason::Releasing, true)]);
    assert!(
        releases(fx).is_empty(),
        "no release before the plugins stopped"
    );
    let fx = c.step(
        Event::TermStopped {
            lease: lease.into(),
            epoch,
        },
        at + ms(5),
    );
    assert_eq!(releases(&fx), [(lease, epoch)]);
    let released = at + ms(10);
    let fx = c.step(
        Event::ReleaseDone {
            lease: lease.into(),
            result: Ok(true),
        },
        released,
    );
    assert!(campaigns(&fx).is_empty(), "{fx:?}");
    assert_eq!(c.view(lease), Some((Role::Standby, None)));
    // Its own release notice does not bring the lease straight back.
    let echo = Event::ReleasedElsewhere {
        lease: lease.into(),
    };
    assert!(campaigns(&c.step(echo, released + ms(1))).is_empty());
    assert!(campaigns(&c.step(Event::Tick, released + ms(2999))).is_empty());
}

#[test]
fn a_handoff_notice_alone_gives_up_nothing_it_renews_at_once_and_the_answer_decides() {
    // On PostgreSQL any role that may connect can send the notice, a plugin's SQL role included:
    // were the notice enough, such a role could make the holder step down again and again.
    let t0 = start();
    let mut c = leader("a", 4, t0, ms(10));
    let at = t0 + ms(300);
    let notice = || Event::HandoffNoticed {
        lease: "a".into(),
        epoch: 4,
    };
    let fx = c.step(notice(), at);
    assert!(end_terms(&fx).is_empty(), "{fx:?}");
    assert_eq!(renewal(&fx).0, [req("a", 4)], "renewed at once");
    assert_eq!(c.view("a"), Some((Role::Leader, Some(4))));
    // A forged notice: the row holds no request, the lease is kept and renewed as usual.
    let fx = c.step(renewed(&["a"], &[], None), at + ms(5));
    assert!(end_terms(&fx).is_empty(), "{fx:?}");
    assert_eq!(c.view("a"), Some((Role::Leader, Some(4))));
    // A real one 50 ms later: within the retry interval of the last renewal a notice brought
    // forward, so it is renewed for at that interval's end, and that renewal reads the request.
    let fx = c.step(notice(), at + ms(50));
    assert!(renewals(&fx).is_empty(), "{fx:?}");
    let at = at + ms(200);
    assert_eq!(c.next_deadline(), Some(at));
    let fx = c.step(Event::Tick, at);
    assert_eq!(renewal(&fx).0.len(), 1, "{fx:?}");
    let fx = c.step(
        Event::RenewDone {
            result: Ok(Renewed {
                landed: names(&["a"]),
                busy: Vec::new(),
                db_now: None,
                handoffs: names(&["a"]),
            }),
        },
        at + ms(5),
    );
    assert_hands_over(&mut c, &fx, "a", 4, at + ms(5));
}

#[test]
fn a_handoff_notice_heard_during_a_renewal_renews_again_as_soon_as_it_returns() {
    // The batch in flight may have read the row before the request was written.
    let t0 = start();
    let mut c = leader("a", 4, t0, ms(10));
    let sent = t0 + ms(1000);
    assert_eq!(renewal(&c.step(Event::Tick, sent)).0.len(), 1);
    let notice = Event::HandoffNoticed {
        lease: "a".into(),
        epoch: 4,
    };
    assert!(c.step(notice, sent + ms(1)).is_empty());
    let back = sent + ms(5);
    let fx = c.step(renewed(&["a"], &[], None), back);
    assert_eq!(renewal(&fx).0, [req("a", 4)], "renewed again at once");
    // Only once: the renewal after that keeps its cadence.
    let fx = c.step(renewed(&["a"], &[], None), back + ms(5));
    assert!(renewals(&fx).is_empty(), "{fx:?}");
    assert!(renewals(&c.step(Event::Tick, back + ms(6))).is_empty());
}

#[test]
fn a_flood_of_handoff_notices_costs_one_renewal_per_retry_interval_at_most() {
    // Forged lines in a SQLite event file, or NOTIFYs on PostgreSQL, one a millisecond for 5 s,
    // each renewal answered in 1 ms: besides the 5 of the cadence, at most one renewal per retry
    // interval (200 ms here), where each notice renewed back to back before.
    let t0 = start();
    let mut c = leader("a", 4, t0, ms(10));
    let mut renewed_at = Vec::new();
    let mut in_flight = false;
    for tick in 0..5000 {
        let now = t0 + ms(10 + tick);
        if in_flight {
            in_flight = !renewals(&c.step(renewed(&["a"], &[], None), now)).is_empty();
            if in_flight {
                renewed_at.push(now);
            }
        }
        let notice = Event::HandoffNoticed {
            lease: "a".into(),
            epoch: 4,
        };
        let mut fx = c.step(notice, now);
        if c.next_deadline().is_some_and(|d| d <= now) {
            fx.extend(c.step(Event::Tick, now));
        }
        if !renewals(&fx).is_empty() {
            assert!(!in_flight, "two renewals in flight at {:?}", now - t0);
            in_flight = true;
            renewed_at.push(now);
        }
    }
    let count = renewed_at.len();
    assert!(count <= 5 + 5000 / 200 + 1, "{count} renewals in 5 s");
    for pair in renewed_at.windows(2) {
        assert!(pair[1] - pair[0] >= ms(200), "{renewed_at:?}");
    }
    assert_eq!(c.view("a"), Some((Role::Leader, Some(4))));
}

#[test]
fn a_handoff_notice_for_another_epoch_or_lease_changes_nothing() {
    let t0 = start();
    let mut c = leader("a", 4, t0, ms(10));
    let before = c.next_deadline();
    for (lease, epoch) in [("a", 3), ("a", 5), ("b", 4)] {
        let fx = c.step(
            Event::HandoffNoticed {
                lease: lease.into(),
                epoch,
            },
            t0 + ms(300),
        );
        assert!(fx.is_empty(), "{lease} at {epoch}: {fx:?}");
    }
    assert_eq!(c.view("a"), Some((Role::Leader, Some(4))));
    assert_eq!(c.next_deadline(), before);
    // A standby asked (the request raced its campaign) has nothing to give up.
    let mut s = coordinator(&["a"], t0);
    s.step(Event::Tick, t0);
    s.step(campaign_done("a", Ok(None)), t0);
    let fx = s.step(
        Event::HandoffNoticed {
            lease: "a".into(),
            epoch: 4,
        },
        t0 + ms(1),
    );
    assert!(fx.is_empty(), "{fx:?}");
}

#[test]
fn a_renewal_that_reports_a_handoff_request_renews_then_hands_the_lease_over() {
    let t0 = start();
    let mut c = leader_of_two(t0);
    let sent = t0 + ms(1000);
    let (batch, _) = renewal(&c.step(Event::Tick, sent));
    assert_eq!(batch.len(), 2);
    let at = sent + ms(5);
    let fx = c.step(
        Event::RenewDone {
            result: Ok(Renewed {
                landed: names(&["a", "b"]),
                busy: Vec::new(),
                db_now: None,
                handoffs: names(&["b"]),
            }),
        },
        at,
    );
    assert_eq!(extensions(&fx).len(), 2, "{fx:?}");
    assert_eq!(c.view("a"), Some((Role::Leader, Some(1))), "a is kept");
    assert_hands_over(&mut c, &fx, "b", 2, at);
}

#[test]
fn a_lone_renewal_that_reports_a_handoff_request_hands_the_lease_over() {
    let t0 = start();
    let mut c = leader_of_two(t0);
    let sent = t0 + ms(1000);
    c.step(Event::Tick, sent);
    let fx = c.step(renewed(&["a"], &["b"], None), sent + ms(5));
    assert_eq!(lone_renewals(&fx).len(), 1);
    let at = sent + ms(20);
    let fx = c.step(
        Event::RenewOneDone {
            lease: "b".into(),
            result: Ok(RenewedOne {
                landed: true,
                db_now: None,
                handoff: true,
            }),
        },
        at,
    );
    assert_hands_over(&mut c, &fx, "b", 2, at);
}
