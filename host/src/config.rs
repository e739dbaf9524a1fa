//! The settings of `leasehold run`: defaults, then the TOML file, then `LEASEHOLD_*` environment
//! variables and flags (clap reads those two), each layer overriding the one before.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::lease::identity::default_replica_id;
use crate::lease::{DatabaseUrl, LeaseName, LeaseNameError, RawUrl, Timing, TimingError, UrlError};

/// Why the configuration was refused; each variant names the file or value at fault.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The config file could not be read.
    #[error("cannot read config file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The config file is not valid TOML for leasehold (unknown keys are rejected).
    #[error("invalid config file {path}: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// The parser's message, with line and column.
        message: String,
    },
    /// The database URL is not one leasehold can use.
    #[error(transparent)]
    DatabaseUrl(#[from] UrlError),
    /// The timing breaks a safety relation: the key, its value, where the value came from and
    /// the rule.
    #[error("invalid timing.{} = {:?} ({origin}): {}", .error.field, .error.value, .error.reason)]
    Timing {
        /// The broken rule, with the field (`margin`, as in `[timing] margin`) and its value.
        error: TimingError,
        /// Where the value was set: the config file, `--ttl`, or derived from the ttl.
        origin: &'static str,
    },
    /// A lease name is unusable.
    #[error(transparent)]
    LeaseName(#[from] LeaseNameError),
    /// A lease is listed twice.
    #[error("invalid lease name {0:?}: listed twice")]
    DuplicateLease(String),
    /// The lease list is empty: the replica would have nothing to do.
    #[error("leases is empty: list at least one lease to campaign for")]
    NoLeases,
    /// A replica id is unusable.
    #[error("invalid replica id {0:?}: use 1 to 200 characters without whitespace")]
    ReplicaId(String),
}

/// The `[timing]` table; every key optional, missing ones derived from the ttl.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TimingFile {
    /// Lease ttl (default 15s), a whole number of milliseconds.
    #[serde(default, with = "humantime_serde")]
    pub ttl: Option<Duration>,
    /// Renewal interval (default ttl/3).
    #[serde(default, with = "humantime_serde")]
    pub renew_interval: Option<Duration>,
    /// Retry interval after a failed renewal (default ttl/15).
    #[serde(default, with = "humantime_serde")]
    pub retry_interval: Option<Duration>,
    /// Standby poll interval (default ttl/5, plus up to 20% jitter).
    #[serde(default, with = "humantime_serde")]
    pub poll_interval: Option<Duration>,
    /// Safety margin subtracted from the ttl (default max(2% of ttl, 250ms), at most ttl/4); at
    /// least max(10ms, 1% of ttl) and at most ttl/2 when set.
    #[serde(default, with = "humantime_serde")]
    pub margin: Option<Duration>,
    /// Timeout of each store call (default ttl/5).
    #[serde(default, with = "humantime_serde")]
    pub store_timeout: Option<Duration>,
}

/// The `[runtime]` table: the WebAssembly engine.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuntimeFile {
    /// Meter fuel: every call gets a budget (`limits.fuel`, else the runtime's default). On by
    /// default so a runaway guest ends on fuel as well as on its deadline; `false` saves the
    /// ~18% it costs in tight loops.
    pub fuel: Option<bool>,
}

/// The config file, as written by an operator. Every key is optional.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigFile {
    /// `postgres://…` or `sqlite:PATH`.
    pub database_url: Option<RawUrl>,
    /// The replica id; a random suffix is added per process start.
    pub replica_id: Option<String>,
    /// Address of the HTTP endpoint.
    pub http: Option<SocketAddr>,
    /// Leases to campaign for.
    pub leases: Option<Vec<String>>,
    /// How long an ordered shutdown may take before the process exits anyway.
    #[serde(default, with = "humantime_serde")]
    pub shutdown_grace: Option<Duration>,
    /// How long the first database connection may take at start-up.
    #[serde(default, with = "humantime_serde")]
    pub connect_timeout: Option<Duration>,
    /// The plugin directory (`NAME.wasm` + optional `NAME.toml`).
    pub plugins: Option<PathBuf>,
    /// Where compiled components are cached.
    pub cache_dir: Option<PathBuf>,
    /// The lease timing.
    #[serde(default)]
    pub timing: TimingFile,
    /// The WebAssembly engine.
    #[serde(default)]
    pub runtime: RuntimeFile,
}

impl ConfigFile {
    /// Reads and parses `path`.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        toml::from_str(&text).map_err(|e| ConfigError::Parse {
            path: path.to_path_buf(),
            message: e.to_string(),
        })
    }
}

/// Values given on the command line or in the environment; they override the file.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    /// `--database-url` / `LEASEHOLD_DATABASE_URL`.
    pub database_url: Option<RawUrl>,
    /// `--replica-id` / `LEASEHOLD_REPLICA_ID`.
    pub replica_id: Option<String>,
    /// `--http` / `LEASEHOLD_HTTP`.
    pub http: Option<SocketAddr>,
    /// `--lease` (repeatable) / `LEASEHOLD_LEASES` (comma-separated).
    pub leases: Vec<String>,
    /// `--ttl` / `LEASEHOLD_TTL`.
    pub ttl: Option<Duration>,
    /// `--plugins` / `LEASEHOLD_PLUGINS`.
    pub plugins: Option<PathBuf>,
    /// `--shutdown-grace` / `LEASEHOLD_SHUTDOWN_GRACE`.
    pub shutdown_grace: Option<Duration>,
    /// `--connect-timeout` / `LEASEHOLD_CONNECT_TIMEOUT`.
    pub connect_timeout: Option<Duration>,
    /// `--cache-dir` / `LEASEHOLD_CACHE_DIR`.
    pub cache_dir: Option<PathBuf>,
}

/// The effective configuration of `leasehold run`.
#[derive(Debug, Clone)]
pub struct Config {
    /// The lease store.
    pub database_url: DatabaseUrl,
    /// The replica id (without the per-process suffix).
    pub replica_id: String,
    /// Where `/healthz` and `/status` listen.
    pub http: SocketAddr,
    /// The leases to campaign for.
    pub leases: Vec<LeaseName>,
    /// The lease timing, validated.
    pub timing: Timing,
    /// How long an ordered shutdown may take.
    pub shutdown_grace: Duration,
    /// How long the first database connection may take.
    pub connect_timeout: Duration,
    /// The plugin directory, if plugins are enabled.
    pub plugins: Option<PathBuf>,
    /// Where compiled components are cached.
    pub cache_dir: PathBuf,
    /// Whether the engine meters fuel.
    pub fuel: bool,
}

/// The effective configuration as a config file would say it, with the database password
/// redacted: what `leasehold config check` prints.
#[derive(Debug, serde::Serialize)]
struct Effective<'a> {
    database_url: String,
    replica_id: &'a str,
    http: String,
    leases: &'a [LeaseName],
    #[serde(with = "humantime_serde")]
    shutdown_grace: Duration,
    #[serde(with = "humantime_serde")]
    connect_timeout: Duration,
    #[serde(skip_serializing_if = "Option::is_none")]
    plugins: Option<&'a Path>,
    cache_dir: &'a Path,
    timing: &'a Timing,
    runtime: EffectiveRuntime,
}

#[derive(Debug, serde::Serialize)]
struct EffectiveRuntime {
    fuel: bool,
}

impl Config {
    /// The effective configuration as TOML, in the shape of the config file, password redacted.
    pub fn to_toml(&self) -> String {
        let effective = Effective {
            database_url: self.database_url.to_string(),
            replica_id: &self.replica_id,
            http: self.http.to_string(),
            leases: &self.leases,
            shutdown_grace: self.shutdown_grace,
            connect_timeout: self.connect_timeout,
            plugins: self.plugins.as_deref(),
            cache_dir: &self.cache_dir,
            timing: &self.timing,
            runtime: EffectiveRuntime { fuel: self.fuel },
        };
        // Every field is a plain value: serialising cannot fail.
        toml::to_string(&effective).unwrap_or_default()
    }
}

/// The default HTTP address: loopback only, so a fresh install exposes nothing; 9464 is free of
/// the common exporters' ports.
pub const DEFAULT_HTTP: &str = "127.0.0.1:9464";
/// Enough for plugins to drain and the release to commit; below Kubernetes' default 30 s grace.
pub const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(20);
/// Long enough for a database across a network, short enough that a wrong URL fails fast.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

impl Config {
    /// Merges defaults, the file and the overrides, and validates the result.
    pub fn resolve(file: ConfigFile, over: Overrides) -> Result<Config, ConfigError> {
        let database_url = match over.database_url.or(file.database_url) {
            Some(raw) => DatabaseUrl::parse(raw.expose())?,
            None => DatabaseUrl::parse(DatabaseUrl::DEFAULT_SQLITE)?,
        };
        let replica_id = over
            .replica_id
            .or(file.replica_id)
            .unwrap_or_else(default_replica_id);
        if replica_id.is_empty()
            || replica_id.len() > 200
            || replica_id.chars().any(char::is_whitespace)
        {
            return Err(ConfigError::ReplicaId(replica_id));
        }
        let leases = if !over.leases.is_empty() {
            over.leases
        } else {
            file.leases
                .unwrap_or_else(|| vec![crate::lease::name::DEFAULT_LEASE.to_string()])
        };
        if leases.is_empty() {
            return Err(ConfigError::NoLeases);
        }
        let mut seen = std::collections::BTreeSet::new();
        let leases = leases
            .into_iter()
            .map(|name| {
                let name = LeaseName::try_from(name)?;
                if !seen.insert(name.clone()) {
                    return Err(ConfigError::DuplicateLease(name.into()));
                }
                Ok(name)
            })
            .collect::<Result<Vec<_>, ConfigError>>()?;
        let t = file.timing;
        let ttl = over.ttl.or(t.ttl).unwrap_or(Timing::DEFAULT_TTL);
        let derived = Timing::from_ttl(ttl);
        let timing = Timing {
            ttl,
            renew_interval: t.renew_interval.unwrap_or(derived.renew_interval),
            retry_interval: t.retry_interval.unwrap_or(derived.retry_interval),
            poll_interval: t.poll_interval.unwrap_or(derived.poll_interval),
            margin: t.margin.unwrap_or(derived.margin),
            store_timeout: t.store_timeout.unwrap_or(derived.store_timeout),
        };
        timing.validate().map_err(|error| {
            let set_in_file = match error.field {
                "ttl" => t.ttl.is_some(),
                "renew_interval" => t.renew_interval.is_some(),
                "retry_interval" => t.retry_interval.is_some(),
                "poll_interval" => t.poll_interval.is_some(),
                "margin" => t.margin.is_some(),
                "store_timeout" => t.store_timeout.is_some(),
                _ => false,
            };
            let origin = match error.field {
                "ttl" if over.ttl.is_some() => "from --ttl or LEASEHOLD_TTL",
                _ if set_in_file => "from the config file",
                "ttl" => "the default",
                _ => "derived from the ttl; set it under [timing] in the config file",
            };
            ConfigError::Timing { error, origin }
        })?;
        let http = match over.http.or(file.http) {
            Some(addr) => addr,
            None => DEFAULT_HTTP
                .parse()
                .unwrap_or_else(|_| SocketAddr::from(([127, 0, 0, 1], 9464))),
        };
        Ok(Config {
            database_url,
            replica_id,
            http,
            leases,
            timing,
            shutdown_grace: over
                .shutdown_grace
                .or(file.shutdown_grace)
                .unwrap_or(DEFAULT_SHUTDOWN_GRACE),
            connect_timeout: over
                .connect_timeout
                .or(file.connect_timeout)
                .unwrap_or(DEFAULT_CONNECT_TIMEOUT),
            plugins: over.plugins.or(file.plugins),
            cache_dir: over
                .cache_dir
                .or(file.cache_dir)
                .unwrap_or_else(crate::runtime::cache::default_dir),
            // On by default: plugins are not trusted to stop by themselves (DESIGN §2.4).
            fuel: file.runtime.fuel.unwrap_or(true),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_config_is_sqlite_and_leader() {
        let c = Config::resolve(ConfigFile::default(), Overrides::default()).unwrap();
        assert_eq!(c.database_url, DatabaseUrl::default_sqlite());
        assert_eq!(c.leases, vec!["leader"]);
        assert_eq!(c.http.to_string(), DEFAULT_HTTP);
        assert_eq!(c.timing, Timing::default());
    }

    #[test]
    fn flags_override_file() {
        let file: ConfigFile = toml::from_str(
            "database_url = 'sqlite:/tmp/x.db'\nleases = ['a', 'b']\n[timing]\nttl = '10s'\nrenew_interval = '2s'\n",
        )
        .unwrap();
        let over = Overrides {
            leases: vec!["c".into()],
            ttl: Some(Duration::from_secs(6)),
            ..Default::default()
        };
        let c = Config::resolve(file, over).unwrap();
        assert_eq!(c.leases, vec!["c"]);
        assert_eq!(c.timing.ttl, Duration::from_secs(6));
        assert_eq!(c.timing.renew_interval, Duration::from_secs(2));
        assert_eq!(c.timing.poll_interval, Duration::from_millis(1200));
    }

    #[test]
    fn rejects_bad_input_by_name() {
        assert!(
            toml::from_str::<ConfigFile>("ttl = '1s'").is_err(),
            "unknown top-level key"
        );
        let file: ConfigFile =
            toml::from_str("[timing]\nttl = '2s'\nrenew_interval = '5s'\n").unwrap();
        let e = Config::resolve(file, Overrides::default())
            .unwrap_err()
            .to_string();
        assert!(e.contains("renew_interval"), "{e}");
        let over = Overrides {
            leases: vec!["a b".into()],
            ..Default::default()
        };
        assert!(
            Config::resolve(ConfigFile::default(), over)
                .unwrap_err()
                .to_string()
                .contains("\"a b\"")
        );
        let over = Overrides {
            leases: vec!["a".into(), "a".into()],
            ..Default::default()
        };
        assert!(Config::resolve(ConfigFile::default(), over).is_err());
    }

    #[test]
    fn timing_errors_name_the_config_key_and_where_the_value_came_from() {
        let file: ConfigFile = toml::from_str("[timing]\nmargin = '1ns'\n").unwrap();
        let e = Config::resolve(file, Overrides::default())
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("timing.margin = 1ns") && e.contains("config file") && e.contains("10ms"),
            "{e}"
        );
        let over = Overrides {
            ttl: Some(Duration::from_millis(50)),
            ..Default::default()
        };
        let e = Config::resolve(ConfigFile::default(), over)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("timing.ttl = 50ms") && e.contains("--ttl") && e.contains("LEASEHOLD_TTL"),
            "{e}"
        );
        // A value nobody set is named as derived from the ttl, with the key that overrides it.
        let file: ConfigFile =
            toml::from_str("[timing]\nttl = '3s'\nrenew_interval = '100ms'\n").unwrap();
        let e = Config::resolve(file, Overrides::default())
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("timing.retry_interval = 200ms") && e.contains("derived from the ttl"),
            "{e}"
        );
    }

    #[test]
    fn an_empty_lease_list_is_refused() {
        let file: ConfigFile = toml::from_str("leases = []").unwrap();
        let e = Config::resolve(file, Overrides::default()).unwrap_err();
        assert!(matches!(e, ConfigError::NoLeases), "{e}");
    }
}
