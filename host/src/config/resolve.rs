//! The effective configuration: defaults, then the file's layer, then the flags', merged and
//! validated into a [`Config`].

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use std::collections::BTreeMap;

use serde::Serialize;

use super::error::ConfigError;
use super::layer::{Layer, LineLayer, check_groups};
use super::{process, service};
use crate::capability::variables::UrlVariables;
use crate::http::admin::AdminToken;
use crate::http::guard::AllowedHosts;
use crate::lease::groups::GroupSpec;
use crate::lease::identity::{check_replica_id, default_replica_id};
use crate::lease::store::Place;
use crate::lease::{DatabaseUrl, LeaseName, Timing};

/// The effective configuration of `leasehold run`. It serialises in the shape of the config
/// file, password redacted: what `leasehold config check` prints.
// Field order is the printed order: plain keys first, then the tables.
#[derive(Debug, Clone, Serialize)]
pub struct Config {
    /// The lease store.
    #[serde(serialize_with = "redacted")]
    pub database_url: DatabaseUrl,
    /// The replica id (without the per-process suffix).
    pub replica_id: String,
    /// Where `/healthz` and `/status` listen.
    pub http: SocketAddr,
    /// Where [`Config::http`] was set (the flag or variable, or the file's key), to name in an
    /// error; `None` for the default, which gives way to a free port when it is taken.
    #[serde(skip)]
    pub http_set_by: Option<&'static str>,
    /// The names the HTTP port answers to besides localhost and IP addresses.
    #[serde(serialize_with = "host_names", skip_serializing_if = "is_empty_hosts")]
    pub http_allowed_hosts: AllowedHosts,
    /// The admin API's token, read from `admin_token_file`; `None` keeps the API off. Shown as
    /// its file, never its token.
    #[serde(
        rename = "admin_token_file",
        serialize_with = "token_file",
        skip_serializing_if = "Option::is_none"
    )]
    pub admin_token: Option<AdminToken>,
    /// The leases to campaign for.
    pub leases: Vec<LeaseName>,
    /// The lease groups this replica takes part in.
    #[serde(
        serialize_with = "groups_as_table",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub groups: Vec<GroupSpec>,
    /// This replica's place in the line of every lease without one of its own (group shards
    /// among them): its `priority` and `preempt_after`.
    #[serde(flatten)]
    pub place: Place,
    /// Its place in the line of each lease that has a `[lease.NAME]` table.
    #[serde(skip_serializing_if = "BTreeMap::is_empty", rename = "lease")]
    pub places: BTreeMap<String, Place>,
    /// How long an ordered shutdown may take.
    #[serde(with = "humantime_serde")]
    pub shutdown_grace: Duration,
    /// How long start-up waits for the database: the first connection, and a lock another
    /// session holds.
    #[serde(with = "humantime_serde")]
    pub connect_timeout: Duration,
    /// The plugin directory, if plugins are enabled.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub plugins: Option<PathBuf>,
    /// Where compiled components are cached; none when neither it nor `XDG_CACHE_HOME` nor
    /// `HOME` is set (there is no shared fallback: see [`crate::runtime::cache`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache_dir: Option<PathBuf>,
    /// Which variables plugins' sql grants may name.
    #[serde(serialize_with = "patterns")]
    pub grant_url_variables: UrlVariables,
    /// The lease timing, validated.
    pub timing: Timing,
    /// The WebAssembly engine.
    pub runtime: RuntimeConfig,
    /// Trace export: the file's `[telemetry]` table. Export starts from it before the log does,
    /// the standard `OTEL_*` variables winning key by key; shown here as the file sets it.
    #[serde(skip_serializing_if = "crate::telemetry::Settings::is_empty")]
    pub telemetry: crate::telemetry::Settings,
    /// The OS processes bound to leases.
    #[serde(rename = "process", skip_serializing_if = "Vec::is_empty")]
    pub processes: Vec<crate::process::bound::BoundProcess>,
    /// The services bound to leases, with their scripts.
    #[serde(rename = "service", skip_serializing_if = "Vec::is_empty")]
    pub services: Vec<crate::process::service::BoundService>,
}

/// The `[runtime]` table of the effective configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct RuntimeConfig {
    /// Whether the engine meters fuel.
    pub fuel: bool,
}

/// The groups as the `[groups]` table of the file.
fn groups_as_table<S: serde::Serializer>(
    groups: &[GroupSpec],
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serializer.collect_map(groups.iter().map(|g| (&g.name, g.shards)))
}

/// The patterns as written.
fn patterns<S: serde::Serializer>(v: &UrlVariables, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.collect_seq(v.patterns())
}

/// The names as checked.
fn host_names<S: serde::Serializer>(v: &AllowedHosts, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.collect_seq(v.names())
}

/// The admin token as its file: the token itself is never shown.
fn token_file<S: serde::Serializer>(
    token: &Option<AdminToken>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    match token {
        Some(token) => serializer.collect_str(&token.file().display()),
        None => serializer.serialize_none(),
    }
}

/// Whether no name is listed (the key is then left out).
fn is_empty_hosts(v: &AllowedHosts) -> bool {
    v.names().is_empty()
}

/// The URL as `Display` shows it, password redacted.
fn redacted<S: serde::Serializer>(url: &DatabaseUrl, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.collect_str(url)
}

impl Config {
    /// The effective configuration as TOML, in the shape of the config file, password redacted.
    pub fn to_toml(&self) -> String {
        // Every field is a plain value: serialising cannot fail.
        toml::to_string(self).unwrap_or_default()
    }
}

/// Where the flag layer's database URL comes from, for errors that must not show it.
pub const DATABASE_URL_FLAG: &str = "--database-url or LEASEHOLD_DATABASE_URL";

/// Where the flag layer's HTTP address comes from, for errors.
pub(crate) const HTTP_FLAG: &str = "--http or LEASEHOLD_HTTP";

/// The default HTTP address: loopback only, so a fresh install exposes nothing; 9464 is free of
/// the common exporters' ports.
pub(crate) const DEFAULT_HTTP: &str = "127.0.0.1:9464";
/// Enough for plugins to drain and the release to commit; below Kubernetes' default 30 s grace.
pub(crate) const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(20);
/// Long enough for a database across a network, short enough that a wrong URL fails fast.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// This replica's place in the line of its leases: the default (the flags' `priority` and
/// `preempt_after` over the file's, else priority 0 and no preemption) and one per `[lease.NAME]`
/// table of the file, over which the flags still win. Refused: a table for a lease not in
/// `leases`, and a `preempt_after` shorter than the ttl (each move is a handoff; at most one per
/// ttl keeps two replicas from trading a lease back and forth).
fn places(
    flags: (Option<i64>, Option<Duration>),
    file: (Option<i64>, Option<Duration>, &BTreeMap<String, LineLayer>),
    leases: &[LeaseName],
    ttl: Duration,
) -> Result<(Place, BTreeMap<String, Place>), ConfigError> {
    let ((flag_priority, flag_preempt), (file_priority, file_preempt, tables)) = (flags, file);
    let check = |what: String, place: Place| match place.preempt_after {
        Some(after) if after < ttl => Err(ConfigError::Line {
            what,
            reason: format!(
                "preempt_after = {} is shorter than the ttl ({}): each move is a handoff, and one per ttl at most keeps two replicas from trading the lease",
                humantime::format_duration(after),
                humantime::format_duration(ttl)
            ),
        }),
        _ => Ok(place),
    };
    let default = check(
        "priority and preempt_after".to_string(),
        Place {
            priority: flag_priority.or(file_priority).unwrap_or(0),
            preempt_after: flag_preempt.or(file_preempt),
        },
    )?;
    let mut places = BTreeMap::new();
    for (name, table) in tables {
        if !leases.iter().any(|l| l.as_str() == name) {
            return Err(ConfigError::Line {
                what: format!("[lease.{name}] in the config file"),
                reason: format!(
                    "this replica does not campaign for a lease {name:?}: add it to leases, or remove the table"
                ),
            });
        }
        let place = Place {
            priority: flag_priority.or(table.priority).unwrap_or(default.priority),
            preempt_after: flag_preempt
                .or(table.preempt_after)
                .or(default.preempt_after),
        };
        places.insert(name.clone(), check(format!("[lease.{name}]"), place)?);
    }
    Ok((default, places))
}

impl Config {
    /// This replica's place in the line of `lease`.
    pub fn place_of(&self, lease: &str) -> Place {
        self.places.get(lease).copied().unwrap_or(self.place)
    }

    /// Merges defaults, the config file and the flags (each key the flags set wins), and
    /// validates the result.
    pub fn resolve(file: Layer, flags: Layer) -> Result<Config, ConfigError> {
        let database_url = match (flags.database_url, file.database_url) {
            (Some(raw), _) => {
                DatabaseUrl::parse(raw.expose()).map_err(|e| e.from_origin(DATABASE_URL_FLAG))?
            }
            (None, Some(raw)) => DatabaseUrl::parse(raw.expose())
                .map_err(|e| e.from_origin("database_url of the config file"))?,
            (None, None) => DatabaseUrl::default_sqlite(),
        };
        let (replica_id, origin) = match (flags.replica_id, file.replica_id) {
            (Some(id), _) => (id, "from --replica-id or LEASEHOLD_REPLICA_ID"),
            (None, Some(id)) => (id, "replica_id in the config file"),
            (None, None) => default_replica_id(),
        };
        if let Err(reason) = check_replica_id(&replica_id) {
            return Err(ConfigError::ReplicaId {
                id: replica_id,
                origin,
                reason,
            });
        }
        let groups = flags.groups.or(file.groups).unwrap_or_default();
        // A replica given only groups campaigns for their shards alone, not for `leader` too.
        let leases = flags
            .leases
            .or(file.leases)
            .unwrap_or_else(|| match groups.is_empty() {
                true => vec![crate::lease::name::DEFAULT_LEASE.to_string()],
                false => Vec::new(),
            });
        if leases.is_empty() && groups.is_empty() {
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
        let groups = check_groups(groups, &leases)?;
        let (f, t) = (flags.timing, file.timing);
        let ttl_set = f.ttl.or(t.ttl).unwrap_or(Timing::DEFAULT_TTL);
        let (place, places) = places(
            (flags.priority, flags.preempt_after),
            (file.priority, file.preempt_after, &file.lease),
            &leases,
            ttl_set,
        )?;
        let ttl = f.ttl.or(t.ttl).unwrap_or(Timing::DEFAULT_TTL);
        let derived = Timing::from_ttl(ttl);
        let timing = Timing {
            ttl,
            renew_interval: f
                .renew_interval
                .or(t.renew_interval)
                .unwrap_or(derived.renew_interval),
            retry_interval: f
                .retry_interval
                .or(t.retry_interval)
                .unwrap_or(derived.retry_interval),
            poll_interval: f
                .poll_interval
                .or(t.poll_interval)
                .unwrap_or(derived.poll_interval),
            margin: f.margin.or(t.margin).unwrap_or(derived.margin),
            store_timeout: f
                .store_timeout
                .or(t.store_timeout)
                .unwrap_or(derived.store_timeout),
        };
        timing.validate().map_err(|error| {
            let origin = match error.field {
                "ttl" if f.ttl.is_some() => "from --ttl or LEASEHOLD_TTL",
                // Only the ttl is a flag; the other keys reach the flag layer from code alone.
                field if f.sets(field) => "from the command line",
                field if t.sets(field) => "from the config file",
                "ttl" => "the default",
                _ => "derived from the ttl; set it under [timing] in the config file",
            };
            ConfigError::Timing { error, origin }
        })?;
        let (http, http_set_by) = match (flags.http, file.http) {
            (Some(addr), _) => (addr, Some(HTTP_FLAG)),
            (None, Some(addr)) => (addr, Some("http in the config file")),
            (None, None) => (
                DEFAULT_HTTP
                    .parse()
                    .unwrap_or_else(|_| SocketAddr::from(([127, 0, 0, 1], 9464))),
                None,
            ),
        };
        let http_allowed_hosts = AllowedHosts::new(
            flags
                .http_allowed_hosts
                .or(file.http_allowed_hosts)
                .unwrap_or_default(),
        )?;
        let admin_token = flags
            .admin_token_file
            .or(file.admin_token_file)
            .map(|path| AdminToken::read(&path))
            .transpose()?;
        // Both layers' tables: the file's, and the one `leasehold exec` adds.
        let group_names: Vec<String> = groups.iter().map(|g| g.name.clone()).collect();
        let processes = process::resolve(
            file.process.into_iter().chain(flags.process).collect(),
            &leases,
            &group_names,
            &timing,
            std::env::var_os("PATH").as_deref(),
        )?;
        let services = service::resolve(
            file.service.into_iter().chain(flags.service).collect(),
            &leases,
            &timing,
            std::env::var_os("PATH").as_deref(),
        )?;
        // One card each in `/status`, by name and lease.
        if let Some(both) = services
            .iter()
            .find(|s| processes.iter().any(|p| p.name == s.name))
        {
            return Err(process::ProcessError {
                which: format!("service {:?}", both.name),
                reason: "a [[process]] has this name too: give one of them another `name`"
                    .to_string(),
            }
            .into());
        }
        Ok(Config {
            database_url,
            replica_id,
            http,
            http_set_by,
            http_allowed_hosts,
            admin_token,
            leases,
            groups,
            place,
            places,
            timing,
            shutdown_grace: flags
                .shutdown_grace
                .or(file.shutdown_grace)
                .unwrap_or(DEFAULT_SHUTDOWN_GRACE),
            connect_timeout: flags
                .connect_timeout
                .or(file.connect_timeout)
                .unwrap_or(DEFAULT_CONNECT_TIMEOUT),
            plugins: flags.plugins.or(file.plugins),
            cache_dir: flags
                .cache_dir
                .or(file.cache_dir)
                .or_else(crate::runtime::cache::default_dir),
            grant_url_variables: match flags.grant_url_variables.or(file.grant_url_variables) {
                Some(patterns) => UrlVariables::new(patterns)?,
                None => UrlVariables::default(),
            },
            runtime: RuntimeConfig {
                // On by default: plugins are not trusted to stop by themselves
                // (docs/ARCHITECTURE.md §7.5).
                fuel: flags.runtime.fuel.or(file.runtime.fuel).unwrap_or(true),
            },
            telemetry: file.telemetry.settings(),
            processes,
            services,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::layer::{GroupArg, LogFormat, TimingLayer, parse_group, parse_http};

    #[test]
    fn zero_config_is_sqlite_and_leader() {
        let c = Config::resolve(Layer::default(), Layer::default()).unwrap();
        assert_eq!(c.database_url, DatabaseUrl::default_sqlite());
        assert_eq!(c.leases, vec!["leader"]);
        assert_eq!(c.http.to_string(), DEFAULT_HTTP);
        assert_eq!(c.timing, Timing::default());
    }

    #[test]
    fn a_replica_stands_at_priority_zero_without_preemption_unless_told() {
        let c = Config::resolve(Layer::default(), Layer::default()).unwrap();
        assert_eq!(c.place_of("leader"), Place::default());
        let file: Layer = toml::from_str(
            "leases = ['a', 'b']\npriority = 2\npreempt_after = '30s'\n[timing]\nttl = '10s'\n[lease.b]\npriority = 7\n",
        )
        .unwrap();
        let c = Config::resolve(file.clone(), Layer::default()).unwrap();
        let thirty = Some(Duration::from_secs(30));
        assert_eq!(
            c.place_of("a"),
            Place {
                priority: 2,
                preempt_after: thirty
            }
        );
        assert_eq!(
            c.place_of("b"),
            Place {
                priority: 7,
                preempt_after: thirty
            }
        );
        // The flags win over the file, its [lease.NAME] tables too.
        let flags = Layer {
            priority: Some(-1),
            ..Default::default()
        };
        let c = Config::resolve(file, flags).unwrap();
        assert_eq!(c.place_of("b").priority, -1);
        assert!(c.to_toml().contains("priority = -1"), "{}", c.to_toml());
    }

    #[test]
    fn a_place_that_cannot_work_is_refused_with_the_setting_named() {
        let refused = |text: &str| {
            let file: Layer = toml::from_str(text).unwrap();
            Config::resolve(file, Layer::default())
                .unwrap_err()
                .to_string()
        };
        let e = refused("leases = ['a']\n[lease.b]\npriority = 1\n");
        assert!(
            e.contains("[lease.b]") && e.contains("does not campaign for"),
            "{e}"
        );
        let e = refused("leases = ['a']\npreempt_after = '1s'\n[timing]\nttl = '2s'\n");
        assert!(
            e.contains("preempt_after = 1s is shorter than the ttl (2s)"),
            "{e}"
        );
        let e = refused("leases = ['a']\n[timing]\nttl = '2s'\n[lease.a]\npreempt_after = '1s'\n");
        assert!(e.starts_with("invalid [lease.a]"), "{e}");
        // Unknown keys in a [lease.NAME] table are refused by name.
        let e = toml::from_str::<Layer>("[lease.a]\npriorty = 1\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("priorty"), "{e}");
    }

    #[test]
    fn flags_override_file() {
        let file: Layer = toml::from_str(
            "database_url = 'sqlite:/tmp/x.db'\nleases = ['a', 'b']\n[timing]\nttl = '10s'\nrenew_interval = '2s'\n",
        )
        .unwrap();
        let flags = Layer {
            leases: Some(vec!["c".into()]),
            timing: TimingLayer {
                ttl: Some(Duration::from_secs(6)),
                ..Default::default()
            },
            ..Default::default()
        };
        let c = Config::resolve(file, flags).unwrap();
        assert_eq!(c.leases, vec!["c"]);
        assert_eq!(c.timing.ttl, Duration::from_secs(6));
        assert_eq!(c.timing.renew_interval, Duration::from_secs(2));
        assert_eq!(c.timing.poll_interval, Duration::from_secs(6));
    }

    #[test]
    fn rejects_bad_input_by_name() {
        assert!(
            toml::from_str::<Layer>("ttl = '1s'").is_err(),
            "unknown top-level key"
        );
        let file: Layer = toml::from_str("[timing]\nttl = '2s'\nrenew_interval = '5s'\n").unwrap();
        let e = Config::resolve(file, Layer::default())
            .unwrap_err()
            .to_string();
        assert!(e.contains("renew_interval"), "{e}");
        let flags = Layer {
            leases: Some(vec!["a b".into()]),
            ..Default::default()
        };
        assert!(
            Config::resolve(Layer::default(), flags)
                .unwrap_err()
                .to_string()
                .contains("\"a b\"")
        );
        let flags = Layer {
            leases: Some(vec!["a".into(), "a".into()]),
            ..Default::default()
        };
        assert!(Config::resolve(Layer::default(), flags).is_err());
    }

    #[test]
    fn timing_errors_name_the_config_key_and_where_the_value_came_from() {
        let file: Layer = toml::from_str("[timing]\nmargin = '1ns'\n").unwrap();
        let e = Config::resolve(file, Layer::default())
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("timing.margin = 1ns") && e.contains("config file") && e.contains("10ms"),
            "{e}"
        );
        let flags = Layer {
            timing: TimingLayer {
                ttl: Some(Duration::from_millis(50)),
                ..Default::default()
            },
            ..Default::default()
        };
        let e = Config::resolve(Layer::default(), flags)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("timing.ttl = 50ms") && e.contains("--ttl") && e.contains("LEASEHOLD_TTL"),
            "{e}"
        );
        // A value nobody set is named as derived from the ttl, with the key that overrides it.
        let file: Layer =
            toml::from_str("[timing]\nttl = '3s'\nrenew_interval = '100ms'\n").unwrap();
        let e = Config::resolve(file, Layer::default())
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("timing.retry_interval = 200ms") && e.contains("derived from the ttl"),
            "{e}"
        );
    }

    #[test]
    fn groups_come_from_flags_the_environment_s_list_or_a_table_and_are_checked_by_name() {
        let file: Layer = toml::from_str("[groups]\norders = 12\nbilling = 3\n").unwrap();
        let c = Config::resolve(file.clone(), Layer::default()).unwrap();
        let names: Vec<(&str, u32)> = c
            .groups
            .iter()
            .map(|g| (g.name.as_str(), g.shards))
            .collect();
        assert_eq!(names, [("billing", 3), ("orders", 12)]);
        assert!(c.leases.is_empty(), "groups alone: no `leader` lease");
        assert!(
            c.to_toml().contains("[groups]\nbilling = 3\norders = 12"),
            "{}",
            c.to_toml()
        );
        let flags = Layer {
            groups: Some(vec![parse_group("jobs=4").unwrap()]),
            ..Default::default()
        };
        let c = Config::resolve(file, flags).unwrap();
        assert_eq!(
            c.groups,
            [GroupSpec {
                name: "jobs".into(),
                shards: 4
            }]
        );
        assert!(parse_group("jobs").unwrap_err().contains("NAME=SHARDS"));
        assert!(parse_group("jobs=x").unwrap_err().contains("whole number"));
        let refused = |groups: Vec<GroupArg>, leases: Option<Vec<String>>| {
            let flags = Layer {
                groups: Some(groups),
                leases,
                ..Default::default()
            };
            Config::resolve(Layer::default(), flags)
                .unwrap_err()
                .to_string()
        };
        let g = |name: &str, shards: i64| GroupArg {
            name: name.into(),
            shards,
        };
        assert!(refused(vec![g("orders", 0)], None).contains("\"orders\": 0 shards"));
        assert!(refused(vec![g("orders", 10_001)], None).contains("1 to 10000"));
        assert!(refused(vec![g("a/b", 2)], None).contains("cannot contain /"));
        assert!(refused(vec![g("a b", 2)], None).contains("\"a b\""));
        assert!(refused(vec![g("x", 2), g("x", 3)], None).contains("listed twice"));
        let e = refused(vec![g("x", 2)], Some(vec!["x/1".into()]));
        assert!(e.contains("x/1 is also listed under leases"), "{e}");
        // A lease that only looks like a shard of a smaller group is its own.
        let flags = Layer {
            groups: Some(vec![g("x", 2)]),
            leases: Some(vec!["x/2".into(), "x/a".into()]),
            ..Default::default()
        };
        assert!(Config::resolve(Layer::default(), flags).is_ok());
        let e = toml::from_str::<Layer>("[groups]\norders = 'many'\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("groups.orders"), "{e}");
    }

    #[test]
    fn http_allowed_hosts_come_from_the_file_or_the_flags_and_are_checked() {
        let file: Layer = toml::from_str("http_allowed_hosts = ['Leasehold.Internal']").unwrap();
        let c = Config::resolve(file.clone(), Layer::default()).unwrap();
        assert_eq!(c.http_allowed_hosts.names(), ["leasehold.internal"]);
        assert!(
            c.to_toml()
                .contains("http_allowed_hosts = [\"leasehold.internal\"]"),
            "{}",
            c.to_toml()
        );
        let flags = Layer {
            http_allowed_hosts: Some(vec!["status.example:9464".into()]),
            ..Default::default()
        };
        let e = Config::resolve(file, flags).unwrap_err().to_string();
        assert!(
            e.contains("http_allowed_hosts") && e.contains("status.example:9464"),
            "{e}"
        );
        let c = Config::resolve(Layer::default(), Layer::default()).unwrap();
        assert!(!c.to_toml().contains("http_allowed_hosts"));
    }

    #[test]
    fn the_admin_token_comes_from_a_private_file_and_config_check_shows_only_the_file() {
        use std::os::unix::fs::PermissionsExt;
        let token = "s3cret-0123456789abcdefghijklmnopqrstuvwxyz";
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("admin-token");
        std::fs::write(&path, format!("{token}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        let c = Config::resolve(Layer::default(), Layer::default()).unwrap();
        assert!(c.admin_token.is_none(), "off by default");
        assert!(!c.to_toml().contains("admin_token_file"), "{}", c.to_toml());
        let file: Layer = toml::from_str(&format!(
            "admin_token_file = {:?}",
            path.display().to_string()
        ))
        .unwrap();
        let c = Config::resolve(file, Layer::default()).unwrap();
        assert!(c.admin_token.as_ref().unwrap().admits(token.as_bytes()));
        let shown = c.to_toml();
        assert!(
            shown.contains(&format!(
                "admin_token_file = {:?}",
                path.display().to_string()
            )) && !shown.contains(token),
            "{shown}"
        );
        assert!(!format!("{c:?}").contains(token));
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let flags = Layer {
            admin_token_file: Some(path.clone()),
            ..Default::default()
        };
        let e = Config::resolve(Layer::default(), flags)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(&path.display().to_string())
                && e.contains("chmod 600")
                && !e.contains(token),
            "{e}"
        );
    }

    #[test]
    fn http_takes_an_ip_or_localhost_and_says_what_to_write_for_another_name() {
        assert_eq!(
            parse_http("127.0.0.1:9464").unwrap().to_string(),
            "127.0.0.1:9464"
        );
        assert_eq!(
            parse_http("localhost:9465").unwrap().to_string(),
            "127.0.0.1:9465"
        );
        let e = parse_http("status.internal:9464").unwrap_err();
        assert!(e.contains("write an IP, e.g. 127.0.0.1:9464"), "{e}");
        let e = parse_http("9464").unwrap_err();
        assert!(e.contains("IP:PORT"), "{e}");
        let file: Layer = toml::from_str("http = 'localhost:9470'").unwrap();
        let c = Config::resolve(file, Layer::default()).unwrap();
        assert_eq!(c.http.to_string(), "127.0.0.1:9470");
        assert_eq!(c.http_set_by, Some("http in the config file"));
        let c = Config::resolve(Layer::default(), Layer::default()).unwrap();
        assert_eq!(c.http_set_by, None, "the default may give way");
    }

    #[test]
    fn a_timing_key_at_the_top_level_is_pointed_to_its_table() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("leasehold.toml");
        std::fs::write(&path, "ttl = '30s'\n").unwrap();
        let e = Layer::load(&path).unwrap_err().to_string();
        assert!(e.contains("did you mean `[timing] ttl`?"), "{e}");
        std::fs::write(&path, "log_format = 'json'\n").unwrap();
        assert_eq!(
            Layer::load(&path).unwrap().log_format,
            Some(LogFormat::Json)
        );
    }

    #[test]
    fn an_empty_lease_list_is_refused() {
        let file: Layer = toml::from_str("leases = []").unwrap();
        let e = Config::resolve(file, Layer::default()).unwrap_err();
        assert!(matches!(e, ConfigError::NoLeases), "{e}");
    }

    #[test]
    fn a_replica_id_that_would_break_a_line_is_refused_naming_where_it_came_from() {
        let flags = Layer {
            replica_id: Some("a\u{1b}[2J\nb".into()),
            ..Default::default()
        };
        let e = Config::resolve(Layer::default(), flags)
            .unwrap_err()
            .to_string();
        assert!(e.contains("--replica-id or LEASEHOLD_REPLICA_ID"), "{e}");
        assert!(e.contains("\"a\\u{1b}[2J\\nb\""), "{e}");
        let file: Layer = toml::from_str("replica_id = 'a b'").unwrap();
        let e = Config::resolve(file, Layer::default())
            .unwrap_err()
            .to_string();
        assert!(e.contains("replica_id in the config file"), "{e}");
    }

    #[test]
    fn a_config_file_that_does_not_parse_is_named_by_line_and_column_not_by_its_text() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("leasehold.toml");
        std::fs::write(
            &path,
            "leases = ['a']\ndatabase_url = postgres://app:hunter2@db/leases\n",
        )
        .unwrap();
        let e = Layer::load(&path).unwrap_err().to_string();
        assert!(e.contains("leasehold.toml: line 2, column 16"), "{e}");
        assert!(!e.contains("hunter2") && !e.contains('\n'), "{e}");
    }
}
