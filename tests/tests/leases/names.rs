//! Names from outside, as attacks on real processes: a plugin file named to forge `/metrics`
//! series or to drive the terminal of whoever reads the log or `leasehold status`, a replica id
//! with control characters from a flag, a variable or `$HOSTNAME`, `leasehold new` beside a
//! staging directory it did not create or into an empty directory of its owner's, a manifest
//! listening on the host's own channel, and a config key or a lease name with escapes echoed in
//! an error.

#![allow(clippy::unwrap_used, missing_docs)]

use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use leasehold_tests::host::{HostBuilder, binary, guests_dist, plugin_dir};
use leasehold_tests::log::Logged;
use leasehold_tests::status::PluginState;

/// A file name that, raw in a label value, ends its series and adds a `leasehold_lease_is_leader`
/// series for a lease this host does not even campaign for.
const FORGED_METRICS: &str = "evil\"} 1\nleasehold_lease_is_leader{lease=\"payments\"} 1\n#";
/// A file name that, raw on a terminal, sets its title and clears its screen.
const TERMINAL_ESCAPES: &str = "x\u{1b}]0;pwned\u{7}\u{1b}[2J";

/// A plugin directory with the well-behaved `hello-reconciler` and a copy of it under each of
/// `names` (each `NAME.wasm`).
fn plugins_named(names: &[&str]) -> tempfile::TempDir {
    let dir = plugin_dir(&[("hello-reconciler", "[schedule]\ninterval = \"1s\"\n")]).unwrap();
    let component = guests_dist().join("hello-reconciler.wasm");
    for name in names {
        std::fs::copy(&component, dir.path().join(format!("{name}.wasm"))).unwrap();
    }
    dir
}

/// A host on its own SQLite file running the plugins of `dir`, once `hello-reconciler` runs:
/// by then every file of the directory has been loaded.
async fn host_of(dir: &Path, db: &Path) -> leasehold_tests::host::Host {
    let host = HostBuilder::new("names")
        .database_url(&format!("sqlite:{}", db.display()))
        .ttl(Duration::from_secs(3))
        .plugins(dir)
        .spawn()
        .await
        .unwrap();
    host.wait_for_plugin(
        "hello-reconciler",
        "hello-reconciler to run",
        Duration::from_secs(30),
        |p| p.state == PluginState::Running && p.calls > 0,
    )
    .await
    .unwrap();
    host
}

/// Whether `text` holds a control character other than a line feed: something a terminal acts
/// on. (The hosts here log to a pipe, so they write no colours.)
fn has_raw_controls(text: &str) -> bool {
    text.chars().any(|c| c.is_control() && c != '\n')
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_file_named_to_forge_metrics_adds_no_series_and_is_listed_invalid() {
    let dir = plugins_named(&[FORGED_METRICS]);
    let db = tempfile::tempdir().unwrap();
    let host = host_of(dir.path(), &db.path().join("leases.db")).await;

    let metrics = host.metrics().await.unwrap();
    let forged: Vec<&str> = metrics
        .lines()
        .filter(|l| l.starts_with("leasehold_lease_is_leader{lease=\"payments\"}"))
        .collect();
    assert!(forged.is_empty(), "forged series: {forged:?}\n{metrics}");
    assert!(!metrics.contains("evil"), "{metrics}");
    // Every sample line is one series of a leasehold family.
    for line in metrics.lines().filter(|l| !l.starts_with('#')) {
        assert!(line.starts_with("leasehold_"), "{line:?}\n{metrics}");
    }

    let shown = "evil\"} 1\\nleasehold_lease_is_leader{lease=\"payments\"} 1\\n#";
    let plugins = host.status().await.unwrap().plugins;
    let status = plugins
        .iter()
        .find(|p| p.name == shown)
        .unwrap_or_else(|| panic!("no plugin {shown:?} in /status: {plugins:?}"))
        .clone();
    assert_eq!(status.state, PluginState::Invalid, "{status:?}");
    assert_eq!(status.calls, 0, "{status:?}");
    let error = status.last_error.unwrap();
    assert!(
        error.contains(&format!("{shown}.wasm: not a plugin name")) && error.contains("holds '\"'"),
        "{error}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_file_named_with_terminal_escapes_reaches_no_log_table_or_check_raw() {
    let dir = plugins_named(&[TERMINAL_ESCAPES]);
    let db = tempfile::tempdir().unwrap();
    let host = host_of(dir.path(), &db.path().join("leases.db")).await;
    let shown = "x\\u{1b}]0;pwned\\u{7}\\u{1b}[2J";

    let log = host.log_text();
    assert!(
        !has_raw_controls(&log),
        "raw control characters in the log:\n{log:?}"
    );
    assert!(
        log.contains(&format!("invalid plugin: {shown}.wasm: not a plugin name")),
        "{log}"
    );

    let table = tokio::process::Command::new(binary().unwrap())
        .args(["status", "--url", &format!("http://{}", host.addr())])
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    let table = tokio::time::timeout(Duration::from_secs(30), table)
        .await
        .unwrap()
        .unwrap();
    assert!(table.status.success(), "{table:?}");
    let stdout = String::from_utf8(table.stdout).unwrap();
    assert!(!has_raw_controls(&stdout), "{stdout:?}");
    assert!(stdout.contains(shown), "{stdout}");
    let status = host.plugin_status(shown).await.unwrap();
    assert_eq!(status.state, PluginState::Invalid, "{status:?}");

    // `leasehold check` says the same of the file, on one line.
    let checked = std::process::Command::new(binary().unwrap())
        .arg("check")
        .arg(dir.path().join(format!("{TERMINAL_ESCAPES}.wasm")))
        .output()
        .unwrap();
    assert_eq!(checked.status.code(), Some(1), "{checked:?}");
    let stderr = String::from_utf8(checked.stderr).unwrap();
    assert!(!has_raw_controls(&stderr), "{stderr:?}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains(&format!(
            "{shown}.wasm: not a plugin name: holds '\\u{{1b}}'"
        )),
        "{stderr}"
    );
}

/// `leasehold run` with `args` and `env` (and no `LEASEHOLD_*` of the test's environment) on a
/// SQLite file in `dir`: its exit code and stderr, or `None` if it still runs after 20 s.
async fn run_briefly(
    dir: &Path,
    args: &[&str],
    env: &[(&str, &str)],
) -> Option<(Option<i32>, String)> {
    let mut cmd = tokio::process::Command::new(binary().unwrap());
    cmd.arg("run")
        .arg("--database-url")
        .arg(format!("sqlite:{}", dir.join("leases.db").display()))
        .args(["--http", "127.0.0.1:0"])
        .args(args)
        .env_remove("LEASEHOLD_REPLICA_ID")
        .env_remove("LEASEHOLD_CONFIG")
        .env_remove("LEASEHOLD_DATABASE_URL")
        .env("RUST_BACKTRACE", "0")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let out = tokio::time::timeout(Duration::from_secs(20), cmd.output())
        .await
        .ok()?
        .unwrap();
    Some((
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_id_with_control_characters_is_refused_naming_where_it_came_from() {
    let dir = tempfile::tempdir().unwrap();
    let id = "web\u{1b}]0;pwned\u{7}-1";
    for (args, env, origin) in [
        (
            vec!["--replica-id", id],
            vec![],
            "--replica-id or LEASEHOLD_REPLICA_ID",
        ),
        (
            vec![],
            vec![("LEASEHOLD_REPLICA_ID", id)],
            "--replica-id or LEASEHOLD_REPLICA_ID",
        ),
        (vec![], vec![("HOSTNAME", id)], "$HOSTNAME"),
    ] {
        let Some((code, stderr)) = run_briefly(dir.path(), &args, &env).await else {
            panic!("{args:?} {env:?}: the host ran with replica id {id:?}");
        };
        assert_eq!(code, Some(1), "{stderr}");
        assert!(!has_raw_controls(&stderr), "{stderr:?}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(
            stderr.contains("invalid replica id \"web\\u{1b}]0;pwned\\u{7}-1\"")
                && stderr.contains(origin),
            "{args:?} {env:?}: {stderr}"
        );
    }
}

/// `leasehold new NAME --lang js --dir PARENT` run by a shell that first runs `prepare` with its
/// own pid as `$$`, which `leasehold new` keeps (the shell execs it): its exit code and stderr.
fn new_after(prepare: &str, parent: &Path, name: &str) -> (Option<i32>, String) {
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!(
            "{prepare} && exec \"$0\" new \"$1\" --lang js --dir \"$2\""
        ))
        .arg(binary().unwrap())
        .arg(name)
        .arg(parent)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn new_leaves_a_staging_directory_it_did_not_create() {
    let parent = tempfile::tempdir().unwrap();
    let (code, stderr) = new_after(
        "mkdir \"$2/.demo.new-$$\" && echo mine > \"$2/.demo.new-$$/keep\"",
        parent.path(),
        "demo",
    );
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains(".demo.new-"), "{stderr}");
    let entries: Vec<_> = std::fs::read_dir(parent.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(entries.len(), 1, "{entries:?}");
    assert_eq!(
        std::fs::read_to_string(entries[0].join("keep")).unwrap(),
        "mine\n"
    );
}

#[test]
fn new_fills_an_empty_directory_in_place_keeping_its_mode() {
    let parent = tempfile::tempdir().unwrap();
    let target = parent.path().join("demo");
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&target)
        .unwrap();
    std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o710)).unwrap();
    let before = std::fs::metadata(&target).unwrap();
    let (code, stderr) = new_after("true", parent.path(), "demo");
    assert_eq!(code, Some(0), "{stderr}");
    let after = std::fs::metadata(&target).unwrap();
    assert_eq!(after.mode() & 0o7777, 0o710);
    assert_eq!(after.ino(), before.ino(), "the directory was replaced");
    assert!(target.join("demo.toml").is_file());
    let entries: Vec<_> = std::fs::read_dir(parent.path()).unwrap().collect();
    assert_eq!(entries.len(), 1, "no staging directory is left");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_manifest_listening_on_the_hosts_release_channel_is_refused() {
    let url = leasehold_tests::pg::server()
        .fresh_database()
        .await
        .unwrap();
    let dir = plugin_dir(&[("hello-reconciler", "[schedule]\ninterval = \"1s\"\n")]).unwrap();
    std::fs::copy(
        guests_dist().join("capability-probe.wasm"),
        dir.path().join("eavesdrop.wasm"),
    )
    .unwrap();
    std::fs::write(
        dir.path().join("eavesdrop.toml"),
        "[events]\nchannels = [\"jobs\", \"leasehold_released\"]\n[config]\nverb = \"idle\"\n",
    )
    .unwrap();
    let host = HostBuilder::new("names")
        .database_url(&url)
        .ttl(Duration::from_secs(3))
        .plugins(dir.path())
        .spawn()
        .await
        .unwrap();
    let status = host
        .wait_for_plugin(
            "eavesdrop",
            "eavesdrop to be listed",
            Duration::from_secs(30),
            |p| p.state != PluginState::Idle,
        )
        .await
        .unwrap();
    assert_eq!(status.state, PluginState::Invalid, "{status:?}");
    let error = status.last_error.unwrap();
    assert!(
        error.contains("eavesdrop.toml: events.channels = \"leasehold_released\"")
            && error.contains("the host's own"),
        "{error}"
    );
}

#[test]
fn a_config_key_or_a_lease_name_with_escapes_is_echoed_escaped_on_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("leasehold.toml");
    // TOML's own escapes: the key holds the raw characters once parsed.
    std::fs::write(&file, "leases = ['a']\n\"k\\u001b]0;pwned\\u0007\" = 1\n").unwrap();
    let db = format!("sqlite:{}", dir.path().join("leases.db").display());
    for args in [
        vec!["config", "check", file.to_str().unwrap()],
        vec![
            "leases",
            "release",
            TERMINAL_ESCAPES,
            "--force",
            "--database-url",
            &db,
        ],
    ] {
        let out = std::process::Command::new(binary().unwrap())
            .args(&args)
            .env_remove("LEASEHOLD_CONFIG")
            .env_remove("LEASEHOLD_DATABASE_URL")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let stderr = String::from_utf8(out.stderr).unwrap();
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(!has_raw_controls(&stderr), "{args:?}: {stderr:?}");
        assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
        assert!(
            stderr.contains("\\u{1b}]0;pwned\\u{7}"),
            "{args:?}: {stderr}"
        );
    }
}
