//! A term's trace, end to end: two real hosts on PostgreSQL exporting to a real OTLP receiver,
//! a graceful handoff between them.

use std::time::Duration;

use leasehold_tests::eventually::eventually;
use leasehold_tests::host::{Host, HostBuilder, plugin_dir, wait_for_single_leader};
use leasehold_tests::log::Logged;
use leasehold_tests::otlp::{ARRIVAL, Received, Receiver};
use leasehold_tests::status::{Role, StatusExt};
use leasehold_tests::stores::{Backend, Db};

/// Short enough that a standby that missed the release still takes over within the test's
/// waits; the handoff itself takes milliseconds.
const TTL: Duration = Duration::from_secs(5);

/// The manifest of the plugin that runs under each term.
const PLUGIN: &str = "lease = \"leader\"\n[schedule]\ninterval = \"1s\"\n";

/// A host exporting to `receiver` as the service `service`.
async fn exporting(name: &str, url: &str, receiver: &Receiver, service: &str) -> Host {
    exporting_with(HostBuilder::new(name), url, receiver, service).await
}

/// `builder`'s host exporting to `receiver` as the service `service`.
async fn exporting_with(
    builder: HostBuilder,
    url: &str,
    receiver: &Receiver,
    service: &str,
) -> Host {
    let plugins = plugin_dir(&[("hello-reconciler", PLUGIN)]).unwrap();
    let host = builder
        .database_url(url)
        .ttl(TTL)
        .plugins(plugins.path())
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", &receiver.endpoint())
        .env("OTEL_SERVICE_NAME", service)
        .env("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=test")
        .spawn()
        .await
        .unwrap();
    // The directory must outlive the host's start only: the plugins are loaded by then.
    std::mem::forget(plugins);
    host
}

/// The epoch `host` holds the lease `leader` at, by its `/status`.
async fn epoch_of(host: &Host) -> i64 {
    let status = host.status().await.unwrap();
    status.lease("leader").unwrap().epoch.unwrap().get()
}

/// The one span named `name` of the term of `leader` at `epoch`, once it has arrived.
async fn arrived(receiver: &Receiver, name: &str, epoch: i64) -> Received {
    let epoch = epoch.to_string();
    eventually(
        format!("the {name} span of epoch {epoch}"),
        ARRIVAL,
        async || match receiver.find(name, "epoch", &epoch).as_slice() {
            [one] => Ok(one.clone()),
            many => Err(format!("{} such spans: {many:?}", many.len())),
        },
    )
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handoffs_two_terms_arrive_linked_with_their_attributes_and_a_graceful_stop_flushes_first()
 {
    let receiver = Receiver::start().await.unwrap();
    let db = Db::new(Backend::Postgres).await.unwrap();
    let url = db.url().unwrap();
    let service = format!("handoff-{}", std::process::id());
    let mut a = exporting("a", &url, &receiver, &service).await;
    wait_for_single_leader(&[&a], "leader", Duration::from_secs(15))
        .await
        .unwrap();
    let first = epoch_of(&a).await;
    let b = exporting("b", &url, &receiver, &service).await;

    // The acquisition shows within seconds, while the term goes on.
    let acquired = arrived(&receiver, "lease acquired", first).await;
    assert_eq!(acquired.attribute("lease"), Some("leader"));
    assert_eq!(acquired.service, service);
    assert!(
        receiver
            .find("term", "epoch", &first.to_string())
            .is_empty(),
        "the term's own span comes when it ends"
    );

    // A graceful stop: a's term span is at the receiver by the time a has exited.
    assert!(a.stop(Duration::from_secs(20)).await.unwrap().success());
    let old = receiver.find("term", "epoch", &first.to_string());
    assert_eq!(
        old.len(),
        1,
        "a's term was not sent before it exited: {old:?}"
    );
    let old = &old[0];
    assert_eq!(old.attribute("lease"), Some("leader"));
    assert_eq!(old.attribute("ended"), Some("released"));
    assert!(
        old.attribute("holder").is_some_and(|h| h.starts_with("a")),
        "{old:?}"
    );
    assert_eq!(old.parent_span_id, "", "a term is the root of its trace");
    assert_eq!(
        (acquired.trace_id.as_str(), acquired.parent_span_id.as_str()),
        (old.trace_id.as_str(), old.span_id.as_str()),
        "the acquisition is a child of its term"
    );
    // Its ordered stop, from the term's end to the release, is under it too.
    let stop = arrived(&receiver, "ordered stop", first).await;
    assert_eq!(
        (stop.trace_id.as_str(), stop.parent_span_id.as_str()),
        (old.trace_id.as_str(), old.span_id.as_str())
    );
    assert_eq!(stop.attribute("ended"), Some("released"));
    assert!(stop.times.0 >= old.times.1 && stop.times.1 >= stop.times.0);
    // The store calls are spans with their outcome: a's release among them.
    assert!(
        receiver
            .spans()
            .iter()
            .any(|s| s.name == "release" && s.attribute("outcome") == Some("ok")),
        "no release span with its outcome: {:?}",
        receiver.spans()
    );
    // Its plugin ran under it.
    let plugin: Vec<_> = receiver
        .spans()
        .into_iter()
        .filter(|s| s.name == "plugin" && s.trace_id == old.trace_id)
        .collect();
    assert!(
        plugin.iter().any(|p| p.parent_span_id == old.span_id),
        "no plugin span under a's term: {plugin:?}"
    );

    // b takes over, at the next epoch, and its term links to a's.
    eventually("b to lead", TTL * 3, async || {
        match b.role("leader").await {
            Some(Role::Leader) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await
    .unwrap();
    let second = epoch_of(&b).await;
    assert_eq!(second, first + 1);
    let mut b = b;
    assert!(b.stop(Duration::from_secs(20)).await.unwrap().success());
    let new = arrived(&receiver, "term", second).await;
    assert!(
        new.attribute("holder").is_some_and(|h| h.starts_with("b")),
        "{new:?}"
    );
    assert_ne!(
        new.trace_id, old.trace_id,
        "each term is a trace of its own"
    );
    assert_eq!(
        new.links,
        vec![(old.trace_id.clone(), old.span_id.clone())],
        "b's term links to a's"
    );
    assert!(new.times.0 >= old.times.1, "b's term began after a's ended");
    eprintln!(
        "term {first} ({} ms) -> term {second}, linked; {} spans received",
        (old.times.1 - old.times.0) / 1_000_000,
        receiver.spans().len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_v1_request_with_a_traceparent_is_traced_under_it() {
    let receiver = Receiver::start().await.unwrap();
    let db = Db::new(Backend::Postgres).await.unwrap();
    let url = db.url().unwrap();
    let mut a = exporting(
        "a",
        &url,
        &receiver,
        &format!("traceparent-{}", std::process::id()),
    )
    .await;
    let (trace, parent) = ("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7");
    let answer = reqwest::Client::new()
        .get(format!("http://{}/v1/leases", a.addr()))
        .header("traceparent", format!("00-{trace}-{parent}-01"))
        .send()
        .await
        .unwrap();
    assert!(answer.status().is_success());
    let request = eventually("the request's span", ARRIVAL, async || {
        let spans: Vec<_> = receiver
            .spans()
            .into_iter()
            .filter(|s| s.name == "http request")
            .collect();
        match spans.as_slice() {
            [one] => Ok(one.clone()),
            other => Err(format!("{other:?}")),
        }
    })
    .await
    .unwrap();
    assert_eq!(
        (request.trace_id.as_str(), request.parent_span_id.as_str()),
        (trace, parent)
    );
    assert_eq!(request.attribute("path"), Some("/v1/leases"));
    assert!(a.stop(Duration::from_secs(20)).await.unwrap().success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_that_logs_warnings_only_still_exports_its_plugin_and_store_call_spans() {
    let receiver = Receiver::start().await.unwrap();
    let db = Db::new(Backend::Postgres).await.unwrap();
    let url = db.url().unwrap();
    // The log's level is the log's alone; the start's info lines are let through for the
    // address the harness reads.
    let builder = HostBuilder::new("a").env("RUST_LOG", "warn,leasehold::app=info");
    let service = format!("quiet-{}", std::process::id());
    let mut a = exporting_with(builder, &url, &receiver, &service).await;
    wait_for_single_leader(&[&a], "leader", Duration::from_secs(15))
        .await
        .unwrap();
    let acquired = arrived(&receiver, "lease acquired", epoch_of(&a).await).await;
    // A plugin's span covers its run, so it ends with the term: after a graceful stop.
    assert!(a.stop(Duration::from_secs(20)).await.unwrap().success());
    let spans = receiver.spans();
    assert!(
        spans
            .iter()
            .any(|s| s.name == "plugin" && s.trace_id == acquired.trace_id),
        "no plugin span under the term: {spans:?}"
    );
    assert!(
        spans
            .iter()
            .any(|s| s.name == "campaign" && s.attribute("outcome").is_some()),
        "no campaign span with its outcome: {spans:?}"
    );
    let log = a.log_text();
    let info: Vec<&str> = log
        .lines()
        .filter(|l| l.contains(" INFO ") && !l.contains(" leasehold::app: "))
        .collect();
    assert!(
        info.is_empty(),
        "info lines logged at RUST_LOG=warn: {info:?}"
    );
}
