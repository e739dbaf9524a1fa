//! The batched renewal: every held lease in one statement at one cadence, `safe_until` counted from
//! the send, failures that leave a lease uncertain until its term ends and then until it has surely
//! expired, recovery, rejection, and answers that come after the lease moved on.

use super::*;

#[test]
fn renewals_of_held_leases_go_out_as_one_batch() {
    let t0 = start();
    let mut c = coordinator(&["a", "b"], t0);
    assert_eq!(campaigns(&c.step(Event::Tick, t0)), ["a", "b"]);
    c.step(
        campaigned(&[("a", Epoch::new(1)), ("b", Epoch::new(4))], &[]),
        t0 + ms(10),
    );
    assert_eq!(c.next_deadline(), Some(t0 + ms(1000)));
    assert!(renewals(&c.step(Event::Tick, t0 + ms(999))).is_empty());

    let sent = t0 + ms(1000);
    let fx = c.step(Event::Tick, sent);
    assert_eq!(
        renewal(&fx),
        (
            vec![req("a", Epoch::new(1)), req("b", Epoch::new(4))],
            ms(600)
        )
    );
    // In flight: nothing more due until the result (the terms end at safe_until regardless).
    assert_eq!(c.next_deadline(), Some(t0 + ms(2750)));
    assert!(renewals(&c.step(Event::Tick, sent + ms(30))).is_empty());

    let fx = c.step(renew_done(&["a", "b"]), sent + ms(50));
    assert_eq!(
        extensions(&fx),
        [("a", sent + ms(2750)), ("b", sent + ms(2750))]
    );
    assert_eq!(c.view("a"), Some((Role::Leader, Some(Epoch::new(1)))));
    assert_eq!(c.view("b"), Some((Role::Leader, Some(Epoch::new(4)))));
    // The cadence runs from the send, not the answer.
    assert_eq!(c.next_deadline(), Some(sent + ms(1000)));
}

#[test]
fn a_lease_won_later_joins_the_shared_renewal() {
    let t0 = start();
    let mut c = coordinator(&["a", "b"], t0);
    c.step(Event::Tick, t0);
    c.step(
        campaigned(&[("a", Epoch::new(1))], &[("b", Some(ms(300)))]),
        t0 + ms(10),
    );
    // b wins when its holder's lease expires, a few hundred ms later.
    let poll = c.next_deadline().unwrap();
    assert_eq!(poll, t0 + ms(311));
    assert_eq!(campaigns(&c.step(Event::Tick, poll)), ["b"]);
    c.step(campaign_done("b", Ok(Some(Epoch::new(2)))), poll + ms(5));
    // One statement at a's cadence renews both.
    assert_eq!(c.next_deadline(), Some(t0 + ms(1000)));
    let (batch, _) = renewal(&c.step(Event::Tick, t0 + ms(1000)));
    assert_eq!(batch, [req("a", Epoch::new(1)), req("b", Epoch::new(2))]);
}

#[test]
fn safe_until_counts_from_when_the_renewal_was_sent() {
    let t0 = start();
    let mut c = leader("a", Epoch::new(1), t0, ms(10));
    let sent = t0 + ms(1000);
    renewal(&c.step(Event::Tick, sent));
    // A slow renewal (500 ms) gives a term 500 ms shorter than its answer time suggests.
    let fx = c.step(renew_done(&["a"]), sent + ms(500));
    assert_eq!(extensions(&fx), [("a", sent + ms(2750))]);
    assert_eq!(c.next_deadline(), Some(sent + ms(1000)));

    // A fast one a second later.
    let sent2 = sent + ms(1000);
    renewal(&c.step(Event::Tick, sent2));
    let fx = c.step(renew_done(&["a"]), sent2 + ms(1));
    assert_eq!(extensions(&fx), [("a", sent2 + ms(2750))]);
}

#[test]
fn renew_failure_makes_uncertain_then_ends_term_at_safe_until_then_standby() {
    let t0 = start();
    let done = t0 + ms(10);
    let mut c = leader("a", Epoch::new(1), t0, ms(10));
    let safe_until = t0 + ms(2750);

    let sent = t0 + ms(1000);
    renewal(&c.step(Event::Tick, sent));
    let fx = c.step(renew_failed(), sent + ms(20));
    assert!(announced(
        &fx,
        &Announcement::RenewFailing {
            leases: vec![("a".into(), Epoch::new(1))],
            error: "store unavailable".into()
        }
    ));
    assert!(end_terms(&fx).is_empty(), "the term runs on: {fx:?}");
    assert_eq!(c.view("a"), Some((Role::Uncertain, Some(Epoch::new(1)))));
    // Retried after the retry interval.
    assert_eq!(c.next_deadline(), Some(sent + ms(220)));

    // Retries keep failing (announced once only) right up to safe_until...
    let last = fail_renewals_before(&mut c, safe_until, safe_until);
    assert!(last > safe_until - ms(200));
    assert_eq!(c.view("a"), Some((Role::Uncertain, Some(Epoch::new(1)))));
    // ...which is the next deadline, exactly, and ends the term.
    assert_eq!(c.next_deadline(), Some(safe_until));
    let fx = c.step(Event::Tick, safe_until);
    assert_eq!(end_terms(&fx), [("a", 1, EndReason::SafeUntil, false)]);
    assert!(announced(
        &fx,
        &Announcement::SafeUntilReached {
            lease: "a".into(),
            epoch: Epoch::new(1)
        }
    ));
    assert_eq!(c.view("a"), Some((Role::Uncertain, Some(Epoch::new(1)))));

    // Still uncertain (and still retrying with the same epoch) until the lease has surely expired.
    let expires_by = done + TTL + ms(250);
    let last = fail_renewals_before(&mut c, expires_by, safe_until);
    assert!(last > safe_until);
    assert_eq!(c.view("a"), Some((Role::Uncertain, Some(Epoch::new(1)))));
    assert_eq!(c.next_deadline(), Some(expires_by));
    let fx = c.step(Event::Tick, expires_by);
    assert!(announced(
        &fx,
        &Announcement::Lost {
            lease: "a".into(),
            epoch: Epoch::new(1),
            rejected: false
        }
    ));
    assert!(end_terms(&fx).is_empty(), "already ended: {fx:?}");
    assert!(renewals(&fx).is_empty());
    assert_eq!(c.view("a"), Some((Role::Standby, None)));
    // ...and campaigns again at once: the campaign is due now (the driver steps again without
    // waiting).
    assert_eq!(c.next_deadline(), Some(expires_by));
    assert_eq!(campaigns(&c.step(Event::Tick, expires_by)), ["a"]);
}

#[test]
fn renewal_landing_while_uncertain_recovers_the_running_term() {
    let t0 = start();
    let mut c = leader("a", Epoch::new(1), t0, ms(10));
    renewal(&c.step(Event::Tick, t0 + ms(1000)));
    c.step(renew_failed(), t0 + ms(1000));
    assert_eq!(c.view("a"), Some((Role::Uncertain, Some(Epoch::new(1)))));

    let sent = c.next_deadline().unwrap();
    assert_eq!(sent, t0 + ms(1200));
    assert_eq!(
        renewal(&c.step(Event::Tick, sent)).0,
        [req("a", Epoch::new(1))]
    );
    let fx = c.step(renew_done(&["a"]), sent + ms(10));
    assert_eq!(extensions(&fx), [("a", sent + ms(2750))]);
    assert!(start_terms(&fx).is_empty());
    assert!(announced(
        &fx,
        &Announcement::Recovered {
            lease: "a".into(),
            epoch: Epoch::new(1)
        }
    ));
    assert_eq!(c.view("a"), Some((Role::Leader, Some(Epoch::new(1)))));
    assert_eq!(c.next_deadline(), Some(sent + ms(1000)));
}

#[test]
fn renewal_landing_after_safe_until_starts_a_new_term_with_the_same_epoch() {
    let t0 = start();
    let mut c = leader("a", Epoch::new(3), t0, ms(10));
    let safe_until = t0 + ms(2750);
    renewal(&c.step(Event::Tick, t0 + ms(1000)));
    c.step(renew_failed(), t0 + ms(1000));
    fail_renewals_before(&mut c, safe_until, safe_until);
    let fx = c.step(Event::Tick, safe_until);
    assert_eq!(end_terms(&fx), [("a", 3, EndReason::SafeUntil, false)]);

    // The next retry lands (the database had not expired the lease yet).
    let sent = c.next_deadline().unwrap();
    assert!(sent > safe_until);
    let (batch, timeout) = renewal(&c.step(Event::Tick, sent));
    assert_eq!(batch, [req("a", Epoch::new(3))]);
    assert!(timeout <= ms(600));
    let fx = c.step(renew_done(&["a"]), sent + ms(30));
    assert_eq!(start_terms(&fx), [("a", 3, sent + ms(2750))]);
    assert!(extensions(&fx).is_empty());
    assert!(announced(
        &fx,
        &Announcement::Recovered {
            lease: "a".into(),
            epoch: Epoch::new(3)
        }
    ));
    assert_eq!(c.view("a"), Some((Role::Leader, Some(Epoch::new(3)))));
}

#[test]
fn renewal_landing_too_late_for_a_term_renews_again_at_once() {
    let t0 = start();
    let mut c = leader("a", Epoch::new(1), t0, ms(10));
    let safe_until = t0 + ms(2750);
    renewal(&c.step(Event::Tick, t0 + ms(1000)));
    c.step(renew_failed(), t0 + ms(1000));
    fail_renewals_before(&mut c, safe_until, safe_until);
    c.step(Event::Tick, safe_until);
    let sent = c.next_deadline().unwrap();
    renewal(&c.step(Event::Tick, sent));
    // Landed, but so late that its own safe_until is already behind us: no term, and the next
    // renewal (whose cadence is already due) goes out at once.
    let late = sent + ms(2750);
    let fx = c.step(renew_done(&["a"]), late);
    assert!(start_terms(&fx).is_empty(), "{fx:?}");
    assert_eq!(renewal(&fx).0, [req("a", Epoch::new(1))]);
    assert_eq!(c.view("a"), Some((Role::Uncertain, Some(Epoch::new(1)))));
    let fx = c.step(renew_done(&["a"]), late + ms(5));
    assert_eq!(start_terms(&fx), [("a", 1, late + ms(2750))]);
    assert_eq!(c.view("a"), Some((Role::Leader, Some(Epoch::new(1)))));
}

#[test]
fn rejected_renewal_ends_the_term_and_campaigns_at_once() {
    let t0 = start();
    let mut c = coordinator(&["a", "b"], t0);
    c.step(Event::Tick, t0);
    c.step(
        campaigned(&[("a", Epoch::new(1)), ("b", Epoch::new(2))], &[]),
        t0 + ms(10),
    );
    let sent = t0 + ms(1000);
    renewal(&c.step(Event::Tick, sent));
    // b landed, a did not: someone else holds a now.
    let fx = c.step(renew_done(&["b"]), sent + ms(10));
    assert_eq!(end_terms(&fx), [("a", 1, EndReason::Lost, false)]);
    assert!(announced(
        &fx,
        &Announcement::Lost {
            lease: "a".into(),
            epoch: Epoch::new(1),
            rejected: true
        }
    ));
    assert_eq!(campaigns(&fx), ["a"]);
    assert_eq!(extensions(&fx), [("b", sent + ms(2750))]);
    assert_eq!(c.view("a"), Some((Role::Standby, None)));
    assert_eq!(c.view("b"), Some((Role::Leader, Some(Epoch::new(2)))));
    // Next batch carries b only.
    c.step(campaign_done("a", Ok(None)), sent + ms(20));
    let (batch, _) = renewal(&c.step(Event::Tick, sent + ms(1000)));
    assert_eq!(batch, [req("b", Epoch::new(2))]);
}

#[test]
fn a_renewal_result_with_nothing_in_flight_is_ignored() {
    let t0 = start();
    let mut c = leader("a", Epoch::new(1), t0, ms(10));
    renewal(&c.step(Event::Tick, t0 + ms(1000)));
    let fx = c.step(renew_done(&["a"]), t0 + ms(1010));
    assert_eq!(extensions(&fx).len(), 1);
    assert!(c.step(renew_done(&[]), t0 + ms(1020)).is_empty());
    assert_eq!(c.view("a"), Some((Role::Leader, Some(Epoch::new(1)))));
}

#[test]
fn a_renewal_for_an_older_epoch_does_not_touch_the_new_one() {
    let t0 = start();
    let mut c = leader("a", Epoch::new(1), t0, ms(10));
    let safe_until = t0 + ms(2750);
    let expires_by = t0 + ms(10) + TTL + ms(250);
    renewal(&c.step(Event::Tick, t0 + ms(1000)));
    c.step(renew_failed(), t0 + ms(1000));
    fail_renewals_before(&mut c, safe_until, safe_until);
    c.step(Event::Tick, safe_until);
    // The last retry goes out just before the lease surely expired...
    let mut sent = c.next_deadline().unwrap();
    while sent < expires_by {
        renewal(&c.step(Event::Tick, sent));
        if c.next_deadline() == Some(expires_by) {
            break;
        }
        c.step(renew_failed(), sent);
        sent = c.next_deadline().unwrap();
    }
    // ...and is still in flight when it has: the lease is given up and won again at epoch 2.
    c.step(Event::Tick, expires_by);
    assert_eq!(c.view("a"), Some((Role::Standby, None)));
    assert_eq!(campaigns(&c.step(Event::Tick, expires_by)), ["a"]);
    let fx = c.step(
        campaign_done("a", Ok(Some(Epoch::new(2)))),
        expires_by + ms(5),
    );
    let (_, _, new_safe_until) = start_terms(&fx)[0];
    assert_eq!(new_safe_until, expires_by + ms(2750));
    // The old renewal (epoch 1) now answers "landed": it says nothing about epoch 2.
    let fx = c.step(renew_done(&["a"]), expires_by + ms(10));
    assert!(
        extensions(&fx).is_empty() && start_terms(&fx).is_empty(),
        "{fx:?}"
    );
    assert!(end_terms(&fx).is_empty(), "{fx:?}");
    assert_eq!(c.view("a"), Some((Role::Leader, Some(Epoch::new(2)))));
}
