//! Fault points and planted bugs, compiled only for the simulator (the `sim` feature), as
//! FoundationDB's BUGGIFY: without the feature every check here is a constant `false` and the
//! code behind it is gone.
//!
//! - A fault point ([`buggify`]) makes production code take a rare branch now and then (a
//!   renewal that times out, a deadline that comes early, a release notice dropped), so runs
//!   reach what a calm simulated store would never show. Each fires by the run's seed.
//! - A planted bug ([`planted`]) breaks one safety rule on purpose, to prove the simulator's
//!   oracle can fail: a run with one planted must find a violation.
//!
//! Both are set per thread ([`install`]): a simulated run has all its replicas on one thread.

/// A safety rule the simulator can be made to break, to show its oracle notices.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Planted {
    /// A term's deadline counted from the reply's arrival instead of the request's start.
    DeadlineFromReply,
    /// The database clock's step check off.
    ClockStepCheckOff,
    /// A renewal that lands whoever holds the lease at whatever epoch.
    RenewalUnscoped,
    /// A release sent before the term's work has stopped.
    ReleaseBeforeStop,
    /// No epoch floor after a failover of the store.
    FailoverFloorOff,
}

impl Planted {
    /// Every planted bug.
    pub const ALL: [Planted; 5] = [
        Planted::DeadlineFromReply,
        Planted::ClockStepCheckOff,
        Planted::RenewalUnscoped,
        Planted::ReleaseBeforeStop,
        Planted::FailoverFloorOff,
    ];

    /// Its name on the command line (`make sim MUTANTS=…`).
    pub fn name(self) -> &'static str {
        match self {
            Planted::DeadlineFromReply => "deadline-from-reply",
            Planted::ClockStepCheckOff => "clock-step-check-off",
            Planted::RenewalUnscoped => "renewal-unscoped",
            Planted::ReleaseBeforeStop => "release-before-stop",
            Planted::FailoverFloorOff => "failover-floor-off",
        }
    }
}

#[cfg(feature = "sim")]
mod hooks {
    use std::cell::RefCell;

    use rand::rngs::SmallRng;
    use rand::{Rng, SeedableRng};

    use super::Planted;

    struct Hooks {
        rng: SmallRng,
        rate: f64,
        planted: Option<Planted>,
    }

    thread_local! {
        static HOOKS: RefCell<Option<Hooks>> = const { RefCell::new(None) };
    }

    pub fn install(seed: u64, rate: f64, planted: Option<Planted>) {
        HOOKS.with(|h| {
            *h.borrow_mut() = Some(Hooks {
                rng: SmallRng::seed_from_u64(seed),
                rate,
                planted,
            });
        });
    }

    pub fn uninstall() {
        HOOKS.with(|h| *h.borrow_mut() = None);
    }

    pub fn buggify(_point: &'static str) -> bool {
        HOOKS.with(|h| {
            h.borrow_mut()
                .as_mut()
                .is_some_and(|h| h.rate > 0.0 && h.rng.random_bool(h.rate))
        })
    }

    pub fn planted(bug: Planted) -> bool {
        HOOKS.with(|h| h.borrow().as_ref().is_some_and(|h| h.planted == Some(bug)))
    }
}

/// Sets this thread's fault points to fire with probability `rate` each, drawn from `seed`, and
/// plants `planted` if any. Only with the `sim` feature.
#[cfg(feature = "sim")]
pub fn install(seed: u64, rate: f64, planted: Option<Planted>) {
    hooks::install(seed, rate, planted);
}

/// Clears this thread's fault points and planted bug.
#[cfg(feature = "sim")]
pub fn uninstall() {
    hooks::uninstall();
}

/// Whether the fault point `point` fires now: never outside the simulator.
#[inline(always)]
pub fn buggify(point: &'static str) -> bool {
    #[cfg(feature = "sim")]
    {
        hooks::buggify(point)
    }
    #[cfg(not(feature = "sim"))]
    {
        let _ = point;
        false
    }
}

/// Whether `bug` is planted in this run: never outside the simulator.
#[inline(always)]
pub fn planted(bug: Planted) -> bool {
    #[cfg(feature = "sim")]
    {
        hooks::planted(bug)
    }
    #[cfg(not(feature = "sim"))]
    {
        let _ = bug;
        false
    }
}
