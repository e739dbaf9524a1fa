//! The deployment files in `examples/` stay true to the host: the example config and the config
//! embedded in the Kubernetes ConfigMap load through the same code as `leasehold run --config`,
//! and the manifests, the systemd unit and the Dockerfile keep the properties their comments
//! promise (probes, identity, secrets, stop timeouts above `shutdown_grace`, a non-root image).

#![allow(clippy::unwrap_used, missing_docs)]

use std::path::{Path, PathBuf};
use std::time::Duration;

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

fn of_kind<'a>(docs: &'a [Value], kind: &str) -> &'a Value {
    let found: Vec<&Value> = docs.iter().filter(|d| d["kind"] == kind).collect();
    assert_eq!(found.len(), 1, "exactly one {kind} in the manifests");
    found[0]
}

fn str_at<'a>(v: &'a Value, what: &str) -> &'a str {
    v.as_str()
        .unwrap_or_else(|| panic!("{what} is not a string: {v:?}"))
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
    assert_eq!(config.shutdown_grace, defaults.shutdown_grace);
    assert_eq!(config.connect_timeout, defaults.connect_timeout);
    assert_eq!(config.runtime, defaults.runtime);

    // Every key of the config file is documented, set or commented out.
    let text = read("leasehold.toml");
    for key in [
        "database_url",
        "replica_id",
        "http",
        "leases",
        "shutdown_grace",
        "connect_timeout",
        "plugins",
        "cache_dir",
        "[groups]",
        "[timing]",
        "ttl",
        "renew_interval",
        "retry_interval",
        "poll_interval",
        "margin",
        "store_timeout",
        "[runtime]",
        "fuel",
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

#[test]
fn the_kubernetes_manifests_fit_the_host() {
    let docs = yaml_documents(&read("kubernetes/leasehold.yaml"));

    // The Secret and the ConfigMap's config: the config loads as `leasehold run` would load it
    // in the pod, with the Secret's URL in LEASEHOLD_DATABASE_URL.
    let secret = of_kind(&docs, "Secret");
    let secret_name = str_at(&secret["metadata"]["name"], "Secret name");
    let secret_url = str_at(&secret["stringData"]["url"], "Secret url");
    let config_map = of_kind(&docs, "ConfigMap");
    let embedded = str_at(
        &config_map["data"]["leasehold.toml"],
        "ConfigMap leasehold.toml",
    );
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("leasehold.toml");
    std::fs::write(&path, embedded).unwrap();
    let flags = Layer {
        database_url: Some(secret_url.into()),
        replica_id: Some("leasehold-7d9f8c-abcde".into()),
        ..Default::default()
    };
    let config = load(&path, flags);
    assert_eq!(config.database_url.backend(), "postgres");
    assert!(
        config.http.ip().is_unspecified(),
        "in a pod the HTTP endpoint must listen on all interfaces, not {}",
        config.http
    );

    let deployment = of_kind(&docs, "Deployment");
    assert_eq!(deployment["spec"]["replicas"].as_u64(), Some(3));
    let pod = &deployment["spec"]["template"]["spec"];
    let containers = pod["containers"].as_sequence().unwrap();
    assert_eq!(containers.len(), 1);
    let container = &containers[0];

    // Probes: readiness on /readyz, liveness on /healthz, both on the declared http port.
    let port = container["ports"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "http")
        .expect("a container port named http");
    assert_eq!(
        port["containerPort"].as_u64(),
        Some(u64::from(config.http.port()))
    );
    assert_eq!(container["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert_eq!(container["livenessProbe"]["httpGet"]["path"], "/healthz");
    for probe in ["readinessProbe", "livenessProbe"] {
        assert_eq!(container[probe]["httpGet"]["port"], "http", "{probe}");
    }

    // The environment: identity from the pod name, the URL from the Secret, the config file.
    let env = container["env"].as_sequence().unwrap();
    let var = |name: &str| {
        env.iter()
            .find(|e| e["name"] == name)
            .unwrap_or_else(|| panic!("{name} is not set in the Deployment"))
    };
    assert_eq!(
        var("LEASEHOLD_REPLICA_ID")["valueFrom"]["fieldRef"]["fieldPath"],
        "metadata.name"
    );
    let secret_ref = &var("LEASEHOLD_DATABASE_URL")["valueFrom"]["secretKeyRef"];
    assert_eq!(secret_ref["name"], secret_name);
    assert_eq!(secret_ref["key"], "url");
    let config_path = str_at(&var("LEASEHOLD_CONFIG")["value"], "LEASEHOLD_CONFIG");

    // The config file is the ConfigMap, mounted where LEASEHOLD_CONFIG points; the plugins
    // come read-only from the claim, where the config says they are; the cache is writable.
    let volumes = pod["volumes"].as_sequence().unwrap();
    let mount_of = |volume: &str| {
        container["volumeMounts"]
            .as_sequence()
            .unwrap()
            .iter()
            .find(|m| m["name"] == volume)
            .unwrap_or_else(|| panic!("volume {volume} is not mounted"))
    };
    let volume_named = |pred: &dyn Fn(&Value) -> bool| {
        str_at(
            &volumes.iter().find(|v| pred(v)).unwrap()["name"],
            "volume name",
        )
        .to_string()
    };
    let config_volume = volume_named(&|v| v["configMap"]["name"] == config_map["metadata"]["name"]);
    let config_mount = str_at(&mount_of(&config_volume)["mountPath"], "mountPath");
    assert_eq!(
        Path::new(config_mount).join("leasehold.toml"),
        Path::new(config_path)
    );
    let claim = of_kind(&docs, "PersistentVolumeClaim");
    let plugins_volume =
        volume_named(&|v| v["persistentVolumeClaim"]["claimName"] == claim["metadata"]["name"]);
    let plugins_mount = mount_of(&plugins_volume);
    assert_eq!(plugins_mount["readOnly"].as_bool(), Some(true));
    assert_eq!(
        config.plugins.as_deref(),
        Some(Path::new(str_at(&plugins_mount["mountPath"], "mountPath")))
    );
    let security = &container["securityContext"];
    assert_eq!(security["readOnlyRootFilesystem"].as_bool(), Some(true));
    assert_eq!(security["allowPrivilegeEscalation"].as_bool(), Some(false));
    assert_eq!(pod["securityContext"]["runAsNonRoot"].as_bool(), Some(true));
    let cache_volume = volume_named(&|v| !v["emptyDir"].is_null());
    let cache_mount = str_at(&mount_of(&cache_volume)["mountPath"], "mountPath");
    let cache_dir = config.cache_dir.as_deref().unwrap_or(Path::new(""));
    assert!(
        cache_dir.starts_with(cache_mount),
        "cache_dir {} is not on the writable volume {cache_mount}",
        cache_dir.display()
    );

    // Shutdown: the kubelet waits for preStop plus the ordered release before its SIGKILL.
    let grace = Duration::from_secs(pod["terminationGracePeriodSeconds"].as_u64().unwrap());
    let pre_stop = container["lifecycle"]["preStop"]["exec"]["command"]
        .as_sequence()
        .unwrap();
    assert_eq!(pre_stop[0], "sleep");
    let pause = Duration::from_secs(str_at(&pre_stop[1], "sleep seconds").parse().unwrap());
    assert!(
        grace > pause + config.shutdown_grace,
        "terminationGracePeriodSeconds {grace:?} must exceed preStop {pause:?} + shutdown_grace {:?}",
        config.shutdown_grace
    );

    let pdb = of_kind(&docs, "PodDisruptionBudget");
    assert_eq!(pdb["spec"]["maxUnavailable"].as_u64(), Some(1));
    assert_eq!(
        pdb["spec"]["selector"]["matchLabels"],
        deployment["spec"]["selector"]["matchLabels"]
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
