//! The monitoring files shipped in `examples/` hold to the host: the Prometheus alert rules
//! (`examples/prometheus/`) pass `promtool check rules` and their own unit tests
//! (`promtool test rules`), and every metric the rules and the Grafana dashboard
//! (`examples/grafana/`) use is one a running `leasehold` process exposes at `/metrics`, so
//! neither file can drift from the code.

#![allow(clippy::unwrap_used, missing_docs)]

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use leasehold_tests::eventually::eventually;
use leasehold_tests::host::{HostBuilder, plugin_dir};

const RULES: &str = "examples/prometheus/leasehold-alerts.yaml";
const RULE_TESTS: &str = "examples/prometheus/leasehold-alerts.test.yaml";
const DASHBOARD: &str = "examples/grafana/leasehold-dashboard.json";

fn repo() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

/// Runs `promtool ARGS` in the repository; fails with its output.
fn promtool(args: &[&str]) -> String {
    let out = Command::new("promtool")
        .args(args)
        .current_dir(repo())
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "promtool: {e} (Debian's prometheus package; scripts/install-deps.sh installs it)"
            )
        });
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "promtool {args:?}:\n{text}");
    text
}

#[test]
fn the_alert_rules_pass_promtool_and_their_unit_tests() {
    let checked = promtool(&["check", "rules", RULES]);
    assert!(checked.contains("SUCCESS"), "{checked}");
    let tested = promtool(&["test", "rules", RULE_TESTS]);
    assert!(tested.contains("SUCCESS"), "{tested}");
}

/// Every metric name `leasehold_…` in `text`; recording rules' names (`level:metric:operations`,
/// with colons) are the rules' own, not the host's.
fn metric_names(text: &str) -> BTreeSet<String> {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
        .filter(|token| token.starts_with("leasehold_") && !token.contains(':'))
        .map(str::to_string)
        .collect()
}

/// The metric families of an exposition, by their `# TYPE` lines.
fn families(exposition: &str) -> BTreeSet<String> {
    exposition
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect()
}

/// The family a sample name belongs to: counters add `_total`, histograms `_bucket`, `_sum` and
/// `_count`.
fn family_of<'a>(name: &'a str, known: &BTreeSet<String>) -> Option<&'a str> {
    std::iter::once(name)
        .chain(
            ["_total", "_bucket", "_sum", "_count"]
                .iter()
                .filter_map(|suffix| name.strip_suffix(suffix)),
        )
        .find(|candidate| known.contains(*candidate))
}

#[tokio::test]
async fn every_metric_the_dashboard_and_the_alerts_use_is_exposed_by_a_running_host() {
    // Leases, a plugin and a lease group, so that every family is registered and labelled.
    let manifest = "lease = \"leader\"\n[schedule]\ninterval = \"200ms\"\n[limits]\n\
                    call_timeout = \"2s\"\nmemory = \"64MiB\"\n[config]\ngreeting = \"hi\"\n";
    let plugins = plugin_dir(&[("hello-reconciler", manifest)]).unwrap();
    let db = tempfile::tempdir().unwrap();
    let url = format!("sqlite:{}", db.path().join("leases.db").display());
    let host = HostBuilder::new("monitored")
        .database_url(&url)
        .lease("leader")
        .plugins(plugins.path())
        .args(&["--group", "orders=2"])
        .spawn()
        .await
        .unwrap();
    host.wait_for_plugin(
        "hello-reconciler",
        "the plugin's first calls",
        Duration::from_secs(20),
        |p| p.calls > 1,
    )
    .await
    .unwrap();
    // The group's families appear with its runner's first look, which on a loaded machine comes
    // after the plugin's first calls.
    let exposition = eventually(
        "the group's metrics in the exposition",
        Duration::from_secs(20),
        async || {
            let exposition = host.metrics().await.map_err(|e| format!("{e:#}"))?;
            if families(&exposition).contains("leasehold_group_members") {
                Ok(exposition)
            } else {
                Err(format!("{:?}", families(&exposition)))
            }
        },
    )
    .await
    .unwrap();
    let known = families(&exposition);
    // The yardstick the rules measure against: the default ttl, 15 s.
    assert_eq!(
        leasehold_tests::endpoint::sample(
            &exposition,
            "leasehold_lease_ttl_seconds{lease=\"leader\"}"
        ),
        Some(15.0)
    );

    for file in [RULES, RULE_TESTS, DASHBOARD] {
        let text = std::fs::read_to_string(repo().join(file)).unwrap();
        let used = metric_names(&text);
        assert!(!used.is_empty(), "{file} uses no leasehold metric");
        let unknown: Vec<&String> = used
            .iter()
            .filter(|name| family_of(name, &known).is_none())
            .collect();
        assert!(
            unknown.is_empty(),
            "{file} uses metrics a running host does not expose: {unknown:?}\nexposed: {known:?}"
        );
    }
}
