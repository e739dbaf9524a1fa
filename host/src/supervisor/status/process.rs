//! What `/status` shows of each OS process bound to a lease (`leasehold exec`, `[[process]]`)
//! and each service (`[[service]]`): one [`ProcessStatus`] per process and lease it runs under,
//! kept on the board beside the plugins' cards (written through a
//! process card), and the host's last word on each.

use crate::lease::Epoch;
use std::collections::BTreeMap;

use serde::Serialize;

/// A process's state on this replica.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ProcessState {
    /// Not running here: the lease is held elsewhere, or not at all.
    Idle,
    /// Being started under a term here (a service: its `activate` script runs).
    Starting,
    /// Running under a term of this replica.
    Running,
    /// Asked to stop (its stop signal sent), not gone yet.
    Stopping,
    /// Exited; waiting to start again (`on_exit = "restart"`).
    Backoff,
    /// Exited as often as its `on_exit` allows: this replica gave the lease up.
    GaveUp,
}

/// What a card shows: a process leasehold runs, or a service it activates and deactivates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProcessKind {
    /// A `[[process]]` table, or `leasehold exec`: leasehold runs it.
    #[default]
    Process,
    /// A `[[service]]` table: leasehold runs its scripts, not the service.
    Service,
}

/// One process under one lease, in `/status`.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct ProcessStatus {
    /// The process's name (its table's `name`, or its command's file name).
    pub name: String,
    /// The lease it runs under (a shard's lease for a process bound to a group).
    pub lease: String,
    /// A process, or a service (whose starts are activations, whose stops deactivations, and
    /// whose exits are its scripts' failures: `health code 1`).
    #[serde(default)]
    pub kind: ProcessKind,
    /// Its state here.
    pub state: ProcessState,
    /// The process id while it runs.
    pub pid: Option<u32>,
    /// The epoch of the term it last started in.
    pub epoch: Option<Epoch>,
    /// Starts on this replica: `leasehold_process_starts_total`.
    pub starts: u64,
    /// Exits by how the process ended (`code 0`, `signal TERM`):
    /// `leasehold_process_exits_total`.
    pub exits: BTreeMap<String, u64>,
    /// Stops that needed SIGKILL of the tree: `leasehold_process_forced_kills_total`.
    pub forced_kills: u64,
    /// Stops its keeper made on its own at the lease's deadline (or with this host gone), on
    /// its own clock, this host not having stopped it (frozen, or renewals failing):
    /// `leasehold_process_keeper_stops_total`.
    #[serde(default)]
    pub keeper_stops: u64,
    /// From the stop signal (or the stop's start, whoever made it) to no process of the tree
    /// left, the last time it was stopped, on the keeper's clock.
    pub last_stop_ms: Option<f64>,
    /// Stops not confirmed by the term's deadline: `leasehold_process_unconfirmed_stops_total`.
    pub unconfirmed_stops: u64,
    /// How it ended last, and why it did not start, if so.
    pub last_exit: Option<String>,
}

/// How a process that ran when the host began to stop ended, for the host's last line: `before`
/// is its card then, `after` its card once the host has waited for it.
pub fn how_it_ended(before: &ProcessStatus, after: &ProcessStatus) -> String {
    let who = format!("{} ({})", after.name, after.lease);
    if matches!(
        after.state,
        ProcessState::Starting | ProcessState::Running | ProcessState::Stopping
    ) {
        return format!("{who} was still stopping when the host stopped waiting");
    }
    if after.unconfirmed_stops > before.unconfirmed_stops {
        return format!("{who}: stop unconfirmed, its end was not seen by the lease's deadline");
    }
    let ended = if after.forced_kills > before.forced_kills {
        "was killed (SIGKILL of its tree) when its grace ran out".to_string()
    } else if after.kind == ProcessKind::Service {
        "deactivated".to_string()
    } else {
        match after.last_exit.as_deref() {
            Some(code) if code.starts_with("code ") => format!("exited with {code}"),
            Some(signal) if signal.starts_with("signal ") => format!("ended by {signal}"),
            _ => "ended".to_string(),
        }
    };
    match after.last_stop_ms {
        Some(ms) => format!("{who} {ended}, stopped in {ms:.0} ms"),
        None => format!("{who} {ended}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(state: ProcessState) -> ProcessStatus {
        ProcessStatus {
            name: "worker".into(),
            lease: "orders".into(),
            kind: ProcessKind::Process,
            state,
            pid: None,
            epoch: Some(Epoch::new(1)),
            starts: 1,
            exits: BTreeMap::new(),
            forced_kills: 0,
            keeper_stops: 0,
            last_stop_ms: None,
            unconfirmed_stops: 0,
            last_exit: None,
        }
    }

    #[test]
    fn the_last_line_says_how_each_process_ended_and_how_long_its_stop_took() {
        let before = status(ProcessState::Running);
        let clean = ProcessStatus {
            last_exit: Some("code 0".into()),
            last_stop_ms: Some(12.4),
            ..status(ProcessState::Idle)
        };
        assert_eq!(
            how_it_ended(&before, &clean),
            "worker (orders) exited with code 0, stopped in 12 ms"
        );
        let killed = ProcessStatus {
            last_exit: Some("signal KILL".into()),
            forced_kills: 1,
            last_stop_ms: Some(5_003.0),
            ..status(ProcessState::Idle)
        };
        assert_eq!(
            how_it_ended(&before, &killed),
            "worker (orders) was killed (SIGKILL of its tree) when its grace ran out, stopped in 5003 ms"
        );
        let lost = ProcessStatus {
            unconfirmed_stops: 1,
            ..status(ProcessState::Idle)
        };
        assert!(how_it_ended(&before, &lost).contains("stop unconfirmed"));
        let service = ProcessStatus {
            kind: ProcessKind::Service,
            last_stop_ms: Some(40.0),
            ..status(ProcessState::Idle)
        };
        assert_eq!(
            how_it_ended(&before, &service),
            "worker (orders) deactivated, stopped in 40 ms"
        );
        let late = status(ProcessState::Stopping);
        assert!(how_it_ended(&before, &late).contains("still stopping"));
    }
}
