//! One failure policy for every plugin loop: what a call's outcome means for backoff, a fresh
//! instance and quarantine. Pure, so each rule is a unit test; the reconciler and health-check
//! loops only carry out the [`Next`] it returns.
//!
//! | outcome | next |
//! |---|---|
//! | a call returned normally | proceed; the count of failures in a row is reset |
//! | an instance started (instantiated, or `init` returned) | proceed; the count stays: only a call that returns shows the plugin works |
//! | returned an error | retry the same instance after the backoff |
//! | trapped (timeout, fuel, memory, stack, trap) | retry with a fresh instance after the backoff |
//! | either, the `quarantine_after`-th time in a row | quarantine until the next term or file |
//! | cancelled: the term's deadline passed | wait for the term (a fresh instance if the call had started) |
//! | cancelled: the term ended, or the file retired | stop |
//!
//! Cancels are never the plugin's fault: they neither count nor back off.

use std::time::Duration;

use super::failure::{Cancel, Failure};
use crate::lease::backoff::Backoff;

/// Consecutive failures before a reconciler is quarantined until its next term or a new file.
pub(crate) const QUARANTINE_AFTER: u32 = 5;
/// The waits after a reconciler's (or a process's) failures in a row: 0.5 s, doubling, at most
/// 30 s. No jitter: each plugin backs off on its own schedule already, and a test can tell the
/// waits.
pub(crate) const BACKOFF: Backoff =
    Backoff::new(Duration::from_millis(500), Duration::from_secs(30));

/// How a kind of plugin loop treats failures.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Policy {
    /// Failures in a row before quarantine; `None` never quarantines.
    pub quarantine_after: Option<u32>,
    /// The waits after failures in a row.
    pub backoff: Backoff,
}

impl Policy {
    /// Reconcilers: exponential backoff from 0.5 s to 30 s, quarantine after five failures in a
    /// row (a plugin that keeps failing must not keep burning the host's time).
    pub const RECONCILER: Policy = Policy {
        quarantine_after: Some(QUARANTINE_AFTER),
        backoff: BACKOFF,
    };

    /// Health checks: retried on their own `interval`, never quarantined (a failing check is the
    /// information it exists to give, and it must keep running to report a recovery).
    pub fn health_check(interval: Duration) -> Policy {
        Policy {
            quarantine_after: None,
            backoff: Backoff::new(interval, interval),
        }
    }
}

/// What an outcome came from: starting an instance, or a call on a started one.
///
/// Only a call that returns resets the failures in a row. A plugin that traps on every call gets a
/// fresh instance each time, and that instance's instantiate and `init` go fine; counted as
/// successes, they would reset the streak before every trap, and the plugin would be retried at
/// the first backoff for ever instead of being backed off and quarantined.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Instantiating a component or calling `init`.
    Start,
    /// `reconcile`, `handle-event` or `check`.
    Call,
}

/// What a plugin loop does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Go on as scheduled with the same instance.
    Proceed,
    /// Wait `after`, then go on with the same instance, or a fresh one when `fresh`.
    Retry {
        /// The backoff.
        after: Duration,
        /// Whether the store is poisoned and a new instance is needed.
        fresh: bool,
    },
    /// Stop until the next term or a new file.
    Quarantine,
    /// The term's deadline passed: wait until a renewal moves it forward (then go on, with a
    /// fresh instance when `fresh`) or the term ends.
    AwaitTerm {
        /// Whether the call was dropped half-way and the store is poisoned.
        fresh: bool,
    },
    /// The term ended or the plugin retired.
    Stop,
}

/// Failures in a row of one plugin, judged by a [`Policy`].
#[derive(Debug, Clone)]
pub(crate) struct Failures {
    /// The rules.
    policy: Policy,
    /// Failures since the last success.
    count: u32,
}

impl Failures {
    /// No failures yet.
    pub fn new(policy: Policy) -> Self {
        Failures { policy, count: 0 }
    }

    /// Failures since the last success.
    pub fn count(&self) -> u32 {
        self.count
    }

    /// Whether the last failure put the plugin in quarantine.
    pub fn quarantined(&self) -> bool {
        self.policy
            .quarantine_after
            .is_some_and(|limit| self.count >= limit)
    }

    /// Takes in one outcome of `step` and says what follows.
    pub fn after(&mut self, step: Step, outcome: Result<(), &Failure>) -> Next {
        let failure = match outcome {
            Ok(()) => {
                if step == Step::Call {
                    self.count = 0;
                }
                return Next::Proceed;
            }
            Err(failure) => failure,
        };
        match failure {
            Failure::Cancelled {
                reason: Cancel::Deadline,
                entered,
            } => Next::AwaitTerm { fresh: *entered },
            Failure::Cancelled { .. } => Next::Stop,
            _ => {
                self.count = self.count.saturating_add(1);
                if self.quarantined() {
                    Next::Quarantine
                } else {
                    Next::Retry {
                        after: self.policy.backoff.delay(self.count),
                        fresh: failure.needs_fresh_start(),
                    }
                }
            }
        }
    }
}

/// A term held at least this long was no churn: its work ran, and the lease's next give-up
/// starts the backoff afresh. The longest backoff, so that a command failing at that pace is
/// still backed off to it.
pub(crate) const STEADY_TERM: Duration = BACKOFF.max;

/// Terms whose bound work (a process, a service's activate) gave the lease up soon after it was
/// taken, in a row: this replica then waits before campaigning again, 0.5 s after the first such
/// term and twice as long after each further one up to 30 s (a reconciler's backoff), on top of
/// a step-down's poll. A lone replica with a command that exits at once would otherwise take, and
/// spend, an epoch at every poll; with others, they get the lease meanwhile.
#[derive(Debug, Clone, Default)]
pub(crate) struct Churn {
    /// Short terms given up in a row.
    in_a_row: u32,
}

impl Churn {
    /// The work gave up a term it held for `held`: how long to wait beyond the poll before
    /// campaigning again.
    pub fn gave_up(&mut self, held: Duration) -> Duration {
        if held >= STEADY_TERM {
            self.in_a_row = 0;
        }
        self.in_a_row = self.in_a_row.saturating_add(1);
        BACKOFF.delay(self.in_a_row)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::CallFailure;

    fn returned() -> Failure {
        Failure::Call(CallFailure::Returned("no".into()))
    }

    #[test]
    fn backoff_doubles_up_to_the_cap() {
        let p = Policy::RECONCILER;
        assert_eq!(p.backoff.delay(1), Duration::from_millis(500));
        assert_eq!(p.backoff.delay(2), Duration::from_secs(1));
        assert_eq!(p.backoff.delay(4), Duration::from_secs(4));
        assert_eq!(p.backoff.delay(40), BACKOFF.max);
    }

    #[test]
    fn a_returned_error_keeps_the_instance_and_backs_off() {
        let mut f = Failures::new(Policy::RECONCILER);
        assert_eq!(
            f.after(Step::Call, Err(&returned())),
            Next::Retry {
                after: Duration::from_millis(500),
                fresh: false
            }
        );
        assert_eq!(
            f.after(Step::Call, Err(&returned())),
            Next::Retry {
                after: Duration::from_secs(1),
                fresh: false
            }
        );
    }

    #[test]
    fn every_kind_of_trap_asks_for_a_fresh_instance() {
        for trap in [
            CallFailure::Timeout(Duration::from_secs(1)),
            CallFailure::OutOfFuel,
            CallFailure::Memory("grow".into()),
            CallFailure::StackOverflow,
            CallFailure::Trap("unreachable".into()),
        ] {
            let mut f = Failures::new(Policy::RECONCILER);
            assert!(
                matches!(
                    f.after(Step::Call, Err(&Failure::Call(trap.clone()))),
                    Next::Retry { fresh: true, .. }
                ),
                "{trap:?}"
            );
        }
    }

    #[test]
    fn the_fifth_failure_in_a_row_quarantines_and_a_success_resets_the_count() {
        let mut f = Failures::new(Policy::RECONCILER);
        for _ in 0..4 {
            assert!(matches!(
                f.after(Step::Call, Err(&returned())),
                Next::Retry { .. }
            ));
        }
        assert_eq!(f.after(Step::Call, Ok(())), Next::Proceed);
        assert_eq!(f.count(), 0);
        for _ in 0..4 {
            f.after(Step::Call, Err(&Failure::Call(CallFailure::OutOfFuel)));
        }
        assert_eq!(f.after(Step::Call, Err(&returned())), Next::Quarantine);
        assert!(f.quarantined());
    }

    #[test]
    fn cancels_are_not_failures() {
        let mut f = Failures::new(Policy::RECONCILER);
        f.after(Step::Call, Err(&returned()));
        let deadline = |entered| Failure::Cancelled {
            reason: Cancel::Deadline,
            entered,
        };
        assert_eq!(
            f.after(Step::Call, Err(&deadline(false))),
            Next::AwaitTerm { fresh: false }
        );
        assert_eq!(
            f.after(Step::Call, Err(&deadline(true))),
            Next::AwaitTerm { fresh: true }
        );
        for reason in [Cancel::TermEnded, Cancel::Retired] {
            let cancel = Failure::Cancelled {
                reason,
                entered: true,
            };
            assert_eq!(f.after(Step::Call, Err(&cancel)), Next::Stop);
        }
        assert_eq!(f.count(), 1, "cancels neither count nor reset");
    }

    #[test]
    fn health_checks_retry_on_their_interval_and_are_never_quarantined() {
        let interval = Duration::from_secs(2);
        let mut f = Failures::new(Policy::health_check(interval));
        for _ in 0..50 {
            assert_eq!(
                f.after(Step::Call, Err(&returned())),
                Next::Retry {
                    after: interval,
                    fresh: false
                }
            );
        }
    }

    #[test]
    fn a_fresh_instance_that_starts_is_not_a_success_so_a_plugin_trapping_on_every_call_is_quarantined()
     {
        let mut f = Failures::new(Policy::RECONCILER);
        let trap = CallFailure::Trap("unreachable".into());
        let mut waits = Vec::new();
        loop {
            // instantiate and init of the fresh instance go fine every time...
            assert_eq!(f.after(Step::Start, Ok(())), Next::Proceed);
            assert_eq!(f.after(Step::Start, Ok(())), Next::Proceed);
            // ...and the call traps.
            match f.after(Step::Call, Err(&Failure::Call(trap.clone()))) {
                Next::Retry { after, fresh: true } => waits.push(after),
                Next::Quarantine => break,
                other => panic!("unexpected {other:?}"),
            }
        }
        assert_eq!(
            waits,
            [500, 1000, 2000, 4000].map(Duration::from_millis),
            "backoff 0.5 → 1 → 2 → 4 s, then the fifth failure quarantines"
        );
    }

    #[test]
    fn an_init_that_fails_every_time_is_quarantined_after_five() {
        let mut f = Failures::new(Policy::RECONCILER);
        let failed = Failure::Call(CallFailure::Returned("no config".into()));
        for _ in 0..4 {
            assert_eq!(f.after(Step::Start, Ok(())), Next::Proceed);
            assert!(matches!(
                f.after(Step::Start, Err(&failed)),
                Next::Retry { .. }
            ));
        }
        assert_eq!(f.after(Step::Start, Ok(())), Next::Proceed);
        assert_eq!(f.after(Step::Start, Err(&failed)), Next::Quarantine);
    }

    #[test]
    fn a_plugin_failing_every_other_call_backs_off_each_time_and_is_never_quarantined() {
        let mut f = Failures::new(Policy::RECONCILER);
        for _ in 0..100 {
            assert_eq!(
                f.after(Step::Call, Err(&returned())),
                Next::Retry {
                    after: BACKOFF.base,
                    fresh: false
                }
            );
            assert_eq!(f.after(Step::Call, Ok(())), Next::Proceed);
        }
    }

    #[test]
    fn work_that_keeps_giving_its_term_up_backs_off_doubling_and_a_steady_term_starts_afresh() {
        let mut churn = Churn::default();
        let quick = Duration::from_millis(20);
        let waits: Vec<u64> = (0..8)
            .map(|_| churn.gave_up(quick).as_millis() as u64)
            .collect();
        assert_eq!(waits, [500, 1000, 2000, 4000, 8000, 16000, 30000, 30000]);
        assert_eq!(churn.gave_up(STEADY_TERM), Duration::from_millis(500));
        assert_eq!(churn.gave_up(quick), Duration::from_secs(1));
    }
}
