//! The lease as this replica sees it.
//!
//! A lease is a named lock kept in the host's database: one replica at a time holds it, for a
//! limited time that it keeps renewing. These functions ask the host about the lease this plugin
//! is bound to (the `lease` key of its manifest), or the shard of the lease group it runs for
//! (the `group` key, [`shard`]).
//!
//! Outside a WebAssembly build they answer from the [`testing::Fake`](crate::testing::Fake) of
//! the thread if there is one, and otherwise as a replica that does not hold the lease:
//! [`epoch`], [`acquired_at`], [`time_left`] and [`shard`] are `None`, and [`name`] and
//! [`holder`] are empty.

use std::time::{Duration, SystemTime};

#[cfg(target_arch = "wasm32")]
mod host {
    use super::Shard;
    use crate::__private::wit_lease as wit;
    use std::time::{Duration, SystemTime, UNIX_EPOCH};

    pub fn name() -> String {
        wit::name()
    }
    pub fn holder() -> String {
        wit::holder()
    }
    pub fn epoch() -> Option<u64> {
        wit::epoch()
    }
    pub fn acquired_at() -> Option<SystemTime> {
        wit::acquired_at_ms().map(|ms| UNIX_EPOCH + Duration::from_millis(ms))
    }
    pub fn time_left() -> Option<Duration> {
        wit::time_left_ms().map(Duration::from_millis)
    }
    pub fn shard() -> Option<Shard> {
        wit::shard().map(|s| Shard {
            group: s.group,
            index: s.index,
            count: s.count,
        })
    }
}

#[cfg(not(target_arch = "wasm32"))]
mod host {
    use super::Shard;
    use crate::testing::{FakeLease, with_fake};
    use std::time::{Duration, SystemTime};

    /// From the fake, or as a replica without the lease (`FakeLease`'s `None`s, empty names).
    fn from_fake<T: Default>(f: impl FnOnce(&FakeLease) -> T) -> T {
        with_fake(|fake| f(fake.lease())).unwrap_or_default()
    }

    pub fn name() -> String {
        from_fake(|l| l.name.clone())
    }
    pub fn holder() -> String {
        from_fake(|l| l.holder.clone())
    }
    pub fn epoch() -> Option<u64> {
        from_fake(|l| l.epoch)
    }
    pub fn acquired_at() -> Option<SystemTime> {
        from_fake(|l| l.acquired_at)
    }
    pub fn time_left() -> Option<Duration> {
        from_fake(|l| l.time_left)
    }
    pub fn shard() -> Option<Shard> {
        from_fake(|l| l.shard.clone())
    }
}

/// The lease's name.
pub fn name() -> String {
    host::name()
}

/// This replica's identity as a lease holder (unique to one run of the host process).
pub fn holder() -> String {
    host::holder()
}

/// The fencing epoch this replica holds the lease with, or `None` when it does not hold the
/// lease (a health check running on a standby replica). See
/// [`Context::epoch`](crate::Context::epoch).
pub fn epoch() -> Option<u64> {
    host::epoch()
}

/// Whether this replica holds the lease.
pub fn is_held() -> bool {
    epoch().is_some()
}

/// When this replica acquired the lease, or `None` when it does not hold it.
pub fn acquired_at() -> Option<SystemTime> {
    host::acquired_at()
}

/// How long this replica may still act as the holder, or `None` when it does not hold the
/// lease.
///
/// The host renews the lease well before this runs out, so the value normally stays well above
/// zero; if renewals keep failing, the plugin is stopped when it reaches zero. Work that cannot
/// finish in this time should not be started.
pub fn time_left() -> Option<Duration> {
    host::time_left()
}

/// A shard of a lease group: the one this instance of a plugin bound to the group runs for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shard {
    /// The group's name (`orders`).
    pub group: String,
    /// This shard's index, from 0: the lease `orders/7` is shard 7.
    pub index: u32,
    /// How many shards the group has.
    pub count: u32,
}

/// The shard this instance runs for, when the plugin is bound to a lease group (`group =
/// "orders"` in its manifest): one instance runs per shard its replica holds, each under that
/// shard's lease, so work is split by `index` out of `count`. `None` for a plugin bound to a
/// lease.
///
/// `kv` is scoped per plugin, not per shard: keep a shard's state under keys that name it
/// (`checkpoint/7`), and whichever replica holds the shard next reads it there.
pub fn shard() -> Option<Shard> {
    host::shard()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_a_fake_the_lease_is_not_held() {
        assert_eq!(name(), "");
        assert_eq!(holder(), "");
        assert_eq!(epoch(), None);
        assert!(!is_held());
        assert_eq!(acquired_at(), None);
        assert_eq!(time_left(), None);
        assert_eq!(shard(), None);
    }
}
