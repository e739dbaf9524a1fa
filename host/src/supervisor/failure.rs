//! What bound work's outcome can be when it is not a success, in the words every kind of work
//! speaks: a plugin's failed call, a process's exit, a cancellation that is nobody's fault. The
//! failure [`policy`](super::policy) judges these, whatever ran.

use crate::runtime::{self, CallFailure};

/// Why work was stopped rather than failed: none of these is the work's fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cancel {
    /// The term's local deadline (`safe_until`) was reached, by the monotonic clock, before or
    /// while the work ran. A renewal that landed in time may still move the deadline forward.
    Deadline,
    /// The term ended (lease lost, released, or stepping down).
    TermEnded,
    /// The plugin's file was replaced or removed.
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

impl From<runtime::Cancel> for Cancel {
    fn from(cancel: runtime::Cancel) -> Self {
        match cancel {
            runtime::Cancel::Deadline => Cancel::Deadline,
            runtime::Cancel::TermEnded => Cancel::TermEnded,
            runtime::Cancel::Retired => Cancel::Retired,
        }
    }
}

/// How one unit of bound work ended when it did not return normally.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Failure {
    /// A plugin's call failed: its guest returned an error or trapped (never a cancel: see
    /// [`Failure::Cancelled`]).
    #[error(transparent)]
    Call(CallFailure),
    /// An OS process bound to a lease ended (its whole run is its one unit of work), or could not
    /// start: how, in the host's words.
    #[error("{0}")]
    Exited(String),
    /// The work was refused before it began, or stopped while it ran, because its term is over
    /// (or the plugin retired). `entered` tells whether it had begun: then a plugin's store is
    /// poisoned.
    #[error("cancelled: {}", .reason.describe())]
    Cancelled {
        /// Why.
        reason: Cancel,
        /// Whether the work had begun.
        entered: bool,
    },
}

impl From<CallFailure> for Failure {
    fn from(failure: CallFailure) -> Self {
        match failure {
            CallFailure::Cancelled { reason, entered } => Failure::Cancelled {
                reason: reason.into(),
                entered,
            },
            failure => Failure::Call(failure),
        }
    }
}

impl Failure {
    /// A short label for the logs: the call's kind of failure, `exit` or `cancelled`.
    pub fn kind(&self) -> &'static str {
        match self {
            Failure::Call(failure) => failure.kind(),
            Failure::Exited(_) => "exit",
            Failure::Cancelled { .. } => "cancelled",
        }
    }

    /// True when what ran must be started afresh: a trap poisons a plugin's store, a cancel
    /// after the work began does too, and an exited process has nothing left to go on with.
    pub fn needs_fresh_start(&self) -> bool {
        match self {
            Failure::Call(failure) => failure.poisons_store(),
            Failure::Exited(_) => true,
            Failure::Cancelled { entered, .. } => *entered,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cancelled_call_becomes_a_cancel_of_the_work_and_keeps_its_words() {
        let call = CallFailure::Cancelled {
            reason: runtime::Cancel::TermEnded,
            entered: true,
        };
        let failure = Failure::from(call.clone());
        assert_eq!(
            failure,
            Failure::Cancelled {
                reason: Cancel::TermEnded,
                entered: true
            }
        );
        assert_eq!(failure.to_string(), call.to_string());
        assert!(failure.needs_fresh_start());
    }

    #[test]
    fn a_returned_error_keeps_the_instance_and_an_exit_does_not() {
        let returned = Failure::from(CallFailure::Returned("no".into()));
        assert_eq!(returned.kind(), "error");
        assert!(!returned.needs_fresh_start());
        let exited = Failure::Exited("exited with code 3".into());
        assert_eq!(exited.kind(), "exit");
        assert!(exited.needs_fresh_start());
    }
}
