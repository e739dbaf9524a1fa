//! The Kubernetes example (`examples/kubernetes/`), checked offline without a cluster. Every
//! object in `leasehold.yaml` passes the API's own schemas strictly (through
//! `scripts/kubernetes-validate.sh`, shown to refuse broken copies), and keeps what its comments
//! promise, given the image it runs (`examples/docker/Dockerfile`) and the host's own config
//! loader: the config loads with the Secret's URL and the pod's name; the probes reach the host's
//! endpoints; the pod is the image's unprivileged user and cannot escalate; the grace period
//! outlasts the preStop pause and the ordered release; a disruption budget lets one of three
//! replicas go at a time; every resource figure gives its reason; the volumes are where the host
//! reads and writes. The README beside it quotes its figures and names, and its loader pod
//! and its NetworkPolicy (which selects the replicas and opens their HTTP port) validate too.
//!
//! The tests read the YAML with `serde_norway`; the script installs its validator on first use.

#![allow(clippy::unwrap_used, missing_docs)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use leasehold::config::{Config, Layer};
use serde::Deserialize;
use serde_norway::Value;

const MANIFEST: &str = "examples/kubernetes/leasehold.yaml";
const README: &str = "examples/kubernetes/README.md";
/// A name `metadata.name` gives a pod of the Deployment.
const POD_NAME: &str = "leasehold-7d9f8c-abcde";

fn root() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

fn read(relative: &str) -> String {
    let path = root().join(relative);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The items of a YAML sequence; none when absent.
fn items(v: &Value) -> impl Iterator<Item = &Value> {
    v.as_sequence().into_iter().flatten()
}

#[track_caller]
fn text(v: &Value) -> &str {
    v.as_str().expect("a string")
}

fn path_of(mount: &Value) -> &Path {
    Path::new(text(&mount["mountPath"]))
}

/// Asserts that `v` holds what the YAML `wanted` states, key by key (`null`: absent).
#[track_caller]
fn holds(v: &Value, wanted: &str) {
    holds_at("", v, &serde_norway::from_str(wanted).unwrap());
}

#[track_caller]
fn holds_at(path: &str, v: &Value, wanted: &Value) {
    match wanted.as_mapping() {
        None => assert_eq!(v, wanted, "{path}"),
        Some(fields) => {
            for (key, wanted) in fields {
                holds_at(&format!("{path}.{}", text(key)), &v[key], wanted);
            }
        }
    }
}

/// Runs `scripts/kubernetes-validate.sh FILE`: its stdout if FILE is valid, else its stderr.
fn validate(file: &Path) -> Result<String, String> {
    let script = root().join("scripts/kubernetes-validate.sh");
    let out = Command::new("bash").arg(script).arg(file).output().unwrap();
    let said = |bytes| String::from_utf8_lossy(bytes).into_owned();
    match out.status.success() {
        true => Ok(said(&out.stdout)),
        false => Err(said(&out.stderr)),
    }
}

/// The facts of the image the Deployment runs, from its Dockerfile's final stage.
struct Image {
    uid: u64,
    gid: u64,
    env: BTreeMap<String, String>,
    exposed: Vec<u16>,
}

impl Image {
    fn load() -> Image {
        // Comment lines go first (Docker drops them inside continued instructions too), then
        // continued lines join into one instruction each.
        let text = read("examples/docker/Dockerfile");
        let comment = |l: &&str| l.trim_start().starts_with('#');
        let code: Vec<&str> = text.lines().filter(|l| !comment(l)).collect();
        let joined = code.join("\n").replace("\\\n", " ");
        let stage = joined.rsplit("\nFROM ").next().unwrap();
        // The words after each `instruction` of the stage, in order.
        let args = |instruction| -> Vec<&str> {
            let found = stage
                .lines()
                .filter_map(|l| l.trim().strip_prefix(instruction));
            found.flat_map(str::split_whitespace).collect()
        };
        let user = args("USER ").pop().expect("a USER");
        let (uid, gid) = user.split_once(':').unwrap_or((user, user));
        let env = args("ENV ").into_iter().filter_map(|kv| kv.split_once('='));
        let port = |p: &str| p.trim_end_matches("/tcp").parse().unwrap();
        Image {
            uid: uid.parse().expect("a numeric uid"),
            gid: gid.parse().expect("a numeric gid"),
            env: env.map(|(k, v)| (k.into(), v.into())).collect(),
            exposed: args("EXPOSE ").iter().map(|p| port(p)).collect(),
        }
    }
}

/// The example: the manifest's text and objects, and the image its Deployment runs.
struct Example {
    text: String,
    docs: Vec<Value>,
    image: Image,
}

impl Example {
    fn load() -> Example {
        let text = read(MANIFEST);
        let docs = serde_norway::Deserializer::from_str(&text)
            .map(|doc| Value::deserialize(doc).unwrap())
            .filter(|doc| !doc.is_null()) // the leading comment block
            .collect();
        let image = Image::load();
        Example { text, docs, image }
    }

    #[track_caller]
    fn one(&self, kind: &str) -> &Value {
        let found: Vec<&Value> = self.docs.iter().filter(|d| d["kind"] == kind).collect();
        assert_eq!(found.len(), 1, "{} {kind} objects, not one", found.len());
        found[0]
    }

    fn pod(&self) -> &Value {
        &self.one("Deployment")["spec"]["template"]["spec"]
    }

    /// Every container of the pod, init containers included.
    fn containers(&self) -> impl Iterator<Item = &Value> {
        items(&self.pod()["initContainers"]).chain(items(&self.pod()["containers"]))
    }

    /// The pod's one container, which runs leasehold.
    fn leasehold(&self) -> &Value {
        match self.pod()["containers"].as_sequence().map(Vec::as_slice) {
            Some([one]) if one["name"] == "leasehold" => one,
            other => panic!("not one container named leasehold: {other:?}"),
        }
    }

    /// A variable as the leasehold process sees it: the container's (a literal, the pod's name or
    /// a key of the manifest's Secret), else the image's.
    fn env(&self, name: &str) -> Option<String> {
        let Some(var) = items(&self.leasehold()["env"]).find(|e| e["name"] == name) else {
            return self.image.env.get(name).cloned();
        };
        let (from, secret) = (&var["valueFrom"], self.one("Secret"));
        Some(if let Some(value) = var["value"].as_str() {
            value.into()
        } else if from["fieldRef"]["fieldPath"] == "metadata.name" {
            POD_NAME.into()
        } else if from["secretKeyRef"]["name"] == secret["metadata"]["name"] {
            text(&secret["stringData"][text(&from["secretKeyRef"]["key"])]).into()
        } else {
            panic!("{name} is from neither the pod's name nor the Secret: {var:?}")
        })
    }

    /// The ConfigMap's `leasehold.toml`, parsed as the binary parses its config file (unknown
    /// keys refused).
    fn config_file(&self) -> Layer {
        toml::from_str(text(&self.one("ConfigMap")["data"]["leasehold.toml"])).unwrap()
    }

    /// The settings the process runs with, resolved and validated as by `leasehold run`: the
    /// config file under the `LEASEHOLD_*` variables of the image and the container.
    fn config(&self) -> Config {
        let env = |name| self.env(name);
        let duration = |name| env(name).map(|v| humantime::parse_duration(&v).unwrap());
        let mut flags = Layer {
            database_url: env("LEASEHOLD_DATABASE_URL").as_deref().map(Into::into),
            replica_id: env("LEASEHOLD_REPLICA_ID"),
            http: env("LEASEHOLD_HTTP").map(|v| v.parse().unwrap()),
            plugins: env("LEASEHOLD_PLUGINS").map(PathBuf::from),
            cache_dir: env("LEASEHOLD_CACHE_DIR").map(PathBuf::from),
            shutdown_grace: duration("LEASEHOLD_SHUTDOWN_GRACE"),
            ..Default::default()
        };
        flags.timing.ttl = duration("LEASEHOLD_TTL");
        let file = self.config_file();
        // Without either, the binary caches under the image's XDG_CACHE_HOME, not the test's.
        if flags.cache_dir.is_none() && file.cache_dir.is_none() {
            let xdg = env("XDG_CACHE_HOME").unwrap();
            flags.cache_dir = Some(Path::new(&xdg).join("leasehold/components"));
        }
        Config::resolve(file, flags).unwrap_or_else(|e| panic!("the pod's config: {e}"))
    }

    /// The pause of the preStop hook: `exec: sleep N` or `sleep: {seconds: N}`.
    fn pre_stop(&self) -> Duration {
        let hook = &self.leasehold()["lifecycle"]["preStop"];
        let seconds = match hook["exec"]["command"].as_sequence().map(Vec::as_slice) {
            Some([sleep, n]) if sleep == "sleep" => text(n).parse().ok(),
            _ => hook["sleep"]["seconds"].as_u64(),
        };
        Duration::from_secs(seconds.expect("a preStop hook that sleeps"))
    }

    /// Set, not the implicit 30 s.
    fn grace_period(&self) -> Duration {
        let seconds = self.pod()["terminationGracePeriodSeconds"].as_u64();
        Duration::from_secs(seconds.expect("terminationGracePeriodSeconds"))
    }

    /// The container's mount of the volume `is_source` picks.
    #[track_caller]
    fn mount_of(&self, is_source: impl Fn(&Value) -> bool) -> &Value {
        let volume = items(&self.pod()["volumes"]).find(|v| is_source(v));
        let name = &volume.expect("such a volume")["name"];
        let mounts = &self.leasehold()["volumeMounts"];
        items(mounts).find(|m| m["name"] == *name).expect("mounted")
    }
}

#[test]
fn every_object_passes_strict_schema_validation_offline() {
    let example = Example::load();
    let said = validate(&root().join(MANIFEST)).unwrap_or_else(|e| panic!("{MANIFEST}:\n{e}"));
    // Every object was checked: the script counts the objects its YAML loader sees (the ones
    // these tests see) against the validator's verdicts.
    let counted = format!("{} objects valid against Kubernetes", example.docs.len());
    assert!(said.contains(&counted), "{said}");
    assert!(said.contains("(strict)"), "{said}");
}

#[test]
fn the_validator_rejects_broken_copies_of_the_manifest() {
    let dir = tempfile::tempdir().unwrap();
    let (original, copy) = (read(MANIFEST), dir.path().join("leasehold.yaml"));
    // The unbroken copy passes: each failure below is its breakage's.
    std::fs::write(&copy, &original).unwrap();
    validate(&copy).unwrap();
    // (what is replaced, by what, what the validator's message must name)
    let pdb = "kind: PodDisruptionBudget";
    let repeated = "imagePullPolicy: IfNotPresent\n          imagePullPolicy: Always";
    for (from, to, named) in [
        ("runAsNonRoot: true", "runAsNonroot: true", "runAsNonroot"), // a misspelt field
        (pdb, "kind: PodDisruptionBudgt", "PodDisruptionBudgt"),      // a misspelt kind
        ("replicas: 3", "replicas: three", "three"),                  // a wrong type
        ("imagePullPolicy: IfNotPresent", repeated, "imagePullPolicy"), // a repeated key
    ] {
        assert!(original.contains(from), "{MANIFEST} no longer has {from:?}");
        std::fs::write(&copy, original.replacen(from, to, 1)).unwrap();
        match validate(&copy) {
            Ok(said) => panic!("{to:?} is accepted:\n{said}"),
            Err(said) => assert!(said.contains(named), "{to:?}: {said}"),
        }
    }
}

#[test]
fn the_config_loads_with_the_url_from_the_secret_and_the_pods_name() {
    let example = Example::load();
    let config = example.config();
    assert_eq!(config.database_url.backend(), "postgres");
    // Readable in logs and `leasehold leases list`; the binary adds a suffix per start.
    assert_eq!(config.replica_id, POD_NAME);
    // The password reaches the process from the Secret alone, never through the ConfigMap.
    let url = items(&example.leasehold()["env"]).find(|e| e["name"] == "LEASEHOLD_DATABASE_URL");
    holds(url.unwrap(), "valueFrom: {secretKeyRef: {key: url}}");
    assert!(example.config_file().database_url.is_none());
}

#[test]
fn every_probe_asks_the_host_through_the_named_port() {
    let example = Example::load();
    let (container, listens) = (example.leasehold(), example.config().http);
    let probes = "
        startupProbe: {httpGet: {path: /healthz, port: http}}
        livenessProbe: {httpGet: {path: /healthz, port: http}}
        readinessProbe: {httpGet: {path: /readyz, port: http}}";
    holds(container, probes);
    let port = items(&container["ports"]).find(|p| p["name"] == "http");
    assert_eq!(port.unwrap()["containerPort"], u64::from(listens.port()));
    // Probes and Prometheus reach the pod's IP, on the port the image exposes.
    assert!(listens.ip().is_unspecified(), "{listens}");
    assert!(example.image.exposed.contains(&listens.port()));
    // The ConfigMap says so too (the image's LEASEHOLD_HTTP wins over it).
    assert_eq!(example.config_file().http, Some(listens));
    // The Service reaches the port by its name too.
    let service = &example.one("Service")["spec"]["ports"];
    assert!(items(service).any(|p| p["targetPort"] == "http"));
    // The startup probe gives the slowest start (plugins compiled on a cold cache) a minute.
    let startup = &container["startupProbe"];
    let period = startup["periodSeconds"].as_u64().unwrap_or(10);
    let patience = period * startup["failureThreshold"].as_u64().unwrap_or(3);
    assert!(patience >= 60, "it gives up after {patience} s");
}

#[test]
fn the_pod_runs_as_the_images_unprivileged_user_and_cannot_escalate() {
    let example = Example::load();
    let (pod, Image { uid, gid, .. }) = (example.pod(), &example.image);
    assert_ne!(*uid, 0, "the image runs as root");
    // Set for the whole pod (its volumes group-owned by fsGroup), and left to it.
    let security = &pod["securityContext"];
    let identity = format!(
        "{{runAsNonRoot: true, runAsUser: {uid}, runAsGroup: {gid}, fsGroup: {gid},
          seccompProfile: {{type: RuntimeDefault}}}}"
    );
    holds(security, &identity);
    for namespace in ["hostNetwork", "hostPID", "hostIPC"] {
        assert_ne!(pod[namespace], true, "{namespace}");
    }
    for container in example.containers() {
        let own = &container["securityContext"];
        for field in ["runAsNonRoot", "runAsUser", "runAsGroup", "seccompProfile"] {
            let kept = own[field].is_null() || own[field] == security[field];
            assert!(kept, "{:?} overrides the pod's {field}", container["name"]);
        }
        let confined = "
            readOnlyRootFilesystem: true
            allowPrivilegeEscalation: false
            capabilities: {drop: [ALL], add: null}";
        holds(own, confined);
        assert_ne!(own["privileged"], true);
    }
}

#[test]
fn the_grace_period_outlasts_the_pre_stop_pause_and_the_ordered_release() {
    let example = Example::load();
    let (grace, pause) = (example.grace_period(), example.pre_stop());
    let needed = pause + example.config().shutdown_grace;
    // Else the kubelet's SIGKILL can land mid-release, and the standbys wait out the ttl.
    assert!(grace > needed, "{grace:?}, not above {needed:?}");
    // The ConfigMap states shutdown_grace, so the figure the grace period is sized from is in
    // the same file rather than a default.
    assert!(example.config_file().shutdown_grace.is_some());
}

#[test]
fn a_disruption_budget_lets_one_of_the_three_replicas_go_at_a_time() {
    let example = Example::load();
    let deployment = example.one("Deployment");
    let pdb = example.one("PodDisruptionBudget");
    // One leader and two standbys: a drain proceeds, and two remain.
    assert_eq!(deployment["spec"]["replicas"], 3);
    let budget = "{maxUnavailable: 1, minAvailable: null, selector: {matchExpressions: null}}";
    holds(&pdb["spec"], budget); // only matchLabels is checked below
    // It counts the pods of its own namespace, with every label it names (none would be all).
    let namespace = |object: &Value| object["metadata"]["namespace"].clone();
    assert_eq!(namespace(pdb), namespace(deployment));
    let selected = &pdb["spec"]["selector"]["matchLabels"];
    assert_eq!(*selected, deployment["spec"]["selector"]["matchLabels"]);
    let labels = &deployment["spec"]["template"]["metadata"]["labels"];
    let wanted = selected.as_mapping().filter(|m| !m.is_empty());
    for (key, value) in wanted.expect("the budget's matchLabels") {
        assert_eq!(&labels[key], value, "the pods lack the label {key:?}");
    }
}

/// A resource quantity (`100m`, `"1"`, `128Mi`, `1G`) in base units.
#[track_caller]
fn quantity(v: &Value) -> f64 {
    if let Some(n) = v.as_f64() {
        return n;
    }
    let s = text(v);
    let (number, suffix) = s.split_at(s.find(char::is_alphabetic).unwrap_or(s.len()));
    let power = |of: &str| 1 + of.find(&suffix[..1]).unwrap() as i32;
    let factor = match suffix {
        "" => 1.0,
        "m" => 1e-3,
        "k" | "M" | "G" | "T" => 1e3f64.powi(power("kMGT")),
        "Ki" | "Mi" | "Gi" | "Ti" => 1024f64.powi(power("KMGT")),
        _ => panic!("{s} is not a quantity"),
    };
    number.parse::<f64>().unwrap() * factor
}

#[test]
fn every_container_requests_at_most_its_limits_and_each_figure_gives_its_reason() {
    let example = Example::load();
    let mut figures = 0;
    for container in example.containers() {
        let resources = &container["resources"];
        for resource in ["cpu", "memory"] {
            let request = quantity(&resources["requests"][resource]);
            let limit = quantity(&resources["limits"][resource]);
            assert!(request <= limit, "{:?}: {resource}", container["name"]);
            figures += 2;
        }
    }
    // In the text, each figure has a comment of its own: the comment lines right above it, at
    // its indentation, or one after it on the same line.
    let lines: Vec<&str> = example.text.lines().collect();
    let indent = |l: &str| l.len() - l.trim_start().len();
    let (mut found, mut unexplained) = (0, Vec::new());
    for (i, line) in lines.iter().enumerate() {
        let trimmed = line.trim_start();
        if !(trimmed.starts_with("cpu:") || trimmed.starts_with("memory:")) {
            continue;
        }
        found += 1;
        let beside = trimmed.split_once(" #").map(|(_, comment)| comment);
        let above = lines[..i].iter().rev().map_while(|above| {
            let comment = above.trim_start().strip_prefix('#')?;
            (indent(above) == indent(line)).then_some(comment)
        });
        let reason = beside.into_iter().chain(above);
        if reason.flat_map(str::split_whitespace).count() < 8 {
            unexplained.push(format!("line {}: {trimmed}", i + 1));
        }
    }
    assert_eq!(found, figures, "cpu: or memory: lines that are no figures");
    assert!(unexplained.is_empty(), "no reason given: {unexplained:#?}");
}

#[test]
fn the_volumes_are_where_the_host_reads_its_config_and_plugins_and_writes_its_cache() {
    let example = Example::load();
    let config = example.config();
    // LEASEHOLD_CONFIG names the ConfigMap's file, where its volume is mounted.
    let config_map = &example.one("ConfigMap")["metadata"]["name"];
    let mount = example.mount_of(|v| v["configMap"]["name"] == *config_map);
    let named = example.env("LEASEHOLD_CONFIG").unwrap();
    assert_eq!(path_of(mount).join("leasehold.toml"), Path::new(&named));
    // The plugins come read-only from the claim, where the image and the ConfigMap both say.
    let claim = &example.one("PersistentVolumeClaim")["metadata"]["name"];
    let plugins = example.mount_of(|v| v["persistentVolumeClaim"]["claimName"] == *claim);
    assert_eq!(plugins["readOnly"], true);
    assert_eq!(config.plugins.as_deref(), Some(path_of(plugins)));
    assert_eq!(example.config_file().plugins, config.plugins);
    // The binary's default cache is $XDG_CACHE_HOME/leasehold/components; the image owns
    // $XDG_CACHE_HOME/leasehold for its user, so that is where the writable volume goes.
    let cache = example.mount_of(|v| !v["emptyDir"].is_null());
    let xdg = example.env("XDG_CACHE_HOME").unwrap();
    assert_eq!(path_of(cache), Path::new(&xdg).join("leasehold"));
    assert_ne!(cache["readOnly"], true);
    let cache_dir = config.cache_dir.unwrap();
    assert!(cache_dir.starts_with(path_of(cache)), "{cache_dir:?}");
}

/// Every number written right after `phrase` in `text` (line breaks read as spaces).
fn figures_after(text: &str, phrase: &str) -> Vec<u64> {
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let after = flat.split(phrase).skip(1);
    let digits = after.map(|rest| rest.split(|c: char| !c.is_ascii_digit()).next());
    digits.filter_map(|d| d?.parse().ok()).collect()
}

#[test]
fn the_readme_and_the_comments_quote_the_manifests_figures_and_names() {
    let (example, readme) = (Example::load(), read(README));
    let (manifest, config) = (&example.text, example.config());
    let grace = example.grace_period().as_secs();
    let pause = example.pre_stop().as_secs();
    let (release, ttl) = (config.shutdown_grace.as_secs(), config.timing.ttl.as_secs());
    for (file, phrase, value) in [
        (README, "`terminationGracePeriodSeconds` (", grace),
        (README, "preStop (", pause),
        (README, "`shutdown_grace` (", release),
        (README, "the ttl runs out, at most ", ttl),
        (README, "cycles between about ", ttl),
        (MANIFEST, "terminationGracePeriodSeconds (", grace),
        (MANIFEST, "preStop (", pause),
        (MANIFEST, "preStop pause (", pause),
        (MANIFEST, "shutdown_grace (", release),
        (MANIFEST, "one ttl (", ttl),
    ] {
        let found = figures_after(if file == README { &readme } else { manifest }, phrase);
        assert!(!found.is_empty(), "{file} no longer says {phrase:?}…");
        let agree = found.iter().all(|&f| f == value);
        assert!(agree, "{file}: {phrase:?}… {found:?}, not {value}");
    }
    let spare = format!(": {grace} leaves {} s to spare", grace - pause - release);
    assert!(manifest.contains(&spare), "{MANIFEST}: not {spare:?}");
    // The objects and labels the commands name exist. A prefix inside a path (the tests'
    // `tests/tests/deployment/`) names no object.
    let names = [("deployment/", "Deployment"), ("deploy/", "Deployment")];
    for (prefix, kind) in names.into_iter().chain([("service/", "Service")]) {
        let object = text(&example.one(kind)["metadata"]["name"]);
        for (at, _) in readme.match_indices(prefix) {
            if readme[..at].ends_with('/') {
                continue;
            }
            let rest = &readme[at + prefix.len()..];
            let named = rest.split(|c: char| !c.is_ascii_alphanumeric() && c != '-');
            assert_eq!(named.into_iter().next(), Some(object), "{prefix}");
        }
    }
    let labels = &example.one("Deployment")["spec"]["template"]["metadata"]["labels"];
    for rest in readme.split(" -l ").skip(1) {
        let selector = rest.split_whitespace().next().unwrap();
        let (key, value) = selector.split_once('=').expect("-l KEY=VALUE");
        assert_eq!(labels[key], value, "the README selects pods by {selector}");
    }
}

#[test]
fn the_readmes_loader_pod_validates_and_writes_where_the_replicas_read() {
    let (example, readme) = (Example::load(), read(README));
    let after = |marker| readme.split(marker).nth(1).expect(marker);
    let name = after("kubectl run ").split(' ').next().unwrap();
    let overrides = after("--overrides='").split('\'').next().unwrap();
    let overrides: serde_json::Value = serde_json::from_str(overrides).unwrap();
    // What `kubectl run NAME --restart=Never --overrides=…` sends: its Pod with the overrides
    // merged in (a JSON merge patch: the containers list is replaced as a whole).
    let mut spec = overrides["spec"].clone();
    spec["restartPolicy"] = "Never".into();
    let pod = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"run": name}},
        "spec": spec,
    });
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("loader.json");
    std::fs::write(&file, pod.to_string()).unwrap();
    validate(&file).unwrap_or_else(|e| panic!("the README's loader pod:\n{e}"));
    // It mounts the claim, writable, where the replicas look for the plugins.
    let pod = serde_norway::to_value(pod).unwrap();
    let volume = &pod["spec"]["volumes"][0];
    let claim = &example.one("PersistentVolumeClaim")["metadata"]["name"];
    assert_eq!(volume["persistentVolumeClaim"]["claimName"], *claim);
    let mounts = &pod["spec"]["containers"][0]["volumeMounts"];
    let mount = items(mounts).find(|m| m["name"] == volume["name"]).unwrap();
    let plugins = example.config().plugins.unwrap();
    assert_eq!(path_of(mount), plugins);
    assert_ne!(mount["readOnly"], true, "the loader must write the plugins");
    let copies = readme.lines().filter_map(|l| l.strip_prefix("kubectl cp "));
    let targets: Vec<&str> = copies.filter_map(|l| l.split(' ').nth(1)).collect();
    assert!(!targets.is_empty(), "the README copies no plugin");
    for target in targets {
        let (pod_name, path) = target.split_once(':').expect("kubectl cp FILE POD:PATH");
        assert_eq!(pod_name, name);
        assert_eq!(Path::new(path).parent(), Some(&*plugins), "{target}");
    }
}

#[test]
fn the_readmes_network_policy_validates_and_admits_to_the_replicas_http_port() {
    let (example, readme) = (Example::load(), read(README));
    let yaml = readme
        .split("```yaml\n")
        .find(|block| block.starts_with("apiVersion: networking.k8s.io/v1"))
        .expect("the README's NetworkPolicy")
        .split("```")
        .next()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("policy.yaml");
    std::fs::write(&file, yaml).unwrap();
    validate(&file).unwrap_or_else(|e| panic!("the README's NetworkPolicy:\n{e}"));
    let policy: Value = serde_norway::from_str(yaml).unwrap();
    assert_eq!(policy["kind"], "NetworkPolicy");
    // It selects the Deployment's pods, and opens the port the host listens on.
    let labels = &example.one("Deployment")["spec"]["template"]["metadata"]["labels"];
    let selector = policy["spec"]["podSelector"]["matchLabels"]
        .as_mapping()
        .unwrap();
    assert!(!selector.is_empty());
    for (key, value) in selector {
        assert_eq!(labels[key], *value, "the policy selects pods by {key:?}");
    }
    let port = u64::from(example.config().http.port());
    let ports: Vec<&Value> = items(&policy["spec"]["ingress"])
        .flat_map(|rule| items(&rule["ports"]))
        .collect();
    assert!(
        ports.iter().any(|p| p["port"] == port),
        "the policy opens {ports:?}, not {port}"
    );
}
