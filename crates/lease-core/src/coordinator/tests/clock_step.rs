//! A forward step of the database's clock: every term ends and the replica keeps quiet for a ttl; a
//! release after the step waits for the ended term's work to stop; a campaign won across a step
//! starts no term until the quiet ends.

use super::*;

#[test]
fn a_forward_clock_step_ends_every_term_and_keeps_the_replica_quiet_for_a_ttl() {
    let t0 = start();
    let mut c = coordinator(&["a", "b", "c"], t0);
    c.step(Event::Tick, t0);
    // c's holder expires just before a and b are renewed.
    let won = Event::CampaignDone {
        result: Ok(CampaignedMany {
            db_now: Some(1_000_000),
            ..campaigned_many(
                &[("a", Epoch::new(1)), ("b", Epoch::new(1))],
                &[("c", Some(ms(990)))],
            )
        }),
    };
    c.step(won, t0 + ms(2));
    assert_eq!(c.view("a"), Some((Role::Leader, Some(Epoch::new(1)))));
    // The renewal finds 8 s more on the database's clock than the 1 s that passed here.
    let sent = t0 + ms(1000);
    let fx = c.step(Event::Tick, sent);
    renewal(&fx);
    assert_eq!(campaigns(&fx), ["c"], "c polls at the same tick");
    let fx = c.step(renewed(&["a", "b"], &[], Some(1_009_003)), sent + ms(2));
    assert_eq!(
        end_terms(&fx),
        [
            ("a", 1, EndReason::ClockStep, true),
            ("b", 1, EndReason::ClockStep, true)
        ]
    );
    assert!(
        start_terms(&fx).is_empty() && extensions(&fx).is_empty(),
        "{fx:?}"
    );
    assert!(fx.iter().any(|e| matches!(
        e,
        Effect::Announce(Announcement::ClockStepped { ahead, quiet })
            if *ahead >= ms(7_990) && *quiet == TTL
    )));
    assert_eq!(c.view("a"), Some((Role::Uncertain, Some(Epoch::new(1)))));
    c.step(campaigned(&[], &[("c", Some(ms(100)))]), sent + ms(3));
    // Quiet for a ttl: renewals go on (the leases stay ours), c does not campaign, no term starts.
    let quiet_until = sent + ms(2) + TTL;
    let mut now = sent + ms(2);
    while let Some(at) = c.next_deadline().filter(|&at| at < quiet_until) {
        now = at;
        let fx = c.step(Event::Tick, now);
        assert!(
            campaigns(&fx).is_empty() && start_terms(&fx).is_empty(),
            "{fx:?}"
        );
        if !renewals(&fx).is_empty() {
            c.step(renewed(&["a", "b"], &[], None), now);
        }
    }
    assert!(now > sent + ms(2000), "renewals went on during the quiet");
    // Then the terms start again on the renewals that landed, and c campaigns.
    assert_eq!(c.next_deadline(), Some(quiet_until));
    let fx = c.step(Event::Tick, quiet_until);
    let mut started: Vec<&str> = start_terms(&fx).iter().map(|t| t.0).collect();
    started.sort();
    assert_eq!(started, ["a", "b"]);
    assert_eq!(campaigns(&fx), ["c"]);
}

/// A leader of "a" at epoch 1 whose renewal, sent at the returned instant, found the database's
/// clock 8 s ahead: the term ended by the step, its work still to confirm stopped.
fn term_ended_by_a_clock_step() -> (Coordinator, Instant) {
    let t0 = start();
    let mut c = coordinator(&["a"], t0);
    c.step(Event::Tick, t0);
    let won = Event::CampaignDone {
        result: Ok(CampaignedMany {
            db_now: Some(1_000_000),
            ..campaigned_many(&[("a", Epoch::new(1))], &[])
        }),
    };
    c.step(won, t0 + ms(2));
    let sent = t0 + ms(1000);
    renewal(&c.step(Event::Tick, sent));
    let fx = c.step(renewed(&["a"], &[], Some(1_009_003)), sent + ms(2));
    assert_eq!(end_terms(&fx), [("a", 1, EndReason::ClockStep, true)]);
    (c, sent)
}

#[test]
fn a_release_after_a_clock_step_waits_for_the_ended_term_s_work_to_stop() {
    // The step ends the term before its deadline, so its work may still drain until then: a
    // step-down (or a handoff, or the shutdown) meanwhile must not release under it, or another
    // replica could start while the drain still lands writes (found by the simulator).
    let (mut c, sent) = term_ended_by_a_clock_step();
    let fx = c.step(
        Event::StepDown {
            lease: "a".to_string(),
        },
        sent + ms(10),
    );
    assert!(
        releases(&fx).is_empty(),
        "released under a draining term: {fx:?}"
    );
    let fx = c.step(
        Event::TermStopped {
            lease: "a".to_string(),
            epoch: Epoch::new(1),
        },
        sent + ms(20),
    );
    assert_eq!(releases(&fx), [("a", 1)]);
}

#[test]
fn a_release_after_a_clock_step_whose_work_has_stopped_goes_out_at_once() {
    let (mut c, sent) = term_ended_by_a_clock_step();
    c.step(
        Event::TermStopped {
            lease: "a".to_string(),
            epoch: Epoch::new(1),
        },
        sent + ms(5),
    );
    let fx = c.step(
        Event::StepDown {
            lease: "a".to_string(),
        },
        sent + ms(10),
    );
    assert_eq!(releases(&fx), [("a", 1)]);
}

#[test]
fn a_campaign_won_across_a_clock_step_starts_no_term_until_the_quiet_ends() {
    let t0 = start();
    let mut c = coordinator(&["a"], t0);
    c.step(Event::Tick, t0);
    let lost = Event::CampaignDone {
        result: Ok(CampaignedMany {
            db_now: Some(5_000),
            ..campaigned_many(&[], &[("a", Some(ms(699)))])
        }),
    };
    c.step(lost, t0 + ms(1));
    // The next campaign wins, but the database's clock moved 5 s in 0.7 s: the old holder may still
    // be running on the old clock.
    let at = c.next_deadline().unwrap();
    assert_eq!(campaigns(&c.step(Event::Tick, at)), ["a"]);
    let won = Event::CampaignDone {
        result: Ok(CampaignedMany {
            db_now: Some(10_700),
            ..campaigned_many(&[("a", Epoch::new(2))], &[])
        }),
    };
    let fx = c.step(won, at + ms(1));
    assert!(start_terms(&fx).is_empty(), "{fx:?}");
    assert_eq!(c.view("a"), Some((Role::Uncertain, Some(Epoch::new(2)))));
    // The quiet ends a ttl after the step was seen, with renewals landing meanwhile.
    let quiet_until = at + ms(1) + TTL;
    loop {
        let next = c.next_deadline().unwrap();
        let fx = c.step(Event::Tick, next);
        if next >= quiet_until {
            assert_eq!(start_terms(&fx).len(), 1, "{fx:?}");
            break;
        }
        assert!(start_terms(&fx).is_empty(), "{fx:?}");
        if !renewals(&fx).is_empty() {
            c.step(renew_done(&["a"]), next);
        }
    }
    assert_eq!(c.view("a"), Some((Role::Leader, Some(Epoch::new(2)))));
}
