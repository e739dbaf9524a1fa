//! A key-value store scoped to the plugin, kept in the lease database, with fenced writes.
//!
//! Granted by the manifest:
//!
//! ```toml
//! [grants]
//! kv = true                       # fenced key-value store in the lease database
//! kv_max_keys = 100000            # optional quota: keys (this is the default)
//! kv_max_bytes = "64MiB"          # optional quota: keys plus values (this is the default)
//! ```
//!
//! Without the grant every call returns [`CapabilityError::NotGranted`].
//!
//! - **Scope.** Keys belong to the plugin (named after its file): other plugins neither see nor
//!   change them. Values survive terms, replicas and restarts: the store lives in the lease
//!   database, not in the instance.
//! - **Writes are fenced.** [`put`] and [`delete`] commit only if this replica still holds the
//!   lease at the epoch the plugin runs under, checked in the same transaction under a lock on the
//!   lease row. Otherwise they return [`CapabilityError::LeaseLost`] and change nothing: a replica
//!   that lost the lease without knowing it yet cannot overwrite what the new holder wrote.
//! - **Reads are not fenced.** [`get`] and [`list`] read the latest committed values; they also
//!   work while the lease is being lost.
//! - **Limits.** A key is 1 to 1024 bytes of UTF-8 without NUL characters
//!   ([`CapabilityError::Invalid`] otherwise); a value is at most 1 MiB
//!   ([`CapabilityError::TooLarge`] otherwise). A [`put`] that would take the plugin's entries past
//!   its quota (`kv_max_keys`, `kv_max_bytes`) is refused with [`CapabilityError::TooLarge`] naming
//!   the quota, and writes nothing; [`delete`] frees room. A [`list`] call returns at most 1000
//!   entries (`limit` is clamped to `1..=1000`), and may return fewer than `limit` with a
//!   [`Page::next`] when the values are large: always follow `next`, or use [`list_all`].
//! - **Order.** Listings are in byte order of the keys (UTF-8 bytes compared as unsigned, as in
//!   `"a/10" < "a/2" < "b"`), independent of the database's locale.
//!
//! The SDK does not check keys and sizes itself: the host does, and its refusal says why.
//!
//! ```no_run
//! use leasehold_guest::{kv, Error};
//!
//! # fn main() -> Result<(), Error> {
//! kv::put("cursor/orders", "2026-11-22T10:00:00Z")?;
//! let cursor: Option<String> = kv::get_string("cursor/orders")?;
//! for entry in kv::list_all("cursor/") {
//!     let (key, value) = entry?;
//!     println!("{key} = {} bytes", value.len());
//! }
//! let existed: bool = kv::delete("cursor/orders")?;
//! # let _ = (cursor, existed);
//! # Ok(()) }
//! ```
//!
//! Outside a WebAssembly build calls go to the thread's [`testing::Fake`](crate::testing::Fake)
//! if there is one, and otherwise return [`CapabilityError::Unavailable`].

use crate::CapabilityError;

/// The longest key, in bytes.
pub const MAX_KEY_BYTES: usize = 1024;
/// The largest value, in bytes (1 MiB).
pub const MAX_VALUE_BYTES: usize = 1 << 20;
/// The most entries one [`list`] call returns.
pub const MAX_LIST_LIMIT: u32 = 1000;

/// One page of a listing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Page {
    /// Keys with their values, in byte order of the keys.
    pub entries: Vec<(String, Vec<u8>)>,
    /// Pass as `after` to [`list`] for the next page; `None` when this page is the last.
    pub next: Option<String>,
}

impl Page {
    /// Whether no page follows this one.
    pub fn is_last(&self) -> bool {
        self.next.is_none()
    }

    /// The keys of this page, in order.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.entries.iter().map(|(k, _)| k.as_str())
    }
}

#[cfg(target_arch = "wasm32")]
mod host {
    use super::Page;
    use crate::__private::wit_kv as wit;
    use crate::CapabilityError;

    pub fn get(key: &str) -> Result<Option<Vec<u8>>, CapabilityError> {
        wit::get(key).map_err(CapabilityError::from)
    }
    pub fn put(key: &str, value: &[u8]) -> Result<(), CapabilityError> {
        wit::put(key, value).map_err(CapabilityError::from)
    }
    pub fn delete(key: &str) -> Result<bool, CapabilityError> {
        wit::delete(key).map_err(CapabilityError::from)
    }
    pub fn list(prefix: &str, after: Option<&str>, limit: u32) -> Result<Page, CapabilityError> {
        let page = wit::list(prefix, after, limit).map_err(CapabilityError::from)?;
        Ok(Page {
            entries: page.entries,
            next: page.next,
        })
    }
}

/// Off-target: the thread's `testing::Fake`, or `Unavailable`.
#[cfg(not(target_arch = "wasm32"))]
mod host {
    use super::Page;
    use crate::CapabilityError;
    use crate::capability::outside;
    use crate::testing::with_fake;

    pub fn get(key: &str) -> Result<Option<Vec<u8>>, CapabilityError> {
        with_fake(|fake| fake.kv_get(key)).unwrap_or_else(|| Err(outside("kv")))
    }
    pub fn put(key: &str, value: &[u8]) -> Result<(), CapabilityError> {
        with_fake(|fake| fake.kv_put(key, value)).unwrap_or_else(|| Err(outside("kv")))
    }
    pub fn delete(key: &str) -> Result<bool, CapabilityError> {
        with_fake(|fake| fake.kv_delete(key)).unwrap_or_else(|| Err(outside("kv")))
    }
    pub fn list(prefix: &str, after: Option<&str>, limit: u32) -> Result<Page, CapabilityError> {
        with_fake(|fake| fake.kv_list(prefix, after, limit)).unwrap_or_else(|| Err(outside("kv")))
    }
}

/// The value of `key`, or `None` when it is not set. Not fenced.
pub fn get(key: &str) -> Result<Option<Vec<u8>>, CapabilityError> {
    host::get(key)
}

/// The value of `key` as text, or `None` when it is not set; [`CapabilityError::Invalid`] when the
/// value is not UTF-8. Not fenced.
pub fn get_string(key: &str) -> Result<Option<String>, CapabilityError> {
    match get(key)? {
        None => Ok(None),
        Some(bytes) => String::from_utf8(bytes).map(Some).map_err(|e| {
            CapabilityError::Invalid(format!(
                "kv value of {key:?} is not UTF-8 text ({e}): read it with kv::get"
            ))
        }),
    }
}

/// Sets `key` to `value` (text or bytes), replacing any previous value. Fenced:
/// [`CapabilityError::LeaseLost`] means nothing was written.
pub fn put(key: &str, value: impl AsRef<[u8]>) -> Result<(), CapabilityError> {
    host::put(key, value.as_ref())
}

/// Removes `key`; `true` when it was set. Fenced: [`CapabilityError::LeaseLost`] means nothing was
/// removed.
pub fn delete(key: &str) -> Result<bool, CapabilityError> {
    host::delete(key)
}

/// Up to `limit` entries (clamped to `1..=1000`) whose keys start with `prefix` (`""` for all)
/// and sort after `after` (`None` to start at the beginning), in byte order of the keys. Not
/// fenced.
///
/// A page may hold fewer than `limit` entries even when more follow (the host caps the bytes of
/// a page): the next page exists exactly when [`Page::next`] is `Some`; pass it as `after`.
pub fn list(prefix: &str, after: Option<&str>, limit: u32) -> Result<Page, CapabilityError> {
    host::list(prefix, after, limit)
}

/// Every entry whose key starts with `prefix`, in byte order of the keys, fetched a page of up
/// to 1000 at a time as the iterator advances.
///
/// Each item is a `Result`: after an error the iterator ends. Collect into a
/// `Result<Vec<_>, CapabilityError>` to get all or the first error:
///
/// ```no_run
/// # use leasehold_guest::{kv, Error};
/// # fn main() -> Result<(), Error> {
/// let jobs: Vec<(String, Vec<u8>)> = kv::list_all("jobs/").collect::<Result<_, _>>()?;
/// # let _ = jobs;
/// # Ok(()) }
/// ```
///
/// Pages are read one after another without a snapshot: keys written meanwhile may or may not
/// show up, but no key is listed twice.
pub fn list_all(prefix: &str) -> ListAll {
    ListAll {
        prefix: prefix.to_string(),
        after: None,
        buffered: Vec::new().into_iter(),
        done: false,
    }
}

/// The iterator of [`list_all`].
#[derive(Debug)]
pub struct ListAll {
    prefix: String,
    after: Option<String>,
    buffered: std::vec::IntoIter<(String, Vec<u8>)>,
    done: bool,
}

impl Iterator for ListAll {
    type Item = Result<(String, Vec<u8>), CapabilityError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(entry) = self.buffered.next() {
                return Some(Ok(entry));
            }
            if self.done {
                return None;
            }
            match list(&self.prefix, self.after.as_deref(), MAX_LIST_LIMIT) {
                Ok(page) => {
                    // A page without entries but with a `next` would loop forever on a
                    // misbehaving host; treat it as the end.
                    self.done =
                        page.next.is_none() || page.entries.is_empty() || page.next == self.after;
                    self.after = page.next;
                    self.buffered = page.entries.into_iter();
                }
                Err(e) => {
                    self.done = true;
                    return Some(Err(e));
                }
            }
        }
    }
}

impl std::iter::FusedIterator for ListAll {}
