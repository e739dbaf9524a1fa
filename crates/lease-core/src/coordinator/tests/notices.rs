//! Release notices and resubscription: another replica's release, or a listener that reconnected,
//! makes a standby campaign at once and leaves a held lease alone.

use super::*;

#[test]
fn released_elsewhere_makes_a_standby_campaign_at_once() {
    let t0 = start();
    let mut c = coordinator(&["a", "b"], t0);
    c.step(Event::Tick, t0);
    c.step(campaigned(&[], &[("a", None), ("b", None)]), t0 + ms(5));
    let fx = c.step(Event::ReleasedElsewhere { lease: "a".into() }, t0 + ms(100));
    assert_eq!(campaigns(&fx), ["a"]);
    // An unknown lease is ignored.
    assert!(
        c.step(
            Event::ReleasedElsewhere {
                lease: "zzz".into()
            },
            t0 + ms(101)
        )
        .is_empty()
    );
    // A campaign already in flight is not doubled.
    assert!(
        c.step(Event::ReleasedElsewhere { lease: "a".into() }, t0 + ms(102))
            .is_empty()
    );
}

#[test]
fn released_elsewhere_leaves_a_held_lease_alone() {
    let t0 = start();
    let mut c = leader("a", Epoch::new(1), t0, ms(10));
    let fx = c.step(Event::ReleasedElsewhere { lease: "a".into() }, t0 + ms(100));
    assert!(fx.is_empty(), "{fx:?}");
    assert_eq!(c.view("a"), Some((Role::Leader, Some(Epoch::new(1)))));
}

#[test]
fn resubscribed_makes_every_standby_campaign_at_once() {
    let t0 = start();
    let mut c = coordinator(&["a", "b", "c"], t0);
    c.step(Event::Tick, t0);
    c.step(
        campaigned(&[("b", Epoch::new(1))], &[("a", None), ("c", None)]),
        t0 + ms(5),
    );
    let fx = c.step(Event::Resubscribed, t0 + ms(100));
    assert_eq!(campaigns(&fx), ["a", "c"]);
    assert_eq!(c.view("b"), Some((Role::Leader, Some(Epoch::new(1)))));
}
