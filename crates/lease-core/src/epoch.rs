//! The fencing token every other part of the lease layer speaks of: the recorded terms
//! ([`super::history`]), the stores (the lease crate's), the coordinator and the fence of the
//! plugins' writes alike (docs/ARCHITECTURE.md §4).
//!
//! A type of its own, not a bare integer, so an epoch cannot be mixed up with a change counter, a
//! pid or a millisecond figure, and so the two edges where it changes representation are written
//! once: the database's `BIGINT` ([`Epoch::new`], [`Epoch::get`]) and the guest's `u64`
//! ([`Epoch::for_guest`]).

use std::fmt;

use serde::{Deserialize, Serialize};

/// The fencing token: +1 on every acquisition of a lease, never reset, never reused.
///
/// Serialized as the bare number (`"epoch": 7`), the shape every JSON surface already promises.
/// The default, 0, is below every epoch a store issues (the first is 1): a floor, never a term.
#[derive(
    Debug, Default, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct Epoch(i64);

impl Epoch {
    /// An epoch as the database stores it (a `BIGINT`).
    pub const fn new(value: i64) -> Self {
        Self(value)
    }

    /// The number the database stores and compares.
    pub const fn get(self) -> i64 {
        self.0
    }

    /// The epoch the next acquisition of the lease records.
    pub const fn next(self) -> Self {
        Self(self.0 + 1)
    }

    /// The epoch a guest sees (`u64` in the WIT world); `None` for a negative value, which no
    /// store issues, so a corrupted row fences nothing rather than wrapping around.
    pub fn for_guest(self) -> Option<u64> {
        u64::try_from(self.0).ok()
    }
}

impl fmt::Display for Epoch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_epoch_is_written_as_its_bare_number() {
        let json = serde_json::to_string(&Epoch::new(7)).unwrap_or_default();
        assert_eq!(json, "7");
        assert_eq!(Epoch::new(7).to_string(), "7");
        let back: Result<Epoch, _> = serde_json::from_str("7");
        assert_eq!(back.ok(), Some(Epoch::new(7)));
    }

    #[test]
    fn a_negative_epoch_reaches_no_guest() {
        assert_eq!(Epoch::new(3).for_guest(), Some(3));
        assert_eq!(Epoch::new(-1).for_guest(), None);
    }
}
