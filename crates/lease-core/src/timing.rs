//! The timing of the lease protocol: ttl, renewal cadence, retries, polling and the safety margin,
//! with their defaults (docs/ARCHITECTURE.md §5.6), and the floors and relations that keep them
//! safe checked up front.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Every interval the coordinator works with. Build with [`Timing::from_ttl`] and override fields,
/// then [`Timing::validate`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Timing {
    /// How long a lease lasts after each renewal, by the database clock.
    #[serde(with = "humantime_serde")]
    pub ttl: Duration,
    /// How often the holder renews.
    #[serde(with = "humantime_serde")]
    pub renew_interval: Duration,
    /// How soon a failed renewal is retried.
    #[serde(with = "humantime_serde")]
    pub retry_interval: Duration,
    /// The longest a standby waits between campaigns for a lease. A standby campaigns when the
    /// holder's lease expires by the database's clock, and at once when a release is announced;
    /// this poll only covers a release notification that never arrived.
    #[serde(with = "humantime_serde")]
    pub poll_interval: Duration,
    /// Subtracted from the ttl to get the local deadline (`safe_until`) for stopping plugins.
    #[serde(with = "humantime_serde")]
    pub margin: Duration,
    /// The longest any single store call may take.
    #[serde(with = "humantime_serde")]
    pub store_timeout: Duration,
}

/// A timing that cannot keep the protocol safe or live.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
#[error("invalid timing: {field} = {value:?}: {reason}")]
pub struct TimingError {
    /// The offending setting, as spelled in the config file.
    pub field: &'static str,
    /// Its value.
    pub value: Duration,
    /// Why it cannot work.
    pub reason: String,
}

impl Timing {
    /// The default ttl: long enough to ride out a GC pause or a database failover blip, short enough
    /// that a crashed holder is replaced within seconds.
    pub const DEFAULT_TTL: Duration = Duration::from_secs(15);

    /// The shortest ttl: the database and the scheduler need room to renew.
    pub const MIN_TTL: Duration = Duration::from_millis(100);

    /// The longest ttl: 24 days. The database's own timeouts derive from it (PostgreSQL's
    /// `statement_timeout` and `lock_timeout`, SQLite's busy timeout: 9/10 of `store_timeout`,
    /// which is below the ttl), and both take at most 2^31 − 1 ms, about 24.8 days: PostgreSQL
    /// refuses a longer one and the SQLite driver panics on it.
    pub const MAX_TTL: Duration = Duration::from_secs(24 * 86_400);

    /// The fixed floor of the margin. The margin absorbs what makes the holder's deadline later
    /// than the database's expiry by a fixed amount: a timer firing a scheduler tick late (1–4 ms
    /// on a loaded Linux machine), and the whole milliseconds of the stores (the ttl is sent in
    /// milliseconds and SQLite's clock reads are cut to milliseconds, each losing up to 1 ms).
    pub const MIN_MARGIN: Duration = Duration::from_millis(10);

    /// The proportional floor of the margin, as a divisor of the ttl (1%). The holder measures the
    /// ttl on its monotonic clock, the database on its own; their rates differ (NTP slews up to
    /// 0.05%, a VM's clock can do worse), and the gap grows with the ttl.
    pub const MIN_MARGIN_TTL_DIVISOR: u32 = 100;

    /// Derives every interval from `ttl`:
    /// - renew every ttl/3, so two renewals can fail before the lease is at risk;
    /// - retry every ttl/15, so several retries fit before `safe_until`;
    /// - poll every ttl at most: a standby campaigns at the holder's expiry as the database reports
    ///   it, so a crashed holder's lease is taken within ttl of its last renewal; the poll is only
    ///   the fallback for a lost release notification, which then costs at most a ttl;
    /// - margin max(2% of ttl, 250 ms): clock-rate drift is proportional, scheduling slack is fixed;
    ///   capped at ttl/4 so that sub-second ttls (tests, demos) still leave room to renew. For any
    ///   ttl of at least [`Self::MIN_TTL`] this meets both floors of [`Self::validate`]: ttl/4 is
    ///   then at least 25 ms, and both ttl/4 and 2% are above the 1% floor;
    /// - store calls time out after ttl/5, so a hung call leaves time for retries before `safe_until`.
    ///
    /// Each is rounded down to whole milliseconds: nothing here is finer, and `config check`
    /// then prints `3s 333ms` for a 10 s ttl's renewal, not `3s 333ms 333us 333ns`.
    pub fn from_ttl(ttl: Duration) -> Self {
        let ms =
            |d: Duration| Duration::from_millis(u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        Timing {
            ttl,
            renew_interval: ms(ttl / 3),
            retry_interval: ms(ttl / 15),
            poll_interval: ttl,
            margin: ms((ttl / 50).max(Duration::from_millis(250)).min(ttl / 4)),
            store_timeout: ms(ttl / 5),
        }
    }

    /// Checks the relations that keep the protocol safe and live, naming the first value that breaks one.
    pub fn validate(&self) -> Result<(), TimingError> {
        let err = |field, value, reason: String| {
            Err(TimingError {
                field,
                value,
                reason,
            })
        };
        if self.ttl < Self::MIN_TTL {
            return err(
                "ttl",
                self.ttl,
                format!(
                    "must be at least {:?}: the database and the scheduler need room to renew",
                    Self::MIN_TTL
                ),
            );
        }
        if self.ttl > Self::MAX_TTL {
            return err(
                "ttl",
                self.ttl,
                format!(
                    "must be at most {}: the database's statement, lock and busy timeouts derive from it and take at most 2^31-1 ms (about 24.8 days)",
                    crate::text::duration(Self::MAX_TTL)
                ),
            );
        }
        // Refused rather than rounded: the stores keep the ttl in whole milliseconds, so the
        // database would count a different ttl than the holder's deadline does, and rounding it
        // silently would run a lease other than the one configured. No one means 1.0005s.
        if !self.ttl.subsec_nanos().is_multiple_of(1_000_000) {
            return err(
                "ttl",
                self.ttl,
                "must be a whole number of milliseconds: the lease stores keep the ttl in milliseconds"
                    .into(),
            );
        }
        // Scheduler lateness and the stores' whole milliseconds: see MIN_MARGIN.
        if self.margin < Self::MIN_MARGIN {
            return err(
                "margin",
                self.margin,
                format!(
                    "must be at least {:?}: it covers a timer firing a scheduler tick late and the whole-millisecond rounding of the ttl and the database clock",
                    Self::MIN_MARGIN
                ),
            );
        }
        // Clock-rate drift between the holder and the database, which grows with the ttl.
        let drift_floor = self.ttl / Self::MIN_MARGIN_TTL_DIVISOR;
        if self.margin < drift_floor {
            return err(
                "margin",
                self.margin,
                format!(
                    "must be at least 1% of the ttl ({drift_floor:?}): it covers the rate drift between this holder's monotonic clock and the database clock, which grows with the ttl"
                ),
            );
        }
        // Half the ttl at most, or too little of the lease is left to run plugins in.
        if self.margin * 2 > self.ttl {
            return err(
                "margin",
                self.margin,
                format!("must be at most half the ttl ({:?})", self.ttl / 2),
            );
        }
        let safe = self.ttl - self.margin;
        if self.renew_interval.is_zero() || self.renew_interval >= safe {
            return err(
                "renew_interval",
                self.renew_interval,
                format!(
                    "must be above zero and below ttl - margin ({safe:?}), or the lease lapses between renewals"
                ),
            );
        }
        if self.retry_interval.is_zero() || self.retry_interval > self.renew_interval {
            return err(
                "retry_interval",
                self.retry_interval,
                format!(
                    "must be above zero and at most renew_interval ({:?})",
                    self.renew_interval
                ),
            );
        }
        if self.poll_interval.is_zero() {
            return err(
                "poll_interval",
                self.poll_interval,
                "must be above zero".into(),
            );
        }
        if self.store_timeout.is_zero() || self.renew_interval + self.store_timeout >= safe {
            return err(
                "store_timeout",
                self.store_timeout,
                format!(
                    "must be above zero and renew_interval + store_timeout must stay below ttl - margin ({safe:?}), or a hung renewal outlives the lease"
                ),
            );
        }
        Ok(())
    }
}

impl Timing {
    /// How often a standby keeps its place in a lease's line ([`crate::queue`]): every ttl/5 (or
    /// its poll, if shorter), the cadence the design has always given standbys. A write per
    /// standby per interval, as a holder's renewal is per ttl/3.
    pub fn in_line_every(&self) -> Duration {
        (self.ttl / 5).min(self.poll_interval)
    }

    /// How long a place in line counts as alive without a campaign, and how long a lease given to
    /// a waiter stays its own unless it takes it up: ttl/2. Short, so that a lease given to a
    /// waiter that died meanwhile is free again well within a ttl; long enough for two campaigns
    /// of [`Timing::in_line_every`] with their jitter, so that one slow statement does not send a
    /// live waiter to the back of the line, and for a waiter that missed the notice to find the
    /// grant at its next campaign with time to spare beyond the margin.
    pub fn in_line_for(&self) -> Duration {
        self.ttl / 2
    }
}

impl Default for Timing {
    fn default() -> Self {
        Self::from_ttl(Self::DEFAULT_TTL)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_place_in_line_is_kept_every_ttl_fifth_and_lasts_half_a_ttl() {
        // The README's figures at the default ttl: every 3 s, lapsed (and a grant free again)
        // after 7.5 s.
        let t = Timing::default();
        assert_eq!(t.in_line_every(), Duration::from_secs(3));
        assert_eq!(t.in_line_for(), Duration::from_millis(7_500));
        // Never slower than the poll.
        let polled = Timing {
            poll_interval: Duration::from_secs(1),
            ..t
        };
        assert_eq!(polled.in_line_every(), Duration::from_secs(1));
    }

    #[test]
    fn defaults_are_valid_across_ttls() {
        // Every whole millisecond from the shortest ttl to a minute, then some long ones.
        for ms in (100..=60_000).chain([3_600_000, 86_400_000, 7 * 86_400_000, 24 * 86_400_000]) {
            let t = Timing::from_ttl(Duration::from_millis(ms));
            assert_eq!(t.validate(), Ok(()), "ttl {ms}ms: {t:?}");
        }
        let d = Timing::default();
        assert_eq!(d.renew_interval, Duration::from_secs(5));
        assert_eq!(d.margin, Duration::from_millis(300));
    }

    #[test]
    fn names_the_bad_value() {
        let mut t = Timing::from_ttl(Duration::from_secs(2));
        t.renew_interval = Duration::from_secs(3);
        assert_eq!(t.validate().unwrap_err().field, "renew_interval");
        let mut t = Timing::from_ttl(Duration::from_secs(2));
        t.retry_interval = Duration::from_secs(1);
        assert_eq!(t.validate().unwrap_err().field, "retry_interval");
        let mut t = Timing::from_ttl(Duration::from_secs(2));
        t.margin = Duration::from_secs(1) + Duration::from_millis(1);
        assert_eq!(t.validate().unwrap_err().field, "margin");
        let mut t = Timing::from_ttl(Duration::from_secs(2));
        t.store_timeout = Duration::from_secs(2);
        let e = t.validate().unwrap_err();
        assert_eq!(e.field, "store_timeout");
        assert!(e.to_string().contains("store_timeout = 2s"), "{e}");
        assert_eq!(
            Timing::from_ttl(Duration::from_millis(10))
                .validate()
                .unwrap_err()
                .field,
            "ttl"
        );
    }

    #[test]
    fn a_margin_below_a_few_milliseconds_is_refused() {
        for margin in [
            Duration::from_nanos(1),
            Duration::from_micros(999),
            Duration::from_millis(9),
        ] {
            let mut t = Timing::from_ttl(Duration::from_millis(200));
            t.margin = margin;
            let e = t.validate().unwrap_err();
            assert_eq!((e.field, e.value), ("margin", margin), "{e}");
            let text = e.to_string();
            assert!(
                text.contains(&format!("margin = {margin:?}")) && text.contains("at least 10ms"),
                "{text}"
            );
        }
        let mut t = Timing::from_ttl(Duration::from_millis(200));
        t.margin = Duration::from_millis(10);
        assert_eq!(t.validate(), Ok(()));
    }

    #[test]
    fn a_margin_below_one_percent_of_the_ttl_is_refused() {
        let mut t = Timing::from_ttl(Duration::from_secs(60));
        t.margin = Duration::from_millis(599);
        let e = t.validate().unwrap_err();
        assert_eq!(e.field, "margin");
        assert!(e.to_string().contains("1% of the ttl (600ms)"), "{e}");
        t.margin = Duration::from_millis(600);
        assert_eq!(t.validate(), Ok(()));
    }

    #[test]
    fn a_ttl_the_database_s_timeouts_cannot_take_is_refused_with_the_reason() {
        assert_eq!(Timing::from_ttl(Timing::MAX_TTL).validate(), Ok(()));
        for ttl in [
            Timing::MAX_TTL + Duration::from_millis(1),
            Duration::from_secs(200 * 86_400),
        ] {
            let e = Timing::from_ttl(ttl).validate().unwrap_err();
            assert_eq!((e.field, e.value), ("ttl", ttl), "{e}");
            assert!(e.to_string().contains("at most 24days"), "{e}");
        }
    }

    #[test]
    fn a_ttl_that_is_not_whole_milliseconds_is_refused() {
        for ttl in [
            Duration::from_micros(1_500_500),
            Duration::from_nanos(2_000_000_001),
        ] {
            let e = Timing::from_ttl(ttl).validate().unwrap_err();
            assert_eq!((e.field, e.value), ("ttl", ttl), "{e}");
            assert!(
                e.to_string().contains("whole number of milliseconds"),
                "{e}"
            );
        }
    }
}
