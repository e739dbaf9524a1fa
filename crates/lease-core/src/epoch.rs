//! The fencing token every other part of the lease layer speaks of: the recorded terms
//! ([`super::history`]), the store ([`super::store`]), the coordinator and the fence of the
//! plugins' writes alike (docs/ARCHITECTURE.md §4).

/// The fencing token: +1 on every acquisition of a lease, never reset, never reused.
pub type Epoch = i64;
