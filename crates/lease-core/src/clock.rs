//! Watching the database's clock (docs/ARCHITECTURE.md §3.5): expiry follows the database's clock
//! while each holder stops on its own monotonic clock, which is only safe while the two run at
//! about the same rate. A step of the database clock (`date -s`, an NTP step, a resync after a VM
//! resume) shortens every lease by the step, so the coordinator compares every pair of readings the
//! store hands back with the monotonic time that can have passed between them.
//!
//! Pure: readings and instants in, a verdict out.

use std::time::Duration;

use crate::instant::Instant;

use crate::record::DbMillis;

/// The rate at which two good clocks may drift apart: ten times what a poor quartz oscillator
/// does (100 ppm), so that a standby whose readings are an hour apart (a closed campaign gate)
/// still sees a step of a few seconds.
pub const MAX_DRIFT: f64 = 1e-3;

/// One reading of the database's clock, with when the call that read it was sent and answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reading {
    /// When the call was sent (monotonic).
    pub sent: Instant,
    /// When its answer came back (monotonic).
    pub received: Instant,
    /// The database's clock, somewhere in between.
    pub db: DbMillis,
}

/// The database clock ran ahead of the monotonic clock by more than drift explains.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Step {
    /// At least this much more database time passed than monotonic time could have.
    pub ahead: Duration,
}

/// The last reading, to compare the next one with.
#[derive(Debug, Clone, Default)]
pub struct ClockWatch {
    /// The reading that came back last.
    last: Option<Reading>,
    /// How far beyond what is tolerated the last pair of readings could have shown a step
    /// without [`ClockWatch::observe`] being able to tell it from slow calls ([`ClockWatch::unsure`]).
    unsure: Duration,
}

impl ClockWatch {
    /// Takes a new reading; returns the step it shows, if any: more than `margin` (what the lease
    /// already allows for, docs/ARCHITECTURE.md §3.5) plus [`MAX_DRIFT`] of the time between the
    /// readings.
    ///
    /// Only forward steps are reported: a backward step lengthens leases in the database, which
    /// delays a takeover but cannot make two holders.
    pub fn observe(&mut self, reading: Reading, margin: Duration) -> Option<Step> {
        let last = self.last.replace(reading)?;
        if crate::buggify::planted(crate::buggify::Planted::ClockStepCheckOff) {
            return None;
        }
        // The two readings were taken inside [last.sent, reading.received], whatever order the
        // calls ran in: that is the most real time between them.
        let real = reading.received.saturating_duration_since(last.sent);
        let db_ms = reading.db.saturating_sub(last.db);
        let db = Duration::from_millis(u64::try_from(db_ms).unwrap_or(0));
        let tolerance = margin + real.mul_f64(MAX_DRIFT);
        let ahead = db.saturating_sub(real);
        // The least real time between the readings: a step this much larger than `ahead` hides
        // in the calls' own durations.
        let least_real = reading.sent.saturating_duration_since(last.received);
        self.unsure = db.saturating_sub(least_real).saturating_sub(tolerance);
        (ahead > tolerance).then_some(Step { ahead })
    }

    /// After a reading that showed no step: how much larger than tolerated a step could still
    /// have been, hidden in the durations of the two calls compared (zero when they were quick).
    /// A holder the database's clock ran past by that much, and that never read the clock since,
    /// may work that much past its lease's expiry: a replica that wins the lease waits it out
    /// before its term starts (found by the simulator).
    pub fn unsure(&self) -> Duration {
        self.unsure
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Where a test's clock starts: far enough from the origin that instants before it still exist.
    fn start() -> Instant {
        Instant::from_origin(Duration::from_secs(1_000))
    }

    const MARGIN: Duration = Duration::from_millis(250);

    fn reading(t0: Instant, sent_ms: u64, took_ms: u64, db: DbMillis) -> Reading {
        Reading {
            sent: t0 + Duration::from_millis(sent_ms),
            received: t0 + Duration::from_millis(sent_ms + took_ms),
            db,
        }
    }

    #[test]
    fn readings_that_follow_the_monotonic_clock_show_no_step() {
        let t0 = start();
        let mut w = ClockWatch::default();
        assert_eq!(w.observe(reading(t0, 0, 2, 1_000_000), MARGIN), None);
        assert_eq!(w.observe(reading(t0, 5_000, 2, 1_005_001), MARGIN), None);
        // A slow call widens the window: 300 ms more database time fits into a 400 ms call.
        assert_eq!(w.observe(reading(t0, 10_000, 400, 1_010_300), MARGIN), None);
    }

    #[test]
    fn a_forward_step_beyond_the_margin_is_seen() {
        let t0 = start();
        let mut w = ClockWatch::default();
        w.observe(reading(t0, 0, 2, 1_000_000), MARGIN);
        let step = w.observe(reading(t0, 5_000, 2, 1_013_000), MARGIN);
        assert_eq!(
            step.map(|s| s.ahead),
            Some(Duration::from_millis(7_998)),
            "8 s of step, less the 2 ms the first call may have taken"
        );
    }

    #[test]
    fn a_step_within_the_margin_and_a_backward_step_are_let_be() {
        let t0 = start();
        let mut w = ClockWatch::default();
        w.observe(reading(t0, 0, 1, 1_000_000), MARGIN);
        assert_eq!(w.observe(reading(t0, 5_000, 1, 1_005_200), MARGIN), None);
        assert_eq!(w.observe(reading(t0, 10_000, 1, 990_000), MARGIN), None);
        // After the backward step, time runs on normally from the new reading.
        assert_eq!(w.observe(reading(t0, 15_000, 1, 995_000), MARGIN), None);
    }

    #[test]
    fn drift_is_tolerated_in_proportion_to_the_time_between_readings() {
        let t0 = start();
        let mut w = ClockWatch::default();
        w.observe(reading(t0, 0, 0, 0), MARGIN);
        // An hour between readings: 3.6 s of drift and the margin are tolerated, 4 s are not.
        assert_eq!(
            w.observe(reading(t0, 3_600_000, 0, 3_603_800), MARGIN),
            None
        );
        assert!(
            w.observe(reading(t0, 7_200_000, 0, 7_207_800), MARGIN)
                .is_some()
        );
    }

    #[test]
    fn slow_calls_leave_a_step_beyond_the_margin_unsure_and_quick_ones_do_not() {
        let t0 = start();
        let mut w = ClockWatch::default();
        // Two quick calls 1 s apart, 1.1 s of database time: nothing could hide.
        w.observe(reading(t0, 0, 2, 1_000_000), MARGIN);
        assert_eq!(w.observe(reading(t0, 1_000, 2, 1_001_100), MARGIN), None);
        assert_eq!(w.unsure(), Duration::ZERO);
        // Two calls of 300 ms each, 1.5 s of database time between readings taken 1.2 to 1.8 s
        // apart: no step shows, but one of up to 300 ms could hide in the calls, 48 ms of it
        // beyond what is tolerated.
        let mut w = ClockWatch::default();
        w.observe(reading(t0, 0, 300, 1_000_000), MARGIN);
        assert_eq!(w.observe(reading(t0, 1_500, 300, 1_001_500), MARGIN), None);
        let unsure = w.unsure();
        assert!(
            unsure > Duration::from_millis(40) && unsure < Duration::from_millis(60),
            "{unsure:?}"
        );
    }
}
