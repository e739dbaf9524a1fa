//! The timing of the lease protocol: ttl, renewal cadence, retries, polling and the safety margin,
//! with the defaults of DESIGN §1 and the relations between them checked up front.

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
    /// How often a standby campaigns when it hears nothing.
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

    /// Derives every interval from `ttl` (DESIGN §1 defaults):
    /// - renew every ttl/3, so two renewals can fail before the lease is at risk;
    /// - retry every ttl/15, so several retries fit before `safe_until`;
    /// - poll every ttl/5, so a crashed holder's lease is taken within ttl + ttl/5;
    /// - margin max(2% of ttl, 250 ms): clock-rate drift is proportional, scheduling slack is fixed;
    ///   capped at ttl/4 so that sub-second ttls (tests, demos) still leave room to renew;
    /// - store calls time out after ttl/5, so a hung call leaves time for retries before `safe_until`.
    pub fn from_ttl(ttl: Duration) -> Self {
        Timing {
            ttl,
            renew_interval: ttl / 3,
            retry_interval: ttl / 15,
            poll_interval: ttl / 5,
            margin: (ttl / 50).max(Duration::from_millis(250)).min(ttl / 4),
            store_timeout: ttl / 5,
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
        let ms = Duration::from_millis;
        if self.ttl < ms(100) {
            return err(
                "ttl",
                self.ttl,
                "must be at least 100ms: the database and the scheduler need room to renew".into(),
            );
        }
        if self.margin.is_zero() || self.margin * 2 > self.ttl {
            return err(
                "margin",
                self.margin,
                format!(
                    "must be above zero and at most half the ttl ({:?})",
                    self.ttl
                ),
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

impl Default for Timing {
    fn default() -> Self {
        Self::from_ttl(Self::DEFAULT_TTL)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_across_ttls() {
        for ms in [100, 500, 1_000, 2_000, 15_000, 60_000, 3_600_000] {
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
}
