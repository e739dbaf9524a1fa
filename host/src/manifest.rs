//! `NAME.toml` beside `NAME.wasm`: which lease (or lease group) the plugin is bound to, its schedule, its limits
//! and its config values. Every key is optional; unknown keys are rejected so a typo is an error,
//! not a silently ignored setting.
//!
//! A leaf of the crate: it imports only [`crate::lease::name`] and the prefix of the host's own
//! channels ([`crate::lease::postgres::OWN_CHANNEL_PREFIX`]), so the layers that act on a
//! manifest (capabilities, the runtime, plugin loading) can all read it.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;

use crate::lease::name::LeaseName;
use crate::lease::postgres::OWN_CHANNEL_PREFIX;

/// Why a manifest was refused.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
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

/// Per-call limits of one plugin, as its store enforces them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallLimits {
    /// Wall-clock deadline of one call.
    pub call_timeout: Duration,
    /// Linear-memory cap in bytes: all of the store's memories together.
    pub memory_bytes: usize,
    /// Fuel per call, when the engine meters fuel.
    pub fuel: Option<u64>,
}

/// `[schedule]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Schedule {
    /// Time between calls.
    #[serde(default, with = "humantime_serde")]
    pub interval: Option<Duration>,
}

/// `[limits]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Limits {
    /// Wall-clock deadline per call.
    #[serde(default, with = "humantime_serde")]
    pub call_timeout: Option<Duration>,
    /// Linear memory cap, e.g. `"64MiB"`: all of the plugin's memories together.
    pub memory: Option<String>,
    /// Fuel per call (needs an engine that meters fuel); the runtime's default when absent.
    pub fuel: Option<u64>,
}

/// `[health]`, for health-check plugins.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Health {
    /// Consecutive failures before the holder steps down.
    pub failure_threshold: Option<u32>,
}

/// `[grants.sql]` as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SqlGrantFile {
    /// The host environment variable holding the database URL.
    pub database_url_env: String,
    /// Server-side bound on each statement.
    #[serde(default, with = "humantime_serde")]
    pub statement_timeout: Option<Duration>,
    /// Rows per result.
    pub max_rows: Option<u32>,
    /// Bytes per result as the host holds it, e.g. `"16MiB"`.
    pub max_bytes: Option<String>,
    /// Connections of the grant's pool.
    pub max_connections: Option<u32>,
}

/// `[grants]`: the capabilities the plugin may use.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct GrantsFile {
    /// The fenced key-value store.
    #[serde(default)]
    pub kv: bool,
    /// Most kv keys the plugin may keep (needs `kv = true`).
    pub kv_max_keys: Option<u64>,
    /// Most kv bytes (keys plus values) the plugin may keep, e.g. `"64MiB"` (needs `kv = true`).
    pub kv_max_bytes: Option<String>,
    /// Statements on a database.
    pub sql: Option<SqlGrantFile>,
}

/// `[events]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct EventsFile {
    /// PostgreSQL LISTEN channels.
    #[serde(default)]
    pub channels: Vec<String>,
}

/// The manifest as written.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ManifestFile {
    /// The lease the plugin is bound to.
    pub lease: Option<String>,
    /// The lease group the plugin is bound to instead: one instance per shard held.
    pub group: Option<String>,
    /// When it runs.
    #[serde(default)]
    pub schedule: Schedule,
    /// What it may use.
    #[serde(default)]
    pub limits: Limits,
    /// Health-check settings.
    #[serde(default)]
    pub health: Health,
    /// Capabilities granted.
    #[serde(default)]
    pub grants: GrantsFile,
    /// Notifications delivered.
    #[serde(default)]
    pub events: EventsFile,
    /// Free-form values handed to the plugin.
    #[serde(default)]
    pub config: BTreeMap<String, String>,
}

/// A validated `[grants.sql]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SqlGrantSpec {
    /// The host environment variable holding the database URL.
    pub database_url_env: String,
    /// Server-side bound on each statement.
    pub statement_timeout: Duration,
    /// Rows per result.
    pub max_rows: u32,
    /// Bytes per result as the host holds it: each value counts what it takes in host memory
    /// ([`crate::capability::sql::SqlValue::size`]), a NULL as much as an integer.
    pub max_bytes: usize,
    /// Connections of the grant's pool.
    pub max_connections: u32,
}

/// 2 s per statement: a reconcile's statements are short, and one that is not fails and says so
/// rather than keeping its own locks on the application's rows. (The fence locks the lease row
/// only around a commit, so a slow statement does not hold up the holder's renewals.)
pub const DEFAULT_STATEMENT_TIMEOUT: Duration = Duration::from_secs(2);
/// 10,000 rows per result: plenty for a reconcile batch; larger reads should page.
pub(crate) const DEFAULT_MAX_ROWS: u32 = 10_000;
/// 16 MiB per result as the host holds it: a quarter of the default guest memory, so a capped
/// result still fits (the guest's copy takes no more than the host's).
pub(crate) const DEFAULT_MAX_BYTES: usize = 16 << 20;
/// 4 connections per grant: one call at a time per plugin needs one; the rest absorb reconnects.
pub(crate) const DEFAULT_MAX_CONNECTIONS: u32 = 4;

/// 100,000 keys per plugin: one key per object a reconciler manages is plenty, and a put loop
/// stops long before its entries crowd the lease database's index.
pub(crate) const DEFAULT_KV_MAX_KEYS: u64 = 100_000;
/// 64 MiB per plugin (keys plus values): kv holds state and checkpoints, not blobs (64 values at
/// the 1 MiB value limit); a put loop stops long before it fills the disk every lease lives on.
pub(crate) const DEFAULT_KV_MAX_BYTES: u64 = 64 << 20;

/// What one plugin may keep in kv: `[grants] kv_max_keys` and `kv_max_bytes`, validated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KvQuota {
    /// Most keys.
    pub max_keys: u64,
    /// Most bytes, keys plus values.
    pub max_bytes: u64,
}

impl Default for KvQuota {
    fn default() -> Self {
        KvQuota {
            max_keys: DEFAULT_KV_MAX_KEYS,
            max_bytes: DEFAULT_KV_MAX_BYTES,
        }
    }
}

/// What the manifest grants.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GrantSpec {
    /// `[grants] kv`.
    pub kv: bool,
    /// `[grants] kv_max_keys`, `kv_max_bytes`, or their defaults.
    pub kv_quota: KvQuota,
    /// `[grants.sql]`.
    pub sql: Option<SqlGrantSpec>,
}

/// What a plugin is bound to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Binding {
    /// One lease (`lease = "jobs"`): the plugin runs on the replica that holds it.
    Lease(LeaseName),
    /// Every shard of a lease group (`group = "orders"`): one instance per shard this replica
    /// holds, each under that shard's term.
    Group(String),
}

impl Binding {
    /// Whether the plugin runs for `lease`.
    pub fn covers(&self, lease: &str) -> bool {
        match self {
            Binding::Lease(name) => name.as_str() == lease,
            Binding::Group(_) => self.shard_of(lease).is_some(),
        }
    }

    /// The shard `lease` is of the group this binds to (`orders/7` → 7); `None` for a lease
    /// binding or another lease.
    pub fn shard_of(&self, lease: &str) -> Option<u32> {
        let Binding::Group(group) = self else {
            return None;
        };
        let index = lease.strip_prefix(group.as_str())?.strip_prefix('/')?;
        // As the host names shards: no sign, no leading zero.
        if index.starts_with('+') || (index.len() > 1 && index.starts_with('0')) {
            return None;
        }
        index.parse().ok()
    }
}

impl std::fmt::Display for Binding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Binding::Lease(name) => f.write_str(name.as_str()),
            Binding::Group(group) => write!(f, "{group}/*"),
        }
    }
}

/// A validated manifest with defaults applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Manifest {
    /// The lease, or the lease group, the plugin is bound to.
    pub binding: Binding,
    /// Time between calls.
    pub interval: Duration,
    /// Per-call limits.
    pub limits: CallLimits,
    /// Consecutive failures before a holder's health check makes it step down.
    pub failure_threshold: u32,
    /// Capabilities granted.
    pub grants: GrantSpec,
    /// PostgreSQL LISTEN channels whose notifications reach `handle-event`.
    pub events: Vec<String>,
    /// Values handed to `init`.
    pub config: BTreeMap<String, String>,
}

/// A reconcile every 10 s: frequent enough to notice drift quickly, rare enough to cost nothing.
pub(crate) const DEFAULT_INTERVAL: Duration = Duration::from_secs(10);
/// 5 s per call: a reconcile is meant to be short; a longer one should requeue itself.
pub(crate) const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(5);
/// 64 MiB of linear memory: ample for a reconciler, small enough to run hundreds per host.
pub(crate) const DEFAULT_MEMORY: usize = 64 << 20;
/// Three consecutive failed checks: one failure may be a blip, three are a pattern.
pub const DEFAULT_FAILURE_THRESHOLD: u32 = 3;

impl Manifest {
    /// The manifest of a plugin without a `.toml`.
    pub fn defaults() -> Self {
        Manifest {
            binding: Binding::Lease(LeaseName::default_lease()),
            interval: DEFAULT_INTERVAL,
            limits: CallLimits {
                call_timeout: DEFAULT_CALL_TIMEOUT,
                memory_bytes: DEFAULT_MEMORY,
                fuel: None,
            },
            failure_threshold: DEFAULT_FAILURE_THRESHOLD,
            grants: GrantSpec::default(),
            events: Vec::new(),
            config: BTreeMap::new(),
        }
    }

    /// Parses and validates manifest text; `path` only names it in errors.
    pub fn parse(path: &str, text: &str) -> Result<Self, ManifestError> {
        let file: ManifestFile = toml::from_str(text).map_err(|e| ManifestError::Parse {
            path: path.to_string(),
            message: crate::report::toml_error(text, &e),
        })?;
        let invalid = |key, value: String, reason| ManifestError::Invalid {
            path: path.to_string(),
            key,
            value,
            reason,
        };
        let d = Self::defaults();
        // Section by section, in this order: the first refusal is the one reported.
        let binding = binding(file.lease, file.group, d.binding, &invalid)?;
        let interval = at_least(
            file.schedule.interval.unwrap_or(d.interval),
            Duration::from_millis(10),
            ("schedule.interval", "must be at least 10ms"),
            &invalid,
        )?;
        let limits = call_limits(file.limits, d.limits, &invalid)?;
        let failure_threshold = at_least(
            file.health.failure_threshold.unwrap_or(d.failure_threshold),
            1,
            ("health.failure_threshold", "must be at least 1"),
            &invalid,
        )?;
        let grants = grants(file.grants, &invalid)?;
        let events = channels(file.events, &invalid)?;
        Ok(Manifest {
            binding,
            interval,
            limits,
            failure_threshold,
            grants,
            events,
            config: file.config,
        })
    }
}

/// `lease` or `group`, validated: one of them, or `default` when neither is set.
fn binding(
    lease: Option<String>,
    group: Option<String>,
    default: Binding,
    invalid: &impl Fn(&'static str, String, &'static str) -> ManifestError,
) -> Result<Binding, ManifestError> {
    match (lease, group) {
        (Some(_), Some(group)) => Err(invalid(
            "group",
            format!("{group:?}"),
            "set lease or group, not both",
        )),
        (None, None) => Ok(default),
        (Some(name), None) => Ok(Binding::Lease(LeaseName::try_from(name).map_err(|e| {
            invalid(
                "lease",
                format!("{:?}", e.name),
                "use 1-200 ASCII letters, digits and - _ . : /",
            )
        })?)),
        (None, Some(group)) => {
            if LeaseName::parse(&group).is_err() || group.contains('/') {
                return Err(invalid(
                    "group",
                    format!("{group:?}"),
                    "use 1-200 ASCII letters, digits and - _ . : (no /)",
                ));
            }
            Ok(Binding::Group(group))
        }
    }
}

/// `value`, unless it is below `min`: then the refusal of `key` (shown as `value` is), for
/// `reason`.
fn at_least<T: PartialOrd + std::fmt::Debug>(
    value: T,
    min: T,
    (key, reason): (&'static str, &'static str),
    invalid: &impl Fn(&'static str, String, &'static str) -> ManifestError,
) -> Result<T, ManifestError> {
    if value < min {
        return Err(invalid(key, format!("{value:?}"), reason));
    }
    Ok(value)
}

/// `[limits]`, validated, with `default`'s values where a key is absent (fuel has none: the
/// runtime's own default applies).
fn call_limits(
    limits: Limits,
    default: CallLimits,
    invalid: &impl Fn(&'static str, String, &'static str) -> ManifestError,
) -> Result<CallLimits, ManifestError> {
    let call_timeout = at_least(
        limits.call_timeout.unwrap_or(default.call_timeout),
        Duration::from_millis(1),
        ("limits.call_timeout", "must be at least 1ms"),
        invalid,
    )?;
    let memory_bytes = match limits.memory {
        Some(text) => parse_size(&text).ok_or_else(|| {
            invalid(
                "limits.memory",
                format!("{text:?}"),
                "expected a size such as 64MiB, 512KiB or 1GiB (at least 64KiB)",
            )
        })?,
        None => default.memory_bytes,
    };
    if limits.fuel == Some(0) {
        return Err(invalid("limits.fuel", "0".into(), "must be above zero"));
    }
    Ok(CallLimits {
        call_timeout,
        memory_bytes,
        fuel: limits.fuel,
    })
}

/// `[grants]`, validated: kv with its quota, then `[grants.sql]`.
fn grants(
    grants: GrantsFile,
    invalid: &impl Fn(&'static str, String, &'static str) -> ManifestError,
) -> Result<GrantSpec, ManifestError> {
    let kv_quota = kv_quota(&grants, invalid)?;
    let sql = match grants.sql {
        None => None,
        Some(sql) => Some(sql_grant(sql, invalid)?),
    };
    Ok(GrantSpec {
        kv: grants.kv,
        kv_quota,
        sql,
    })
}

/// `[events] channels`, validated: few enough, each a PostgreSQL name that is not one of the
/// host's own channels.
fn channels(
    events: EventsFile,
    invalid: &impl Fn(&'static str, String, &'static str) -> ManifestError,
) -> Result<Vec<String>, ManifestError> {
    let channels = events.channels;
    if channels.len() > MAX_CHANNELS {
        return Err(invalid(
            "events.channels",
            format!("{} channels", channels.len()),
            "at most 32 channels",
        ));
    }
    for channel in &channels {
        if !is_channel_name(channel) {
            return Err(invalid(
                "events.channels",
                format!("{channel:?}"),
                "use 1-63 lowercase letters, digits and _, starting with a letter or _",
            ));
        }
        if channel.starts_with(OWN_CHANNEL_PREFIX) {
            return Err(invalid(
                "events.channels",
                format!("{channel:?}"),
                "channels starting with leasehold_ are the host's own (lease releases); pick another name",
            ));
        }
    }
    Ok(channels)
}

/// Channels one plugin may listen on: each costs the server a little per notification.
const MAX_CHANNELS: usize = 32;

/// A PostgreSQL identifier as an unquoted name would be folded: lowercase, at most 63 bytes.
fn is_channel_name(name: &str) -> bool {
    let mut chars = name.chars();
    name.len() <= 63
        && chars
            .next()
            .is_some_and(|c| c.is_ascii_lowercase() || c == '_')
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

/// Validates `[grants.sql]`, filling defaults.
fn sql_grant(
    sql: SqlGrantFile,
    invalid: &impl Fn(&'static str, String, &'static str) -> ManifestError,
) -> Result<SqlGrantSpec, ManifestError> {
    let env = sql.database_url_env;
    let env_ok = env
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && env.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !env_ok {
        return Err(invalid(
            "grants.sql.database_url_env",
            format!("{env:?}"),
            "must name an environment variable (letters, digits and _)",
        ));
    }
    let statement_timeout = sql.statement_timeout.unwrap_or(DEFAULT_STATEMENT_TIMEOUT);
    if statement_timeout < Duration::from_millis(1) {
        return Err(invalid(
            "grants.sql.statement_timeout",
            format!("{statement_timeout:?}"),
            "must be at least 1ms",
        ));
    }
    let max_rows = sql.max_rows.unwrap_or(DEFAULT_MAX_ROWS);
    if max_rows == 0 {
        return Err(invalid(
            "grants.sql.max_rows",
            "0".into(),
            "must be at least 1",
        ));
    }
    let max_bytes = match sql.max_bytes {
        None => DEFAULT_MAX_BYTES,
        Some(text) => parse_size(&text).ok_or_else(|| {
            invalid(
                "grants.sql.max_bytes",
                format!("{text:?}"),
                "expected a size such as 16MiB or 512KiB (at least 64KiB)",
            )
        })?,
    };
    let max_connections = sql.max_connections.unwrap_or(DEFAULT_MAX_CONNECTIONS);
    if !(1..=64).contains(&max_connections) {
        return Err(invalid(
            "grants.sql.max_connections",
            max_connections.to_string(),
            "must be between 1 and 64",
        ));
    }
    Ok(SqlGrantSpec {
        database_url_env: env,
        statement_timeout,
        max_rows,
        max_bytes,
        max_connections,
    })
}

/// `[grants] kv_max_keys` and `kv_max_bytes`, or their defaults.
fn kv_quota(
    grants: &GrantsFile,
    invalid: &impl Fn(&'static str, String, &'static str) -> ManifestError,
) -> Result<KvQuota, ManifestError> {
    let d = KvQuota::default();
    if !grants.kv {
        if let Some(keys) = grants.kv_max_keys {
            return Err(invalid(
                "grants.kv_max_keys",
                keys.to_string(),
                "needs kv = true",
            ));
        }
        if let Some(bytes) = &grants.kv_max_bytes {
            return Err(invalid(
                "grants.kv_max_bytes",
                format!("{bytes:?}"),
                "needs kv = true",
            ));
        }
    }
    let max_keys = grants.kv_max_keys.unwrap_or(d.max_keys);
    if max_keys == 0 {
        return Err(invalid(
            "grants.kv_max_keys",
            "0".into(),
            "must be at least 1",
        ));
    }
    let max_bytes = match &grants.kv_max_bytes {
        None => d.max_bytes,
        Some(text) => parse_size(text).map(|b| b as u64).ok_or_else(|| {
            invalid(
                "grants.kv_max_bytes",
                text.clone(),
                "expected a size such as 64MiB or 512KiB (at least 64KiB)",
            )
        })?,
    };
    Ok(KvQuota {
        max_keys,
        max_bytes,
    })
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
        assert_eq!(m.binding, Binding::Lease(LeaseName::parse("jobs").unwrap()));
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
    fn a_plugin_bound_to_a_group_covers_each_of_its_shards_and_nothing_else() {
        let m = Manifest::parse("x.toml", "group = 'orders'\n").unwrap();
        assert_eq!(m.binding, Binding::Group("orders".into()));
        assert_eq!(m.binding.to_string(), "orders/*");
        for (lease, shard) in [
            ("orders/0", Some(0)),
            ("orders/11", Some(11)),
            ("orders/01", None),
            ("orders/+1", None),
            ("orders/x", None),
            ("orders", None),
            ("ordersx/1", None),
            ("billing/1", None),
        ] {
            assert_eq!(m.binding.shard_of(lease), shard, "{lease}");
            assert_eq!(m.binding.covers(lease), shard.is_some(), "{lease}");
        }
        let lease = Manifest::parse("x.toml", "lease = 'orders/1'\n").unwrap();
        assert!(lease.binding.covers("orders/1") && lease.binding.shard_of("orders/1").is_none());
        let both = Manifest::parse("x.toml", "lease = 'a'\ngroup = 'b'\n").unwrap_err();
        assert!(both.to_string().contains("not both"), "{both}");
        let slash = Manifest::parse("x.toml", "group = 'a/b'\n").unwrap_err();
        assert!(slash.to_string().contains("group = \"a/b\""), "{slash}");
    }

    #[test]
    fn the_hosts_own_channels_are_ones_a_plugin_may_not_name() {
        assert!(crate::lease::postgres::RELEASE_CHANNEL.starts_with(OWN_CHANNEL_PREFIX));
    }

    #[test]
    fn grants_and_events() {
        let m = Manifest::parse(
            "x.toml",
            "[grants]\nkv = true\n[grants.sql]\ndatabase_url_env = 'APP_DB'\nmax_rows = 5\n[events]\nchannels = ['jobs', 'sandbox_events']\n",
        )
        .unwrap();
        assert!(m.grants.kv);
        let sql = m.grants.sql.unwrap();
        assert_eq!(sql.database_url_env, "APP_DB");
        assert_eq!(sql.max_rows, 5);
        assert_eq!(sql.statement_timeout, DEFAULT_STATEMENT_TIMEOUT);
        assert_eq!(m.events, ["jobs", "sandbox_events"]);
        assert_eq!(Manifest::defaults().grants, GrantSpec::default());
        for (text, key) in [
            (
                "[grants.sql]\ndatabase_url_env = 'APP DB'",
                "grants.sql.database_url_env",
            ),
            (
                "[grants.sql]\ndatabase_url_env = 'A'\nmax_connections = 0",
                "grants.sql.max_connections",
            ),
            ("[events]\nchannels = ['Jobs']", "events.channels"),
            ("[events]\nchannels = ['x;drop']", "events.channels"),
            (
                "[events]\nchannels = ['jobs', 'leasehold_released']",
                "events.channels = \"leasehold_released\": channels starting with leasehold_",
            ),
            ("[events]\nchannels = ['leasehold_x']", "the host's own"),
            ("[grants]\nkv = true\nsql = 3", "p.toml"),
            ("[grants]\nkvv = true", "kvv"),
        ] {
            let e = Manifest::parse("p.toml", text).unwrap_err().to_string();
            assert!(e.contains(key), "{text}: {e}");
        }
    }

    #[test]
    fn kv_quotas_default_and_are_set_only_with_the_kv_grant() {
        let m = Manifest::parse("p.toml", "[grants]\nkv = true\n").unwrap();
        assert_eq!(m.grants.kv_quota, KvQuota::default());
        let m = Manifest::parse(
            "p.toml",
            "[grants]\nkv = true\nkv_max_keys = 50\nkv_max_bytes = '1MiB'\n",
        )
        .unwrap();
        assert_eq!(
            m.grants.kv_quota,
            KvQuota {
                max_keys: 50,
                max_bytes: 1 << 20
            }
        );
        for (text, key) in [
            ("[grants]\nkv_max_keys = 5", "grants.kv_max_keys"),
            ("[grants]\nkv_max_bytes = '1MiB'", "grants.kv_max_bytes"),
            ("[grants]\nkv = true\nkv_max_keys = 0", "grants.kv_max_keys"),
            (
                "[grants]\nkv = true\nkv_max_bytes = '1TB'",
                "grants.kv_max_bytes",
            ),
            ("[grants]\nkv = true\nkv_max_key = 5", "kv_max_key"),
        ] {
            let e = Manifest::parse("p.toml", text).unwrap_err().to_string();
            assert!(e.contains(key), "{text}: {e}");
        }
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
