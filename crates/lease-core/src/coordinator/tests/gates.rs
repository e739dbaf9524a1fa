//! Campaign gates: a health check or a service that shuts a lease's gate keeps its standby from
//! campaigning until every source that shut it has opened it again.

use super::*;

fn gate(lease: &str, source: &GateSource, open: bool) -> Event {
    Event::CampaignGate {
        lease: lease.into(),
        source: source.clone(),
        open,
    }
}

fn check(plugin: &str) -> GateSource {
    GateSource::HealthCheck(plugin.into())
}

fn service(name: &str) -> GateSource {
    GateSource::Service(name.into())
}

#[test]
fn a_closed_campaign_gate_keeps_a_standby_from_campaigning() {
    let t0 = start();
    let mut c = coordinator(&["g"], t0);
    let fx = c.step(gate("g", &check("probe"), false), t0);
    assert!(fx.is_empty(), "{fx:?}");
    assert_eq!(
        c.next_deadline(),
        None,
        "a gated standby has nothing to wake up for"
    );
    for s in 1..20 {
        let fx = c.step(Event::Tick, t0 + Duration::from_secs(s));
        assert!(campaigns(&fx).is_empty(), "{fx:?}");
        let fx = c.step(
            Event::ReleasedElsewhere { lease: "g".into() },
            t0 + Duration::from_secs(s),
        );
        assert!(campaigns(&fx).is_empty(), "{fx:?}");
    }
    let fx = c.step(
        gate("g", &check("probe"), true),
        t0 + Duration::from_secs(30),
    );
    assert_eq!(campaigns(&fx), ["g"], "opening the gate campaigns at once");
}

#[test]
fn a_gate_shut_before_the_first_tick_holds_back_even_the_first_campaign() {
    // The host shuts it before the driver's first step, until the check's first pass.
    let t0 = start();
    let mut c = coordinator(&["g"], t0);
    let fx = c.step_all([gate("g", &check("probe"), false), Event::Tick], t0);
    assert!(campaigns(&fx).is_empty(), "{fx:?}");
    assert_eq!(c.next_deadline(), None);
    let fx = c.step(gate("g", &check("probe"), true), t0 + ms(40));
    assert_eq!(campaigns(&fx), ["g"]);
}

#[test]
fn a_gate_stays_shut_while_any_of_its_sources_keeps_it_shut() {
    let t0 = start();
    let mut c = coordinator(&["g"], t0);
    c.step_all(
        [
            gate("g", &service("relay"), false),
            gate("g", &check("probe"), false),
        ],
        t0,
    );
    // The plugin passes while the service's script still fails: no campaign.
    let fx = c.step(gate("g", &check("probe"), true), t0 + ms(100));
    assert!(campaigns(&fx).is_empty(), "{fx:?}");
    assert_eq!(c.next_deadline(), None);
    // It fails again, then the script passes: still shut.
    c.step(gate("g", &check("probe"), false), t0 + ms(200));
    let fx = c.step(gate("g", &service("relay"), true), t0 + ms(300));
    assert!(campaigns(&fx).is_empty(), "{fx:?}");
    assert!(campaigns(&c.step(Event::Tick, t0 + ms(10_000))).is_empty());
    // Open once the last of them passes, and at once.
    let fx = c.step(gate("g", &check("probe"), true), t0 + ms(10_100));
    assert_eq!(campaigns(&fx), ["g"]);
}

#[test]
fn a_source_that_never_shut_a_gate_cannot_open_it_and_one_that_shut_it_twice_opens_it_once() {
    let t0 = start();
    let mut c = coordinator(&["g"], t0);
    c.step(gate("g", &service("relay"), false), t0);
    for source in [check("relay"), check("other"), service("other")] {
        let fx = c.step(gate("g", &source, true), t0 + ms(10));
        assert!(campaigns(&fx).is_empty(), "{source:?}: {fx:?}");
    }
    // The same source saying it twice is one source: one pass opens the gate.
    c.step(gate("g", &service("relay"), false), t0 + ms(20));
    let fx = c.step(gate("g", &service("relay"), true), t0 + ms(30));
    assert_eq!(campaigns(&fx), ["g"]);
    // A gate of another lease, or of a lease this replica does not campaign for, is its own.
    let mut c = coordinator(&["g", "h"], t0);
    let fx = c.step_all(
        [
            gate("h", &service("relay"), false),
            gate("x", &service("relay"), false),
        ],
        t0,
    );
    assert_eq!(campaigns(&fx), ["g"]);
}
