//! The `[[service]]` tables of the config file: raw as the operator wrote them, then validated
//! into [`BoundService`]s against the leases and timing of the same configuration.

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::time::Duration;

use serde::Deserialize;

use super::process::{ProcessError, check_command, check_name};
use crate::lease::{LeaseName, Timing};
use crate::process::bound::{default_grace, max_grace};
use crate::process::service::{BoundService, DEFAULT_FAILURE_THRESHOLD, DEFAULT_HEALTH_INTERVAL};

/// One `[[service]]` table as written.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ServiceLayer {
    /// Its name in the log and `/status` [default: the lease's name].
    pub name: Option<String>,
    /// The lease it follows [default: the only lease, when there is one].
    pub lease: Option<String>,
    /// Run once the lease is taken.
    #[serde(default)]
    pub activate: Vec<String>,
    /// Run before the lease is let go.
    #[serde(default)]
    pub deactivate: Vec<String>,
    /// Run every `health_interval` with `active` or `standby` appended [default: none].
    #[serde(default)]
    pub health: Vec<String>,
    /// Between two health runs, and each run's time limit [default: 5s].
    #[serde(default, with = "humantime_serde")]
    pub health_interval: Option<Duration>,
    /// Failures in a row of `health active` before the lease is given up [default: 3].
    pub failure_threshold: Option<u32>,
    /// The most `deactivate` may take [default: as a process's grace].
    #[serde(default, with = "humantime_serde")]
    pub grace: Option<Duration>,
}

/// Validates `layers` against the configuration's `leases` and `timing`; commands are looked
/// for in `path`.
pub fn resolve(
    layers: Vec<ServiceLayer>,
    leases: &[LeaseName],
    timing: &Timing,
    path: Option<&std::ffi::OsStr>,
) -> Result<Vec<BoundService>, ProcessError> {
    let mut names = BTreeSet::new();
    layers
        .into_iter()
        .enumerate()
        .map(|(i, layer)| {
            let which = match layer.name.as_ref().or(layer.lease.as_ref()) {
                Some(name) => format!("{:?}", crate::report::escape_controls(name)),
                None => format!("#{}", i + 1),
            };
            let fail = |reason: String| ProcessError {
                which: format!("service {which}"),
                reason,
            };
            let bound = one(layer, leases, timing, path).map_err(fail)?;
            if !names.insert(bound.name.clone()) {
                return Err(ProcessError {
                    which: format!("service {:?}", bound.name),
                    reason: "two services have this name: give one a `name`".to_string(),
                });
            }
            Ok(bound)
        })
        .collect()
}

fn one(
    layer: ServiceLayer,
    leases: &[LeaseName],
    timing: &Timing,
    path: Option<&std::ffi::OsStr>,
) -> Result<BoundService, String> {
    let lease = match layer.lease {
        Some(lease) => {
            let lease = LeaseName::try_from(lease).map_err(|e| e.to_string())?;
            if !leases.contains(&lease) {
                return Err(format!(
                    "lease {lease:?} is not one this replica campaigns for: add it to leases"
                ));
            }
            lease
        }
        None => match leases {
            [only] => only.clone(),
            _ => return Err("no lease: set lease = \"NAME\"".to_string()),
        },
    };
    let name = layer.name.unwrap_or_else(|| lease.to_string());
    check_name(&name)?;
    let command = |key: &str, command: &[String]| -> Result<Vec<OsString>, String> {
        if command.is_empty() {
            return Err(format!("{key} is empty: {key} = [\"PROGRAM\", \"ARG\", …]"));
        }
        check_command(command, path).map_err(|e| format!("{key}: {e}"))
    };
    let activate = command("activate", &layer.activate)?;
    let deactivate = command("deactivate", &layer.deactivate)?;
    let health = match layer.health.is_empty() {
        true => None,
        false => Some(command("health", &layer.health)?),
    };
    let health_interval = layer.health_interval.unwrap_or(DEFAULT_HEALTH_INTERVAL);
    if health_interval.is_zero() {
        return Err("health_interval = 0: at least 1ms".to_string());
    }
    let failure_threshold = match layer.failure_threshold {
        Some(0) => return Err("failure_threshold = 0: at least 1".to_string()),
        Some(n) => n,
        None => DEFAULT_FAILURE_THRESHOLD,
    };
    let most = max_grace(timing);
    let grace = match layer.grace {
        Some(grace) if grace > most => {
            return Err(format!(
                "grace = {} is longer than the {} the timing allows: deactivate would start \
                 while renewals still land; shorten it or raise the ttl",
                humantime::format_duration(grace),
                humantime::format_duration(most)
            ));
        }
        Some(grace) => grace,
        None => default_grace(timing),
    };
    Ok(BoundService {
        name,
        lease,
        activate,
        deactivate,
        health,
        health_interval,
        failure_threshold,
        grace,
    })
}
