//! One backoff for every retry in leasehold: a failed campaign, a lost listener connection, a
//! plugin or process that keeps failing. The wait doubles with each failure in a row from `base`
//! up to `max`, and may be spread by up to a fraction of itself drawn from the caller's seeded
//! generator, so that replicas that failed together do not all come back in the same
//! millisecond, and a simulated run draws the same spread again from its seed.

use std::time::Duration;

use rand::Rng;

/// The spread leasehold adds to the waits of replicas that may be in step: up to a fifth of the
/// wait, enough to pull a crowd apart within one wait, too little to delay any replica much.
pub const JITTER: f64 = 0.2;

/// An exponential backoff: [`Backoff::delay`] after `n` failures in a row is `base` × 2ⁿ⁻¹, at
/// most `max`; [`Backoff::jittered`] adds up to `jitter` of that.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Backoff {
    /// The wait after the first failure in a row.
    pub base: Duration,
    /// The longest wait.
    pub max: Duration,
    /// The most that may be added at random, as a fraction of the wait: 0 adds nothing.
    pub jitter: f64,
}

impl Backoff {
    /// A backoff from `base` to `max`, without jitter.
    pub const fn new(base: Duration, max: Duration) -> Backoff {
        Backoff {
            base,
            max,
            jitter: 0.0,
        }
    }

    /// The same, spread by up to `jitter` of each wait.
    pub const fn with_jitter(self, jitter: f64) -> Backoff {
        Backoff { jitter, ..self }
    }

    /// The wait after `failures` failures in a row (none or one: `base`).
    pub fn delay(&self, failures: u32) -> Duration {
        let doublings = failures.saturating_sub(1).min(16);
        self.base.saturating_mul(1 << doublings).min(self.max)
    }

    /// [`Backoff::delay`], spread by up to `jitter` of itself drawn from `rng`.
    pub fn jittered(&self, failures: u32, rng: &mut impl Rng) -> Duration {
        spread(self.delay(failures), self.jitter, rng)
    }
}

/// `wait` plus up to `jitter` of itself drawn from `rng`; `wait` itself when `jitter` is 0.
pub fn spread(wait: Duration, jitter: f64, rng: &mut impl Rng) -> Duration {
    if jitter <= 0.0 {
        return wait;
    }
    wait + wait.mul_f64(rng.random_range(0.0..jitter))
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;
    use rand::rngs::SmallRng;

    use super::*;

    const SECOND: Duration = Duration::from_secs(1);

    #[test]
    fn the_wait_doubles_from_the_base_to_the_cap() {
        let b = Backoff::new(SECOND / 2, 30 * SECOND);
        let waits: Vec<Duration> = (0..=8).map(|n| b.delay(n)).collect();
        assert_eq!(
            waits,
            [500, 500, 1000, 2000, 4000, 8000, 16000, 30000, 30000].map(Duration::from_millis)
        );
        assert_eq!(b.delay(u32::MAX), 30 * SECOND, "no overflow however many");
    }

    #[test]
    fn jitter_adds_at_most_its_fraction_and_replays_from_the_same_seed() {
        let b = Backoff::new(SECOND, 8 * SECOND).with_jitter(JITTER);
        let draw = |seed| {
            let mut rng = SmallRng::seed_from_u64(seed);
            (1..=5).map(|n| b.jittered(n, &mut rng)).collect::<Vec<_>>()
        };
        let waits = draw(7);
        assert_eq!(waits, draw(7), "the same seed, the same waits");
        for (n, wait) in (1..=5).zip(&waits) {
            let least = b.delay(n);
            assert!(
                *wait >= least && *wait < least.mul_f64(1.0 + JITTER),
                "{n}: {wait:?}"
            );
        }
        let mut rng = SmallRng::seed_from_u64(7);
        assert_eq!(Backoff::new(SECOND, SECOND).jittered(3, &mut rng), SECOND);
    }
}
