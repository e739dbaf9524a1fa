//! Lease groups' shards: campaigned for only while the group's plan assigns them here, kept while
//! held until the group steps them down, and campaigned for at once when given back.

use super::*;

fn assign(lease: &str, yours: bool) -> Event {
    Event::Assign {
        lease: lease.into(),
        yours,
    }
}

#[test]
fn a_shard_is_campaigned_for_only_once_assigned_and_at_once_when_it_is() {
    let t0 = start();
    let mut c = Coordinator::with_shards(
        timing(),
        ["plain".to_string()],
        ["orders/0".to_string(), "orders/1".to_string()],
        t0,
        7,
    );
    let fx = c.step(Event::Tick, t0);
    assert_eq!(
        campaigns(&fx),
        ["plain"],
        "shards wait for their group's plan"
    );
    c.step(campaigned(&[("plain", Epoch::new(1))], &[]), t0 + ms(5));
    // A release notice or a poll does not make an unassigned shard campaign.
    let fx = c.step(
        Event::ReleasedElsewhere {
            lease: "orders/0".into(),
        },
        t0 + ms(10),
    );
    assert!(campaigns(&fx).is_empty(), "{fx:?}");
    let fx = c.step(assign("orders/1", true), t0 + ms(20));
    assert_eq!(campaigns(&fx), ["orders/1"]);
    // Assigned but lost to its holder: campaigns again at the holder's expiry, as any lease.
    let fx = c.step(campaigned(&[], &[("orders/1", Some(ms(700)))]), t0 + ms(25));
    assert!(campaigns(&fx).is_empty());
    let fx = c.step(Event::Tick, t0 + ms(25) + ms(700) + CAMPAIGN_SLACK);
    assert_eq!(campaigns(&fx), ["orders/1"]);
}

#[test]
fn taking_a_held_shard_s_assignment_away_keeps_it_held_until_it_is_stepped_down() {
    let t0 = start();
    let mut c = Coordinator::with_shards(timing(), [], ["orders/0".to_string()], t0, 7);
    let fx = c.step(assign("orders/0", true), t0);
    assert_eq!(campaigns(&fx), ["orders/0"]);
    let fx = c.step(campaigned(&[("orders/0", Epoch::new(3))], &[]), t0 + ms(5));
    assert_eq!(start_terms(&fx).len(), 1);
    let fx = c.step(assign("orders/0", false), t0 + ms(10));
    assert!(fx.is_empty(), "{fx:?}");
    assert_eq!(
        c.view("orders/0"),
        Some((Role::Leader, Some(Epoch::new(3))))
    );
    // The group's runner steps it down: the ordered release, and no campaign after it.
    let fx = c.step(
        Event::StepDown {
            lease: "orders/0".into(),
        },
        t0 + ms(20),
    );
    assert_eq!(
        end_terms(&fx),
        [("orders/0", 3, EndReason::Releasing, true)]
    );
    let fx = c.step(
        Event::TermStopped {
            lease: "orders/0".into(),
            epoch: Epoch::new(3),
        },
        t0 + ms(30),
    );
    assert_eq!(releases(&fx), [("orders/0", 3)]);
    c.step(
        Event::ReleaseDone {
            lease: "orders/0".into(),
            result: Ok(true),
        },
        t0 + ms(35),
    );
    for s in 1..10 {
        let fx = c.step(Event::Tick, t0 + Duration::from_secs(s));
        assert!(campaigns(&fx).is_empty(), "{fx:?}");
        let fx = c.step(
            Event::CampaignNow {
                lease: "orders/0".into(),
            },
            t0 + Duration::from_secs(s),
        );
        assert!(campaigns(&fx).is_empty(), "{fx:?}");
    }
}

#[test]
fn campaign_now_wakes_an_assigned_standby_before_its_poll() {
    let t0 = start();
    let mut c = Coordinator::with_shards(timing(), [], ["orders/0".to_string()], t0, 7);
    c.step(assign("orders/0", true), t0);
    // Lost without a known wait (the holder released and someone else's campaign took it).
    let fx = c.step(campaigned(&[], &[("orders/0", None)]), t0 + ms(5));
    assert!(campaigns(&fx).is_empty());
    let fx = c.step(
        Event::CampaignNow {
            lease: "orders/0".into(),
        },
        t0 + ms(400),
    );
    assert_eq!(campaigns(&fx), ["orders/0"]);
}

#[test]
fn a_shard_stepped_down_from_and_given_back_by_its_group_is_campaigned_for_at_once() {
    let t0 = start();
    let mut c = Coordinator::with_shards(timing(), [], ["orders/3".to_string()], t0, 7);
    c.step(assign("orders/3", true), t0);
    c.step(campaigned(&[("orders/3", Epoch::new(2))], &[]), t0 + ms(5));
    c.step(assign("orders/3", false), t0 + ms(10));
    c.step(
        Event::StepDown {
            lease: "orders/3".into(),
        },
        t0 + ms(10),
    );
    c.step(
        Event::TermStopped {
            lease: "orders/3".into(),
            epoch: Epoch::new(2),
        },
        t0 + ms(12),
    );
    c.step(
        Event::ReleaseDone {
            lease: "orders/3".into(),
            result: Ok(true),
        },
        t0 + ms(14),
    );
    // Its new owner left again at once, and the plan gives the shard back: no poll's wait.
    let fx = c.step(assign("orders/3", true), t0 + ms(30));
    assert_eq!(campaigns(&fx), ["orders/3"]);
}
