//! What one plugin's store may take of the host's memory, whatever its guest does:
//!
//! - [`Limiter`]: all of the store's linear memories together stay within the manifest's
//!   `limits.memory`, and all of its tables within [`TABLE_ELEMENTS`] (a component has several
//!   core instances, each with its own memory: a per-memory cap would let a store take several
//!   times its limit);
//! - [`HOSTCALL_FUEL`]: the bytes one call into the host may copy out of the guest (its strings and
//!   lists, lifted before any host code can look at them);
//! - [`MAX_RANDOM_BYTES`]: the largest `wasi:random` answer;
//! - [`MAX_HANDLES`]: the resources the host keeps for the guest (streams, pollables) and the
//!   component handles it may hold.
//!
//! Results the host builds for the guest are capped where they are built (the `sql` grant's
//! `max_bytes`, the `kv` page size). README "Memory budget" adds these up.

use wasmtime::ResourceLimiter;

/// Bytes one host call may copy out of the guest: twice the largest parameter set the `sql`
/// capability accepts ([`crate::capability::sql::value::MAX_CALL_BYTES`]), so that a set a
/// little too large gets a `too-large` error rather than a trap, and above every other import's
/// need (a `kv` value is at most 1 MiB, a log line is cut to 8 KiB). Past it the call traps.
/// wasmtime's default, 128 MiB, would let one call cost the host twice a plugin's memory.
pub(crate) const HOSTCALL_FUEL: usize = 2 * crate::capability::sql::value::MAX_CALL_BYTES;

/// The largest `wasi:random` request (`get-random-bytes`, `get-insecure-random-bytes`): far above
/// what seeds, keys and ids take, and small next to a plugin's memory. wasmtime's default, 64 MiB,
/// is a plugin's whole default memory per call. A larger request traps.
pub(crate) const MAX_RANDOM_BYTES: u64 = 1 << 20;

/// Resources the host keeps for one store, and component handles the store may hold: a plugin
/// uses a few dozen streams and pollables, and at ~100 host bytes each this bounds the table to
/// about a megabyte. wasmtime's defaults (1,000,000 and 100,000) let a guest that never drops
/// its handles take a hundred megabytes. Past it the import that would add one traps.
pub(crate) const MAX_HANDLES: usize = 10_000;

/// Table elements of all of a store's tables together: 100,000 function references (~800 KB) is
/// far more than any compiled guest declares.
pub(crate) const TABLE_ELEMENTS: usize = 100_000;

/// Core instances per store: a component built from Rust has two or three (the program, the
/// WASI adapter, a shim); 16 leaves room for composed components.
pub(crate) const INSTANCES: usize = 16;

/// Tables per store: one per core instance is typical.
pub(crate) const TABLES: usize = 16;

/// Linear memories per store: the program's and the WASI adapter's, and room for composed
/// components; [`Limiter`] caps their sum, so more memories never mean more bytes.
pub(crate) const MEMORIES: usize = 4;

/// Growth refused because the store would exceed its limit: the call traps with this error.
#[derive(Debug, thiserror::Error)]
pub(crate) enum GrowthRefused {
    /// The store's linear memories together would exceed `limits.memory`.
    #[error("its memories would take {total} bytes together, over limits.memory = {limit} bytes")]
    Memory {
        /// The bytes all memories would take after the growth.
        total: usize,
        /// The manifest's `limits.memory`.
        limit: usize,
    },
    /// The store's tables together would exceed [`TABLE_ELEMENTS`].
    #[error("its tables would hold {total} elements together, over the {limit} a plugin may have")]
    Table {
        /// The elements all tables would hold after the growth.
        total: usize,
        /// [`TABLE_ELEMENTS`].
        limit: usize,
    },
}

/// The store's resource limiter: sums every memory's and every table's growth.
///
/// wasmtime asks before creating a memory (from 0 to its initial size) and before each growth,
/// with that memory's current and desired size; memories never shrink and go only with the
/// store, so the sum of granted increments is what the store's memories take.
#[derive(Debug)]
pub(crate) struct Limiter {
    /// The cap on all linear memories together (`limits.memory`).
    memory_limit: usize,
    /// Bytes all linear memories take now.
    memory_total: usize,
    /// Elements all tables hold now.
    table_total: usize,
    /// The largest `memory_total` so far, in bytes (for the high-water metric).
    pub memory_high_water: usize,
}

impl Limiter {
    /// A limiter capping the store's memories at `memory_limit` bytes together.
    pub fn new(memory_limit: usize) -> Self {
        Limiter {
            memory_limit,
            memory_total: 0,
            table_total: 0,
            memory_high_water: 0,
        }
    }
}

/// `total` with one memory or table grown from `current` to `desired`, or `None` on overflow.
fn grown(total: usize, current: usize, desired: usize) -> Option<usize> {
    total.checked_add(desired.checked_sub(current)?)
}

impl ResourceLimiter for Limiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if maximum.is_some_and(|max| desired > max) {
            // The memory's own maximum: wasmtime fails the growth (memory.grow returns -1).
            return Ok(false);
        }
        match grown(self.memory_total, current, desired) {
            Some(total) if total <= self.memory_limit => {
                self.memory_total = total;
                self.memory_high_water = self.memory_high_water.max(total);
                Ok(true)
            }
            total => Err(GrowthRefused::Memory {
                total: total.unwrap_or(usize::MAX),
                limit: self.memory_limit,
            }
            .into()),
        }
    }

    fn memory_grow_failed(&mut self, error: wasmtime::Error) -> wasmtime::Result<()> {
        // The host could not map what the limiter granted: a trap, not a guest that carries on.
        Err(error.context("forcing a memory growth failure to be a trap"))
    }

    fn table_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if maximum.is_some_and(|max| desired > max) {
            return Ok(false);
        }
        match grown(self.table_total, current, desired) {
            Some(total) if total <= TABLE_ELEMENTS => {
                self.table_total = total;
                Ok(true)
            }
            total => Err(GrowthRefused::Table {
                total: total.unwrap_or(usize::MAX),
                limit: TABLE_ELEMENTS,
            }
            .into()),
        }
    }

    fn table_grow_failed(&mut self, error: wasmtime::Error) -> wasmtime::Result<()> {
        Err(error.context("forcing a table growth failure to be a trap"))
    }

    fn instances(&self) -> usize {
        INSTANCES
    }

    fn tables(&self) -> usize {
        TABLES
    }

    fn memories(&self) -> usize {
        MEMORIES
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memories_are_capped_together_not_each() {
        let mut limiter = Limiter::new(64 << 20);
        // Two memories created, each well under the limit on its own.
        assert!(limiter.memory_growing(0, 40 << 20, None).unwrap());
        assert!(limiter.memory_growing(0, 20 << 20, None).unwrap());
        // The first grows by 4 MiB: exactly the limit.
        assert!(limiter.memory_growing(40 << 20, 44 << 20, None).unwrap());
        // One byte-page more in either is refused, as a trap naming the limit.
        let refused = limiter.memory_growing(20 << 20, (20 << 20) + 65536, None);
        let error = refused.unwrap_err();
        assert!(
            matches!(
                error.downcast_ref::<GrowthRefused>(),
                Some(GrowthRefused::Memory { .. })
            ),
            "{error}"
        );
        assert_eq!(limiter.memory_high_water, 64 << 20);
        // A memory's own maximum fails the growth without a trap.
        assert!(!limiter.memory_growing(0, 2 << 20, Some(1 << 20)).unwrap());
    }

    #[test]
    fn tables_are_capped_together() {
        let mut limiter = Limiter::new(64 << 20);
        assert!(limiter.table_growing(0, TABLE_ELEMENTS - 10, None).unwrap());
        assert!(limiter.table_growing(0, 10, None).unwrap());
        assert!(limiter.table_growing(10, 11, None).is_err());
    }
}
