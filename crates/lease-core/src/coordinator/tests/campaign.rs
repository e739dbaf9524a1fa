//! Campaigns: the first tick campaigns for every lease in one statement, and each later one carries
//! every lease due within the margin; a won campaign starts a term measured from when it was sent,
//! and one answered too late starts none; a lost one waits for the holder's expiry, or at most
//! ttl/5 with jitter to keep its place in the lease's line alive; failures back off; a failover's hold-off is waited out, and a row found locked is tried
//! again soon.

use super::*;

#[test]
fn first_tick_campaigns_every_lease() {
    let t0 = start();
    let mut c = coordinator(&["a", "b", "c"], t0);
    assert_eq!(c.next_deadline(), Some(t0));
    assert_eq!(c.view("a"), Some((Role::Standby, None)));
    assert_eq!(c.view("nope"), None);
    let fx = c.step(Event::Tick, t0);
    assert_eq!(campaigns(&fx), ["a", "b", "c"]);
    assert_eq!(fx.len(), 1, "one statement for all: {fx:?}");
    assert!(fx.iter().all(|e| matches!(
        e,
        Effect::Campaign { timeout, .. } if *timeout == ms(600)
    )));
    // Campaigns in flight: nothing more is due and a second tick sends nothing twice.
    assert_eq!(c.next_deadline(), None);
    assert!(c.step(Event::Tick, t0 + ms(10)).is_empty());
}

#[test]
fn won_campaign_starts_a_term_until_sent_plus_ttl_minus_margin() {
    let t0 = start();
    let mut c = coordinator(&["a"], t0);
    c.step(Event::Tick, t0);
    // The campaign took 400 ms: the term is measured from when it was sent.
    let fx = c.step(campaign_done("a", Ok(Some(Epoch::new(5)))), t0 + ms(400));
    assert_eq!(start_terms(&fx), [("a", 5, t0 + ms(2750))]);
    assert!(announced(
        &fx,
        &Announcement::Acquired {
            lease: "a".into(),
            epoch: Epoch::new(5)
        }
    ));
    assert_eq!(c.view("a"), Some((Role::Leader, Some(Epoch::new(5)))));
    // First renewal one renew interval after the campaign was sent.
    assert_eq!(c.next_deadline(), Some(t0 + ms(1000)));
}

#[test]
fn a_lost_campaign_campaigns_again_just_after_the_holder_s_expiry() {
    let t0 = start();
    let mut c = coordinator(&["a", "b"], t0);
    c.step(Event::Tick, t0);
    // a's holder expires 234 ms after the statement read the clock; b's in 2 ttls (a holder
    // with a longer ttl), beyond the time a place in line lasts.
    let done = t0 + ms(50);
    let fx = c.step(
        campaigned(&[], &[("a", Some(ms(234))), ("b", Some(2 * TTL))]),
        done,
    );
    assert!(fx.is_empty(), "{fx:?}");
    assert_eq!(c.view("a"), Some((Role::Standby, None)));
    let next = c.next_deadline().unwrap();
    assert_eq!(next, done + ms(234) + CAMPAIGN_SLACK);
    assert!(c.step(Event::Tick, next - ms(1)).is_empty());
    assert_eq!(campaigns(&c.step(Event::Tick, next)), ["a"]);
    // b waits ttl/5 (+ up to 20%) at most: it keeps its place in line alive, and it is the
    // fallback for a release notification that never came.
    c.step(campaign_done("a", Ok(None)), next + ms(2));
    let b_at = c.next_deadline().unwrap();
    assert!(
        b_at >= done + ms(600) && b_at < done + ms(720),
        "{:?}",
        b_at - done
    );
    assert_eq!(campaigns(&c.step(Event::Tick, b_at)), ["b"]);
}

#[test]
fn a_lost_campaign_without_a_known_expiry_polls_with_jitter_and_a_failed_one_retries_soon() {
    let t0 = start();
    let mut c = coordinator(&["a"], t0);
    c.step(Event::Tick, t0);
    let done = t0 + ms(50);
    let fx = c.step(campaign_done("a", Ok(None)), done);
    assert!(fx.is_empty(), "{fx:?}");
    assert_eq!(c.view("a"), Some((Role::Standby, None)));
    let next = c.next_deadline().unwrap();
    assert!(
        next >= done + ms(600) && next < done + ms(720),
        "next campaign {:?} after the result",
        next - done
    );
    assert!(c.step(Event::Tick, next - ms(1)).is_empty());
    assert_eq!(campaigns(&c.step(Event::Tick, next)), ["a"]);

    // A store error is announced and retried soon, as a failed renewal is.
    let fx = c.step(campaign_done("a", Err("boom".into())), next + ms(5));
    assert!(announced(
        &fx,
        &Announcement::CampaignFailed {
            leases: vec!["a".into()],
            error: "boom".into()
        }
    ));
    assert_eq!(c.view("a"), Some((Role::Standby, None)));
    let again = c.next_deadline().unwrap();
    assert!(again >= next + ms(205) && again < next + ms(245));
}

#[test]
fn failed_campaigns_back_off_to_a_quarter_of_the_poll_and_an_answer_or_a_release_ends_the_wait() {
    let t0 = start();
    let mut c = coordinator(&["a"], t0);
    let timing = *c.timing();
    let mut now = t0;
    let mut waits = Vec::new();
    for _ in 0..8 {
        assert_eq!(campaigns(&c.step(Event::Tick, now)), ["a"]);
        let failed = now + ms(5);
        c.step(campaign_done("a", Err("refused".into())), failed);
        let next = c.next_deadline().unwrap();
        waits.push(next - failed);
        now = next;
    }
    // Doubling from the retry interval (each with up to 20% jitter), then a quarter of the poll.
    let cap = timing.poll_interval / 4;
    for (i, wait) in waits.iter().enumerate() {
        let base = (timing.retry_interval * (1 << i)).min(cap);
        assert!(
            *wait >= base && *wait <= base.mul_f64(1.2),
            "wait {i}: {wait:?}, base {base:?}: {waits:?}"
        );
    }
    assert!(waits[7] <= cap.mul_f64(1.2), "{waits:?}");
    // A release notification campaigns at once, however long the wait.
    assert_eq!(campaigns(&c.step(Event::Tick, now)), ["a"]);
    c.step(campaign_done("a", Err("refused".into())), now + ms(5));
    let later = now + ms(10);
    let fx = c.step(Event::ReleasedElsewhere { lease: "a".into() }, later);
    assert_eq!(campaigns(&fx), ["a"], "{fx:?}");
    // An answered campaign (lost) resets the backoff: the next failure waits the retry interval.
    c.step(campaign_done("a", Ok(None)), later + ms(5));
    let next = c.next_deadline().unwrap();
    assert_eq!(campaigns(&c.step(Event::Tick, next)), ["a"]);
    c.step(campaign_done("a", Err("refused".into())), next + ms(5));
    let wait = c.next_deadline().unwrap() - (next + ms(5));
    assert!(wait <= timing.retry_interval.mul_f64(1.2), "{wait:?}");
}

#[test]
fn one_campaign_carries_every_lease_due_within_the_margin_and_none_while_one_is_in_flight() {
    let t0 = start();
    let mut c = coordinator(&["a", "b", "c", "d"], t0);
    assert_eq!(campaigns(&c.step(Event::Tick, t0)), ["a", "b", "c", "d"]);
    // Due in 300 ms, 500 ms (within the 250 ms margin of a), 599 ms (beyond it); d on its
    // place in line's cadence, 600 to 720 ms.
    let fx = c.step(
        campaigned(
            &[],
            &[
                ("a", Some(ms(299))),
                ("b", Some(ms(499))),
                ("c", Some(ms(598))),
                ("d", None),
            ],
        ),
        t0,
    );
    assert!(fx.is_empty());
    assert_eq!(c.next_deadline(), Some(t0 + ms(300)));
    let fx = c.step(Event::Tick, t0 + ms(300));
    assert_eq!(campaigns(&fx), ["a", "b"]);
    // c falls due while the batch is in flight: it waits for the answer, without a busy tick.
    assert_eq!(c.next_deadline(), None);
    assert!(c.step(Event::Tick, t0 + ms(599)).is_empty());
    let fx = c.step(
        campaigned(&[("a", Epoch::new(2))], &[("b", Some(ms(150)))]),
        t0 + ms(700),
    );
    assert_eq!(start_terms(&fx).len(), 1);
    assert_eq!(
        campaigns(&fx),
        ["b", "c", "d"],
        "c and d were due meanwhile, and b is due within the margin"
    );
}

#[test]
fn a_campaign_held_off_by_a_failover_is_announced_once_and_retried_when_the_hold_off_ends() {
    let t0 = start();
    let mut c = coordinator(&["a"], t0);
    c.step(Event::Tick, t0);
    let held_off = |remaining: Duration| Event::CampaignDone {
        result: Ok(CampaignedMany {
            held_off_for: Some(remaining),
            ..campaigned_many(&[], &[("a", Some(remaining))])
        }),
    };
    let (done, hold) = (t0 + ms(50), ms(500));
    let fx = c.step(held_off(hold), done);
    assert!(announced(&fx, &Announcement::HeldOff { remaining: hold }));
    // No poll in between: the database would hold it off again.
    let at = done + hold + CAMPAIGN_SLACK;
    assert_eq!(c.next_deadline(), Some(at));
    assert_eq!(campaigns(&c.step(Event::Tick, at)), ["a"]);
    // Held off a little longer (the clocks disagree by a few ms): not announced again.
    let fx = c.step(held_off(ms(3)), at + ms(1));
    assert!(fx.is_empty(), "{fx:?}");
    let again = at + ms(1) + ms(3) + CAMPAIGN_SLACK;
    assert_eq!(c.next_deadline(), Some(again));
    assert_eq!(campaigns(&c.step(Event::Tick, again)), ["a"]);
    let fx = c.step(
        campaign_done("a", Ok(Some(Epoch::new((1 << 32) + 1)))),
        again + ms(1),
    );
    assert_eq!(start_terms(&fx).len(), 1);
}

#[test]
fn jitter_spreads_polls_but_replays_with_the_same_seed() {
    let t0 = start();
    let polls = |seed: u64| {
        let mut c = Coordinator::new(timing(), ["a".to_string()], t0, seed);
        let mut now = t0;
        let mut out = Vec::new();
        for _ in 0..20 {
            c.step(Event::Tick, now);
            c.step(campaign_done("a", Ok(None)), now);
            let next = c.next_deadline().unwrap();
            let wait = next - now;
            assert!(wait >= ms(600) && wait < ms(720), "{wait:?}");
            out.push(wait);
            now = next;
        }
        out
    };
    let (a, b) = (polls(1), polls(1));
    assert_eq!(a, b);
    assert!(a.iter().any(|w| *w != a[0]), "no jitter at all: {a:?}");
}

#[test]
fn late_campaign_result_gives_no_term_and_renews_at_once() {
    let t0 = start();
    let mut c = coordinator(&["a"], t0);
    c.step(Event::Tick, t0);
    // The answer came after what would have been safe_until: no term may start on it.
    let fx = c.step(campaign_done("a", Ok(Some(Epoch::new(1)))), t0 + ms(2750));
    assert!(start_terms(&fx).is_empty(), "{fx:?}");
    assert_eq!(renewal(&fx).0, [req("a", Epoch::new(1))]);
    assert_eq!(c.view("a"), Some((Role::Uncertain, Some(Epoch::new(1)))));
    let fx = c.step(renew_done(&["a"]), t0 + ms(2760));
    assert_eq!(start_terms(&fx), [("a", 1, t0 + ms(5500))]);
    assert_eq!(c.view("a"), Some((Role::Leader, Some(Epoch::new(1)))));
}

#[test]
fn a_free_lease_whose_row_is_locked_is_retried_soon_and_announced_when_found_locked_again() {
    let t0 = start();
    let mut c = coordinator(&["a", "b"], t0);
    c.step(Event::Tick, t0);
    let locked = |won: &[(&str, Epoch)]| Event::CampaignDone {
        result: Ok(CampaignedMany {
            locked: vec![("b".to_string(), vec![4242])],
            ..campaigned_many(won, &[("b", None)])
        }),
    };
    let fx = c.step(locked(&[("a", Epoch::new(1))]), t0 + ms(2));
    // The other lease is not held up, and a first sighting (another standby's campaign has the
    // row for a moment) is not worth a warning.
    assert_eq!(start_terms(&fx).len(), 1);
    assert!(
        !fx.iter()
            .any(|e| matches!(e, Effect::Announce(Announcement::CampaignBlocked { .. })))
    );
    // Again after the retry interval (with its jitter), not after a poll.
    let at = c.next_deadline().unwrap();
    assert!(at <= t0 + ms(2) + ms(240), "{:?}", at - t0);
    assert_eq!(campaigns(&c.step(Event::Tick, at)), ["b"]);
    let fx = c.step(locked(&[]), at + ms(1));
    let blocked: Vec<_> = fx
        .iter()
        .filter_map(|e| match e {
            Effect::Announce(Announcement::CampaignBlocked {
                lease, locked_by, ..
            }) => Some((lease.as_str(), locked_by.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(blocked, [("b", vec![4242])]);
    // Once per run of sightings.
    let at = c.next_deadline().unwrap();
    c.step(Event::Tick, at);
    let fx = c.step(locked(&[]), at + ms(1));
    assert!(
        !fx.iter()
            .any(|e| matches!(e, Effect::Announce(Announcement::CampaignBlocked { .. })))
    );
    assert_eq!(c.view("a"), Some((Role::Leader, Some(Epoch::new(1)))));
}
