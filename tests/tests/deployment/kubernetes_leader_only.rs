//! The active/passive example (`examples/kubernetes/leader-only.yaml`): every object passes the
//! API's schemas strictly; the sidecar's readiness probe asks for the lease its config campaigns
//! for, on the port it listens on; the app's health check reaches the app's port; a rollout can
//! proceed with one ready pod; and the sidecar's config, run by real hosts beside a stand-in
//! app, makes the probe ready on the holder alone, moving on a handoff.

#![allow(clippy::unwrap_used, missing_docs)]

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use leasehold::config::{Config, Layer};
use leasehold_tests::eventually::{eventually, when};
use leasehold_tests::host::HostBuilder;
use serde::Deserialize;
use serde_norway::Value;

const MANIFEST: &str = "examples/kubernetes/leader-only.yaml";

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn objects() -> Vec<Value> {
    let text = std::fs::read_to_string(root().join(MANIFEST)).unwrap();
    serde_norway::Deserializer::from_str(&text)
        .map(|doc| Value::deserialize(doc).unwrap())
        .filter(|doc| !doc.is_null())
        .collect()
}

fn one<'a>(objects: &'a [Value], kind: &str) -> &'a Value {
    let found: Vec<&Value> = objects.iter().filter(|o| o["kind"] == kind).collect();
    assert_eq!(found.len(), 1, "{kind}");
    found[0]
}

fn container<'a>(objects: &'a [Value], name: &str) -> &'a Value {
    let pod = &one(objects, "Deployment")["spec"]["template"]["spec"];
    pod["containers"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no container {name}"))
}

fn config_text(objects: &[Value]) -> String {
    one(objects, "ConfigMap")["data"]["leasehold.toml"]
        .as_str()
        .unwrap()
        .to_string()
}

/// The sidecar's config as `leasehold run` resolves it, with a database URL standing in for the
/// Secret's.
fn config(objects: &[Value]) -> Config {
    let file: Layer = toml::from_str(&config_text(objects)).unwrap();
    let flags = Layer {
        database_url: Some("postgres://leasehold@db.example/leasehold".into()),
        replica_id: Some("web-7d9f8c-abcde".into()),
        ..Default::default()
    };
    Config::resolve(file, flags).unwrap_or_else(|e| panic!("the sidecar's config: {e}"))
}

fn port_named(container: &Value, name: &str) -> u64 {
    container["ports"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|p| p["name"] == name)
        .and_then(|p| p["containerPort"].as_u64())
        .unwrap_or_else(|| panic!("no port {name}"))
}

#[test]
fn every_object_of_the_leader_only_example_passes_strict_schema_validation() {
    let out = Command::new("bash")
        .arg(root().join("scripts/kubernetes-validate.sh"))
        .arg(root().join(MANIFEST))
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let counted = format!("{} objects valid against Kubernetes", objects().len());
    assert!(
        said.contains(&counted) && said.contains("(strict)"),
        "{said}"
    );
}

#[test]
fn the_readiness_probe_asks_the_sidecar_for_its_lease_and_the_health_check_reaches_the_app() {
    let objects = objects();
    let config = config(&objects);
    let sidecar = container(&objects, "leasehold");
    let probe = &sidecar["readinessProbe"]["httpGet"];
    let lease = probe["path"]
        .as_str()
        .unwrap()
        .strip_prefix("/readyz/leases/")
        .expect("a per-lease readiness probe");
    assert!(
        config.leases.iter().any(|l| l.as_str() == lease),
        "the probe's lease {lease} is campaigned for"
    );
    assert_eq!(probe["port"], "http");
    assert_eq!(
        port_named(sidecar, "http"),
        u64::from(config.http.port()),
        "the named port is where the sidecar listens"
    );
    assert!(
        config.http.ip().is_unspecified(),
        "the kubelet reaches the pod's IP"
    );
    // Believed at once, both ways: the traffic follows the lease within a probe period.
    let readiness = &sidecar["readinessProbe"];
    assert_eq!(
        (
            readiness["periodSeconds"].as_u64(),
            readiness["failureThreshold"].as_u64(),
            readiness["successThreshold"].as_u64()
        ),
        (Some(1), Some(1), Some(1))
    );
    // The app's health, which gates the lease, is asked on the app container's port.
    let service = config
        .services
        .iter()
        .find(|s| s.lease.as_str() == lease)
        .expect("a [[service]] for the lease");
    let health = serde_json::to_value(service).unwrap()["health"].clone();
    let url = url::Url::parse(health.as_str().expect("an HTTP health check")).unwrap();
    let app = container(&objects, "app");
    assert_eq!(u64::from(url.port().unwrap()), port_named(app, "web"));
    assert_eq!(url.host_str(), Some("127.0.0.1"), "beside it, in the pod");
    // The Service sends traffic to the app, and a rollout can proceed with the holder's pod
    // alone ready.
    let svc = one(&objects, "Service");
    assert_eq!(svc["spec"]["ports"][0]["targetPort"], "web");
    let deployment = &one(&objects, "Deployment")["spec"];
    let replicas = deployment["replicas"].as_u64().unwrap();
    let unavailable = deployment["strategy"]["rollingUpdate"]["maxUnavailable"]
        .as_u64()
        .unwrap();
    assert_eq!(unavailable, replicas - 1);
}

/// A stand-in app: answers `/healthz` 200 on a port of its own.
async fn app() -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let router = axum::Router::new().route("/healthz", axum::routing::get(|| async { "ok" }));
    tokio::spawn(async move { axum::serve(listener, router).await });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sidecars_config_makes_the_probe_ready_on_the_holder_alone_and_it_moves_on_a_handoff() {
    let objects = objects();
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite:{}", dir.path().join("leases.db").display());
    let spawn = async |name: &str| {
        let app = app().await;
        let text = config_text(&objects)
            .replace("127.0.0.1:8080", &app.to_string())
            .replace("ttl = \"15s\"", "ttl = \"2s\"")
            .replace("health_interval = \"2s\"", "health_interval = \"200ms\"");
        let cache = dir.path().join(format!("cache-{name}"));
        HostBuilder::new(name)
            .database_url(&url)
            .config(&text)
            .args(&["--cache-dir", cache.to_str().unwrap()])
            .spawn()
            .await
            .unwrap()
    };
    let mut a = spawn("a").await;
    eventually("a ready for web", Duration::from_secs(20), async || {
        when(a.get("/readyz/leases/web").await.unwrap().0, |c| *c == 200)
    })
    .await
    .unwrap();
    let b = spawn("b").await;
    // b's app passes its standby check, yet b is not ready: it does not hold the lease.
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(b.get("/readyz/leases/web").await.unwrap().0, 503);
    let stopped = Instant::now();
    a.signal("TERM").unwrap();
    eventually("b ready for web", Duration::from_secs(10), async || {
        when(b.get("/readyz/leases/web").await.unwrap().0, |c| *c == 200)
    })
    .await
    .unwrap();
    eprintln!("SIGTERM to a → b's probe ready: {:?}", stopped.elapsed());
    assert!(
        stopped.elapsed() < Duration::from_secs(2),
        "a handoff, not an expiry"
    );
    a.wait_exit(Duration::from_secs(20)).await.unwrap();
}
