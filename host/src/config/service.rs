//! The `[[service]]` tables of the config file: raw as the operator wrote them, then validated
//! into [`BoundService`]s against the leases and timing of the same configuration.

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::time::Duration;

use serde::Deserialize;

use super::process::{ProcessError, check_command, check_name};
use crate::lease::{LeaseName, Timing};
use crate::process::bound::{default_grace, max_grace};
use crate::process::service::{
    BoundService, DEFAULT_FAILURE_THRESHOLD, DEFAULT_HEALTH_INTERVAL, Health,
};

/// One `[[service]]` table as written.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ServiceLayer {
    /// Its name in the log and `/status` [default: the lease's name].
    pub name: Option<String>,
    /// The lease it follows [default: the only lease, when there is one].
    pub lease: Option<String>,
    /// Run once the lease is taken [default: none: a term counts as activated at once].
    pub activate: Option<Vec<String>>,
    /// Run before the lease is let go [default: none: the stop is confirmed at once].
    pub deactivate: Option<Vec<String>>,
    /// Checked every `health_interval` in the role `active` or `standby` [default: none].
    pub health: Option<HealthLayer>,
    /// Between two health runs, and each run's time limit [default: 5s].
    #[serde(default, with = "humantime_serde")]
    pub health_interval: Option<Duration>,
    /// Failures in a row of `health active` before the lease is given up [default: 3].
    pub failure_threshold: Option<u32>,
    /// The most `deactivate` may take [default: as a process's grace].
    #[serde(default, with = "humantime_serde")]
    pub grace: Option<Duration>,
}

/// `health` as written: a URL string (an HTTP probe) or a command array.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(untagged, expecting = "a URL string or a command array")]
pub enum HealthLayer {
    /// `health = "http://127.0.0.1:8080/healthz"`: `GET` it, the role in its query and headers.
    Url(String),
    /// `health = ["PROGRAM", "ARG", …]`: run it with the role appended.
    Command(Vec<String>),
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
            // As it will be named: its name, else its lease's, else the only lease's.
            let default = match leases {
                [only] => Some(only.as_str()),
                _ => None,
            };
            let which = match layer.name.as_deref().or(layer.lease.as_deref()).or(default) {
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
    // Something to do with the lease: without any of the three the table would do nothing.
    if layer.activate.is_none() && layer.deactivate.is_none() && layer.health.is_none() {
        return Err(
            "nothing to run: set activate and deactivate (a service leasehold starts and \
             stops), or health (an app that lends its health to the lease), or all three"
                .to_string(),
        );
    }
    let activate = layer
        .activate
        .map(|c| command("activate", &c))
        .transpose()?;
    let deactivate = layer
        .deactivate
        .map(|c| command("deactivate", &c))
        .transpose()?;
    let health = match layer.health {
        None => None,
        Some(HealthLayer::Url(url)) => Some(Health::Probe(probe_url(&url)?)),
        Some(HealthLayer::Command(c)) => Some(Health::Command(command("health", &c)?)),
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

/// `health`'s URL, if leasehold can probe it: plain `http://` to the service's own address.
fn probe_url(text: &str) -> Result<url::Url, String> {
    let url = url::Url::parse(text).map_err(|e| {
        format!(
            "health = {text:?} is not a URL ({e}): a command is an array, \
             health = [\"PROGRAM\", \"ARG\", …]"
        )
    })?;
    match url.scheme() {
        // A probe of the app beside the host: TLS would need roots and names for a local port.
        "http" => Ok(url),
        "https" => Err(format!(
            "health = {text:?}: https is not probed (a probe is for the app's local address): \
             for TLS make health a command, e.g. a script that runs curl"
        )),
        other => Err(format!(
            "health = {text:?}: scheme {other:?} is not probed: use an http:// URL, or a command"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timing() -> Timing {
        Timing::from_ttl(Duration::from_secs(15))
    }

    fn leases() -> Vec<LeaseName> {
        vec![LeaseName::try_from("relay".to_string()).unwrap()]
    }

    fn path() -> Option<OsString> {
        std::env::var_os("PATH")
    }

    fn table(text: &str) -> ServiceLayer {
        toml::from_str(text).unwrap()
    }

    fn bound(text: &str) -> BoundService {
        let bound = resolve(vec![table(text)], &leases(), &timing(), path().as_deref()).unwrap();
        let [one] = &bound[..] else {
            panic!("{bound:?}")
        };
        one.clone()
    }

    fn refused(text: &str) -> String {
        resolve(vec![table(text)], &leases(), &timing(), path().as_deref())
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn a_health_url_is_probed_and_shown_as_the_url() {
        let one = bound(r#"health = "http://127.0.0.1:8080/healthz?deep=1""#);
        let Some(Health::Probe(url)) = &one.health else {
            panic!("{one:?}")
        };
        assert_eq!(url.as_str(), "http://127.0.0.1:8080/healthz?deep=1");
        let shown = toml::to_string(&one).unwrap();
        assert!(
            shown.contains(r#"health = "http://127.0.0.1:8080/healthz?deep=1""#),
            "{shown}"
        );
        // The command form still reads, and shows, as an array.
        let one = bound(r#"health = ["sh", "-c", "exit 0"]"#);
        assert!(matches!(&one.health, Some(Health::Command(c)) if c.len() == 3));
        let shown = toml::to_string(&one).unwrap();
        assert!(
            shown.contains(r#"health = ["sh", "-c", "exit 0"]"#),
            "{shown}"
        );
    }

    #[test]
    fn a_health_url_s_password_is_probed_with_and_shown_as_stars() {
        let one = bound(r#"health = "http://probe:Pr0beS3cret@127.0.0.1:8080/healthz?deep=1""#);
        let Some(Health::Probe(url)) = &one.health else {
            panic!("{one:?}")
        };
        assert_eq!(url.password(), Some("Pr0beS3cret"), "the probe sends it");
        let shown = toml::to_string(&one).unwrap();
        assert!(
            shown.contains(r#"health = "http://probe:***@127.0.0.1:8080/healthz?deep=1""#),
            "{shown}"
        );
        let debugged = format!("{one:?}");
        assert!(
            !shown.contains("Pr0beS3cret") && !debugged.contains("Pr0beS3cret"),
            "{shown}\n{debugged}"
        );
        // A user without a password has nothing to hide.
        let one = bound(r#"health = "http://probe@127.0.0.1:8080/healthz""#);
        let shown = toml::to_string(&one).unwrap();
        assert!(
            shown.contains(r#"health = "http://probe@127.0.0.1:8080/healthz""#),
            "{shown}"
        );
    }

    #[test]
    fn a_service_with_health_alone_needs_no_activate_or_deactivate() {
        let one = bound(r#"health = "http://localhost:9000/""#);
        assert_eq!(one.name, "relay");
        assert_eq!(one.activate, None);
        assert_eq!(one.deactivate, None);
        assert_eq!(one.failure_threshold, DEFAULT_FAILURE_THRESHOLD);
        assert_eq!(one.health_interval, DEFAULT_HEALTH_INTERVAL);
        let shown = toml::to_string(&one).unwrap();
        assert!(!shown.contains("activate"), "{shown}");
    }

    #[test]
    fn an_https_health_url_is_refused_naming_the_service_and_pointing_to_a_command() {
        let error = refused(r#"health = "https://127.0.0.1:8443/healthz""#);
        assert!(
            error.starts_with("invalid service \"relay\": health = \"https://127.0.0.1:8443/healthz\": https is not probed"),
            "{error}"
        );
        assert!(error.contains("for TLS make health a command"), "{error}");
        assert_eq!(error.lines().count(), 1, "{error}");
    }

    #[test]
    fn a_health_url_of_another_scheme_or_no_url_at_all_is_refused() {
        let cases = [
            (
                r#"health = "ftp://127.0.0.1/healthz""#,
                "scheme \"ftp\" is not probed: use an http:// URL, or a command",
            ),
            (
                r#"health = "unix:/run/relay.sock""#,
                "scheme \"unix\" is not probed",
            ),
            (
                r#"health = "/usr/local/bin/check-relay""#,
                "is not a URL (relative URL without a base): a command is an array",
            ),
            (r#"health = "http://""#, "is not a URL (empty host)"),
        ];
        for (text, wanted) in cases {
            let error = refused(text);
            assert!(error.starts_with("invalid service \"relay\": "), "{error}");
            assert!(error.contains(wanted), "{text}: {error}");
            assert_eq!(error.lines().count(), 1, "{error}");
        }
        let neither = toml::from_str::<ServiceLayer>("health = 3").unwrap_err();
        assert!(
            neither
                .to_string()
                .contains("a URL string or a command array"),
            "{neither}"
        );
    }

    #[test]
    fn a_service_with_nothing_to_run_is_refused_naming_it() {
        let error = refused(r#"name = "idle""#);
        assert!(
            error.starts_with(
                "invalid service \"idle\": nothing to run: set activate and deactivate"
            ),
            "{error}"
        );
        assert_eq!(error.lines().count(), 1, "{error}");
        // Given but empty is a mistake of its own, named by its key.
        let error = refused(
            r#"activate = ["true"]
            deactivate = []"#,
        );
        assert!(error.contains("deactivate is empty"), "{error}");
    }

    #[test]
    fn activate_and_deactivate_without_health_still_run_as_before() {
        let one = bound(
            r#"activate = ["true"]
            deactivate = ["sh", "-c", "exit 0"]"#,
        );
        assert_eq!(one.activate.as_ref().map(Vec::len), Some(1));
        assert_eq!(one.deactivate.as_ref().map(Vec::len), Some(3));
        assert_eq!(one.health, None);
    }
}
