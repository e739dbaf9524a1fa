//! Handoff: a notice alone gives up nothing, it only brings a renewal forward, and a flood of them
//! costs at most one renewal per retry interval; a renewal, batched or alone, that reports the
//! request starts the ordered release.

use super::*;

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
    assert_eq!(
        end_terms(fx),
        [(lease, epoch.get(), EndReason::Releasing, true)]
    );
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
    assert_eq!(releases(&fx), [(lease, epoch.get())]);
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
    let mut c = leader("a", Epoch::new(4), t0, ms(10));
    let at = t0 + ms(300);
    let notice = || Event::HandoffNoticed {
        lease: "a".into(),
        epoch: Epoch::new(4),
    };
    let fx = c.step(notice(), at);
    assert!(end_terms(&fx).is_empty(), "{fx:?}");
    assert_eq!(renewal(&fx).0, [req("a", Epoch::new(4))], "renewed at once");
    assert_eq!(c.view("a"), Some((Role::Leader, Some(Epoch::new(4)))));
    // A forged notice: the row holds no request, the lease is kept and renewed as usual.
    let fx = c.step(renewed(&["a"], &[], None), at + ms(5));
    assert!(end_terms(&fx).is_empty(), "{fx:?}");
    assert_eq!(c.view("a"), Some((Role::Leader, Some(Epoch::new(4)))));
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
    assert_hands_over(&mut c, &fx, "a", Epoch::new(4), at + ms(5));
}

#[test]
fn a_handoff_notice_heard_during_a_renewal_renews_again_as_soon_as_it_returns() {
    // The batch in flight may have read the row before the request was written.
    let t0 = start();
    let mut c = leader("a", Epoch::new(4), t0, ms(10));
    let sent = t0 + ms(1000);
    assert_eq!(renewal(&c.step(Event::Tick, sent)).0.len(), 1);
    let notice = Event::HandoffNoticed {
        lease: "a".into(),
        epoch: Epoch::new(4),
    };
    assert!(c.step(notice, sent + ms(1)).is_empty());
    let back = sent + ms(5);
    let fx = c.step(renewed(&["a"], &[], None), back);
    assert_eq!(
        renewal(&fx).0,
        [req("a", Epoch::new(4))],
        "renewed again at once"
    );
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
    let mut c = leader("a", Epoch::new(4), t0, ms(10));
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
            epoch: Epoch::new(4),
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
    assert_eq!(c.view("a"), Some((Role::Leader, Some(Epoch::new(4)))));
}

#[test]
fn a_handoff_notice_for_another_epoch_or_lease_changes_nothing() {
    let t0 = start();
    let mut c = leader("a", Epoch::new(4), t0, ms(10));
    let before = c.next_deadline();
    for (lease, epoch) in [("a", 3), ("a", 5), ("b", 4)] {
        let fx = c.step(
            Event::HandoffNoticed {
                lease: lease.into(),
                epoch: Epoch::new(epoch),
            },
            t0 + ms(300),
        );
        assert!(fx.is_empty(), "{lease} at {epoch}: {fx:?}");
    }
    assert_eq!(c.view("a"), Some((Role::Leader, Some(Epoch::new(4)))));
    assert_eq!(c.next_deadline(), before);
    // A standby asked (the request raced its campaign) has nothing to give up.
    let mut s = coordinator(&["a"], t0);
    s.step(Event::Tick, t0);
    s.step(campaign_done("a", Ok(None)), t0);
    let fx = s.step(
        Event::HandoffNoticed {
            lease: "a".into(),
            epoch: Epoch::new(4),
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
    assert_eq!(
        c.view("a"),
        Some((Role::Leader, Some(Epoch::new(1)))),
        "a is kept"
    );
    assert_hands_over(&mut c, &fx, "b", Epoch::new(2), at);
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
    assert_hands_over(&mut c, &fx, "b", Epoch::new(2), at);
}
