//! The batch's store timeout, and a lease whose row the batch found busy: renewed alone within its
//! own time left, lost if refused, and back in the batch once its answer lands.

use super::*;

fn renewed_alone(lease: &str, result: Result<bool, String>) -> Event {
    Event::RenewOneDone {
        lease: lease.to_string(),
        result: result.map(|landed| RenewedOne {
            landed,
            db_now: None,
            handoff: false,
        }),
    }
}

#[test]
fn the_batch_waits_its_store_timeout_whatever_time_a_lease_has_left() {
    // One lease near its deadline must not give the whole batch a timeout shorter than a round
    // trip: each lease's deadline is kept by ticks, not by the call.
    let t0 = start();
    let mut c = leader("a", Epoch::new(1), t0, ms(10));
    assert_eq!(renewal(&c.step(Event::Tick, t0 + ms(1000))).1, ms(600));
    c.step(renew_failed(), t0 + ms(1000));
    for at in [1200, 1400, 1600, 1800, 2000, 2200, 2400, 2600] {
        let now = t0 + ms(at);
        assert_eq!(c.next_deadline(), Some(now));
        assert_eq!(renewal(&c.step(Event::Tick, now)).1, ms(600), "at {at} ms");
        c.step(renew_failed(), now);
    }
    // The term still ends at safe_until.
    let fx = c.step(Event::Tick, t0 + ms(2750));
    assert_eq!(end_terms(&fx), [("a", 1, EndReason::SafeUntil, false)]);
}

#[test]
fn a_busy_lease_is_renewed_alone_within_its_own_time_left_while_the_others_land() {
    let t0 = start();
    let mut c = leader_of_two(t0);
    let sent = t0 + ms(1000);
    renewal(&c.step(Event::Tick, sent));
    let fx = c.step(renewed(&["b"], &["a"], None), sent + ms(5));
    assert_eq!(extensions(&fx), [("b", sent + TTL - ms(250))]);
    let alone = lone_renewals(&fx);
    assert_eq!(alone.len(), 1, "{fx:?}");
    // a's term runs until t0 + 2750 ms: that is all its lone renewal may wait.
    assert_eq!(
        alone[0],
        (req("a", Epoch::new(1)), t0 + ms(2750) - (sent + ms(5)))
    );
    assert_eq!(c.view("a"), Some((Role::Leader, Some(Epoch::new(1)))));
    // Until its answer comes, a stays out of the batch.
    let (batch, _) = renewal(&c.step(Event::Tick, sent + ms(1000)));
    assert_eq!(batch, [req("b", Epoch::new(2))]);
    // It lands: a's term runs on from when the lone renewal was sent.
    let fx = c.step(renewed_alone("a", Ok(true)), sent + ms(1500));
    assert_eq!(extensions(&fx), [("a", sent + ms(5) + TTL - ms(250))]);
    c.step(renewed(&["b"], &[], None), sent + ms(1500));
    let (batch, _) = renewal(&c.step(Event::Tick, sent + ms(2000)));
    assert_eq!(batch, [req("a", Epoch::new(1)), req("b", Epoch::new(2))]);
}

#[test]
fn a_busy_lease_refused_alone_is_lost_and_a_failed_one_only_uncertain() {
    let t0 = start();
    let mut c = leader_of_two(t0);
    renewal(&c.step(Event::Tick, t0 + ms(1000)));
    c.step(renewed(&[], &["a", "b"], None), t0 + ms(1002));
    let fx = c.step(renewed_alone("a", Ok(false)), t0 + ms(1010));
    assert_eq!(end_terms(&fx), [("a", 1, EndReason::Lost, false)]);
    assert_eq!(c.view("a"), Some((Role::Standby, None)));
    let fx = c.step(
        renewed_alone("b", Err("lock timeout".into())),
        t0 + ms(1010),
    );
    assert!(end_terms(&fx).is_empty());
    assert_eq!(c.view("b"), Some((Role::Uncertain, Some(Epoch::new(2)))));
    // b is retried in the batch after the retry interval, not at the next renewal.
    let retry = t0 + ms(1210);
    assert_eq!(c.next_deadline(), Some(retry));
    assert_eq!(
        renewal(&c.step(Event::Tick, retry)).0,
        [req("b", Epoch::new(2))]
    );
}

#[test]
fn a_lone_renewals_answer_for_a_lease_not_held_here_changes_nothing() {
    let t0 = start();
    let mut c = leader_of_two(t0);
    renewal(&c.step(Event::Tick, t0 + ms(1000)));
    c.step(renewed(&["b"], &["a"], None), t0 + ms(1002));
    let fx = c.step(Event::Tick, t0 + ms(2750));
    assert_eq!(end_terms(&fx), [("a", 1, EndReason::SafeUntil, false)]);
    let fx = c.step(renewed_alone("x", Ok(true)), t0 + ms(2800));
    assert!(fx.is_empty(), "{fx:?}");
}

#[test]
fn a_lone_renewal_landing_after_its_term_ended_starts_a_new_term_at_the_same_epoch_safe_from_its_send()
 {
    // The term ended on time at safe_until, nothing having come back; the lease is still ours in
    // the store until it expires. The lone renewal then lands: the store extended the lease from no
    // earlier than its send, so a new term at the same epoch is safe until then + ttl - margin.
    let t0 = start();
    let mut c = leader_of_two(t0);
    renewal(&c.step(Event::Tick, t0 + ms(1000)));
    let sent = t0 + ms(1002);
    c.step(renewed(&["b"], &["a"], None), sent);
    let fx = c.step(Event::Tick, t0 + ms(2750));
    assert_eq!(end_terms(&fx), [("a", 1, EndReason::SafeUntil, false)]);
    let fx = c.step(renewed_alone("a", Ok(true)), t0 + ms(2800));
    assert_eq!(start_terms(&fx), [("a", 1, sent + ms(2750))], "{fx:?}");
}

#[test]
fn while_the_only_held_lease_is_renewed_alone_nothing_wakes_the_coordinator_before_its_answer() {
    // The batch has no lease to carry meanwhile: were its time (or a handoff notice's renewal) a
    // deadline, the driver would wake, find nothing to send and wake again at once, until the
    // lone answer came, which may take the lease's whole time left.
    let t0 = start();
    let mut c = leader("a", Epoch::new(1), t0, ms(10));
    let sent = t0 + ms(1000);
    renewal(&c.step(Event::Tick, sent));
    let fx = c.step(renewed(&[], &["a"], None), sent + ms(5));
    assert_eq!(lone_renewals(&fx).len(), 1, "{fx:?}");
    let safe_until = t0 + ms(2750);
    assert_eq!(c.next_deadline(), Some(safe_until));
    assert!(c.step(Event::Tick, sent + ms(1000)).is_empty());
    assert_eq!(
        c.next_deadline(),
        Some(safe_until),
        "the batch's time, with no batch"
    );
    let notice = Event::HandoffNoticed {
        lease: "a".into(),
        epoch: Epoch::new(1),
    };
    let fx = c.step(notice, sent + ms(1100));
    assert!(fx.is_empty(), "{fx:?}");
    assert_eq!(
        c.next_deadline(),
        Some(safe_until),
        "a notice with no batch to send"
    );
    // Back in the batch once its lone renewal lands, and renewed at once for the notice: the lone
    // renewal may have read the row before the request was written.
    let back = sent + ms(1300);
    let fx = c.step(renewed_alone("a", Ok(true)), back);
    assert_eq!(extensions(&fx), [("a", sent + ms(5) + TTL - ms(250))]);
    assert_eq!(renewal(&fx).0, [req("a", Epoch::new(1))]);
}
