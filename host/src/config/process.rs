//! The `[[process]]` tables of the config file (and `leasehold exec`'s one process): raw as the
//! operator wrote them, then validated into [`BoundProcess`]es against the leases, groups and
//! timing of the same configuration.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::lease::{LeaseName, Timing};
use crate::manifest::Binding;
use crate::process::bound::{
    BoundProcess, DEFAULT_MAX_FAILURES, OnExit, default_grace, max_grace, parse_signal,
};
use crate::process::handle::Spec;
use crate::process::protocol::Mode;

/// One `[[process]]` table as written; every key but `command` optional.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ProcessLayer {
    /// Its name in the log and `/status` [default: the command's file name].
    pub name: Option<String>,
    /// The lease it runs under [default: the only lease, when there is one].
    pub lease: Option<String>,
    /// The group on each of whose shards held here it runs (instead of `lease`).
    pub group: Option<String>,
    /// The program and its arguments.
    #[serde(default)]
    pub command: Vec<String>,
    /// The signal that asks it to stop [default: SIGTERM].
    pub stop_signal: Option<String>,
    /// How long it has between that signal and SIGKILL [default: half of what the timing
    /// allows, at most 10 s].
    #[serde(default, with = "humantime_serde")]
    pub grace: Option<Duration>,
    /// `release` (default) or `restart`.
    pub on_exit: Option<OnExit>,
    /// With `on_exit = "restart"`: exits in a row before the lease is given up [default: 5].
    pub max_failures: Option<u32>,
}

/// Why a `[[process]]` table cannot run: the process (by name or position) and the reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {which}: {reason}")]
pub struct ProcessError {
    /// `process "worker"` (its name, else its program's file name), `process #2` for a table
    /// without either; `service "relay"` for a `[[service]]` table.
    pub which: String,
    /// What is wrong, naming the key.
    pub reason: String,
}

/// Validates `layers` against the configuration's `leases`, `groups` and `timing`. `path` is
/// where commands are looked for (`PATH`), to refuse one that is missing or not executable now
/// rather than at the first term.
pub fn resolve(
    layers: Vec<ProcessLayer>,
    leases: &[LeaseName],
    groups: &[String],
    timing: &Timing,
    path: Option<&std::ffi::OsStr>,
) -> Result<Vec<BoundProcess>, ProcessError> {
    let mut names = BTreeSet::new();
    layers
        .into_iter()
        .enumerate()
        .map(|(i, layer)| {
            // As it will be named: its `name`, else its program's file name.
            let named = layer.name.clone().or_else(|| {
                let program = layer.command.first()?;
                Some(
                    Path::new(program)
                        .file_name()?
                        .to_string_lossy()
                        .into_owned(),
                )
            });
            let which = match named {
                Some(name) => format!("{:?}", crate::report::escape_controls(&name)),
                None => format!("#{}", i + 1),
            };
            let fail = |reason: String| ProcessError {
                which: format!("process {which}"),
                reason,
            };
            let bound = one(layer, leases, groups, timing, path).map_err(fail)?;
            if !names.insert(bound.name.clone()) {
                return Err(ProcessError {
                    which: format!("process {:?}", bound.name),
                    reason: "two processes have this name: give one a `name`".to_string(),
                });
            }
            Ok(bound)
        })
        .collect()
}

/// One table, validated; the error is the reason alone.
fn one(
    layer: ProcessLayer,
    leases: &[LeaseName],
    groups: &[String],
    timing: &Timing,
    path: Option<&std::ffi::OsStr>,
) -> Result<BoundProcess, String> {
    let Some(program) = layer.command.first() else {
        return Err("command is empty: command = [\"PROGRAM\", \"ARG\", …]".to_string());
    };
    let command = check_command(&layer.command, path)?;
    let name = match layer.name {
        Some(name) => name,
        None => Path::new(program)
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
    };
    check_name(&name)?;
    let binding = match (layer.lease, layer.group) {
        (Some(_), Some(_)) => return Err("both lease and group are set: set one".to_string()),
        (Some(lease), None) => {
            let lease = LeaseName::try_from(lease).map_err(|e| e.to_string())?;
            if !leases.contains(&lease) {
                return Err(format!(
                    "lease {lease:?} is not one this replica campaigns for ({}): add it to leases",
                    list(leases.iter().map(|l| l.to_string()))
                ));
            }
            Binding::Lease(lease)
        }
        (None, Some(group)) => {
            if !groups.contains(&group) {
                return Err(format!(
                    "group {:?} is not one this replica takes part in ({})",
                    crate::report::escape_controls(&group),
                    list(groups.iter().cloned())
                ));
            }
            Binding::Group(group)
        }
        (None, None) => match leases {
            [only] if groups.is_empty() => Binding::Lease(only.clone()),
            _ => return Err("no lease: set lease = \"NAME\" (or group)".to_string()),
        },
    };
    let signal = match &layer.stop_signal {
        Some(name) => parse_signal(name).map_err(|e| format!("stop_signal: {e}"))?,
        None => rustix::process::Signal::TERM,
    };
    let most = max_grace(timing);
    let grace = match layer.grace {
        Some(grace) if grace > most => {
            return Err(format!(
                "grace = {} is longer than the {} the timing allows (the ttl, less a renewal's \
                 interval, the store timeout and the margin): the stop signal would come while \
                 renewals still land; shorten it or raise the ttl",
                humantime::format_duration(grace),
                humantime::format_duration(most)
            ));
        }
        Some(grace) => grace,
        None => default_grace(timing),
    };
    let on_exit = layer.on_exit.unwrap_or_default();
    let max_failures = match (layer.max_failures, on_exit) {
        (Some(0), _) => return Err("max_failures = 0: at least 1".to_string()),
        (Some(_), OnExit::Release) => {
            return Err(
                "max_failures is for on_exit = \"restart\": with \"release\" the first exit gives the lease up"
                    .to_string(),
            );
        }
        (Some(n), OnExit::Restart) => n,
        (None, _) => DEFAULT_MAX_FAILURES,
    };
    Ok(BoundProcess {
        name,
        binding,
        spec: Spec {
            command,
            signal,
            grace,
            mode: Mode::Own,
        },
        on_exit,
        max_failures,
    })
}

/// A non-empty command as it will be run: its program found (see [`find_program`]), its
/// arguments as written.
pub(super) fn check_command(
    command: &[String],
    path: Option<&std::ffi::OsStr>,
) -> Result<Vec<std::ffi::OsString>, String> {
    let program = command.first().map(String::as_str).unwrap_or_default();
    let mut run = vec![find_program(program, path)?.into_os_string()];
    run.extend(command.iter().skip(1).map(Into::into));
    Ok(run)
}

/// The program a command names, as it will be run: a path with a `/` as it is, a bare name
/// looked up in `path`. Refused when missing or not executable, naming what was searched.
fn find_program(program: &str, path: Option<&std::ffi::OsStr>) -> Result<PathBuf, String> {
    use std::os::unix::fs::PermissionsExt;
    let shown = crate::report::escape_controls(program);
    let executable = |p: &Path| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if program.contains('/') {
        let p = PathBuf::from(program);
        return match std::fs::metadata(&p) {
            Err(e) => Err(format!("command {shown}: {e}")),
            Ok(_) if !executable(&p) => Err(format!(
                "command {shown} is not an executable file (chmod +x?)"
            )),
            Ok(_) => Ok(p),
        };
    }
    if program.is_empty() {
        return Err("command's program is empty".to_string());
    }
    let dirs: Vec<PathBuf> = path
        .map(|p| std::env::split_paths(p).collect())
        .unwrap_or_default();
    dirs.iter()
        .map(|d| d.join(program))
        .find(|p| executable(p))
        // Kept as written: the keeper looks it up again in the same PATH.
        .map(|_| PathBuf::from(program))
        .ok_or_else(|| format!("command {shown} is not found in PATH, or not executable"))
}

/// A process name: what a plugin name may be, so that both read alike in `/status` and metrics.
pub(super) fn check_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && !name.starts_with('.');
    match ok {
        true => Ok(()),
        false => Err(format!(
            "name {:?}: 1 to 64 of A-Z a-z 0-9 - _ . (not starting with .); set name = \"…\"",
            crate::report::escape_controls(name)
        )),
    }
}

fn list(names: impl Iterator<Item = String>) -> String {
    let all: Vec<String> = names.collect();
    if all.is_empty() {
        "none".to_string()
    } else {
        all.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timing() -> Timing {
        Timing::from_ttl(Duration::from_secs(15))
    }

    fn leases(names: &[&str]) -> Vec<LeaseName> {
        names
            .iter()
            .map(|n| LeaseName::try_from(n.to_string()).unwrap())
            .collect()
    }

    fn path() -> Option<std::ffi::OsString> {
        std::env::var_os("PATH")
    }

    fn table(text: &str) -> ProcessLayer {
        toml::from_str(text).unwrap()
    }

    fn refused(text: &str, leases_: &[&str], groups: &[&str]) -> String {
        let groups: Vec<String> = groups.iter().map(|g| g.to_string()).collect();
        resolve(
            vec![table(text)],
            &leases(leases_),
            &groups,
            &timing(),
            path().as_deref(),
        )
        .unwrap_err()
        .to_string()
    }

    #[test]
    fn a_table_with_only_a_command_runs_under_the_only_lease_with_sigterm_and_the_default_grace() {
        let bound = resolve(
            vec![table(r#"command = ["sh", "-c", "exec sleep 1"]"#)],
            &leases(&["nightly"]),
            &[],
            &timing(),
            path().as_deref(),
        )
        .unwrap();
        let [one] = &bound[..] else {
            panic!("{bound:?}")
        };
        assert_eq!(one.name, "sh");
        assert_eq!(one.binding.to_string(), "nightly");
        assert_eq!(one.spec.signal, rustix::process::Signal::TERM);
        assert_eq!(one.spec.grace, default_grace(&timing()));
        assert_eq!(one.on_exit, OnExit::Release);
    }

    #[test]
    fn each_mistake_is_refused_naming_the_process_and_the_key() {
        let cases = [
            (r#"command = []"#, "invalid process #1: command is empty"),
            (
                r#"command = ["/no/such/program"]"#,
                "command /no/such/program: No such file",
            ),
            (
                r#"command = ["no-such-program-anywhere"]"#,
                "not found in PATH",
            ),
            (
                r#"command = ["sh"]
                stop_signal = "SIGTERMINATE""#,
                "stop_signal: unknown signal \"SIGTERMINATE\"",
            ),
            (
                r#"command = ["sh"]
                grace = "1m""#,
                "grace = 1m is longer than the 6s 650ms the timing allows",
            ),
            (
                r#"command = ["sh"]
                lease = "other""#,
                "lease \"other\" is not one this replica campaigns for (nightly)",
            ),
            (
                r#"command = ["sh"]
                group = "orders""#,
                "group \"orders\" is not one this replica takes part in (none)",
            ),
            (
                r#"command = ["sh"]
                max_failures = 3"#,
                "max_failures is for on_exit = \"restart\"",
            ),
            (
                r#"name = "a b"
                command = ["sh"]"#,
                "name \"a b\": 1 to 64 of",
            ),
        ];
        for (text, wanted) in cases {
            let error = refused(text, &["nightly"], &[]);
            assert!(error.contains(wanted), "{text}: {error}");
        }
        let dir = tempfile::tempdir().unwrap();
        let plain = dir.path().join("plain");
        std::fs::write(&plain, "#!/bin/sh\n").unwrap();
        let text = format!(
            "name = \"w\"\ncommand = [{:?}]",
            plain.display().to_string()
        );
        let error = refused(&text, &["nightly"], &[]);
        assert!(
            error.contains("invalid process \"w\": command ")
                && error.contains("is not an executable file (chmod +x?)"),
            "{error}"
        );
        let error = refused(r#"command = ["sh"]"#, &["a", "b"], &[]);
        assert!(error.contains("no lease: set lease"), "{error}");
        let unknown = toml::from_str::<ProcessLayer>("command = [\"sh\"]\ncommnd = 1");
        assert!(
            unknown
                .unwrap_err()
                .to_string()
                .contains("unknown field `commnd`")
        );
    }

    #[test]
    fn two_processes_of_one_name_are_refused() {
        let error = resolve(
            vec![
                table(r#"command = ["sh"]"#),
                table(r#"command = ["/bin/sh"]"#),
            ],
            &leases(&["nightly"]),
            &[],
            &timing(),
            path().as_deref(),
        )
        .unwrap_err();
        assert!(
            error.to_string().contains("two processes have this name"),
            "{error}"
        );
    }
}
