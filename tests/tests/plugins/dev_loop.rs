//! `leasehold dev` end to end: the real binary on a tiny project whose `build.sh` copies a
//! prebuilt component. It copies the plugin into the plugin directory at start, refuses a
//! manifest the host would refuse with the host's words (the directory left as it was), copies
//! the fixed one, copies nothing after a failed build, and exits 0 on SIGTERM. A host running on that plugin directory loads the copy
//! from the compile cache the check filled (`cache=Hit`), not compiling it again.

#![allow(clippy::unwrap_used, missing_docs)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use leasehold_tests::host::{HostBuilder, binary, guests_dist};
use leasehold_tests::log::Logged;
use leasehold_tests::stores::{Backend, Db};
use rustix::process::{Pid, Signal, kill_process};

const NAME: &str = "dev-hello";
/// The manifest the project starts with.
const GOOD: &str = "lease = \"leader\"\n[config]\ngreeting = \"hello\"\n";
/// A manifest the host refuses: a key it does not know.
const BAD: &str = "lease = \"leader\"\nbogus_key = 1\n";
/// The fixed manifest.
const FIXED: &str = "lease = \"leader\"\n[config]\ngreeting = \"fixed\"\n";

/// What it says once the files are in the plugin directory.
const COPIED: &str = "leasehold dev: copied";

/// Polls `ok` every 50 ms for at most `limit`; the log so far in the panic message.
fn wait_for(what: &str, log: &Path, limit: Duration, ok: impl Fn(&str) -> bool) {
    let started = Instant::now();
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if ok(&text) {
            return;
        }
        assert!(
            started.elapsed() < limit,
            "{what}: not seen within {limit:?}; leasehold dev said:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Ends the child whatever the test's outcome.
struct Reap(Child);

impl Drop for Reap {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Writes the project `ROOT/NAME`: a `build.sh` copying hello-reconciler from guests/dist, and
/// the `GOOD` manifest.
fn write_project(root: &Path) -> (PathBuf, PathBuf) {
    let project = root.join(NAME);
    std::fs::create_dir(&project).unwrap();
    let component = guests_dist().join("hello-reconciler.wasm");
    let script = project.join("build.sh");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\necho build.sh: building\ncp '{}' {NAME}.wasm.tmp && mv -f {NAME}.wasm.tmp {NAME}.wasm\n",
            component.display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(project.join(format!("{NAME}.toml")), GOOD).unwrap();
    (project, component)
}

/// Starts `leasehold dev --plugins PLUGINS PROJECT`, its output in `ROOT/dev.log`, its compile
/// cache under `ROOT/cache` (kept out of the user's).
fn start_dev(root: &Path, plugins: &Path, project: &Path) -> (Reap, PathBuf) {
    let log = root.join("dev.log");
    let out = std::fs::File::create(&log).unwrap();
    let child = Command::new(binary().unwrap())
        .args(["dev", "--plugins"])
        .arg(plugins)
        .arg(project)
        .env("XDG_CACHE_HOME", root.join("cache"))
        .env("RUST_BACKTRACE", "0")
        .stdin(Stdio::null())
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .spawn()
        .unwrap();
    (Reap(child), log)
}

#[test]
fn dev_copies_only_what_builds_and_passes_the_hosts_check() {
    let root = tempfile::tempdir().unwrap();
    let (project, component) = write_project(root.path());
    let plugins = root.path().join("plugins");
    let (mut child, log) = start_dev(root.path(), &plugins, &project);
    let limit = Duration::from_secs(60);
    let wasm_in = plugins.join(format!("{NAME}.wasm"));
    let toml_in = plugins.join(format!("{NAME}.toml"));

    // At start: built, checked, copied.
    wait_for("the first copy", &log, limit, |t| t.contains(COPIED));
    assert_eq!(
        std::fs::read(&wasm_in).unwrap(),
        std::fs::read(&component).unwrap()
    );
    assert_eq!(std::fs::read_to_string(&toml_in).unwrap(), GOOD);
    wait_for("watching", &log, limit, |t| t.contains("watching"));

    // A manifest the host would refuse: the check's words, nothing copied.
    std::fs::write(project.join(format!("{NAME}.toml")), BAD).unwrap();
    wait_for("the refusal", &log, limit, |t| t.contains("not copied"));
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.contains("leasehold: error:") && text.contains("bogus_key"),
        "the refusal names the key, as leasehold check does:\n{text}"
    );
    assert_eq!(std::fs::read_to_string(&toml_in).unwrap(), GOOD);
    let leftovers: Vec<_> = std::fs::read_dir(&plugins)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "temporary files left: {leftovers:?}");

    // The fix: copied.
    std::fs::write(project.join(format!("{NAME}.toml")), FIXED).unwrap();
    wait_for("the second copy", &log, limit, |t| {
        t.matches(COPIED).count() >= 2
    });
    assert_eq!(std::fs::read_to_string(&toml_in).unwrap(), FIXED);

    // Its own reads and the build's outputs are no change: it stays idle until the next edit.
    std::thread::sleep(Duration::from_secs(1));
    let text = std::fs::read_to_string(&log).unwrap();
    assert_eq!(
        text.matches("build.sh: building").count(),
        3,
        "one build at start and one per edit:\n{text}"
    );

    // A failed build: said, nothing copied, still watching.
    let mut script = std::fs::OpenOptions::new()
        .append(true)
        .open(project.join("build.sh"))
        .unwrap();
    std::io::Write::write_all(&mut script, b"exit 3\n").unwrap();
    drop(script);
    std::fs::write(project.join(format!("{NAME}.toml")), GOOD).unwrap();
    wait_for("the failed build", &log, limit, |t| {
        t.contains("build.sh failed (exit status: 3); nothing copied")
    });
    assert_eq!(std::fs::read_to_string(&toml_in).unwrap(), FIXED);

    // SIGTERM: a clean exit.
    let pid = Pid::from_raw(i32::try_from(child.0.id()).unwrap()).unwrap();
    kill_process(pid, Signal::TERM).unwrap();
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.0.try_wait().unwrap() {
            break status;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "leasehold dev still running 10 s after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "leasehold dev exited with {status}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_host_loads_what_dev_copied_from_the_compile_cache() {
    let root = tempfile::tempdir().unwrap();
    let (project, _) = write_project(root.path());
    let plugins = root.path().join("plugins");
    std::fs::create_dir(&plugins).unwrap();
    let db = Db::new(Backend::Sqlite).await.unwrap();
    let mut host = HostBuilder::new("dev-host")
        .database_url(&db.url().unwrap())
        .plugins(&plugins)
        .env(
            "XDG_CACHE_HOME",
            root.path().join("cache").to_str().unwrap(),
        )
        .spawn()
        .await
        .unwrap();
    let (_dev, log) = start_dev(root.path(), &plugins, &project);
    let loaded = host
        .wait_for_log("plugin loaded", Duration::from_secs(60))
        .await;
    let dev_said = std::fs::read_to_string(&log).unwrap_or_default();
    let loaded = loaded.unwrap_or_else(|e| panic!("{e}; leasehold dev said:\n{dev_said}"));
    assert!(
        loaded.contains(&format!("plugin={NAME}")) && loaded.contains("cache=Hit"),
        "the host loads the copied component compiled by the check: {loaded}"
    );
    host.kill().await.unwrap();
}

#[test]
fn a_plugin_directory_inside_the_project_does_not_start_the_next_build() {
    let root = tempfile::tempdir().unwrap();
    let (project, _) = write_project(root.path());
    let plugins = project.join("plugins");
    let (mut child, log) = start_dev(root.path(), &plugins, &project);
    wait_for("the copy", &log, Duration::from_secs(60), |t| {
        t.contains(COPIED)
    });
    // Its own copies are no change of the sources: one build, then idle.
    std::thread::sleep(Duration::from_secs(1));
    let text = std::fs::read_to_string(&log).unwrap();
    assert_eq!(
        text.matches("build.sh: building").count(),
        1,
        "one build only:\n{text}"
    );
    let _ = child.0.kill();
}
