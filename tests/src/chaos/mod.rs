//! Building blocks of fault trials: real `leasehold` hosts hold a lease while faults are
//! injected, and the recorded history is judged afterwards. A [`witness`] the faults do not touch
//! records the work of every term with its own clock, beside the commit order of the fenced writes
//! in the lease database; the [`checker`] judges that history. The [`faults`] are run by
//! [`trials`], each on a cluster of its own; `tests/leases/chaos.rs` runs a few trials of each, and
//! the `chaos` binary (`make chaos`) many.

pub mod checker;
pub mod faults;
pub mod trials;
pub mod witness;
