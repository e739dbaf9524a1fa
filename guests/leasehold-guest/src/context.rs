//! What a call is told and what it answers.

use std::time::Duration;

/// What a [`Reconciler::reconcile`](crate::Reconciler::reconcile) call is told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Context {
    lease: String,
    epoch: u64,
    tick: u64,
}

impl Context {
    /// A context with the given values, for testing a plugin's logic outside a host.
    pub fn new(lease: impl Into<String>, epoch: u64, tick: u64) -> Self {
        Context {
            lease: lease.into(),
            epoch,
            tick,
        }
    }

    /// The name of the lease the plugin is bound to.
    pub fn lease(&self) -> &str {
        &self.lease
    }

    /// The fencing epoch of this term: a number that grows every time any replica acquires the
    /// lease and is never reused.
    ///
    /// Pass it along with writes to other systems and have them refuse writes carrying an epoch
    /// lower than one they have already seen: a replica that lost the lease without knowing it
    /// yet then cannot overwrite the work of the new holder.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// How many `reconcile` calls came before this one in this term (0 for the first).
    pub fn tick(&self) -> u64 {
        self.tick
    }

    /// Whether this is the first `reconcile` call of the term.
    pub fn is_first(&self) -> bool {
        self.tick == 0
    }
}

/// What a [`Reconciler::reconcile`](crate::Reconciler::reconcile) call asks for.
///
/// The default outcome runs the next call after the interval set in the manifest's
/// `[schedule]` section.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Outcome {
    requeue_after: Option<Duration>,
}

impl Outcome {
    /// Runs the next call after the manifest's interval (the same as [`Outcome::default`]).
    pub fn on_schedule() -> Self {
        Outcome::default()
    }

    /// Runs the next call after `delay` instead of the manifest's interval, e.g. soon after a
    /// partial success, or later while waiting for something slow.
    ///
    /// The delay is rounded up to whole milliseconds.
    pub fn requeue_after(delay: Duration) -> Self {
        Outcome {
            requeue_after: Some(delay),
        }
    }

    /// The delay asked for with [`Outcome::requeue_after`], if any.
    pub fn requeue_delay(&self) -> Option<Duration> {
        self.requeue_after
    }

    /// The delay in whole milliseconds, rounded up, as the host receives it.
    pub(crate) fn requeue_after_ms(&self) -> Option<u64> {
        self.requeue_after.map(|d| {
            let ms = d.as_nanos().div_ceil(1_000_000);
            u64::try_from(ms).unwrap_or(u64::MAX)
        })
    }
}

/// Which side of the lease a [`HealthCheck::check`](crate::HealthCheck::check) call speaks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// This replica holds the lease: failing checks make it give the lease up.
    Active,
    /// This replica waits for the lease: a failing check keeps it from competing for it.
    Standby,
}

impl Role {
    /// `"active"` or `"standby"`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Role::Active => "active",
            Role::Standby => "standby",
        }
    }
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requeue_rounds_up_to_milliseconds() {
        assert_eq!(Outcome::default().requeue_after_ms(), None);
        let ms = |d| Outcome::requeue_after(d).requeue_after_ms();
        assert_eq!(ms(Duration::ZERO), Some(0));
        assert_eq!(ms(Duration::from_micros(1)), Some(1));
        assert_eq!(ms(Duration::from_millis(1500)), Some(1500));
        assert_eq!(ms(Duration::MAX), Some(u64::MAX));
    }
}
