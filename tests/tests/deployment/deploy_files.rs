//! The deployment files in `examples/` stay true to the host: the example config loads through
//! the same code as `leasehold run --config` and documents the defaults, and the systemd unit and
//! the Dockerfile keep the properties their comments promise (a stop timeout above
//! `shutdown_grace`, a non-root image without a compiler, the uid the Kubernetes pod runs as).
//! The Kubernetes example has its own tests, in `kubernetes.rs`.

#![allow(clippy::unwrap_used, missing_docs)]

use std::path::{Path, PathBuf};

use leasehold::config::{Config, Layer};
use serde::Deserialize;
use serde_norway::Value;

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .join("examples")
}

fn read(relative: &str) -> String {
    let path = examples().join(relative);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Loads a config file the way `leasehold run --config` does: parse (unknown keys rejected), then
/// resolve over the defaults with the given flags and validate.
fn load(path: &Path, flags: Layer) -> Config {
    let file = Layer::load(path).unwrap_or_else(|e| panic!("{e}"));
    Config::resolve(file, flags).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every document of a multi-document YAML file, by kind.
fn yaml_documents(text: &str) -> Vec<Value> {
    serde_norway::Deserializer::from_str(text)
        .map(|doc| Value::deserialize(doc).unwrap())
        .filter(|v| !v.is_null())
        .collect()
}

#[test]
fn the_example_config_loads_and_documents_the_defaults() {
    let path = examples().join("leasehold.toml");
    let config = load(&path, Layer::default());
    let defaults = Config::resolve(Layer::default(), Layer::default()).unwrap();
    // The file spells out the defaults: loading it changes nothing.
    assert_eq!(config.timing, defaults.timing);
    assert_eq!(config.leases, defaults.leases);
    assert_eq!(config.http, defaults.http);
    assert_eq!(config.http_allowed_hosts, defaults.http_allowed_hosts);
    assert_eq!(config.admin_token, defaults.admin_token);
    assert_eq!(config.shutdown_grace, defaults.shutdown_grace);
    assert_eq!(config.connect_timeout, defaults.connect_timeout);
    assert_eq!(config.runtime, defaults.runtime);

    // Every key of the config file is documented, set or commented out.
    let text = read("leasehold.toml");
    for key in [
        "database_url",
        "replica_id",
        "http",
        "http_allowed_hosts",
        "admin_token_file",
        "leases",
        "shutdown_grace",
        "connect_timeout",
        "plugins",
        "cache_dir",
        "log_format",
        "[groups]",
        "[[process]]",
        "name",
        "lease",
        "command",
        "stop_signal",
        "grace",
        "on_exit",
        "max_failures",
        "[[service]]",
        "activate",
        "deactivate",
        "health",
        "health_interval",
        "failure_threshold",
        "[timing]",
        "ttl",
        "renew_interval",
        "retry_interval",
        "poll_interval",
        "margin",
        "store_timeout",
        "[runtime]",
        "fuel",
        "[telemetry]",
        "endpoint",
        "service_name",
        "resource_attributes",
    ] {
        let documented = text.lines().any(|l| {
            let l = l.trim_start_matches('#').trim_start();
            l.starts_with(&format!("{key} =")) || l == key
        });
        assert!(documented, "examples/leasehold.toml does not show `{key}`");
    }
    // Secrets belong in the environment: the database URL is not set in the file.
    assert!(
        !text.lines().any(|l| l.starts_with("database_url")),
        "database_url should stay commented out"
    );
}

/// `Key=value` lines of a unit or env file, comments skipped.
fn unit_value<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    text.lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .find_map(|l| l.strip_prefix(key)?.strip_prefix('='))
        .map(str::trim)
}

#[test]
fn the_systemd_unit_outlasts_the_ordered_release() {
    let unit = read("systemd/leasehold.service");
    let config = load(&examples().join("leasehold.toml"), Layer::default());
    let stop = humantime::parse_duration(unit_value(&unit, "TimeoutStopSec").unwrap()).unwrap();
    assert!(
        stop > config.shutdown_grace,
        "TimeoutStopSec {stop:?} must exceed shutdown_grace {:?}",
        config.shutdown_grace
    );
    assert_eq!(unit_value(&unit, "KillSignal"), Some("SIGTERM"));
    assert_eq!(unit_value(&unit, "Restart"), Some("on-failure"));
    let exec = unit_value(&unit, "ExecStart").unwrap();
    assert!(exec.contains(" run --config "), "{exec}");
    assert!(unit_value(&unit, "EnvironmentFile").is_some());
    assert!(
        unit_value(&unit, "DynamicUser") == Some("yes") || unit_value(&unit, "User").is_some(),
        "the service must not run as root"
    );
    assert_eq!(unit_value(&unit, "NoNewPrivileges"), Some("yes"));
    // The engine maps compiled code executable: this option would break every plugin.
    assert_ne!(unit_value(&unit, "MemoryDenyWriteExecute"), Some("yes"));
}

#[test]
fn the_docker_image_runs_unprivileged_without_a_compiler() {
    let dockerfile = read("docker/Dockerfile");
    let instructions: Vec<&str> = dockerfile
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    let last_from = instructions
        .iter()
        .rposition(|l| l.starts_with("FROM "))
        .unwrap();
    let final_stage = &instructions[last_from..];
    let base = final_stage[0];
    assert!(
        instructions[..last_from]
            .iter()
            .any(|l| l.starts_with("FROM rust")),
        "the binary is built in a rust stage"
    );
    assert!(
        !base.contains("rust"),
        "final stage is a rust image: {base}"
    );
    assert!(
        !final_stage
            .iter()
            .any(|l| l.contains("cargo ") || l.contains(" gcc") || l.contains("build-essential")),
        "the final stage installs or runs a compiler"
    );
    assert!(
        final_stage
            .iter()
            .any(|l| l.starts_with("COPY --from=") && l.contains("leasehold")),
        "the final stage copies the built binary"
    );
    let user = final_stage
        .iter()
        .rev()
        .find_map(|l| l.strip_prefix("USER "))
        .expect("a USER in the final stage")
        .trim();
    let uid = user.split(':').next().unwrap();
    assert!(
        uid != "root" && uid != "0",
        "the image runs as root ({user})"
    );
    assert!(
        final_stage.iter().any(|l| l
            .strip_prefix("VOLUME")
            .is_some_and(|v| v.contains("/plugins"))),
        "/plugins is a volume"
    );
    assert!(final_stage.contains(&"STOPSIGNAL SIGTERM"));
    assert!(dockerfile.contains("LEASEHOLD_PLUGINS=/plugins"));
    assert!(dockerfile.contains("cargo build --release -p leasehold --locked"));
    // The Kubernetes manifests verify runAsNonRoot, which needs a numeric uid.
    assert!(
        uid.chars().all(|c| c.is_ascii_digit()),
        "USER {user} is not numeric"
    );
    let k8s_uid = yaml_documents(&read("kubernetes/leasehold.yaml"))
        .iter()
        .find(|d| d["kind"] == "Deployment")
        .map(|d| d["spec"]["template"]["spec"]["securityContext"]["runAsUser"].as_u64())
        .unwrap();
    assert_eq!(
        k8s_uid,
        uid.parse().ok(),
        "the pod's runAsUser matches the image's USER"
    );
}
