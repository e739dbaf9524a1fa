//! Shutdown and step-down: the term ends and drains, then the ordered release; after it the
//! coordinator finishes, or (after a step-down) campaigns again after a poll or a backoff.

use super::*;

#[test]
fn shutdown_while_leader_releases_only_after_the_term_stopped() {
    let t0 = start();
    let mut c = leader("a", Epoch::new(1), t0, ms(10));
    let at = t0 + ms(500);
    let fx = c.step(Event::Shutdown, at);
    assert_eq!(end_terms(&fx), [("a", 1, EndReason::Releasing, true)]);
    assert!(releases(&fx).is_empty());
    assert!(campaigns(&fx).is_empty());
    assert_eq!(c.view("a"), Some((Role::Uncertain, Some(Epoch::new(1)))));
    assert!(!c.is_finished());

    // The term drains for a while: nothing is released, the lease is kept renewed meanwhile.
    let fx = c.step(Event::Tick, t0 + ms(1000));
    assert!(releases(&fx).is_empty());
    assert_eq!(renewal(&fx).0, [req("a", Epoch::new(1))]);
    c.step(renew_done(&["a"]), t0 + ms(1010));
    // A confirmation for another epoch is not this term's.
    assert!(
        c.step(
            Event::TermStopped {
                lease: "a".into(),
                epoch: Epoch::new(9)
            },
            t0 + ms(1100)
        )
        .is_empty()
    );

    let fx = c.step(
        Event::TermStopped {
            lease: "a".into(),
            epoch: Epoch::new(1),
        },
        t0 + ms(1200),
    );
    assert_eq!(releases(&fx), [("a", 1)]);
    assert!(fx.contains(&Effect::Release {
        lease: "a".into(),
        epoch: Epoch::new(1),
        timeout: ms(600)
    }));
    assert!(!c.is_finished());
    assert_eq!(c.next_deadline(), None);

    let fx = c.step(
        Event::ReleaseDone {
            lease: "a".into(),
            result: Ok(true),
        },
        t0 + ms(1210),
    );
    assert!(announced(
        &fx,
        &Announcement::Released {
            lease: "a".into(),
            epoch: Epoch::new(1),
            error: None
        }
    ));
    assert!(c.is_finished());
    assert_eq!(c.view("a"), Some((Role::Standby, None)));
    assert_eq!(c.next_deadline(), None);
    assert!(c.step(Event::Tick, t0 + ms(5000)).is_empty());
}

#[test]
fn shutdown_in_standby_finishes_at_once() {
    let t0 = start();
    let mut c = coordinator(&["a"], t0);
    c.step(Event::Tick, t0);
    c.step(campaign_done("a", Ok(None)), t0);
    assert!(c.step(Event::Shutdown, t0 + ms(1)).is_empty());
    assert!(c.is_finished());
    assert_eq!(c.next_deadline(), None);
}

#[test]
fn shutdown_with_a_campaign_in_flight_that_wins_releases_at_once() {
    let t0 = start();
    let mut c = coordinator(&["a", "b"], t0);
    c.step(Event::Tick, t0);
    assert!(c.step(Event::Shutdown, t0 + ms(5)).is_empty());
    assert!(!c.is_finished(), "campaigns still in flight");
    let fx = c.step(
        campaigned(&[("a", Epoch::new(7))], &[("b", None)]),
        t0 + ms(10),
    );
    assert_eq!(releases(&fx), [("a", 7)]);
    assert!(start_terms(&fx).is_empty());
    assert!(!c.is_finished());
    c.step(
        Event::ReleaseDone {
            lease: "a".into(),
            result: Ok(true),
        },
        t0 + ms(20),
    );
    assert!(c.is_finished());
}

#[test]
fn shutdown_releases_an_uncertain_lease_without_a_term_at_once() {
    let t0 = start();
    let mut c = leader("a", Epoch::new(1), t0, ms(10));
    let safe_until = t0 + ms(2750);
    renewal(&c.step(Event::Tick, t0 + ms(1000)));
    c.step(renew_failed(), t0 + ms(1000));
    fail_renewals_before(&mut c, safe_until, safe_until);
    c.step(Event::Tick, safe_until);
    let fx = c.step(Event::Shutdown, safe_until + ms(10));
    assert!(end_terms(&fx).is_empty());
    assert_eq!(releases(&fx), [("a", 1)]);
    // A failed release still finishes: the lease expires by its ttl.
    let fx = c.step(
        Event::ReleaseDone {
            lease: "a".into(),
            result: Err("down".into()),
        },
        safe_until + ms(20),
    );
    assert!(announced(
        &fx,
        &Announcement::Released {
            lease: "a".into(),
            epoch: Epoch::new(1),
            error: Some("down".into())
        }
    ));
    assert!(c.is_finished());
}

#[test]
fn step_down_releases_then_campaigns_again_after_a_poll() {
    let t0 = start();
    let mut c = leader("a", Epoch::new(2), t0, ms(10));
    let fx = c.step(Event::StepDown { lease: "a".into() }, t0 + ms(300));
    assert_eq!(end_terms(&fx), [("a", 2, EndReason::Releasing, true)]);
    assert!(releases(&fx).is_empty());
    let fx = c.step(
        Event::TermStopped {
            lease: "a".into(),
            epoch: Epoch::new(2),
        },
        t0 + ms(400),
    );
    assert_eq!(releases(&fx), [("a", 2)]);
    assert_eq!(c.view("a"), Some((Role::Uncertain, Some(Epoch::new(2)))));

    let released = t0 + ms(410);
    let fx = c.step(
        Event::ReleaseDone {
            lease: "a".into(),
            result: Ok(true),
        },
        released,
    );
    assert!(campaigns(&fx).is_empty(), "{fx:?}");
    assert_eq!(c.view("a"), Some((Role::Standby, None)));
    assert!(!c.is_finished());
    let next = c.next_deadline().unwrap();
    assert!(next >= released + ms(3000) && next < released + ms(3600));
    assert!(campaigns(&c.step(Event::Tick, next - ms(1))).is_empty());
    assert_eq!(campaigns(&c.step(Event::Tick, next)), ["a"]);
    // It may win it back, with whatever epoch the store hands out.
    let fx = c.step(campaign_done("a", Ok(Some(Epoch::new(3)))), next + ms(5));
    assert_eq!(start_terms(&fx), [("a", 3, next + ms(2750))]);
}

#[test]
fn a_step_down_backing_off_waits_the_backoff_beyond_the_poll_and_only_once() {
    let t0 = start();
    let mut c = leader("a", Epoch::new(2), t0, ms(10));
    c.step(
        Event::BackOff {
            lease: "a".into(),
            wait: ms(8000),
        },
        t0 + ms(300),
    );
    c.step(Event::StepDown { lease: "a".into() }, t0 + ms(300));
    c.step(
        Event::TermStopped {
            lease: "a".into(),
            epoch: Epoch::new(2),
        },
        t0 + ms(400),
    );
    let released = t0 + ms(410);
    c.step(
        Event::ReleaseDone {
            lease: "a".into(),
            result: Ok(true),
        },
        released,
    );
    let next = c.next_deadline().unwrap();
    assert!(
        next >= released + ms(11_000) && next < released + ms(11_600),
        "{:?}",
        next - released
    );
    // Another replica's release notice does not cut it short either.
    c.step(
        Event::ReleasedElsewhere { lease: "a".into() },
        released + ms(500),
    );
    assert!(campaigns(&c.step(Event::Tick, next - ms(1))).is_empty());
    assert_eq!(campaigns(&c.step(Event::Tick, next)), ["a"]);
    // Taken again and stepped down without a backoff: a poll only.
    let fx = c.step(campaign_done("a", Ok(Some(Epoch::new(3)))), next + ms(5));
    assert_eq!(start_terms(&fx).len(), 1);
    c.step(Event::StepDown { lease: "a".into() }, next + ms(10));
    c.step(
        Event::TermStopped {
            lease: "a".into(),
            epoch: Epoch::new(3),
        },
        next + ms(10),
    );
    let again = next + ms(20);
    c.step(
        Event::ReleaseDone {
            lease: "a".into(),
            result: Ok(true),
        },
        again,
    );
    let after = c.next_deadline().unwrap();
    assert!(after < again + ms(3600), "{:?}", after - again);
}

#[test]
fn after_a_step_down_our_own_release_notice_does_not_make_us_campaign() {
    let t0 = start();
    let mut c = leader("a", Epoch::new(2), t0, ms(10));
    c.step(Event::StepDown { lease: "a".into() }, t0 + ms(300));
    c.step(
        Event::TermStopped {
            lease: "a".into(),
            epoch: Epoch::new(2),
        },
        t0 + ms(300),
    );
    let released = t0 + ms(310);
    c.step(
        Event::ReleaseDone {
            lease: "a".into(),
            result: Ok(true),
        },
        released,
    );
    let next = c.next_deadline().unwrap();
    // The store announces our own release to our own listener: that is no reason to campaign.
    let echo = Event::ReleasedElsewhere { lease: "a".into() };
    assert!(campaigns(&c.step(echo.clone(), released + ms(1))).is_empty());
    assert!(campaigns(&c.step(Event::Resubscribed, released + ms(2))).is_empty());
    assert_eq!(
        c.next_deadline(),
        Some(next),
        "the poll is not put off either"
    );
    assert_eq!(campaigns(&c.step(Event::Tick, next)), ["a"]);
    // Once the hold-off is over, notifications work as usual again.
    c.step(campaign_done("a", Ok(None)), next + ms(5));
    assert_eq!(campaigns(&c.step(echo, next + ms(6))), ["a"]);
}

#[test]
fn step_down_of_a_lease_not_held_does_nothing() {
    let t0 = start();
    let mut c = coordinator(&["a"], t0);
    c.step(Event::Tick, t0);
    c.step(campaign_done("a", Ok(None)), t0);
    let before = c.next_deadline();
    assert!(
        c.step(Event::StepDown { lease: "a".into() }, t0 + ms(1))
            .is_empty()
    );
    assert_eq!(c.next_deadline(), before);
    assert_eq!(c.view("a"), Some((Role::Standby, None)));
}
