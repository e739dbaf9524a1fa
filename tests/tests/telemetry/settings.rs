//! `leasehold config check` shows the `[telemetry]` table as the file sets it, and where spans
//! would go once the standard variables have had their say, as `run` would start the export.

use std::process::{Command, Output, Stdio};

use leasehold_tests::host::binary;

/// A file whose `[telemetry]` table sets every key.
const FILE: &str = r#"
[telemetry]
endpoint = "http://127.0.0.1:4318"
service_name = "payments"
resource_attributes = { "deployment.environment" = "prod" }
"#;

/// `leasehold config check ARGS` in `dir` with only `env` of the `OTEL_*` variables.
fn config_check(dir: &std::path::Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(binary().unwrap());
    cmd.args(["config", "check"])
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null());
    for (key, _) in std::env::vars().filter(|(k, _)| k.starts_with("OTEL_")) {
        cmd.env_remove(key);
    }
    cmd.envs(env.iter().copied()).output().unwrap()
}

/// The line that says where spans go.
fn export_line(out: &Output) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
        .lines()
        .find(|l| l.starts_with("# trace export: "))
        .unwrap_or_else(|| panic!("no trace export line in:\n{stdout}"))
        .to_string()
}

#[test]
fn config_check_shows_the_telemetry_table_and_where_spans_go_after_the_standard_variables() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("leasehold.toml"), FILE).unwrap();
    let file = ["leasehold.toml"];

    let out = config_check(dir.path(), &file, &[]);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    for shown in [
        "[telemetry]",
        "endpoint = \"http://127.0.0.1:4318\"",
        "service_name = \"payments\"",
        "deployment.environment",
    ] {
        assert!(stdout.contains(shown), "{shown} not in:\n{stdout}");
    }
    assert_eq!(
        export_line(&out),
        "# trace export: spans go to http://127.0.0.1:4318/v1/traces over OTLP/HTTP as service \"payments\""
    );

    // The standard variables win, key by key.
    let out = config_check(
        dir.path(),
        &file,
        &[
            ("OTEL_SERVICE_NAME", "orders"),
            (
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                "http://collector:4318/traces",
            ),
        ],
    );
    assert_eq!(
        export_line(&out),
        "# trace export: spans go to http://collector:4318/traces over OTLP/HTTP as service \"orders\""
    );
    let out = config_check(dir.path(), &file, &[("OTEL_SDK_DISABLED", "true")]);
    assert!(export_line(&out).starts_with("# trace export: off"));

    // No file, no variable: off, and no table.
    let out = config_check(dir.path(), &[], &[]);
    assert!(export_line(&out).starts_with("# trace export: off"));
    assert!(!String::from_utf8_lossy(&out.stdout).contains("[telemetry]"));
}

#[test]
fn config_check_refuses_an_https_endpoint_as_run_does_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let out = config_check(
        dir.path(),
        &[],
        &[(
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            "https://collector.example:4318",
        )],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("https://collector.example:4318/v1/traces") && stderr.contains("https"),
        "{stderr}"
    );
}
