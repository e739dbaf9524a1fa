//! The lease API (`/v1/leases`, `/v1/leases/NAME`, `/v1/leases/NAME/watch`) from outside, on real
//! hosts: it answers as `docs/api/openapi.yaml` says, every documented response included; the
//! watch stream reports a handoff on both replicas, the old holder's end before the new one's
//! start; a reconnect after a missed change is told so; watchers are bounded apart from other
//! clients, and one that never reads is dropped while the lease goes on. The README's `curl`
//! commands answer in the shape it shows.

#![allow(clippy::unwrap_used, missing_docs)]

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::time::Duration;

use leasehold_tests::endpoint::sample;
use leasehold_tests::eventually::{eventually, when};
use leasehold_tests::host::{Host, HostBuilder};
use leasehold_tests::log::Logged;
use leasehold_tests::openapi::{Contract, Documented};
use leasehold_tests::sse::{SseEvent, Watch};
use serde_json::Value;

const LEASE: &str = "leader";
const WAIT: Duration = Duration::from_secs(10);

/// What the test saw of the contract: responses by (path template, status), and the fields of
/// each schema that some answer carried.
#[derive(Default)]
struct Seen {
    responses: BTreeSet<Documented>,
    fields: BTreeMap<String, BTreeSet<String>>,
}

impl Seen {
    /// Checks `body` against the documented response and notes it.
    fn json(&mut self, contract: &Contract, path: &str, status: u16, body: &str) -> Value {
        let (kind, schema) = contract.response(path, status).unwrap();
        assert_eq!(kind, "application/json", "GET {path} {status}");
        let value: Value = serde_json::from_str(body)
            .unwrap_or_else(|e| panic!("GET {path} {status}: not JSON ({e}): {body}"));
        contract
            .check(&value, &schema)
            .unwrap_or_else(|e| panic!("GET {path} {status} breaks the contract: {e:#}"));
        self.note(&schema, &value);
        self.responses.insert(Documented {
            path: path.into(),
            status,
        });
        value
    }

    /// Notes a plain-text answer.
    fn text(&mut self, contract: &Contract, path: &str, status: u16) {
        let (kind, _) = contract.response(path, status).unwrap();
        assert_eq!(kind, "text/plain", "GET {path} {status}");
        self.responses.insert(Documented {
            path: path.into(),
            status,
        });
    }

    /// Checks a watch event against the contract and notes it.
    fn event(&mut self, contract: &Contract, event: &SseEvent) {
        let path = "/v1/leases/{name}/watch";
        let (kind, schema) = contract.response(path, 200).unwrap();
        assert_eq!(kind, "text/event-stream");
        assert!(
            contract.events(path, 200).contains(&event.event),
            "undocumented event {event:?}"
        );
        let value = event.json().unwrap();
        contract
            .check(&value, &schema)
            .unwrap_or_else(|e| panic!("event {event:?} breaks the contract: {e:#}"));
        self.note(&schema, &value);
        self.fields
            .entry("events".into())
            .or_default()
            .insert(event.event.clone());
        self.responses.insert(Documented {
            path: path.into(),
            status: 200,
        });
    }

    fn note(&mut self, schema: &Value, value: &Value) {
        let name = schema["$ref"].as_str().unwrap_or("?").to_string();
        let fields = self.fields.entry(name).or_default();
        let items = match value {
            Value::Object(o) if o.contains_key("leases") && o["leases"].is_array() => {
                fields.extend(o.keys().cloned());
                o["leases"].as_array().unwrap().clone()
            }
            other => vec![other.clone()],
        };
        for item in items {
            if let Value::Object(o) = item {
                let inner = match schema["$ref"].as_str() {
                    Some(r) if r.ends_with("/LeaseList") => "#/components/schemas/LeaseView",
                    Some(r) => r,
                    None => "?",
                };
                self.fields
                    .entry(inner.to_string())
                    .or_default()
                    .extend(o.keys().cloned());
            }
        }
    }
}

async fn get(addr: SocketAddr, path: &str, accept: Option<&str>) -> (u16, String) {
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    let mut request = client.get(format!("http://{addr}{path}"));
    if let Some(accept) = accept {
        request = request.header("Accept", accept);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.text().await.unwrap())
}

async fn two_hosts(url: &str, extra: &[&str]) -> (Host, Host) {
    let a = HostBuilder::new("a")
        .database_url(url)
        .ttl(Duration::from_secs(2))
        .args(extra)
        .spawn_leading(LEASE)
        .await
        .unwrap();
    let b = HostBuilder::new("b")
        .database_url(url)
        .ttl(Duration::from_secs(2))
        .args(extra)
        .spawn()
        .await
        .unwrap();
    (a, b)
}

fn sqlite(dir: &tempfile::TempDir) -> String {
    format!("sqlite:{}", dir.path().join("leases.db").display())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_answers_as_its_openapi_file_says_every_documented_response_included() {
    let contract = Contract::load().unwrap();
    let mut seen = Seen::default();
    let dir = tempfile::tempdir().unwrap();
    let url = sqlite(&dir);
    let (mut a, b) = two_hosts(&url, &[]).await;

    // Lists and single leases, on the holder and on the standby (once it has read the holder).
    let (code, body) = get(a.addr(), "/v1/leases", None).await;
    let list = seen.json(&contract, "/v1/leases", code, &body);
    assert_eq!(code, 200);
    assert_eq!(list["leases"][0]["role"], "leader");
    assert_eq!(list["leases"][0]["holder"], list["replica"]);
    let (code, body) = get(a.addr(), "/v1/leases/leader", Some("application/json")).await;
    let one = seen.json(&contract, "/v1/leases/{name}", code, &body);
    assert!(one["stop_within_ms"].as_u64().unwrap() > 0, "{one}");
    assert_eq!(one["epoch"], 1);
    let holder = list["replica"].clone();
    eventually("b to name a as the holder", WAIT, async || {
        let (code, body) = get(b.addr(), "/v1/leases/leader", None).await;
        let v: Value = serde_json::from_str(&body).unwrap_or_default();
        when((code, v), |(c, v)| *c == 200 && v["holder"] == holder)
    })
    .await
    .unwrap();
    let (code, body) = get(b.addr(), "/v1/leases/leader", None).await;
    let standby = seen.json(&contract, "/v1/leases/{name}", code, &body);
    assert_eq!(
        (standby["role"].as_str(), standby["stop_within_ms"].as_u64()),
        (Some("standby"), Some(0))
    );
    let (code, body) = get(b.addr(), "/v1/leases", None).await;
    seen.json(&contract, "/v1/leases", code, &body);

    // Refusals: an unknown lease names the known ones; an Accept the endpoint cannot answer.
    let (code, body) = get(a.addr(), "/v1/leases/nope", None).await;
    assert_eq!(code, 404);
    let refused = seen.json(&contract, "/v1/leases/{name}", code, &body);
    assert_eq!(refused["leases"], serde_json::json!(["leader"]));
    assert!(refused["error"].as_str().unwrap().contains("\"nope\""));
    for path in ["/v1/leases", "/v1/leases/leader"] {
        let (code, body) = get(a.addr(), path, Some("text/html")).await;
        assert_eq!(code, 406, "{path}: {body}");
        let template = path.replace("leader", "{name}");
        seen.json(&contract, &template, code, &body);
    }
    let (code, body) = get(a.addr(), "/v1/leases/nope/watch", None).await;
    assert_eq!(code, 404, "{body}");
    let refused = seen.json(&contract, "/v1/leases/{name}/watch", code, &body);
    assert!(
        refused["error"].as_str().unwrap().contains("\"nope\""),
        "{refused}"
    );
    let (code, response) = Watch::request(a.addr(), LEASE, None, Some("application/json"))
        .await
        .unwrap();
    let body = response.text().await.unwrap();
    assert_eq!(code, 406, "{body}");
    seen.json(&contract, "/v1/leases/{name}/watch", code, &body);

    // Readiness.
    for (host, want) in [(&a, 200), (&b, 503)] {
        let (code, _) = get(host.addr(), "/readyz/leases/leader", None).await;
        assert_eq!(code, want);
        seen.text(&contract, "/readyz/leases/{name}", code);
    }
    let (code, _) = get(a.addr(), "/readyz/leases/nope", None).await;
    assert_eq!(code, 404);
    seen.text(&contract, "/readyz/leases/{name}", code);

    // The streams: state at once, then renewals and heartbeats on the holder; a handoff.
    let mut on_a = Watch::open(a.addr(), LEASE, None).await.unwrap().follow();
    let mut on_b = Watch::open(b.addr(), LEASE, None).await.unwrap().follow();
    let (state_b, _) = on_b.until("state", WAIT).await.unwrap();
    assert_eq!(state_b.event, "state");
    seen.event(&contract, &state_b);
    let (renewed, before) = on_a.until("renewed", WAIT).await.unwrap();
    for event in before.iter().chain([&renewed]) {
        seen.event(&contract, event);
    }
    let (beat, before) = on_a.until("heartbeat", WAIT).await.unwrap();
    for event in before.iter().chain([&beat]) {
        seen.event(&contract, event);
    }
    a.signal("TERM").unwrap();
    let (ended, before) = on_a.until("ended", WAIT).await.unwrap();
    for event in before.iter().chain([&ended]) {
        seen.event(&contract, event);
    }
    assert_eq!(ended.field("reason"), "released", "{ended:?}");
    let (started, before) = on_b.until("started", WAIT).await.unwrap();
    for event in before.iter().chain([&started]) {
        seen.event(&contract, event);
    }
    assert_eq!(started.field("epoch"), 2, "{started:?}");
    a.wait_exit(WAIT).await.unwrap();

    // A reconnect after the change, with the id of the state before it.
    let mut again = Watch::open(b.addr(), LEASE, state_b.id.as_deref())
        .await
        .unwrap();
    let state = again.next(WAIT).await.unwrap();
    seen.event(&contract, &state);
    assert_eq!(
        (state.field("missed"), state.field("missed_changes")),
        (Value::Bool(true), serde_json::json!(1)),
        "{state:?}"
    );

    // The bound on watchers, on a host whose open-file limit leaves room for 32 of them.
    let c = HostBuilder::new("c")
        .database_url(&url)
        .under_shell("ulimit -n 800")
        .spawn()
        .await
        .unwrap();
    // One address may hold a quarter of them (8): a ninth from it is refused while others are
    // served, and the 32 come from four loopback addresses.
    let from = |n: u8| Some(std::net::IpAddr::from([127, 0, 0, n]));
    let mut open = Vec::new();
    for n in 1..=4 {
        for _ in 0..8 {
            open.push(
                Watch::open_from(from(n), c.addr(), LEASE, None)
                    .await
                    .unwrap(),
            );
        }
        if n == 1 {
            let (code, response) = Watch::request_from(from(1), c.addr(), LEASE, None, None)
                .await
                .unwrap();
            let body = response.text().await.unwrap();
            assert_eq!(code, 503, "{body}");
            assert!(
                body.contains("8 watch streams from 127.0.0.1 already follow"),
                "{body}"
            );
        }
    }
    let (code, response) = Watch::request_from(from(5), c.addr(), LEASE, None, None)
        .await
        .unwrap();
    let body = response.text().await.unwrap();
    assert_eq!(code, 503, "{body}");
    assert!(body.contains("32 watch streams already follow"), "{body}");
    seen.text(&contract, "/v1/leases/{name}/watch", code);
    let metrics = c.metrics().await.unwrap();
    assert_eq!(sample(&metrics, "leasehold_http_watchers"), Some(32.0));
    assert_eq!(
        sample(&metrics, "leasehold_http_watchers_refused_total"),
        Some(2.0)
    );
    // Probes and scrapers still get in; a watcher that leaves makes room for the next.
    assert_eq!(get(c.addr(), "/v1/leases", None).await.0, 200);
    drop(open.pop());
    eventually("room for one more watcher", WAIT, async || {
        let (code, _) = Watch::request_from(from(4), c.addr(), LEASE, None, None)
            .await
            .unwrap();
        when(code, |c| *c == 200)
    })
    .await
    .unwrap();
    c.wait_for_log("room for 32 watch streams", WAIT)
        .await
        .expect("the host says why it serves fewer watchers");

    // Every documented response was answered, every documented field and event seen.
    let documented: BTreeSet<Documented> = contract.responses().into_iter().collect();
    assert_eq!(
        documented.difference(&seen.responses).collect::<Vec<_>>(),
        Vec::<&Documented>::new(),
        "documented but never answered"
    );
    for schema in ["LeaseView", "LeaseList", "WatchEvent", "ApiError"] {
        let reference = format!("#/components/schemas/{schema}");
        let mut documented = contract.properties(&contract.schema(schema)).unwrap();
        // A failing store read is the store fault suite's business, not this test's.
        documented.remove("store_error");
        let carried = seen.fields.get(&reference).cloned().unwrap_or_default();
        assert_eq!(
            documented.difference(&carried).collect::<Vec<_>>(),
            Vec::<&String>::new(),
            "{schema}: documented fields no answer carried"
        );
    }
    let events = seen.fields["events"].clone();
    assert_eq!(
        events,
        contract.events("/v1/leases/{name}/watch", 200),
        "every documented event seen"
    );
}

/// The fenced `sh` block under `## Beside any app` in README.md: its commands, and the output
/// each `# ` line under it shows.
fn readme_block() -> Vec<(String, Vec<String>)> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md");
    let readme = std::fs::read_to_string(path).unwrap();
    let section = readme.split("\n## Beside any app").nth(1).unwrap();
    let block = section
        .split("```sh\n")
        .nth(1)
        .and_then(|rest| rest.split("\n```").next())
        .unwrap();
    let mut steps: Vec<(String, Vec<String>)> = Vec::new();
    for line in block.lines() {
        match line.strip_prefix("# ").or(line.strip_prefix("#")) {
            Some(shown) => steps.last_mut().unwrap().1.push(shown.to_string()),
            None => steps.push((line.to_string(), Vec::new())),
        }
    }
    steps
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readmes_curl_commands_answer_in_the_shape_it_shows() {
    let dir = tempfile::tempdir().unwrap();
    // A short ttl, so that a second of the stream has a heartbeat after its `state`.
    let host = HostBuilder::new("web-1")
        .database_url(&sqlite(&dir))
        .ttl(Duration::from_secs(3))
        .spawn_leading(LEASE)
        .await
        .unwrap();
    let steps = readme_block();
    assert_eq!(steps.len(), 2, "{steps:?}");
    for (command, shown) in steps {
        let command = command.replace("127.0.0.1:9464", &host.addr().to_string());
        // The stream does not end: a second of it.
        let out = tokio::process::Command::new("timeout")
            .args(["2", "bash", "-c", &command])
            .output()
            .await
            .unwrap();
        let got = String::from_utf8_lossy(&out.stdout).into_owned();
        if command.ends_with("/watch") {
            let shown = shown.join("\n");
            // The first event as shown, field by field: the same lines, the same JSON keys.
            let first_shown: Vec<&str> = shown.split("\n\n").next().unwrap().lines().collect();
            let first_got: Vec<&str> = got.split("\n\n").next().unwrap().lines().collect();
            assert_eq!(first_got.len(), first_shown.len(), "{got}");
            for (g, s) in first_got.iter().zip(&first_shown) {
                let field = |l: &str| l.split(':').next().unwrap().to_string();
                assert_eq!(field(g), field(s), "{got}");
            }
            let keys = |data: &str| -> BTreeSet<String> {
                let v: Value = serde_json::from_str(data.strip_prefix("data: ").unwrap()).unwrap();
                v.as_object().unwrap().keys().cloned().collect()
            };
            assert_eq!(keys(first_got[2]), keys(first_shown[2]));
            assert!(first_got[0] == "event: state", "{got}");
            assert!(
                got.contains("event: renewed") || got.contains("event: heartbeat"),
                "{got}"
            );
        } else {
            let keys = |text: &str| -> BTreeSet<String> {
                let v: Value = serde_json::from_str(text.trim()).unwrap();
                v.as_object().unwrap().keys().cloned().collect()
            };
            assert_eq!(keys(&got), keys(&shown[0]), "{got}");
            let v: Value = serde_json::from_str(got.trim()).unwrap();
            assert_eq!(v["role"], "leader");
        }
    }
}
