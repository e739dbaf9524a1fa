//! `NAME.toml` beside `NAME.wasm`: which lease the plugin is bound to, its schedule, its limits
//! and its config values. Every key is optional; unknown keys are rejected so a typo is an error,
//! not a silently ignored setting.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use serde::Deserialize;

use crate::runtime::host::CallLimits;

/// Why a manifest was refused.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    /// The file could not be read.
    #[error("{path}: cannot read: {source}")]
    Read {
        /// The manifest.
        path: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The file is not a valid manifest.
    #[error("{path}: {message}")]
    Parse {
        /// The manifest.
        path: String,
        /// The parser's message, with line and column.
        message: String,
    },
    /// A value is out of range.
    #[error("{path}: {key} = {value}: {reason}")]
    Invalid {
        /// The manifest.
        path: String,
        /// The key.
        key: &'static str,
        /// The value.
        value: String,
        /// Why.
        reason: &'static str,
    },
}

/// `[schedule]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Schedule {
    /// Time between calls.
    #[serde(default, with = "humantime_serde")]
    pub interval: Option<Duration>,
}

/// `[limits]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    /// Wall-clock deadline per call.
    #[serde(default, with = "humantime_serde")]
    pub call_timeout: Option<Duration>,
    /// Linear memory cap, e.g. `"64MiB"`.
    pub memory: Option<String>,
    /// Fuel per call (needs an engine that meters fuel).
    pub fuel: Option<u64>,
}

/// `[health]`, for health-check plugins.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Health {
    /// Consecutive failures before the holder steps down.
    pub failure_threshold: Option<u32>,
}

/// The manifest as written.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ManifestFile {
    /// The lease the plugin is bound to.
    pub lease: Option<String>,
    /// When it runs.
    #[serde(default)]
    pub schedule: Schedule,
    /// What it may use.
    #[serde(default)]
    pub limits: Limits,
    /// Health-check settings.
    #[serde(default)]
    pub health: Health,
    /// Free-form values handed to the plugin.
    #[serde(default)]
    pub config: BTreeMap<String, String>,
}

/// A validated manifest with defaults applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Manifest {
    /// The lease the plugin is bound to.
    pub lease: String,
    /// Time between calls.
    pub interval: Duration,
    /// Per-call limits.
    pub limits: CallLimits,
    /// Consecutive failures before a holder's health check makes it step down.
    pub failure_threshold: u32,
    /// Values handed to `init`.
    pub config: BTreeMap<String, String>,
}

/// A reconcile every 10 s: frequent enough to notice drift quickly, rare enough to cost nothing.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(10);
/// 5 s per call: a reconcile is meant to be short; a longer one should requeue itself.
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(5);
/// 64 MiB of linear memory: ample for a reconciler, small enough to run hundreds per host.
pub const DEFAULT_MEMORY: usize = 64 << 20;
/// Three consecutive failed checks: one failure may be a blip, three are a pattern.
pub const DEFAULT_FAILURE_THRESHOLD: u32 = 3;

impl Manifest {
    /// The manifest of a plugin without a `.toml`.
    pub fn defaults() -> Self {
        Manifest {
            lease: crate::config::DEFAULT_LEASE.to_string(),
            interval: DEFAULT_INTERVAL,
            limits: CallLimits {
                call_timeout: DEFAULT_CALL_TIMEOUT,
                memory_bytes: DEFAULT_MEMORY,
                fuel: None,
            },
            failure_threshold: DEFAULT_FAILURE_THRESHOLD,
            config: BTreeMap::new(),
        }
    }

    /// Reads and validates the manifest at `path`.
    pub fn load(path: &Path) -> Result<Self, ManifestError> {
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| ManifestError::Read {
            path: shown.clone(),
            source,
        })?;
        Self::parse(&shown, &text)
    }

    /// Parses and validates manifest text; `path` only names it in errors.
    pub fn parse(path: &str, text: &str) -> Result<Self, ManifestError> {
        let file: ManifestFile = toml::from_str(text).map_err(|e| ManifestError::Parse {
            path: path.to_string(),
            message: e.to_string(),
        })?;
        let invalid = |key, value: String, reason| ManifestError::Invalid {
            path: path.to_string(),
            key,
            value,
            reason,
        };
        let d = Self::defaults();
        let lease = file.lease.unwrap_or(d.lease);
        if crate::config::validate_lease_name(&lease).is_err() {
            return Err(invalid(
                "lease",
                lease,
                "use 1-200 ASCII letters, digits and - _ . : /",
            ));
        }
        let interval = file.schedule.interval.unwrap_or(d.interval);
        if interval < Duration::from_millis(10) {
            return Err(invalid(
                "schedule.interval",
                format!("{interval:?}"),
                "must be at least 10ms",
            ));
        }
        let call_timeout = file.limits.call_timeout.unwrap_or(d.limits.call_timeout);
        if call_timeout < Duration::from_millis(1) {
            return Err(invalid(
                "limits.call_timeout",
                format!("{call_timeout:?}"),
                "must be at least 1ms",
            ));
        }
        let memory_bytes = match file.limits.memory {
            Some(text) => parse_size(&text).ok_or_else(|| {
                invalid(
                    "limits.memory",
                    text.clone(),
                    "expected a size such as 64MiB, 512KiB or 1GiB (at least 64KiB)",
                )
            })?,
            None => d.limits.memory_bytes,
        };
        if file.limits.fuel == Some(0) {
            return Err(invalid("limits.fuel", "0".into(), "must be above zero"));
        }
        let failure_threshold = file.health.failure_threshold.unwrap_or(d.failure_threshold);
        if failure_threshold == 0 {
            return Err(invalid(
                "health.failure_threshold",
                "0".into(),
                "must be at least 1",
            ));
        }
        Ok(Manifest {
            lease,
            interval,
            limits: CallLimits {
                call_timeout,
                memory_bytes,
                fuel: file.limits.fuel,
            },
            failure_threshold,
            config: file.config,
        })
    }
}

/// `64MiB`, `512KiB`, `1GiB`, `65536` (bytes); at least one 64 KiB wasm page.
fn parse_size(text: &str) -> Option<usize> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let number: usize = number.parse().ok()?;
    let factor = match unit.trim() {
        "" | "B" => 1,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        _ => return None,
    };
    number
        .checked_mul(factor)
        .filter(|&bytes| bytes >= 64 << 10)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_full_manifest() {
        assert_eq!(Manifest::parse("x.toml", "").unwrap(), Manifest::defaults());
        let m = Manifest::parse(
            "x.toml",
            "lease = 'jobs'\n[schedule]\ninterval = '2s'\n[limits]\ncall_timeout = '500ms'\nmemory = '16MiB'\nfuel = 1000\n[health]\nfailure_threshold = 2\n[config]\ngreeting = 'hi'\n",
        )
        .unwrap();
        assert_eq!(m.lease, "jobs");
        assert_eq!(m.interval, Duration::from_secs(2));
        assert_eq!(
            m.limits,
            CallLimits {
                call_timeout: Duration::from_millis(500),
                memory_bytes: 16 << 20,
                fuel: Some(1000)
            }
        );
        assert_eq!(m.failure_threshold, 2);
        assert_eq!(m.config["greeting"], "hi");
    }

    #[test]
    fn rejects_typos_and_bad_values_by_key() {
        let e = Manifest::parse("p.toml", "leese = 'x'")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("p.toml: ") && e.contains("leese"), "{e}");
        let e = Manifest::parse("p.toml", "[limits]\nmemory = '12 parsecs'")
            .unwrap_err()
            .to_string();
        assert!(e.contains("limits.memory"), "{e}");
        let e = Manifest::parse("p.toml", "[schedule]\ninterval = '1ms'")
            .unwrap_err()
            .to_string();
        assert!(e.contains("schedule.interval"), "{e}");
        let e = Manifest::parse("p.toml", "[config]\nn = 3")
            .unwrap_err()
            .to_string();
        assert!(e.contains("p.toml"), "{e}");
    }
}
