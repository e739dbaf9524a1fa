//! Building blocks of fault trials: real `leasehold` hosts hold a lease while faults are
//! injected, and the recorded history is judged afterwards. A [`witness`] the faults do not touch
//! records the work of every term with its own clock, beside the commit order of the fenced writes
//! in the lease database; the [`checker`] judges that history.

pub mod checker;
pub mod witness;
