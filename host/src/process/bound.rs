//! A process the operator bound to a lease (a `[[process]]` table of the config file, or
//! `leasehold exec`): what to run, how to stop it, and what its own exit means. Only the operator
//! names commands: nothing dropped into the plugin directory can start native code.

use std::fmt;
use std::time::Duration;

use rustix::process::Signal;

use super::handle::Spec;
use crate::lease::Timing;
use crate::manifest::Binding;

/// What a child's own exit means.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnExit {
    /// The lease is given up, so that another replica may run the process (the default: a
    /// process that ends is done here, and a replica where it cannot run must not keep the
    /// lease).
    #[default]
    Release,
    /// The process is started again after a backoff; after `max_failures` exits in a row the
    /// lease is given up, as a failing health check gives it up.
    Restart,
}

/// Exits in a row, with [`OnExit::Restart`], before the lease is given up: as many as a
/// reconciler's failures before quarantine, so that one broken node cannot hold the lease.
pub const DEFAULT_MAX_FAILURES: u32 = 5;

/// The longest default grace: ten seconds is what container runtimes give a stopping process.
pub(crate) const MAX_DEFAULT_GRACE: Duration = Duration::from_secs(10);

/// How long before the term's `safe_until` the keeper's SIGKILL lands: the kill, and the
/// kernel's teardown of the tree, take a few milliseconds, and must be over by `safe_until`.
pub const KILL_MARGIN: Duration = Duration::from_millis(50);

/// One process bound to a lease, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BoundProcess {
    /// Its name in the log, `/status` and metrics.
    pub name: String,
    /// The lease (or each shard of the group) it runs under.
    pub binding: Binding,
    /// The command and how to stop it.
    pub spec: Spec,
    /// What its own exit means.
    pub on_exit: OnExit,
    /// With [`OnExit::Restart`]: exits in a row before the lease is given up.
    pub max_failures: u32,
}

/// The stop signals a process may ask for, by name.
const SIGNALS: [(&str, Signal); 8] = [
    ("HUP", Signal::HUP),
    ("INT", Signal::INT),
    ("QUIT", Signal::QUIT),
    ("KILL", Signal::KILL),
    ("USR1", Signal::USR1),
    ("USR2", Signal::USR2),
    ("ALRM", Signal::ALARM),
    ("TERM", Signal::TERM),
];

/// A stop signal by name, with or without `SIG` (`TERM`, `SIGTERM`, `sigint`).
pub fn parse_signal(name: &str) -> Result<Signal, String> {
    let upper = name.trim().to_ascii_uppercase();
    let bare = upper.strip_prefix("SIG").unwrap_or(&upper);
    SIGNALS
        .iter()
        .find(|(n, _)| *n == bare)
        .map(|(_, s)| *s)
        .ok_or_else(|| {
            let known: Vec<String> = SIGNALS.iter().map(|(n, _)| format!("SIG{n}")).collect();
            format!(
                "unknown signal {:?}: one of {}",
                crate::report::escape_controls(name),
                known.join(", ")
            )
        })
}

/// A signal's name as [`parse_signal`] reads it.
pub fn signal_name(signal: Signal) -> String {
    SIGNALS.iter().find(|(_, s)| *s == signal).map_or_else(
        || format!("signal {}", signal.as_raw()),
        |(n, _)| format!("SIG{n}"),
    )
}

/// How far ahead of now `safe_until` stays while renewals land, even a slow one: it is set to
/// `sent + ttl − margin` by each renewal, the next is sent a renew interval later and may take
/// a store timeout to land. The keeper's stop signal must come no sooner than this lead before
/// `safe_until`, or a process would be stopped while its lease is healthy.
pub(crate) fn healthy_lead(timing: &Timing) -> Duration {
    timing
        .ttl
        .saturating_sub(timing.margin)
        .saturating_sub(timing.renew_interval)
        .saturating_sub(timing.store_timeout)
}

/// The longest grace `timing` allows: the stop signal, a grace before the kill, itself
/// [`KILL_MARGIN`] before `safe_until`, must come after the [`healthy_lead`].
pub fn max_grace(timing: &Timing) -> Duration {
    healthy_lead(timing).saturating_sub(KILL_MARGIN)
}

/// The default grace: half of [`max_grace`] (renewals may fail for the other half before the
/// stop signal is sent), at most [`MAX_DEFAULT_GRACE`], in whole milliseconds.
pub fn default_grace(timing: &Timing) -> Duration {
    let half = max_grace(timing) / 2;
    Duration::from_millis(half.min(MAX_DEFAULT_GRACE).as_millis() as u64)
}

/// As `leasehold config check` prints it: the `[[process]]` table it would take to write it.
impl serde::Serialize for BoundProcess {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut table = serializer.serialize_struct("process", 7)?;
        table.serialize_field("name", &self.name)?;
        match &self.binding {
            Binding::Lease(lease) => table.serialize_field("lease", lease.as_str())?,
            Binding::Group(group) => table.serialize_field("group", group)?,
        }
        let command: Vec<String> = self
            .spec
            .command
            .iter()
            .map(|c| c.to_string_lossy().into_owned())
            .collect();
        table.serialize_field("command", &command)?;
        table.serialize_field("stop_signal", &signal_name(self.spec.signal))?;
        table.serialize_field(
            "grace",
            &humantime::format_duration(self.spec.grace).to_string(),
        )?;
        table.serialize_field("on_exit", &self.on_exit)?;
        if self.on_exit == OnExit::Restart {
            table.serialize_field("max_failures", &self.max_failures)?;
        }
        table.end()
    }
}

impl fmt::Display for OnExit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            OnExit::Release => "release",
            OnExit::Restart => "restart",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signal_is_read_with_or_without_sig_in_any_case_and_an_unknown_one_lists_the_known() {
        for name in ["TERM", "SIGTERM", "sigterm", " term "] {
            assert_eq!(parse_signal(name), Ok(Signal::TERM), "{name:?}");
        }
        assert_eq!(parse_signal("SIGINT"), Ok(Signal::INT));
        let error = parse_signal("SIGTERMINATE").unwrap_err();
        assert!(
            error.contains("\"SIGTERMINATE\"") && error.ends_with("SIGALRM, SIGTERM"),
            "{error}"
        );
        assert_eq!(signal_name(Signal::USR1), "SIGUSR1");
    }

    #[test]
    fn the_default_grace_leaves_half_the_healthy_lead_to_failing_renewals() {
        let timing = Timing::from_ttl(Duration::from_secs(15));
        let lead = healthy_lead(&timing);
        assert!(lead > Duration::from_secs(5), "{lead:?}");
        assert_eq!(max_grace(&timing), lead - KILL_MARGIN);
        let grace = default_grace(&timing);
        assert_eq!(grace, Duration::from_millis(3325), "{lead:?}");
        // A long ttl: the cap.
        let long = Timing::from_ttl(Duration::from_secs(600));
        assert_eq!(default_grace(&long), MAX_DEFAULT_GRACE);
    }
}
