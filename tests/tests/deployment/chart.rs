//! The Helm chart (`charts/leasehold/`), rendered offline with Helm's own library
//! (`scripts/helm-render.sh`) and checked without a cluster: for 1, 2, 3 and 5 replicas in both
//! modes and both ways of routing traffic, every manifest passes the Kubernetes API's schemas
//! strictly (`scripts/kubernetes-validate.sh`); a rollout never waits for a standby to become
//! Ready and a disruption budget never keeps the holder's node from being drained; the Services
//! select the pods and name their ports; no RBAC object is needed; the config each pod gets
//! loads in the host's own loader; the optional NetworkPolicy opens the database and DNS alone;
//! a bad or contradictory value fails the render naming it.

#![allow(clippy::unwrap_used, missing_docs)]

use std::ffi::OsStr;
use std::path::PathBuf;
use std::process::Command;

use leasehold::config::{Config, Layer};
use serde::Deserialize;
use serde_norway::Value;

const CHART: &str = "charts/leasehold";

fn root() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

/// Runs `scripts/NAME` with `args`: its stdout if it succeeded, else its stderr.
fn script(name: &str, args: &[&OsStr]) -> Result<String, String> {
    let out = Command::new("bash")
        .arg(root().join("scripts").join(name))
        .args(args)
        .output()
        .unwrap();
    let said = |bytes| String::from_utf8_lossy(bytes).into_owned();
    match out.status.success() {
        true => Ok(said(&out.stdout)),
        false => Err(said(&out.stderr)),
    }
}

/// The chart rendered with `values` (YAML) over its defaults: its objects, or Helm's message.
pub(super) fn render(values: &str) -> Result<Vec<Value>, String> {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("values.yaml");
    std::fs::write(&file, values).unwrap();
    let chart = root().join(CHART);
    let stream = script("helm-render.sh", &[chart.as_os_str(), file.as_os_str()])?;
    let objects = serde_norway::Deserializer::from_str(&stream)
        .map(|doc| Value::deserialize(doc).unwrap())
        .filter(|v| !v.is_null())
        .collect();
    Ok(objects)
}

/// The values of one case: a mode, a number of replicas and a way to route traffic.
fn case(mode: &str, replicas: u32, traffic: &str) -> String {
    let app = match mode {
        "beside-app" => "app:\n  image: registry.example.com/web:1.0.0\n",
        _ => "",
    };
    format!("mode: {mode}\nreplicas: {replicas}\ntraffic: {traffic}\n{app}")
}

/// Every case the chart must render: both modes, 1, 2, 3 and 5 replicas, both routes, but the
/// holder-only route on one replica, which must fail (`a_bad_value_fails_the_render_naming_it`).
fn cases() -> Vec<(String, u32, String)> {
    let mut cases = Vec::new();
    for mode in ["replicas", "beside-app"] {
        for replicas in [1, 2, 3, 5] {
            for traffic in ["all", "holder"] {
                if traffic == "holder" && replicas == 1 {
                    continue;
                }
                cases.push((mode.to_string(), replicas, traffic.to_string()));
            }
        }
    }
    cases
}

fn of_kind<'a>(objects: &'a [Value], kind: &str) -> Vec<&'a Value> {
    objects.iter().filter(|o| o["kind"] == kind).collect()
}

pub(super) fn one<'a>(objects: &'a [Value], kind: &str) -> &'a Value {
    match of_kind(objects, kind).as_slice() {
        [only] => only,
        found => panic!("{} objects of kind {kind}", found.len()),
    }
}

/// A value that is an integer, or a percentage of `of` (rounded as Kubernetes rounds it: up for
/// a budget's maxUnavailable and a rollout's maxSurge, down for a rollout's maxUnavailable).
fn count(v: &Value, of: u64, round_up: bool) -> u64 {
    if let Some(n) = v.as_u64() {
        return n;
    }
    let pct: u64 = v.as_str().unwrap().trim_end_matches('%').parse().unwrap();
    match round_up {
        true => (pct * of).div_ceil(100),
        false => pct * of / 100,
    }
}

#[test]
fn every_case_renders_and_every_manifest_passes_the_api_schemas_strictly() {
    for (mode, replicas, traffic) in cases() {
        render_valid(&case(&mode, replicas, &traffic));
    }
}

#[test]
fn a_rollout_never_waits_for_a_standby_and_a_drain_can_always_take_the_holders_node() {
    for (mode, replicas, traffic) in cases() {
        let objects = render(&case(&mode, replicas, &traffic)).unwrap();
        let at = format!("{mode}, {replicas} replicas, traffic {traffic}");
        let deployment = one(&objects, "Deployment");
        let rolling = &deployment["spec"]["strategy"]["rollingUpdate"];
        let replicas = u64::from(replicas);
        let max_unavailable = count(&rolling["maxUnavailable"], replicas, false);
        let max_surge = count(&rolling["maxSurge"], replicas, true);
        assert!(max_surge >= 1, "{at}: a rollout starts a new pod first");
        let budget = one(&objects, "PodDisruptionBudget");
        assert_eq!(
            budget["spec"]["unhealthyPodEvictionPolicy"], "AlwaysAllow",
            "{at}: an unready pod is always evictable"
        );
        // The pods a budget wants kept Ready, of `replicas` (PodDisruptionBudget's own rule).
        let spec = &budget["spec"];
        let keep = match spec.get("minAvailable") {
            Some(min) => count(min, replicas, true),
            None => replicas.saturating_sub(count(&spec["maxUnavailable"], replicas, true)),
        };
        match traffic.as_str() {
            // Only the holder is ever Ready: the rollout may stop every standby without waiting
            // for one to become Ready, and an eviction of the holder's pod (the one Ready pod)
            // must be allowed, or its node could never be drained.
            "holder" => {
                assert!(max_unavailable >= replicas - 1, "{at}: {rolling:?}");
                assert_eq!(keep, 0, "{at}: the budget keeps the holder: {spec:?}");
            }
            // Every replica that can take over is Ready: the rollout replaces one at a time
            // without ever going below the replicas asked for, and a drain takes one at a time.
            _ => {
                assert_eq!(max_unavailable, 0, "{at}: {rolling:?}");
                assert_eq!(keep, replicas - 1, "{at}: {spec:?}");
            }
        }
    }
}

#[test]
fn the_services_select_the_pods_by_their_own_labels_and_ports_and_no_rbac_is_rendered() {
    for (mode, replicas, traffic) in cases() {
        let objects = render(&case(&mode, replicas, &traffic)).unwrap();
        let at = format!("{mode}, {replicas} replicas, traffic {traffic}");
        let pod = &one(&objects, "Deployment")["spec"]["template"];
        let labels = pod["metadata"]["labels"].as_mapping().unwrap();
        let ports: Vec<&Value> = pod["spec"]["containers"]
            .as_sequence()
            .unwrap()
            .iter()
            .flat_map(|c| c["ports"].as_sequence().unwrap())
            .map(|p| &p["name"])
            .collect();
        let services = of_kind(&objects, "Service");
        // leasehold's port, the headless peers, and the app's in beside-app mode.
        let expected = if mode == "beside-app" { 3 } else { 2 };
        assert_eq!(services.len(), expected, "{at}");
        let test_pod = one(&objects, "Pod")["metadata"]["labels"]
            .as_mapping()
            .unwrap();
        for service in services {
            let selector = service["spec"]["selector"].as_mapping().unwrap();
            assert!(
                selector.iter().any(|(k, v)| test_pod.get(k) != Some(v)),
                "{at}: the test pod is not one of the Service's endpoints"
            );
            for (key, value) in service["spec"]["selector"].as_mapping().unwrap() {
                assert_eq!(labels.get(key), Some(value), "{at}: selector {key:?}");
            }
            for port in service["spec"]["ports"].as_sequence().unwrap() {
                assert!(ports.contains(&&port["targetPort"]), "{at}: {port:?}");
            }
        }
        for kind in [
            "ServiceAccount",
            "Role",
            "RoleBinding",
            "ClusterRole",
            "ClusterRoleBinding",
        ] {
            assert!(of_kind(&objects, kind).is_empty(), "{at}: a {kind}");
        }
    }
}

/// The pod's config as `leasehold run` resolves it: the ConfigMap's file under the variables
/// the Deployment sets (the database URL from its Secret, the pod's name).
fn pod_config(objects: &[Value]) -> Config {
    let file: Layer = toml::from_str(
        one(objects, "ConfigMap")["data"]["leasehold.toml"]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    let flags = Layer {
        database_url: Some("postgres://leasehold@db.example/leasehold".into()),
        replica_id: Some("leasehold-7d9f8c-abcde".into()),
        ..Default::default()
    };
    Config::resolve(file, flags).unwrap_or_else(|e| panic!("the pod's config: {e}"))
}

#[test]
fn each_pod_gets_a_config_the_host_loads_with_the_values_leases_ttl_and_app() {
    let objects = render(
        "leases: [orders, billing]\nttl: 9s\nshutdownGrace: 45s\nplugins:\n  claimName: plugins\n",
    )
    .unwrap();
    let config = pod_config(&objects);
    let leases: Vec<&str> = config.leases.iter().map(|l| l.as_str()).collect();
    assert_eq!(leases, ["orders", "billing"]);
    assert_eq!(config.timing.ttl.as_secs(), 9);
    assert_eq!(config.shutdown_grace.as_secs(), 45);
    assert_eq!(config.plugins, Some(PathBuf::from("/plugins")));
    let pod = &one(&objects, "Deployment")["spec"]["template"]["spec"];
    // The grace period outlasts the preStop pause (2 s) and the ordered stop.
    assert_eq!(pod["terminationGracePeriodSeconds"], 55);
    let mounts = pod["containers"][0]["volumeMounts"].as_sequence().unwrap();
    assert!(
        mounts
            .iter()
            .any(|m| m["mountPath"] == "/plugins" && m["readOnly"] == true),
        "{mounts:?}"
    );

    let objects = render(&case("beside-app", 3, "holder")).unwrap();
    let config = pod_config(&objects);
    assert_eq!(config.services.len(), 1, "the app as the lease's service");
    let containers = one(&objects, "Deployment")["spec"]["template"]["spec"]["containers"]
        .as_sequence()
        .unwrap()
        .clone();
    let leasehold = containers
        .iter()
        .find(|c| c["name"] == "leasehold")
        .unwrap();
    assert_eq!(
        leasehold["readinessProbe"]["httpGet"]["path"], "/readyz/leases/leader",
        "only the holder is Ready"
    );
    assert!(containers.iter().any(|c| c["name"] == "app"));
}

#[test]
fn the_database_url_comes_from_a_secret_given_or_made_from_the_value() {
    let env_of = |objects: &[Value]| {
        let containers = &one(objects, "Deployment")["spec"]["template"]["spec"]["containers"];
        let env = containers[0]["env"].as_sequence().unwrap().clone();
        let url = env
            .into_iter()
            .find(|e| e["name"] == "LEASEHOLD_DATABASE_URL")
            .unwrap();
        url["valueFrom"]["secretKeyRef"].clone()
    };
    let objects = render("database:\n  secret:\n    name: pg\n    key: dsn\n").unwrap();
    assert!(of_kind(&objects, "Secret").is_empty(), "the operator's own");
    assert_eq!(env_of(&objects)["name"], "pg");
    assert_eq!(env_of(&objects)["key"], "dsn");
    let objects = render("database:\n  url: postgres://u:pw@db/leasehold\n").unwrap();
    let secret = one(&objects, "Secret");
    assert_eq!(secret["stringData"]["url"], "postgres://u:pw@db/leasehold");
    assert_eq!(env_of(&objects)["name"], secret["metadata"]["name"]);
}

/// The chart rendered with `values`, every manifest validated strictly: its objects.
fn render_valid(values: &str) -> Vec<Value> {
    let objects = render(values).unwrap();
    let stream: Vec<String> = objects
        .iter()
        .map(|o| serde_norway::to_string(o).unwrap())
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("rendered.yaml");
    std::fs::write(&file, format!("---\n{}", stream.join("---\n"))).unwrap();
    if let Err(said) = script("kubernetes-validate.sh", &[file.as_os_str()]) {
        panic!("{values}: {said}");
    }
    objects
}

#[test]
fn a_network_policy_lets_the_pods_reach_the_database_and_dns_alone_and_metrics_from_the_peers_named()
 {
    let monitoring = "kubernetes.io/metadata.name: monitoring";
    let objects = render_valid(&format!(
        "networkPolicy:\n  enabled: true\n  database:\n    cidr: 10.0.12.0/24\n    port: 6432\n  metricsFrom:\n    - namespaceSelector:\n        matchLabels:\n          {monitoring}\n"
    ));
    let policy = &one(&objects, "NetworkPolicy")["spec"];
    let pod = &one(&objects, "Deployment")["spec"]["template"]["metadata"]["labels"];
    for (key, value) in policy["podSelector"]["matchLabels"].as_mapping().unwrap() {
        assert_eq!(&pod[key], value, "the policy selects the pods");
    }
    let egress = policy["egress"].as_sequence().unwrap();
    assert_eq!(egress.len(), 2, "{egress:?}");
    assert_eq!(egress[0]["to"][0]["ipBlock"]["cidr"], "10.0.12.0/24");
    assert_eq!(egress[0]["ports"][0]["port"], 6432);
    assert_eq!(
        egress[1]["to"][0]["podSelector"]["matchLabels"]["k8s-app"],
        "kube-dns"
    );
    assert!(
        egress[1]["ports"]
            .as_sequence()
            .unwrap()
            .iter()
            .all(|p| p["port"] == 53)
    );
    let ingress = policy["ingress"].as_sequence().unwrap();
    assert_eq!(ingress.len(), 2, "{ingress:?}");
    assert_eq!(ingress[1]["ports"][0]["port"], 9464);
    assert_eq!(
        ingress[1]["from"][0]["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"],
        "monitoring"
    );

    // Nobody named: the port opens to `helm test`'s pod alone (a rule without `from` would open
    // it to all).
    let objects =
        render_valid("networkPolicy:\n  enabled: true\n  database:\n    cidr: 10.0.12.7/32\n");
    let policy = &one(&objects, "NetworkPolicy")["spec"];
    let ingress = policy["ingress"].as_sequence().unwrap();
    assert_eq!(ingress.len(), 1, "{policy:?}");
    let test_pod = &one(&objects, "Pod")["metadata"]["labels"];
    for (key, value) in ingress[0]["from"][0]["podSelector"]["matchLabels"]
        .as_mapping()
        .unwrap()
    {
        assert_eq!(&test_pod[key], value, "the rule admits the test pod");
    }

    // Beside an app the policy would bind the app's egress too: ingress alone, the app's port
    // open to its Service's traffic.
    let objects = render_valid(
        "mode: beside-app\napp:\n  image: web:1\n  port: 8081\nnetworkPolicy:\n  enabled: true\n",
    );
    let policy = &one(&objects, "NetworkPolicy")["spec"];
    assert_eq!(
        policy["policyTypes"],
        serde_norway::from_str::<Value>("[Ingress]").unwrap()
    );
    let ingress = policy["ingress"].as_sequence().unwrap();
    assert!(
        ingress
            .iter()
            .any(|r| r["ports"][0]["port"] == 8081 && r.get("from").is_none()),
        "{ingress:?}"
    );
    assert!(
        of_kind(&render_valid("{}\n"), "NetworkPolicy").is_empty(),
        "off by default"
    );
}

#[test]
fn a_bad_value_fails_the_render_naming_it() {
    let refused = [
        ("bogus: 1\n", "'bogus' not allowed"),
        ("replicas: 0\n", "/replicas"),
        ("ttl: 15 seconds\n", "/ttl"),
        ("mode: sidecar\n", "/mode"),
        ("traffic: leader\n", "/traffic"),
        ("leases: [\"\"]\n", "/leases/0"),
        ("leases: []\n", "leases and groups are both empty"),
        (
            "leases: []\ngroups:\n  orders: 4\ntraffic: holder\n",
            "leases is empty: mode replicas with traffic holder",
        ),
        ("groups:\n  orders: 0\n", "/groups/orders"),
        ("groups:\n  a/b: 2\n", "invalid propertyName 'a/b'"),
        (
            "plugins:\n  claimName: p\n  image:\n    repository: reg/plugins\n",
            "plugins.claimName and plugins.image.repository are both set",
        ),
        (
            "mode: beside-app\napp:\n  image: web:1\nplugins:\n  claimName: p\n",
            "plugins are set but mode is beside-app",
        ),
        (
            "plugins:\n  image:\n    path: plugins\n",
            "/plugins/image/path",
        ),
        (
            "app:\n  resources:\n    limits:\n      gpu: 1\n",
            "'gpu' not allowed",
        ),
        (
            "monitoring:\n  serviceMonitor:\n    interval: 30 seconds\n",
            "/monitoring/serviceMonitor/interval",
        ),
        ("monitoring:\n  grafana: {}\n", "'grafana' not allowed"),
        ("database:\n  url: mysql://db\n", "/database/url"),
        ("image:\n  pullPolicy: Sometimes\n", "/image/pullPolicy"),
        ("resources:\n  limits:\n    gpu: 1\n", "'gpu' not allowed"),
        (
            "traffic: holder\nreplicas: 1\n",
            "traffic: holder with replicas: 1",
        ),
        (
            "podDisruptionBudget:\n  minAvailable: 1\n  maxUnavailable: 1\n",
            "podDisruptionBudget.minAvailable and podDisruptionBudget.maxUnavailable are both set",
        ),
        (
            "traffic: holder\npodDisruptionBudget:\n  maxUnavailable: 1\n",
            "podDisruptionBudget.maxUnavailable 1 with traffic: holder",
        ),
        (
            "traffic: holder\npodDisruptionBudget:\n  minAvailable: 1\n",
            "podDisruptionBudget.minAvailable 1 with traffic: holder",
        ),
        ("mode: beside-app\n", "mode: beside-app needs app.image"),
        (
            "app:\n  image: web:1\n",
            "app.image is set but mode is replicas",
        ),
        (
            "networkPolicy:\n  enabled: true\n",
            "networkPolicy.enabled needs networkPolicy.database.cidr",
        ),
        (
            "networkPolicy:\n  database:\n    cidr: 10.0.12.0\n",
            "/networkPolicy/database/cidr",
        ),
    ];
    for (values, says) in refused {
        match render(values) {
            Ok(_) => panic!("rendered with {values:?}"),
            Err(message) => assert!(message.contains(says), "{values:?}: {message}"),
        }
    }
}

#[test]
fn helm_lints_the_chart_without_an_error() {
    let chart = root().join(CHART);
    if let Err(said) = script("helm-render.sh", &[OsStr::new("--lint"), chart.as_os_str()]) {
        panic!("{said}");
    }
}

/// Runs `promtool ARGS` in `dir`; fails with its output.
fn promtool(dir: &std::path::Path, args: &[&str]) {
    let out = Command::new("promtool")
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| panic!("promtool: {e} (scripts/install-deps.sh installs it)"));
    assert!(
        out.status.success(),
        "promtool {args:?}:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn the_service_monitor_rules_and_dashboard_validate_and_are_the_projects_own() {
    let objects = render_valid(
        "monitoring:\n  serviceMonitor:\n    enabled: true\n    interval: 15s\n    labels:\n      release: kube-prometheus-stack\n  prometheusRule:\n    enabled: true\n  dashboard:\n    enabled: true\n",
    );
    // The ServiceMonitor selects the headless Service, which selects every pod, Ready or not.
    let monitor = one(&objects, "ServiceMonitor");
    assert_eq!(
        monitor["metadata"]["labels"]["release"],
        "kube-prometheus-stack"
    );
    let services = of_kind(&objects, "Service");
    let selected: Vec<&&Value> = services
        .iter()
        .filter(|s| {
            let labels = s["metadata"]["labels"].as_mapping().unwrap();
            monitor["spec"]["selector"]["matchLabels"]
                .as_mapping()
                .unwrap()
                .iter()
                .all(|(k, v)| labels.get(k) == Some(v))
        })
        .collect();
    assert_eq!(selected.len(), 1, "{selected:?}");
    let peers = &selected[0]["spec"];
    assert_eq!(peers["clusterIP"], "None");
    assert_eq!(peers["publishNotReadyAddresses"], true);
    let endpoint = &monitor["spec"]["endpoints"][0];
    assert_eq!(endpoint["port"], peers["ports"][0]["name"]);
    assert_eq!(
        (endpoint["path"].as_str(), endpoint["interval"].as_str()),
        (Some("/metrics"), Some("15s"))
    );

    // The rules are the example's, and pass promtool and the example's unit tests as rendered.
    let rules = &one(&objects, "PrometheusRule")["spec"];
    let example: Value = serde_norway::from_str(
        &std::fs::read_to_string(root().join("examples/prometheus/leasehold-alerts.yaml")).unwrap(),
    )
    .unwrap();
    assert_eq!(rules, &example);
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("leasehold-alerts.yaml"),
        serde_norway::to_string(rules).unwrap(),
    )
    .unwrap();
    std::fs::copy(
        root().join("examples/prometheus/leasehold-alerts.test.yaml"),
        dir.path().join("leasehold-alerts.test.yaml"),
    )
    .unwrap();
    promtool(dir.path(), &["check", "rules", "leasehold-alerts.yaml"]);
    promtool(dir.path(), &["test", "rules", "leasehold-alerts.test.yaml"]);

    // The dashboard is the example's, byte for byte, under the sidecar's label.
    let dashboards: Vec<&Value> = of_kind(&objects, "ConfigMap")
        .into_iter()
        .filter(|c| c["metadata"]["labels"]["grafana_dashboard"] == "1")
        .collect();
    assert_eq!(dashboards.len(), 1);
    let json = dashboards[0]["data"]["leasehold-dashboard.json"]
        .as_str()
        .unwrap();
    let file =
        std::fs::read_to_string(root().join("examples/grafana/leasehold-dashboard.json")).unwrap();
    assert_eq!(json.trim_end(), file.trim_end());
    serde_json::from_str::<serde_json::Value>(json).unwrap();

    let objects = render("{}\n").unwrap();
    for kind in ["ServiceMonitor", "PrometheusRule"] {
        assert!(of_kind(&objects, kind).is_empty(), "{kind} off by default");
    }
    assert_eq!(
        of_kind(&objects, "ConfigMap").len(),
        1,
        "no dashboard by default"
    );
}

#[test]
fn plugins_from_an_image_are_copied_where_the_host_reads_them_and_groups_reach_its_config() {
    let objects = render_valid(
        "groups:\n  orders: 12\n  billing: 3\nplugins:\n  image:\n    repository: registry.example.com/plugins\n    tag: \"1.4\"\n    path: /opt/plugins/\n",
    );
    let config = pod_config(&objects);
    assert_eq!(config.plugins, Some(PathBuf::from("/plugins")));
    let groups: Vec<(String, u32)> = config
        .groups
        .iter()
        .map(|g| (g.name.to_string(), g.shards))
        .collect();
    assert_eq!(groups, [("billing".into(), 3), ("orders".into(), 12)]);
    let pod = &one(&objects, "Deployment")["spec"]["template"]["spec"];
    let init = &pod["initContainers"][0];
    assert_eq!(init["image"], "registry.example.com/plugins:1.4");
    assert_eq!(
        init["command"],
        serde_norway::from_str::<Value>(r#"["cp", "-R", "/opt/plugins/.", "/copy-to/"]"#).unwrap()
    );
    let copied_to = &init["volumeMounts"][0];
    let read_from = pod["containers"][0]["volumeMounts"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|m| m["mountPath"] == "/plugins")
        .unwrap();
    assert_eq!(copied_to["name"], read_from["name"], "one volume");
    assert_eq!(read_from["readOnly"], true);
    let volume = pod["volumes"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|v| v["name"] == read_from["name"])
        .unwrap();
    assert!(volume.get("emptyDir").is_some(), "{volume:?}");

    // Groups alone: no `leases` key, the shards only.
    let config = pod_config(&render_valid("leases: []\ngroups:\n  orders: 4\n"));
    assert!(config.leases.is_empty());

    // The app's resources, beside leasehold's own.
    let objects = render_valid(
        "mode: beside-app\napp:\n  image: web:1\n  resources:\n    requests:\n      cpu: 250m\n      memory: 256Mi\n",
    );
    let containers = &one(&objects, "Deployment")["spec"]["template"]["spec"]["containers"];
    assert_eq!(containers[0]["name"], "app");
    assert_eq!(containers[0]["resources"]["requests"]["memory"], "256Mi");
}

#[test]
fn helm_test_asks_every_replica_through_the_peers_service_for_one_holder_per_lease() {
    for replicas in [1, 3] {
        let objects = render_valid(&format!("replicas: {replicas}\n"));
        let pod = one(&objects, "Pod");
        assert_eq!(pod["metadata"]["annotations"]["helm.sh/hook"], "test");
        let container = &pod["spec"]["containers"][0];
        assert_eq!(
            container["image"],
            one(&objects, "Deployment")["spec"]["template"]["spec"]["containers"][0]["image"],
            "the release's own image"
        );
        let args: Vec<&str> = container["args"]
            .as_sequence()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap())
            .collect();
        let peers = of_kind(&objects, "Service")
            .into_iter()
            .find(|s| s["spec"]["clusterIP"] == "None")
            .unwrap();
        let url = format!(
            "http://{}:9464",
            peers["metadata"]["name"].as_str().unwrap()
        );
        assert_eq!(
            args,
            [
                "leases",
                "check",
                url.as_str(),
                &format!("--replicas={replicas}"),
                "--wait=60s"
            ]
        );
        // The Deployment's selector does not count the test pod as a replica.
        let selector = one(&objects, "Deployment")["spec"]["selector"]["matchLabels"]
            .as_mapping()
            .unwrap();
        let labels = pod["metadata"]["labels"].as_mapping().unwrap();
        assert!(selector.iter().any(|(k, v)| labels.get(k) != Some(v)));
    }
}
