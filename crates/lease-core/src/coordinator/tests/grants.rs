//! Grants (`crate::queue`): a lease given to this replica by a release or another standby's
//! campaign is taken up after one read (or the campaign that finds it), with a term measured from
//! when that statement was sent and never longer than the grant, and a renewal at once; a grant
//! this replica may not take up is released at once, which passes it on; a notice is only a
//! hint, and an epoch already held here is never taken up again.

use super::*;

fn grant_noticed(lease: &str, epoch: i64) -> Event {
    Event::GrantNoticed {
        lease: lease.into(),
        epoch: Epoch::new(epoch),
    }
}

fn grant_read(lease: &str, epoch: i64, left: Option<Duration>) -> Event {
    Event::GrantRead {
        lease: lease.into(),
        epoch: Epoch::new(epoch),
        result: Ok(GrantSeen { left, db_now: None }),
    }
}

fn reads(fx: &[Effect]) -> Vec<(&str, i64)> {
    fx.iter()
        .filter_map(|e| match e {
            Effect::ReadGrant { lease, epoch, .. } => Some((lease.as_str(), epoch.get())),
            _ => None,
        })
        .collect()
}

/// A standby of `a` whose first campaign lost, with nothing in flight.
fn standby(t0: Instant) -> Coordinator {
    let mut c = coordinator(&["a"], t0);
    c.step(Event::Tick, t0);
    c.step(campaign_done("a", Ok(None)), t0 + ms(5));
    c
}

/// A coordinator for lease `a` that won it at epoch 6, stepped down and released it by `t0 + 30
/// ms`; with the step-down's effects.
fn held_at_6_then_released(t0: Instant) -> (Coordinator, Vec<Effect>) {
    let mut c = coordinator(&["a"], t0);
    c.step(Event::Tick, t0);
    c.step(campaign_done("a", Ok(Some(Epoch::new(6)))), t0 + ms(5));
    let fx = c.step(Event::StepDown { lease: "a".into() }, t0 + ms(10));
    c.step(
        Event::TermStopped {
            lease: "a".into(),
            epoch: Epoch::new(6),
        },
        t0 + ms(20),
    );
    c.step(
        Event::ReleaseDone {
            lease: "a".into(),
            result: Ok(true),
        },
        t0 + ms(30),
    );
    (c, fx)
}

#[test]
fn a_grant_notice_reads_the_row_and_starts_a_term_from_when_the_read_was_sent() {
    let t0 = start();
    let mut c = standby(t0);
    let noticed = t0 + ms(100);
    let fx = c.step(grant_noticed("a", 7), noticed);
    assert_eq!(reads(&fx), [("a", 7)]);
    // No campaign while the read is out: its answer decides.
    assert_eq!(c.next_deadline(), None);
    // The read took 50 ms and found 1,400 ms left of the grant by the database's clock.
    let fx = c.step(grant_read("a", 7, Some(ms(1400))), noticed + ms(50));
    assert_eq!(start_terms(&fx), [("a", 7, noticed + ms(1400) - ms(250))]);
    assert!(announced(
        &fx,
        &Announcement::Granted {
            lease: "a".into(),
            epoch: Epoch::new(7)
        }
    ));
    // A renewal at once, in the same step: the grant is short, the renewal makes it a ttl.
    let (batch, _) = renewal(&fx);
    assert_eq!(batch, [req("a", Epoch::new(7))]);
    assert_eq!(c.view("a"), Some((Role::Leader, Some(Epoch::new(7)))));
}

#[test]
fn a_campaign_that_finds_a_grant_takes_it_up_as_the_read_would() {
    let t0 = start();
    let mut c = coordinator(&["a", "b"], t0);
    c.step(Event::Tick, t0);
    let fx = c.step(
        Event::CampaignDone {
            result: Ok(CampaignedMany {
                granted: vec![("a".into(), Epoch::new(3), ms(900))],
                ..campaigned_many(&[], &[("b", None)])
            }),
        },
        t0 + ms(20),
    );
    assert_eq!(start_terms(&fx), [("a", 3, t0 + ms(900) - ms(250))]);
    assert_eq!(renewal(&fx).0, [req("a", Epoch::new(3))]);
    assert_eq!(c.view("b"), Some((Role::Standby, None)));
}

#[test]
fn a_notice_the_row_does_not_confirm_starts_nothing_and_the_campaigns_go_on() {
    let t0 = start();
    let mut c = standby(t0);
    let fx = c.step(grant_noticed("a", 4), t0 + ms(100));
    assert_eq!(reads(&fx), [("a", 4)]);
    let fx = c.step(grant_read("a", 4, None), t0 + ms(110));
    assert!(start_terms(&fx).is_empty(), "{fx:?}");
    assert_eq!(c.view("a"), Some((Role::Standby, None)));
    assert!(c.next_deadline().is_some());
    // A read that failed: a campaign soon, which reads grants too.
    c.step(grant_noticed("a", 5), t0 + ms(120));
    c.step(
        Event::GrantRead {
            lease: "a".into(),
            epoch: Epoch::new(5),
            result: Err("down".into()),
        },
        t0 + ms(130),
    );
    let next = c.next_deadline().unwrap();
    assert!(next <= t0 + ms(130) + ms(240), "{:?}", next - t0);
}

#[test]
fn an_epoch_held_here_before_is_never_taken_up_again() {
    let t0 = start();
    // The term ends (a step-down), and the lease is released.
    let (mut c, fx) = held_at_6_then_released(t0);
    assert_eq!(end_terms(&fx).len(), 1);
    // A notice heard late, for the epoch this replica held: no read at all.
    assert!(reads(&c.step(grant_noticed("a", 6), t0 + ms(40))).is_empty());
    assert!(reads(&c.step(grant_noticed("a", 5), t0 + ms(41))).is_empty());
    assert_eq!(
        reads(&c.step(grant_noticed("a", 8), t0 + ms(42))),
        [("a", 8)]
    );
}

#[test]
fn a_grant_this_replica_may_not_take_up_is_released_at_once() {
    let t0 = start();
    // Its health gate shut after it joined the line.
    let mut c = standby(t0);
    c.step(
        Event::CampaignGate {
            lease: "a".into(),
            source: GateSource::HealthCheck("probe".into()),
            open: false,
        },
        t0 + ms(10),
    );
    c.step(grant_noticed("a", 9), t0 + ms(20));
    let fx = c.step(grant_read("a", 9, Some(ms(1400))), t0 + ms(25));
    assert!(start_terms(&fx).is_empty(), "{fx:?}");
    assert_eq!(releases(&fx), [("a", 9)]);

    // A grant read with less time left than the margin: no term could start.
    let mut c = standby(t0);
    c.step(grant_noticed("a", 9), t0 + ms(20));
    let fx = c.step(grant_read("a", 9, Some(ms(200))), t0 + ms(25));
    assert!(start_terms(&fx).is_empty(), "{fx:?}");
    assert_eq!(releases(&fx), [("a", 9)]);
}

#[test]
fn a_shutdown_waits_for_a_grant_being_read_and_releases_it() {
    let t0 = start();
    let mut c = standby(t0);
    c.step(grant_noticed("a", 2), t0 + ms(20));
    c.step(Event::Shutdown, t0 + ms(21));
    assert!(!c.is_finished());
    let fx = c.step(grant_read("a", 2, Some(ms(1400))), t0 + ms(25));
    assert_eq!(releases(&fx), [("a", 2)]);
    c.step(
        Event::ReleaseDone {
            lease: "a".into(),
            result: Ok(true),
        },
        t0 + ms(30),
    );
    assert!(c.is_finished());

    // A read that finds nothing lets the shutdown finish.
    let mut c = standby(t0);
    c.step(grant_noticed("a", 2), t0 + ms(20));
    c.step(Event::Shutdown, t0 + ms(21));
    c.step(grant_read("a", 2, None), t0 + ms(25));
    assert!(c.is_finished());
}

#[test]
fn a_campaign_answer_that_comes_after_a_grant_was_taken_up_changes_nothing() {
    let t0 = start();
    let mut c = standby(t0);
    // A campaign is out when the grant notice comes; the read comes back first.
    let next = c.next_deadline().unwrap();
    assert_eq!(campaigns(&c.step(Event::Tick, next)), ["a"]);
    c.step(grant_noticed("a", 3), next + ms(1));
    let fx = c.step(grant_read("a", 3, Some(ms(1400))), next + ms(2));
    assert_eq!(start_terms(&fx).len(), 1);
    // The campaign read the row before the grant: lost, for all it knew.
    let fx = c.step(campaign_done("a", Ok(None)), next + ms(3));
    assert!(end_terms(&fx).is_empty(), "{fx:?}");
    assert_eq!(c.view("a"), Some((Role::Leader, Some(Epoch::new(3)))));
}

#[test]
fn a_grant_read_across_a_clock_step_starts_no_term_until_the_quiet_ends() {
    let t0 = start();
    let mut c = coordinator(&["a"], t0);
    c.step(Event::Tick, t0);
    let lost = Event::CampaignDone {
        result: Ok(CampaignedMany {
            db_now: Some(1_000_000),
            ..campaigned_many(&[], &[("a", None)])
        }),
    };
    c.step(lost, t0 + ms(5));
    c.step(grant_noticed("a", 4), t0 + ms(100));
    // 100 ms later by this replica's clock, the database's says 900 ms: a step beyond the margin.
    let read = Event::GrantRead {
        lease: "a".into(),
        epoch: Epoch::new(4),
        result: Ok(GrantSeen {
            left: Some(ms(1400)),
            db_now: Some(1_000_900),
        }),
    };
    let fx = c.step(read, t0 + ms(105));
    assert!(start_terms(&fx).is_empty(), "{fx:?}");
    assert!(
        fx.iter()
            .any(|e| matches!(e, Effect::Announce(Announcement::ClockStepped { .. })))
    );
    // Held without a term, and renewed at once all the same.
    assert_eq!(renewal(&fx).0, [req("a", Epoch::new(4))]);
    assert_eq!(c.view("a").unwrap().0, Role::Uncertain);
}

#[test]
fn a_campaign_that_finds_a_grant_of_an_epoch_held_here_before_waits_for_it_to_lapse() {
    let t0 = start();
    // The term ends and the lease is lost; a failover then brings back a row granting epoch 6
    // to this replica, untaken.
    let (mut c, _) = held_at_6_then_released(t0);
    let at = c.next_deadline().unwrap();
    assert_eq!(campaigns(&c.step(Event::Tick, at)), ["a"]);
    let fx = c.step(
        Event::CampaignDone {
            result: Ok(CampaignedMany {
                granted: vec![("a".into(), Epoch::new(6), ms(400))],
                ..campaigned_many(&[], &[])
            }),
        },
        at + ms(1),
    );
    assert!(start_terms(&fx).is_empty(), "{fx:?}");
    // Not at once again (the same row would answer the same): once the grant has lapsed.
    let next = c.next_deadline().unwrap();
    assert!(next > at + ms(1), "{:?}", next - at);
    assert!(next <= at + ms(1) + ms(400) + CAMPAIGN_SLACK);
}
