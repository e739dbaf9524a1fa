//! What one guest call returns to the host: its result in host types, a [`CallFailure`] that says
//! how it ended when it did not return normally, and a [`CallReport`] of what it cost.

use std::time::Duration;

use wasmtime::Trap;

/// Why a call was cancelled rather than failed: none of these is the plugin's fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cancel {
    /// The term's local deadline (`safe_until`) was reached, by the monotonic clock, before or
    /// during the call. A renewal that landed in time may still move the deadline forward.
    Deadline,
    /// The term ended (lease lost, released, or stepping down).
    TermEnded,
    /// The plugin's file was replaced or removed while it was being instantiated.
    Retired,
}

impl Cancel {
    fn describe(self) -> &'static str {
        match self {
            Cancel::Deadline => "the term's deadline passed",
            Cancel::TermEnded => "the term ended",
            Cancel::Retired => "the plugin file was replaced or removed",
        }
    }
}

/// How a call ended when it did not return normally.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CallFailure {
    /// The guest returned an error value.
    #[error("returned an error: {0}")]
    Returned(String),
    /// The call outlived its deadline and was interrupted.
    #[error("interrupted after its {0:?} deadline")]
    Timeout(Duration),
    /// The call ran out of fuel.
    #[error("ran out of fuel")]
    OutOfFuel,
    /// Memory or table growth beyond the plugin's limits.
    #[error("exceeded its memory limit: {0}")]
    Memory(String),
    /// The guest's stack overflowed.
    #[error("overflowed its stack")]
    StackOverflow,
    /// Any other trap (unreachable, a panic, out-of-bounds access, ...).
    #[error("trapped: {0}")]
    Trap(String),
    /// The call was refused before it entered the guest, or stopped while it ran, because its
    /// term is over (or the plugin retired). `entered` tells whether guest code had started.
    #[error("cancelled: {}", .reason.describe())]
    Cancelled {
        /// Why.
        reason: Cancel,
        /// Whether the guest had been entered (then the store is poisoned).
        entered: bool,
    },
}

impl CallFailure {
    /// A short label for metrics and `/status`.
    pub fn kind(&self) -> &'static str {
        match self {
            CallFailure::Returned(_) => "error",
            CallFailure::Timeout(_) => "timeout",
            CallFailure::OutOfFuel => "fuel",
            CallFailure::Memory(_) => "memory",
            CallFailure::StackOverflow => "stack",
            CallFailure::Trap(_) => "trap",
            CallFailure::Cancelled { .. } => "cancelled",
        }
    }

    /// True when the store must be discarded: any trap poisons it, and so does a call dropped
    /// half-way ("cannot enter component instance" afterwards).
    pub fn poisons_store(&self) -> bool {
        match self {
            CallFailure::Returned(_) => false,
            CallFailure::Cancelled { entered, .. } => *entered,
            _ => true,
        }
    }

    /// True for a trap of the plugin's own making (not a returned error, not a cancel).
    pub fn is_trap(&self) -> bool {
        !matches!(
            self,
            CallFailure::Returned(_) | CallFailure::Cancelled { .. }
        )
    }

    /// Classifies a wasmtime error; `interrupted` says why the epoch callback trapped, if it did.
    pub(super) fn classify(
        error: wasmtime::Error,
        timeout: Duration,
        interrupted: Option<Cancel>,
    ) -> CallFailure {
        match error.downcast_ref::<Trap>() {
            Some(Trap::Interrupt) => match interrupted {
                Some(reason) => CallFailure::Cancelled {
                    reason,
                    entered: true,
                },
                None => CallFailure::Timeout(timeout),
            },
            Some(Trap::OutOfFuel) => CallFailure::OutOfFuel,
            Some(Trap::StackOverflow) => CallFailure::StackOverflow,
            Some(Trap::AllocationTooLarge) => CallFailure::Memory(error.root_cause().to_string()),
            _ if let Some(refused) = error.downcast_ref::<super::limits::GrowthRefused>() => {
                CallFailure::Memory(refused.to_string())
            }
            _ => {
                // The root cause alone: the outer layers only say "error while executing". It
                // may carry text of the guest's (a name from its custom sections): shown bounded.
                let text = crate::report::guest_text(error.root_cause().to_string());
                // The resource limiter's refusal surfaces as an error, not a trap code.
                if text.contains("forcing trap when growing") {
                    CallFailure::Memory(text)
                } else {
                    CallFailure::Trap(text)
                }
            }
        }
    }
}

/// What one call cost, for `/status` and the metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CallReport {
    /// Whether guest code ran (false when the call was refused at the door).
    pub entered: bool,
    /// Wall-clock time inside the call.
    pub took: Duration,
    /// Fuel burnt, when the engine meters fuel.
    pub fuel: Option<u64>,
    /// Writes the fence refused during the call (`lease-lost`).
    pub refused_writes: u64,
}

/// A call's result with its report.
#[derive(Debug)]
pub struct Called<T> {
    /// What the guest returned, or how the call ended.
    pub result: Result<T, CallFailure>,
    /// What it cost.
    pub report: CallReport,
}

/// What `reconcile` asked for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Outcome {
    /// Call again after this long instead of the manifest's interval.
    pub requeue_after: Option<Duration>,
}

/// The role a health check is asked about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckRole {
    /// This replica holds the lease.
    Active,
    /// This replica is a standby.
    Standby,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_of_trap_is_one_the_status_counts() {
        let traps = [
            CallFailure::Timeout(Duration::from_secs(1)),
            CallFailure::OutOfFuel,
            CallFailure::Memory("m".into()),
            CallFailure::StackOverflow,
            CallFailure::Trap("t".into()),
        ];
        for failure in traps {
            // A new variant fails to compile here until it is sorted (and listed above if it traps).
            match &failure {
                CallFailure::Returned(_) | CallFailure::Cancelled { .. } => {}
                CallFailure::Timeout(_)
                | CallFailure::OutOfFuel
                | CallFailure::Memory(_)
                | CallFailure::StackOverflow
                | CallFailure::Trap(_) => {}
            }
            assert!(failure.is_trap(), "{failure:?}");
            assert!(
                crate::runtime::metrics::TRAP_KINDS.contains(&failure.kind()),
                "{failure:?}: {}",
                failure.kind()
            );
        }
    }
}
