//! The coordinator's instants: a reading of a monotonic clock, as time since an origin its driver
//! chose. Plain numbers, so the core reads no clock of its own and a simulator can hand it any
//! time it likes; the driver converts to and from its runtime's instants at the edge.

use std::ops::{Add, AddAssign, Sub};
use std::time::Duration;

/// A point on one replica's monotonic clock: the time since that clock's origin. Instants of two
/// replicas (two origins) are never compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Instant(Duration);

impl Instant {
    /// The clock's origin.
    pub const ZERO: Instant = Instant(Duration::ZERO);

    /// The instant `since` after the origin.
    pub const fn from_origin(since: Duration) -> Instant {
        Instant(since)
    }

    /// The time since the origin.
    pub const fn since_origin(self) -> Duration {
        self.0
    }

    /// The time from `earlier` to `self`; zero when `earlier` is later (as
    /// `std::time::Instant::duration_since` does since Rust 1.60).
    pub fn duration_since(self, earlier: Instant) -> Duration {
        self.0.saturating_sub(earlier.0)
    }

    /// The same as [`Instant::duration_since`], named as the standard library names it where
    /// saturating is the point.
    pub fn saturating_duration_since(self, earlier: Instant) -> Duration {
        self.duration_since(earlier)
    }

    /// `self + d`, or `None` past the end of time.
    pub fn checked_add(self, d: Duration) -> Option<Instant> {
        self.0.checked_add(d).map(Instant)
    }

    /// `self - d`, or `None` before the origin.
    pub fn checked_sub(self, d: Duration) -> Option<Instant> {
        self.0.checked_sub(d).map(Instant)
    }
}

impl Add<Duration> for Instant {
    type Output = Instant;
    /// Saturates at the end of time instead of panicking: a ttl of years from a late instant is
    /// still "never" to every comparison the coordinator makes.
    fn add(self, d: Duration) -> Instant {
        Instant(self.0.saturating_add(d))
    }
}

impl AddAssign<Duration> for Instant {
    fn add_assign(&mut self, d: Duration) {
        *self = *self + d;
    }
}

impl Sub<Duration> for Instant {
    type Output = Instant;
    /// Saturates at the origin.
    fn sub(self, d: Duration) -> Instant {
        Instant(self.0.saturating_sub(d))
    }
}

impl Sub<Instant> for Instant {
    type Output = Duration;
    /// Saturates at zero, like [`Instant::duration_since`].
    fn sub(self, earlier: Instant) -> Duration {
        self.duration_since(earlier)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instants_add_and_subtract_without_panicking_at_either_end() {
        let t = Instant::from_origin(Duration::from_secs(5));
        assert_eq!((t + Duration::from_secs(2)) - t, Duration::from_secs(2));
        assert_eq!(t - Duration::from_secs(9), Instant::ZERO);
        assert_eq!(Instant::ZERO - t, Duration::ZERO);
        assert_eq!(
            Instant::from_origin(Duration::MAX) + Duration::from_secs(1),
            Instant::from_origin(Duration::MAX)
        );
        assert_eq!(t.checked_sub(Duration::from_secs(6)), None);
    }
}
