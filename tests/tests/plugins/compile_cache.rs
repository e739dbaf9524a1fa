//! The compile cache holds native code the host maps and runs unverified, so it is trusted only
//! while it is private to the host's user. Each test runs real hosts on a real plugin directory
//! and a cache directory it tampers with between starts, and reads the `cache=` field of the
//! "plugin loaded" line: a tampered cache is compiled around, never loaded, and the plugin runs.

#![allow(clippy::unwrap_used, missing_docs)]

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use leasehold_tests::host::{HostBuilder, plugin_dir};
use leasehold_tests::in_process::InProcessHost;
use leasehold_tests::log::Logged;
use leasehold_tests::stores::{Backend, Db};
use sha2::{Digest, Sha256};

const MANIFEST: &str =
    "lease = \"leader\"\n[schedule]\ninterval = \"100ms\"\n[config]\ngreeting = \"hi\"\n";

/// A host on `db` with `plugins`, caching compiled components in `cache`.
async fn start(name: &str, db: &Db, plugins: &Path, cache: &Path) -> InProcessHost {
    HostBuilder::new(name)
        .database_url(&db.url().unwrap())
        .plugins(plugins)
        .config(&format!("cache_dir = {:?}\n", cache.to_str().unwrap()))
        .start_in_process()
        .await
        .unwrap()
}

/// Starts a host, waits until its plugin runs, stops it, and returns the `cache=` field of its
/// "plugin loaded" line and its whole log.
async fn run_once(name: &str, db: &Db, plugins: &Path, cache: &Path) -> (String, String) {
    let mut host = start(name, db, plugins, cache).await;
    let loaded = host
        .wait_for_log("plugin loaded", Duration::from_secs(30))
        .await
        .unwrap();
    host.wait_for_log("hi from epoch", Duration::from_secs(15))
        .await
        .unwrap();
    host.stop().await.unwrap();
    let field = loaded
        .split_whitespace()
        .find_map(|w| w.strip_prefix("cache="))
        .unwrap_or_else(|| panic!("no cache= field in {loaded:?}"))
        .to_string();
    (field, host.log_text())
}

/// The artifact (`.cwasm`) in `cache`.
fn artifact(cache: &Path) -> PathBuf {
    std::fs::read_dir(cache)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "cwasm"))
        .unwrap_or_else(|| panic!("no artifact in {}", cache.display()))
}

fn mode(path: &Path) -> u32 {
    std::fs::symlink_metadata(path)
        .unwrap()
        .permissions()
        .mode()
        & 0o7777
}

/// Asserts a start refused the cache, logged `why` naming `path`, and still ran the plugin.
fn assert_refused(case: &str, (field, log): &(String, String), path: &Path, why: &str) {
    assert_eq!(
        field, "Refused",
        "{case}: the tampered cache was not refused"
    );
    let shown = path.display().to_string();
    assert!(
        log.lines()
            .any(|l| l.contains("compile cache") && l.contains(&shown) && l.contains(why)),
        "{case}: no log line naming {shown} and {why:?}:\n{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tampered_compile_cache_is_compiled_around_never_loaded() {
    let db = Db::new(Backend::Sqlite).await.unwrap();
    let plugins = plugin_dir(&[("hello-reconciler", MANIFEST)]).unwrap();
    let scratch = tempfile::tempdir().unwrap();
    let cache = scratch.path().join("leasehold").join("components");
    let p = plugins.path();

    // A cold cache is created private to the host's user; a warm one is loaded.
    assert_eq!(run_once("cold", &db, p, &cache).await.0, "Compiled");
    assert_eq!(mode(&cache), 0o700);
    assert_eq!(mode(&artifact(&cache)), 0o600);
    assert_eq!(run_once("warm", &db, p, &cache).await.0, "Hit");

    // A directory others can write: another user could have planted the artifact.
    std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o777)).unwrap();
    let run = run_once("open-dir", &db, p, &cache).await;
    assert_refused(
        "world-writable directory",
        &run,
        &cache,
        "writable by group or others",
    );
    std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o700)).unwrap();
    assert_eq!(run_once("closed-dir", &db, p, &cache).await.0, "Hit");

    // An artifact that is a link, even to a genuine artifact, is not followed.
    let target = artifact(&cache);
    let elsewhere = scratch.path().join("planted.cwasm");
    std::fs::rename(&target, &elsewhere).unwrap();
    std::os::unix::fs::symlink(&elsewhere, &target).unwrap();
    let run = run_once("symlink", &db, p, &cache).await;
    assert_refused("symlinked artifact", &run, &target, "symbolic link");
    // The compile put a file of the host's own in the link's place.
    assert!(!std::fs::symlink_metadata(&target).unwrap().is_symlink());
    assert_eq!(run_once("relinked", &db, p, &cache).await.0, "Hit");

    // Garbage under the artifact's name: caught by the checksum...
    std::fs::write(&target, b"\x7fELF garbage where native code was").unwrap();
    let run = run_once("garbage", &db, p, &cache).await;
    assert_refused("garbage artifact", &run, &target, "fails its checksum");
    // ...and, with a matching checksum beside it, by the engine's own header check.
    let garbage = b"\x7fELF garbage with a checksum that matches".to_vec();
    std::fs::write(&target, &garbage).unwrap();
    let sum = format!("{:x}", Sha256::digest(&garbage));
    std::fs::write(target.with_extension("sha256"), format!("{sum}\n")).unwrap();
    let run = run_once("garbage-summed", &db, p, &cache).await;
    assert_refused(
        "summed garbage",
        &run,
        &target,
        "not an artifact this engine loads",
    );
    assert_eq!(run_once("repaired", &db, p, &cache).await.0, "Hit");
}

/// Only root can give a file away, so this runs as root and is ignored, saying so, otherwise.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not_root,
    ignore = "not root: only root can give the compile cache to another user"
)]
async fn a_compile_cache_owned_by_another_user_is_compiled_around_never_loaded() {
    // Built as root (cfg) but run as another user: fail rather than pass untested.
    assert!(
        rustix::process::geteuid().is_root(),
        "built as root, run as another user: rebuild the tests as this user"
    );
    let db = Db::new(Backend::Sqlite).await.unwrap();
    let plugins = plugin_dir(&[("hello-reconciler", MANIFEST)]).unwrap();
    let scratch = tempfile::tempdir().unwrap();
    let cache = scratch.path().join("leasehold").join("components");
    let p = plugins.path();
    assert_eq!(run_once("cold", &db, p, &cache).await.0, "Compiled");
    let target = artifact(&cache);

    let nobody = 65534;
    std::os::unix::fs::chown(&target, Some(nobody), None).unwrap();
    let run = run_once("foreign-file", &db, p, &cache).await;
    assert_refused(
        "artifact of another user",
        &run,
        &target,
        "owned by uid 65534",
    );
    std::os::unix::fs::chown(&cache, Some(nobody), None).unwrap();
    let run = run_once("foreign-dir", &db, p, &cache).await;
    assert_refused(
        "directory of another user",
        &run,
        &cache,
        "owned by uid 65534",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_home_or_a_configured_directory_there_is_no_cache_and_no_temp_fallback() {
    let db = Db::new(Backend::Sqlite).await.unwrap();
    let plugins = plugin_dir(&[("hello-reconciler", MANIFEST)]).unwrap();
    // The temp directory the old fallback would have used: it must stay empty.
    let tmp = tempfile::tempdir().unwrap();
    let mut host = HostBuilder::new("homeless")
        .database_url(&db.url().unwrap())
        .plugins(plugins.path())
        .env("TMPDIR", tmp.path().to_str().unwrap())
        .under_shell("unset HOME XDG_CACHE_HOME LEASEHOLD_CACHE_DIR")
        .spawn()
        .await
        .unwrap();
    let loaded = host
        .wait_for_log("plugin loaded", Duration::from_secs(30))
        .await
        .unwrap();
    assert!(loaded.contains("cache=Off"), "{loaded}");
    host.wait_for_log("hi from epoch", Duration::from_secs(15))
        .await
        .unwrap();
    assert_eq!(
        host.log_text().matches("no compile cache").count(),
        1,
        "{}",
        host.log_text()
    );
    host.kill().await.unwrap();
    let left: Vec<_> = std::fs::read_dir(tmp.path()).unwrap().collect();
    assert!(left.is_empty(), "the host wrote to TMPDIR: {left:?}");
}
