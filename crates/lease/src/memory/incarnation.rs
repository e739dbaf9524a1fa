//! The in-memory store's incarnation, kept as PostgreSQL keeps `leasehold_incarnation`
//! (migration 20261128000001, docs/ARCHITECTURE.md §9.2): a campaign that finds the store failed
//! over since the incarnation it recorded records the new one, with the time it was first seen
//! and an epoch floor above every epoch in the table, and wins nothing; later campaigns wait out
//! a hold-off from that time and hand out epochs of at least the floor.
//!
//! One difference: PostgreSQL's record is a row like the others, which a second failover can lose
//! with the commit that wrote it; its floor is then computed again from the rows restored alone,
//! and can equal the lost one, so epochs handed out after the first failover could be handed out
//! again. Here the floor survives every failover, so no epoch of a lease is ever handed out twice.

use std::time::Duration;

use tokio::time::Instant;

use crate::store::{Epoch, StoreError};

/// How far above every epoch in the table a new incarnation's floor is: more than any lost
/// history can have handed out of one lease.
pub(super) const FLOOR_STEP: i64 = 1 << 32;

#[derive(Debug, Default)]
pub(super) struct Incarnation {
    /// How many failovers the store has been through: PostgreSQL's system identifier and WAL
    /// timeline.
    current: u64,
    /// The incarnation campaigns last recorded.
    recorded: u64,
    /// When a campaign first saw the recorded incarnation, by the store's clock; `None` for the
    /// one the store began in, which needs no hold-off (PostgreSQL's `-infinity`).
    seen_at: Option<Instant>,
    /// Every epoch handed out in the recorded incarnation is at least this.
    floor: Epoch,
}

impl Incarnation {
    /// The store failed over: a new incarnation, which no campaign has seen yet.
    pub(super) fn fail_over(&mut self) {
        self.current += 1;
    }

    /// Which incarnation the store is in, to tell whether it failed over meanwhile.
    pub(super) fn current(&self) -> u64 {
        self.current
    }

    /// A campaign at `now` looks at the incarnation, with `max_epoch` the highest epoch in the
    /// lease table. Returns whether it saw a new one first (and recorded it): such a campaign
    /// wins nothing, whatever [`Incarnation::held_off`] says of the time.
    pub(super) fn see(&mut self, max_epoch: Epoch, now: Instant) -> Result<bool, StoreError> {
        if self.recorded == self.current {
            return Ok(false);
        }
        self.floor = self
            .floor
            .max(max_epoch)
            .get()
            .checked_add(FLOOR_STEP)
            .map(Epoch::new)
            .ok_or_else(|| StoreError::Invalid {
                what: "epoch floor",
                reason: format!("{max_epoch} is too close to the largest epoch to go above it"),
            })?;
        self.recorded = self.current;
        self.seen_at = Some(now);
        Ok(true)
    }

    /// How much longer a campaign at `now` is held off a lease, `hold` being the longer of the
    /// lease's recorded ttl and the campaign's own: all of it for the campaign that saw the new
    /// incarnation first, else what is left of it since then; `None` once it is over.
    pub(super) fn held_off(
        &self,
        seen_first: bool,
        hold: Duration,
        now: Instant,
    ) -> Option<Duration> {
        if seen_first {
            return Some(hold);
        }
        let since = now.saturating_duration_since(self.seen_at?);
        hold.checked_sub(since).filter(|left| !left.is_zero())
    }

    /// Whether a release at `now` may give a lease of recorded ttl `hold` to a waiter: only in
    /// the incarnation campaigns recorded, once its hold-off is over, as a campaign may win one.
    pub(super) fn settled(&self, hold: Duration, now: Instant) -> bool {
        self.recorded == self.current && self.held_off(false, hold, now).is_none()
    }

    /// The least epoch a campaign may hand out.
    pub(super) fn floor(&self) -> Epoch {
        // A planted bug of the simulator: no floor, so a lost campaign's epoch is handed out again.
        match crate::buggify::planted(crate::buggify::Planted::FailoverFloorOff) {
            true => Epoch::default(),
            false => self.floor,
        }
    }
}
