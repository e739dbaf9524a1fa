//! One layer of the settings, as the file or the flags give it: every key optional, unknown keys
//! refused. The file and the flags are the same type, [`Layer`], so a setting is declared once for
//! both.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Args;
use serde::{Deserialize, Serialize};

use super::error::ConfigError;
use super::{process, service};
use crate::lease::groups::{GroupSpec, MAX_SHARDS};
use crate::lease::{LeaseName, RawUrl};

/// The `[timing]` table of a [`Layer`]; every key optional, missing ones derived from the ttl.
/// Only the ttl is also a flag (`--ttl`); the other keys are set in the file alone.
#[derive(Debug, Clone, Copy, Default, Deserialize, Args)]
#[serde(deny_unknown_fields)]
pub struct TimingLayer {
    /// Lease ttl, e.g. 15s or 500ms [default: 15s]; the other intervals derive from it.
    // Whole milliseconds only (`Timing::validate`). After `--lease` in `--help`: see `Layer`.
    #[serde(default, with = "humantime_serde")]
    #[arg(
        long,
        env = "LEASEHOLD_TTL",
        value_parser = humantime::parse_duration,
        display_order = 5
    )]
    pub ttl: Option<Duration>,
    /// Renewal interval (default ttl/3).
    #[serde(default, with = "humantime_serde")]
    #[arg(skip)]
    pub renew_interval: Option<Duration>,
    /// Retry interval after a failed renewal (default ttl/15).
    #[serde(default, with = "humantime_serde")]
    #[arg(skip)]
    pub retry_interval: Option<Duration>,
    /// The longest a standby waits between campaigns (default ttl, plus up to 20% jitter); it
    /// campaigns at the holder's expiry anyway, and at once on a release notification.
    #[serde(default, with = "humantime_serde")]
    #[arg(skip)]
    pub poll_interval: Option<Duration>,
    /// Safety margin subtracted from the ttl (default max(2% of ttl, 250ms), at most ttl/4); at
    /// least max(10ms, 1% of ttl) and at most ttl/2 when set.
    #[serde(default, with = "humantime_serde")]
    #[arg(skip)]
    pub margin: Option<Duration>,
    /// Timeout of each store call (default ttl/5).
    #[serde(default, with = "humantime_serde")]
    #[arg(skip)]
    pub store_timeout: Option<Duration>,
}

impl TimingLayer {
    /// Whether this layer sets `field`, spelled as in [`crate::lease::TimingError::field`].
    pub(super) fn sets(&self, field: &str) -> bool {
        match field {
            "ttl" => self.ttl.is_some(),
            "renew_interval" => self.renew_interval.is_some(),
            "retry_interval" => self.retry_interval.is_some(),
            "poll_interval" => self.poll_interval.is_some(),
            "margin" => self.margin.is_some(),
            "store_timeout" => self.store_timeout.is_some(),
            _ => false,
        }
    }
}

/// A `[lease.NAME]` table of a [`Layer`]: this replica's place in the line of lease NAME, over
/// the layer's `priority` and `preempt_after`. File only.
#[derive(Debug, Clone, Copy, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LineLayer {
    /// Its priority in the lease's line.
    pub priority: Option<i64>,
    /// After how long in line it takes the lease over from a holder of lower priority.
    #[serde(default, with = "humantime_serde")]
    pub preempt_after: Option<Duration>,
}

/// The `[runtime]` table of a [`Layer`]: the WebAssembly engine. File only.
#[derive(Debug, Clone, Copy, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuntimeLayer {
    /// Meter fuel: every call gets a budget (`limits.fuel`, else the runtime's default). On by
    /// default so a runaway guest ends on fuel as well as on its deadline; `false` saves the
    /// ~18% it costs in tight loops.
    pub fuel: Option<bool>,
}

/// The `[telemetry]` table of a [`Layer`]: OpenTelemetry trace export. File only; each key has
/// its standard variable, which wins over it. Export is off unless an endpoint is set, here or
/// in `OTEL_EXPORTER_OTLP_ENDPOINT`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TelemetryLayer {
    /// The OTLP/HTTP collector's base URL, e.g. `http://127.0.0.1:4318` (`/v1/traces` is added),
    /// as `OTEL_EXPORTER_OTLP_ENDPOINT`.
    pub endpoint: Option<String>,
    /// The service name, as `OTEL_SERVICE_NAME` [default: leasehold]. Replicas that hand leases
    /// to each other must share it: their terms' trace ids derive from it.
    pub service_name: Option<String>,
    /// Resource attributes, as `OTEL_RESOURCE_ATTRIBUTES` (which wins key by key).
    #[serde(default)]
    pub resource_attributes: std::collections::BTreeMap<String, String>,
}

impl TelemetryLayer {
    /// The settings trace export starts from.
    pub fn settings(&self) -> crate::telemetry::Settings {
        crate::telemetry::Settings {
            endpoint: self.endpoint.clone(),
            service_name: self.service_name.clone(),
            resource_attributes: self.resource_attributes.clone(),
        }
    }
}

/// One layer of settings, every key optional: the config file as an operator writes it, or the
/// flags and `LEASEHOLD_*` variables of `leasehold run` (clap reads both). The doc line of each
/// flag is its `--help` text; keys without a flag are `#[arg(skip)]`.
// The field order is the file's: serde lists it when it refuses an unknown key. `--help` keeps
// its own order through `display_order`; a new flag needs one too, or it collides with these.
#[derive(Debug, Clone, Default, Deserialize, Args)]
#[serde(deny_unknown_fields)]
pub struct Layer {
    /// postgres://USER@HOST/DB or sqlite:PATH [default: sqlite:./leasehold.db].
    // Usually carries a password: `--help` must not echo the variable.
    #[arg(
        long,
        env = "LEASEHOLD_DATABASE_URL",
        hide_env_values = true,
        display_order = 1
    )]
    pub database_url: Option<RawUrl>,
    /// Replica id [default: $HOSTNAME]; a random suffix is added per process start.
    #[arg(long, env = "LEASEHOLD_REPLICA_ID", display_order = 2)]
    pub replica_id: Option<String>,
    /// Address for /healthz and /status, IP:PORT or localhost:PORT [default: 127.0.0.1:9464, or
    /// a free port of 127.0.0.1 when another process has it]; port 0 picks a free port.
    #[serde(default, deserialize_with = "http_address")]
    #[arg(long, env = "LEASEHOLD_HTTP", value_parser = parse_http, display_order = 3)]
    pub http: Option<SocketAddr>,
    /// A name the HTTP port answers to besides localhost and IP addresses (the Host header a
    /// browser sends); repeat for several. Other names are refused, against DNS rebinding.
    #[arg(
        long = "http-allowed-host",
        env = "LEASEHOLD_HTTP_ALLOWED_HOSTS",
        value_delimiter = ',',
        display_order = 3
    )]
    pub http_allowed_hosts: Option<Vec<String>>,
    /// A file holding the admin API's bearer token (at least 32 characters; the file readable by
    /// its owner alone): turns on POST /v1/admin/leases/NAME/handoff [default: none, the admin
    /// API is off].
    // A file, not the token: a flag or variable shows in `ps` and environment dumps.
    #[arg(long, env = "LEASEHOLD_ADMIN_TOKEN_FILE", display_order = 4)]
    pub admin_token_file: Option<PathBuf>,
    /// A lease to campaign for; repeat for several [default: leader].
    #[arg(
        long = "lease",
        env = "LEASEHOLD_LEASES",
        value_delimiter = ',',
        display_order = 4
    )]
    pub leases: Option<Vec<String>>,
    /// A lease group NAME=SHARDS, spread over the replicas that take part in it (the leases
    /// NAME/0 … NAME/SHARDS-1); repeat for several. In the file, a [groups] table: orders = 12.
    // The line above is `--help` text, where `[groups]` is the file's table, not a doc link.
    #[allow(rustdoc::broken_intra_doc_links)]
    #[serde(default, deserialize_with = "groups_table")]
    #[arg(
        long = "group",
        env = "LEASEHOLD_GROUPS",
        value_delimiter = ',',
        value_parser = parse_group,
        display_order = 4
    )]
    pub groups: Option<Vec<GroupArg>>,
    /// This replica's priority in the line of each of its leases: when a lease changes hands,
    /// the live standby of highest priority gets it, then the one that waited longest
    /// [default: 0]. Per lease in the file: [lease.NAME] priority = N.
    #[allow(rustdoc::broken_intra_doc_links)]
    #[arg(
        long,
        env = "LEASEHOLD_PRIORITY",
        allow_negative_numbers = true,
        display_order = 4
    )]
    pub priority: Option<i64>,
    /// Take a lease over from a holder of lower priority once this replica has waited this long
    /// in its line, by a graceful handoff, at most once per this long; at least the ttl
    /// [default: off]. Per lease in the file: [lease.NAME] preempt_after = "30s".
    #[allow(rustdoc::broken_intra_doc_links)]
    #[serde(default, with = "humantime_serde")]
    #[arg(
        long,
        env = "LEASEHOLD_PREEMPT_AFTER",
        value_parser = humantime::parse_duration,
        display_order = 4
    )]
    pub preempt_after: Option<Duration>,
    /// `[lease.NAME]` tables: this replica's place in one lease's line. File only.
    #[serde(default)]
    #[arg(skip)]
    pub lease: std::collections::BTreeMap<String, LineLayer>,
    /// How long the ordered release on SIGTERM may take [default: 20s].
    #[serde(default, with = "humantime_serde")]
    #[arg(
        long,
        env = "LEASEHOLD_SHUTDOWN_GRACE",
        value_parser = humantime::parse_duration,
        display_order = 7
    )]
    pub shutdown_grace: Option<Duration>,
    /// How long start-up waits for the database: the first connection, and a lock another
    /// session holds (the migrators') [default: 5s].
    #[serde(default, with = "humantime_serde")]
    #[arg(
        long,
        env = "LEASEHOLD_CONNECT_TIMEOUT",
        value_parser = humantime::parse_duration,
        display_order = 8
    )]
    pub connect_timeout: Option<Duration>,
    /// Plugin directory: NAME.wasm components with optional NAME.toml manifests.
    #[arg(long, env = "LEASEHOLD_PLUGINS", display_order = 6)]
    pub plugins: Option<PathBuf>,
    /// Where compiled components are cached [default: $XDG_CACHE_HOME/leasehold/components,
    /// else $HOME/.cache/leasehold/components, else no cache].
    #[arg(long, env = "LEASEHOLD_CACHE_DIR", display_order = 9)]
    pub cache_dir: Option<PathBuf>,
    /// Variables a plugin's [grants.sql] database_url_env may name: NAME, PREFIX* or *SUFFIX;
    /// repeat for several [default: *_DATABASE_URL]. LEASEHOLD_* is never allowed.
    #[arg(
        long = "grant-url-variable",
        env = "LEASEHOLD_GRANT_URL_VARIABLES",
        value_delimiter = ',',
        display_order = 10
    )]
    pub grant_url_variables: Option<Vec<String>>,
    /// The lease timing; its `ttl` is also `--ttl`.
    #[serde(default)]
    #[command(flatten)]
    pub timing: TimingLayer,
    /// The WebAssembly engine.
    #[serde(default)]
    #[arg(skip)]
    pub runtime: RuntimeLayer,
    /// The log format on stderr, `text` or `json` (the file's key; `--log-format` and
    /// `LEASEHOLD_LOG_FORMAT` are global flags of every command, and win over it).
    #[arg(skip)]
    pub log_format: Option<LogFormat>,
    /// OpenTelemetry trace export: the `[telemetry]` table (read before the log starts, as
    /// `log_format` is).
    #[serde(default)]
    #[arg(skip)]
    pub telemetry: TelemetryLayer,
    /// OS processes bound to leases: `[[process]]` tables (`leasehold exec` adds one).
    #[serde(default)]
    #[arg(skip)]
    pub process: Vec<process::ProcessLayer>,
    /// Services leasehold does not own, bound to leases: `[[service]]` tables.
    #[serde(default)]
    #[arg(skip)]
    pub service: Vec<service::ServiceLayer>,
}

/// Log output formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// An HTTP address as `--http` and `http` take it: `IP:PORT`, or `localhost:PORT` for
/// 127.0.0.1 (the listener binds one address; `localhost` is the loopback one). Any other name
/// is refused with what to write instead: the port is bound before any name could be resolved.
pub(crate) fn parse_http(text: &str) -> Result<SocketAddr, String> {
    if let Ok(addr) = text.parse() {
        return Ok(addr);
    }
    if let Some((host, port)) = text.rsplit_once(':')
        && let Ok(port) = port.parse::<u16>()
    {
        if host.eq_ignore_ascii_case("localhost") {
            return Ok(SocketAddr::from(([127, 0, 0, 1], port)));
        }
        return Err(format!(
            "{text:?} is not an IP address and port: write an IP, e.g. 127.0.0.1:{port} (this machine only) or 0.0.0.0:{port} (every interface)"
        ));
    }
    Err(format!(
        "{text:?} is not an address and port: write IP:PORT, e.g. 127.0.0.1:9464"
    ))
}

/// The file's `http`, read as [`parse_http`] reads the flag.
fn http_address<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<SocketAddr>, D::Error> {
    let text = String::deserialize(deserializer)?;
    parse_http(&text)
        .map(Some)
        .map_err(serde::de::Error::custom)
}

/// The keys of the `[timing]` table, for the hint on one written at the top level.
const TIMING_KEYS: &[&str] = &[
    "ttl",
    "renew_interval",
    "retry_interval",
    "poll_interval",
    "margin",
    "store_timeout",
];

/// One group as given, before it is checked: `NAME=SHARDS`, or `NAME = SHARDS` in `[groups]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupArg {
    /// The group's name.
    pub name: String,
    /// Its shard count as written.
    pub shards: i64,
}

/// `--group NAME=SHARDS`.
pub(super) fn parse_group(arg: &str) -> Result<GroupArg, String> {
    let (name, shards) = arg
        .split_once('=')
        .ok_or_else(|| format!("{arg:?}: expected NAME=SHARDS, e.g. orders=12"))?;
    let shards = shards
        .trim()
        .parse()
        .map_err(|_| format!("{arg:?}: the shard count must be a whole number"))?;
    Ok(GroupArg {
        name: name.trim().to_string(),
        shards,
    })
}

/// The `[groups]` table: group name = shard count, in name order.
fn groups_table<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<Vec<GroupArg>>, D::Error> {
    let table = toml::Table::deserialize(deserializer)?;
    table
        .into_iter()
        .map(|(name, shards)| match shards.as_integer() {
            Some(shards) => Ok(GroupArg { name, shards }),
            None => Err(serde::de::Error::custom(format!(
                "groups.{name} = {shards}: the shard count must be a whole number"
            ))),
        })
        .collect::<Result<Vec<_>, _>>()
        .map(Some)
}

/// Checks the groups: names as lease names without `/`, 1 to [`MAX_SHARDS`] shards, no group
/// twice, and no shard that is also a plain lease of `leases`.
pub(super) fn check_groups(
    groups: Vec<GroupArg>,
    leases: &[LeaseName],
) -> Result<Vec<GroupSpec>, ConfigError> {
    let mut seen = std::collections::BTreeSet::new();
    groups
        .into_iter()
        .map(|GroupArg { name, shards }| {
            let refuse = |reason: String| ConfigError::Group {
                name: name.clone(),
                reason,
            };
            if let Err(e) = LeaseName::parse(&name) {
                return Err(refuse(e.reason.to_string()));
            }
            if name.contains('/') {
                return Err(refuse(
                    "a group name cannot contain / (its shards are NAME/0, NAME/1, …)".into(),
                ));
            }
            let shards = u32::try_from(shards)
                .ok()
                .filter(|s| (1..=MAX_SHARDS).contains(s))
                .ok_or_else(|| refuse(format!("{shards} shards: a group has 1 to {MAX_SHARDS}")))?;
            if !seen.insert(name.clone()) {
                return Err(refuse("listed twice".into()));
            }
            let spec = GroupSpec {
                name: name.clone(),
                shards,
            };
            if let Some(lease) = leases.iter().find(|l| {
                l.as_str()
                    .strip_prefix(&format!("{name}/"))
                    .is_some_and(|i| i.parse::<u32>().is_ok_and(|i| i < shards))
            }) {
                return Err(refuse(format!(
                    "its shard {lease} is also listed under leases"
                )));
            }
            Ok(spec)
        })
        .collect()
}

impl Layer {
    /// Reads and parses the config file at `path`.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        toml::from_str(&text).map_err(|e| {
            let mut message = crate::report::toml_error(&text, &e);
            // A timing key at the top level: the table it belongs in, not the whole key list.
            if let Some(key) = TIMING_KEYS
                .iter()
                .find(|k| e.message().starts_with(&format!("unknown field `{k}`")))
            {
                message.push_str(&format!(" (did you mean `[timing] {key}`?)"));
            }
            ConfigError::Parse {
                path: path.to_path_buf(),
                message,
            }
        })
    }
}
