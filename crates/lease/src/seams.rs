//! Where the lease layer reads time and draws random numbers, and nowhere else (a lint keeps
//! `Instant::now`, `SystemTime::now` and `rand::rng` out of every other module of the lease
//! crates, `clippy.toml`).
//!
//! - Monotonic time is the runtime's ([`now`]): a real clock in `leasehold run`, a paused one the
//!   simulator advances. The coordinator's instants are time since an [`Origin`] the driver takes
//!   at its start; it converts at the edge.
//! - The wall clock (when a term began or ended, for people) and random numbers (the holder id's
//!   suffix, jitter) come from a [`Seams`] the composition root hands in: the system's in
//!   production, a seed's in the simulator, so a run replays exactly.

use std::hash::{Hash, Hasher};
use std::time::{Duration, SystemTime};

use leasehold_lease_core::identity::HolderId;
use leasehold_lease_core::instant::Instant as CoreInstant;
use rand::SeedableRng;
use rand::rngs::SmallRng;
use tokio::time::Instant;

/// The runtime's monotonic clock: what every deadline of the lease layer is measured on.
#[allow(clippy::disallowed_methods)] // the one place it is read
pub fn now() -> Instant {
    Instant::now()
}

/// The origin of one driver's coordinator instants: core instants are time since it.
#[derive(Debug, Clone, Copy)]
pub struct Origin(Instant);

impl Origin {
    /// An origin at the runtime's now.
    pub fn now() -> Origin {
        Origin(now())
    }

    /// The runtime's `t` as a core instant (the origin itself for a `t` before it).
    pub fn to_core(self, t: Instant) -> CoreInstant {
        CoreInstant::from_origin(t.saturating_duration_since(self.0))
    }

    /// The core's `t` as the runtime's instant; a `t` past what the runtime can represent is a
    /// year away, which every deadline treats as never.
    pub fn to_runtime(self, t: CoreInstant) -> Instant {
        self.0
            .checked_add(t.since_origin())
            .unwrap_or_else(|| self.0 + Duration::from_secs(365 * 86_400))
    }

    /// The runtime's now as a core instant.
    pub fn core_now(self) -> CoreInstant {
        self.to_core(now())
    }
}

/// The wall clock and the random source of one replica's lease layer, handed in by the
/// composition root.
#[derive(Debug, Clone)]
pub struct Seams {
    wall: Wall,
    seed: u64,
}

#[derive(Debug, Clone, Copy)]
enum Wall {
    /// The system's wall clock.
    System,
    /// `at` when the runtime's clock read `origin`, running at the runtime clock's rate.
    Simulated { at: SystemTime, origin: Instant },
}

impl Seams {
    /// The system's wall clock, and a seed from the operating system's entropy: a fresh holder
    /// id and fresh jitter per process start.
    #[allow(clippy::disallowed_methods)] // the one place entropy is drawn
    pub fn system() -> Seams {
        Seams {
            wall: Wall::System,
            seed: rand::random(),
        }
    }

    /// A replayable replica: its wall clock reads `wall_at_start` now and runs with the runtime's
    /// clock; every random number derives from `seed`.
    pub fn simulated(seed: u64, wall_at_start: SystemTime) -> Seams {
        Seams {
            wall: Wall::Simulated {
                at: wall_at_start,
                origin: now(),
            },
            seed,
        }
    }

    /// The wall clock now.
    #[allow(clippy::disallowed_methods)] // the one place the system's wall clock is read
    pub fn wall(&self) -> SystemTime {
        match self.wall {
            Wall::System => SystemTime::now(),
            Wall::Simulated { at, origin } => at + now().saturating_duration_since(origin),
        }
    }

    /// This replica's holder id: `replica_id` and a suffix drawn from the seed.
    pub fn holder_id(&self, replica_id: &str) -> HolderId {
        HolderId::generate(replica_id, &mut self.rng("holder"))
    }

    /// A random source for one `purpose` (`"holder"`, `"jitter"`, …): the same seed and purpose
    /// give the same numbers, and two purposes draw independent ones, so adding a draw in one
    /// place does not shift every other.
    pub fn rng(&self, purpose: &str) -> SmallRng {
        SmallRng::seed_from_u64(self.seed ^ stable_hash(purpose))
    }
}

/// A hash of `text` that is the same in every process and release (std's `DefaultHasher` is
/// only the same within one release; FNV-1a is fixed).
fn stable_hash(text: &str) -> u64 {
    struct Fnv(u64);
    impl Hasher for Fnv {
        fn finish(&self) -> u64 {
            self.0
        }
        fn write(&mut self, bytes: &[u8]) {
            for b in bytes {
                self.0 = (self.0 ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3);
            }
        }
    }
    let mut h = Fnv(0xcbf2_9ce4_8422_2325);
    text.hash(&mut h);
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::Rng;

    #[test]
    fn one_seed_and_purpose_draw_the_same_numbers_and_two_purposes_differ() {
        let a = Seams::simulated(7, SystemTime::UNIX_EPOCH);
        let b = Seams::simulated(7, SystemTime::UNIX_EPOCH);
        let draw = |s: &Seams, p: &str| s.rng(p).random::<u64>();
        assert_eq!(draw(&a, "holder"), draw(&b, "holder"));
        assert_ne!(draw(&a, "holder"), draw(&a, "jitter"));
        assert_ne!(
            draw(&a, "holder"),
            draw(&Seams::simulated(8, SystemTime::UNIX_EPOCH), "holder")
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_simulated_wall_clock_runs_with_the_runtime_clock() {
        let start = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000);
        let s = Seams::simulated(1, start);
        tokio::time::advance(Duration::from_secs(5)).await;
        assert_eq!(s.wall(), start + Duration::from_secs(5));
        let origin = Origin::now();
        let later = now() + Duration::from_millis(1_500);
        assert_eq!(origin.to_runtime(origin.to_core(later)), later);
    }
}
