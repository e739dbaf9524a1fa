//! `leasehold new` end to end: for each language and world, the real binary writes a project
//! into a temporary directory, the project's own `./test.sh` and `./build.sh` pass, and
//! `leasehold check` finds the world that was asked for; a Python project's build reports a
//! syntax error as Python does, without its build tool's own backtrace; two Python builds may
//! share one virtual environment from their first run.
//!
//! What is slow to build is shared. The Rust projects build in the checkout's guests/target,
//! where `make guests` and the guests' own tests have built the SDK's dependencies (and, on the
//! Debian recipe, std) with the same toolchain, profile and lock: from a clean clone the first
//! Rust project otherwise spent 100 s of CPU building them again. Kept between runs under
//! target/tmp/new-project: one Python virtual environment with componentize-py
//! (`LEASEHOLD_PY_VENV`, which the projects' scripts honour) and the host's compile cache for
//! `leasehold check`. npm installs from its own cache.

#![allow(clippy::unwrap_used, missing_docs)]

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::time::{Duration, Instant};

use leasehold_tests::host::binary;

const WORLDS: [&str; 3] = ["reconciler", "event-reconciler", "health-check"];

/// The checkout's guests' build directory, which the Rust projects share (see the module's head).
fn guests_target() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../guests/target")
}

/// A directory kept between runs of this test.
fn shared(name: &str) -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("new-project")
        .join(name)
}

/// Runs `cmd` (its output kept in `logs`), failing the test with that output if it fails or
/// outlives `limit`; returns stdout and stderr together.
fn run(what: &str, cmd: &mut Command, logs: &Path, limit: Duration) -> String {
    let started = Instant::now();
    match run_to_end(what, cmd, logs, limit) {
        (Some(s), output) if s.success() => {
            eprintln!("{what}: ok in {:.1?}", started.elapsed());
            output
        }
        (Some(s), output) => panic!("{what}: {cmd:?} failed ({s}):\n{output}"),
        (None, output) => panic!("{what}: {cmd:?} still running after {limit:?}:\n{output}"),
    }
}

/// Runs `cmd` (its output kept in `logs`) for at most `limit`; returns how it exited (`None`:
/// killed at the limit) and its stdout and stderr together.
fn run_to_end(
    what: &str,
    cmd: &mut Command,
    logs: &Path,
    limit: Duration,
) -> (Option<ExitStatus>, String) {
    let out_path = logs.join(format!("{}.log", what.replace([' ', '/'], "_")));
    let out = File::create(&out_path).unwrap();
    let started = Instant::now();
    let mut child = cmd
        .stdin(std::process::Stdio::null())
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .spawn()
        .unwrap_or_else(|e| panic!("{what}: cannot start {cmd:?}: {e}"));
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    (
        status,
        std::fs::read_to_string(&out_path).unwrap_or_default(),
    )
}

/// `leasehold new NAME --lang LANG --world WORLD` into a fresh directory, then the project's
/// tests, its build and `leasehold check`. `env` is given to the project's scripts;
/// `expect_tests` is a line its test run prints when the tests passed.
fn new_build_test_check(
    lang: &str,
    world: &str,
    extra_args: &[&str],
    env: &[(&str, PathBuf)],
    expect_tests: &str,
) {
    let leasehold = binary().unwrap();
    let parent = tempfile::tempdir().unwrap();
    let logs = parent.path();
    let name = format!("{lang}-{world}");
    let dir = parent.path().join(&name);
    let what = |step: &str| format!("{name} {step}");
    let minutes = |m: u64| Duration::from_secs(60 * m);

    let created = run(
        &what("new"),
        Command::new(&leasehold)
            .args(["new", &name, "--lang", lang, "--world", world, "--dir"])
            .arg(parent.path())
            .args(extra_args),
        logs,
        minutes(1),
    );
    assert!(
        created.contains(&format!("Created {}", dir.display())),
        "{created}"
    );
    for file in ["README.md", "wit/plugin.wit", &format!("{name}.toml")] {
        assert!(dir.join(file).is_file(), "{name}: no {file}");
    }

    let script = |step: &str| {
        let mut cmd = Command::new(dir.join(step));
        cmd.current_dir(&dir);
        for (key, value) in env {
            cmd.env(key, value);
        }
        cmd
    };
    let lock = dir.join("Cargo.lock");
    let locked = std::fs::read_to_string(&lock).ok();
    assert_eq!(locked.is_some(), lang == "rust", "{name}: Cargo.lock");
    let tested = run(&what("test"), &mut script("test.sh"), logs, minutes(10));
    assert!(tested.contains(expect_tests), "{name}: tests:\n{tested}");
    run(&what("build"), &mut script("build.sh"), logs, minutes(15));
    // The lock the project came with was whole: cargo resolved nothing and rewrote nothing.
    assert_eq!(
        std::fs::read_to_string(&lock).ok(),
        locked,
        "{name}: cargo changed the Cargo.lock `leasehold new` wrote"
    );

    let wasm = format!("{name}.wasm");
    let checked = run(
        &what("check"),
        Command::new(&leasehold)
            .args(["check", &wasm])
            .current_dir(&dir)
            .env("XDG_CACHE_HOME", shared("cache")),
        logs,
        minutes(5),
    );
    let expected = format!("{wasm}: ok: leasehold:plugin@0.1.0 world {world}\n");
    assert!(checked.contains(&expected), "{name}: check:\n{checked}");
}

#[test]
fn rust_projects_build_pass_their_tests_and_check_as_their_world() {
    // The SDK of this checkout, given explicitly once; the project's own copy otherwise.
    let sdk = Path::new(env!("CARGO_MANIFEST_DIR")).join("../guests/leasehold-guest");
    let sdk = sdk.to_str().unwrap();
    for world in WORLDS {
        let extra: &[&str] = if world == "health-check" {
            &["--sdk", sdk]
        } else {
            &[]
        };
        // Offline: the project's own lock and SDK copy need no registry, only the crates the
        // guests' build downloaded.
        let env = [
            ("CARGO_TARGET_DIR", guests_target()),
            ("CARGO_NET_OFFLINE", PathBuf::from("true")),
        ];
        new_build_test_check("rust", world, extra, &env, "test tests::");
    }
}

#[test]
fn python_projects_build_pass_their_tests_and_check_as_their_world() {
    let env = [("LEASEHOLD_PY_VENV", shared("py-venv"))];
    for world in WORLDS {
        new_build_test_check("python", world, &[], &env, "\nOK\n");
    }
}

#[test]
fn a_syntax_error_in_a_python_plugin_is_reported_without_the_build_tools_rust_backtrace() {
    // componentize-py is a Rust program: with RUST_BACKTRACE set where the author works, its
    // error came with thirty frames of its own under the Python error.
    let leasehold = binary().unwrap();
    let parent = tempfile::tempdir().unwrap();
    let logs = parent.path();
    run(
        "new",
        Command::new(&leasehold)
            .args(["new", "broken", "--lang", "python", "--dir"])
            .arg(parent.path()),
        logs,
        Duration::from_secs(60),
    );
    let dir = parent.path().join("broken");
    let source = dir.join("broken.py");
    let mut text = std::fs::read_to_string(&source).unwrap();
    text.push_str("\ndef oops(:\n");
    std::fs::write(&source, text).unwrap();

    let (status, output) = run_to_end(
        "build",
        Command::new(dir.join("build.sh"))
            .current_dir(&dir)
            .env("LEASEHOLD_PY_VENV", shared("py-venv"))
            .env("RUST_BACKTRACE", "1"),
        logs,
        Duration::from_secs(600),
    );
    assert!(
        status.is_some_and(|s| !s.success()),
        "build.sh: {status:?}:\n{output}"
    );
    assert!(
        output.contains("SyntaxError") && output.contains("broken.py"),
        "the error names the file and what is wrong:\n{output}"
    );
    assert!(
        !output.to_lowercase().contains("stack backtrace"),
        "no backtrace of componentize-py's own frames:\n{output}"
    );
    assert!(
        output.contains("build.sh: componentize-py failed"),
        "{output}"
    );
}

#[test]
fn two_first_builds_sharing_one_python_environment_install_it_once_and_both_succeed() {
    // LEASEHOLD_PY_VENV is offered for sharing between projects, and this suite's own Python
    // tests share one: two first builds at once both created it, and one failed on a directory
    // the other had just made. The second now waits for the first's install and finds it done.
    let leasehold = binary().unwrap();
    let parent = tempfile::tempdir().unwrap();
    let logs = parent.path();
    let venv = parent.path().join("shared-venv");
    let builds: Vec<_> = ["first", "second"]
        .into_iter()
        .map(|name| {
            run(
                &format!("new {name}"),
                Command::new(&leasehold)
                    .args(["new", name, "--lang", "python", "--dir"])
                    .arg(parent.path()),
                logs,
                Duration::from_secs(60),
            );
            let dir = parent.path().join(name);
            let venv = venv.clone();
            let logs = logs.to_path_buf();
            std::thread::spawn(move || {
                run_to_end(
                    &format!("build {name}"),
                    Command::new(dir.join("build.sh"))
                        .current_dir(&dir)
                        .env("LEASEHOLD_PY_VENV", venv),
                    &logs,
                    Duration::from_secs(600),
                )
            })
        })
        .collect();
    let mut installs = 0;
    for build in builds {
        let (status, output) = build.join().unwrap();
        assert!(
            status.is_some_and(|s| s.success()),
            "build.sh: {status:?}:\n{output}"
        );
        installs += output.matches("installing componentize-py").count();
    }
    assert_eq!(installs, 1, "the shared environment is installed once");
}

#[test]
fn javascript_projects_build_pass_their_tests_and_check_as_their_world() {
    for world in WORLDS {
        new_build_test_check("js", world, &[], &[], "ℹ fail 0");
    }
}

#[test]
fn new_refuses_a_bad_name_and_a_directory_that_is_not_empty_in_one_line() {
    let leasehold = binary().unwrap();
    let parent = tempfile::tempdir().unwrap();
    let new = |args: &[&str]| {
        Command::new(&leasehold)
            .arg("new")
            .args(args)
            .arg("--dir")
            .arg(parent.path())
            .output()
            .unwrap()
    };

    let bad = new(&["My_Plugin"]);
    assert!(!bad.status.success());
    let stderr = String::from_utf8_lossy(&bad.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.starts_with("leasehold: error: invalid plugin name \"My_Plugin\""),
        "{stderr}"
    );

    let taken = parent.path().join("taken");
    std::fs::create_dir(&taken).unwrap();
    std::fs::write(taken.join("notes.txt"), "mine").unwrap();
    let refused = new(&["taken", "--lang", "js"]);
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("already exists and is not empty"),
        "{stderr}"
    );
    let left: Vec<_> = std::fs::read_dir(&taken).unwrap().collect();
    assert_eq!(
        left.len(),
        1,
        "nothing was written into {}",
        taken.display()
    );
    let entries: Vec<_> = std::fs::read_dir(parent.path()).unwrap().collect();
    assert_eq!(entries.len(), 1, "no staging directory is left");
}

/// A template's language, its source file, the edits (text replaced, text put there) and the
/// environment its build needs.
type Edit<'a> = (
    &'a str,
    &'a str,
    &'a [(&'a str, &'a str)],
    Vec<(&'a str, PathBuf)>,
);

/// Each language's reconciler template, changed only to read its kv store on every tick, built,
/// and loaded by a real host without `[grants] kv = true`: the call fails as the template's own
/// error, one line in the host's words naming the manifest key, not as a trap of the guest's
/// runtime.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_template_that_uses_kv_without_the_grant_fails_in_one_line_naming_the_grant() {
    use leasehold_tests::host::HostBuilder;
    use leasehold_tests::stores::{Backend, Db};

    // (language, source file, what the edit replaces, what it puts there, the project's env)
    let edits: [Edit; 3] = [
        (
            "python",
            "kv_python.py",
            &[
                (
                    "from wit_world.imports import lease, log, types",
                    "from wit_world.imports import kv, lease, log, types",
                ),
                (
                    "        info(f\"{greeting} from epoch {ctx.epoch}, tick {ctx.tick}\")\n",
                    "        info(f\"{greeting} from epoch {ctx.epoch}, tick {ctx.tick}\")\n        kv.get(\"greeting\")\n",
                ),
            ],
            vec![("LEASEHOLD_PY_VENV", shared("py-venv"))],
        ),
        (
            "js",
            "kv-js.js",
            &[
                (
                    "import { log } from 'leasehold:plugin/log@0.1.0';\n",
                    "import { log } from 'leasehold:plugin/log@0.1.0';\nimport { get } from 'leasehold:plugin/kv@0.1.0';\n",
                ),
                (
                    "    log('info', `${greeting} from epoch ${ctx.epoch}, tick ${ctx.tick}`);\n",
                    "    log('info', `${greeting} from epoch ${ctx.epoch}, tick ${ctx.tick}`);\n    get('greeting');\n",
                ),
            ],
            vec![],
        ),
        (
            "rust",
            "src/lib.rs",
            &[(
                "        info!(\"{} from epoch {epoch}, tick {tick}\", self.greeting);\n",
                "        info!(\"{} from epoch {epoch}, tick {tick}\", self.greeting);\n        leasehold_guest::kv::get(\"greeting\")?;\n",
            )],
            vec![
                ("CARGO_TARGET_DIR", guests_target()),
                ("CARGO_NET_OFFLINE", PathBuf::from("true")),
            ],
        ),
    ];
    let leasehold = binary().unwrap();
    let parent = tempfile::tempdir().unwrap();
    let logs = parent.path();
    let plugins = parent.path().join("plugins");
    std::fs::create_dir(&plugins).unwrap();
    let mut names = Vec::new();
    for (lang, source, replacements, env) in &edits {
        let name = format!("kv-{lang}");
        run(
            &format!("{name} new"),
            Command::new(&leasehold)
                .args(["new", &name, "--lang", lang, "--dir"])
                .arg(parent.path()),
            logs,
            Duration::from_secs(60),
        );
        let dir = parent.path().join(&name);
        let mut text = std::fs::read_to_string(dir.join(source)).unwrap();
        for (from, to) in *replacements {
            assert!(text.contains(from), "{name}: the template has no {from:?}");
            text = text.replacen(from, to, 1);
        }
        std::fs::write(dir.join(source), text).unwrap();
        let mut build = Command::new(dir.join("build.sh"));
        build
            .current_dir(&dir)
            .envs(env.iter().map(|(k, v)| (*k, v)));
        run(
            &format!("{name} build"),
            &mut build,
            logs,
            Duration::from_secs(900),
        );
        // Compiled into the cache the host loads from, as the author's `leasehold check` does:
        // the host compiles every plugin before it serves, and three 12–18 MB components take
        // longer than the harness waits for a host to come up on a loaded machine.
        run(
            &format!("{name} check"),
            Command::new(&leasehold)
                .args(["check", &format!("{name}.wasm")])
                .current_dir(&dir)
                .env("XDG_CACHE_HOME", shared("cache")),
            logs,
            Duration::from_secs(300),
        );
        // The template's manifest as it is: no [grants].
        for file in [format!("{name}.wasm"), format!("{name}.toml")] {
            std::fs::copy(dir.join(&file), plugins.join(&file)).unwrap();
        }
        names.push(name);
    }

    let db = Db::new(Backend::Sqlite).await.unwrap();
    let host = HostBuilder::new("a")
        .database_url(&db.url().unwrap())
        .plugins(&plugins)
        .env("XDG_CACHE_HOME", shared("cache").to_str().unwrap())
        .spawn()
        .await
        .unwrap();
    for name in &names {
        let status = host
            .wait_for_plugin(name, "its first error", Duration::from_secs(120), |s| {
                s.last_error.is_some()
            })
            .await
            .unwrap();
        let error = status.last_error.as_deref().unwrap();
        assert!(
            error.starts_with("returned an error: ")
                && error
                    .contains("kv is not granted: add [grants] kv = true to the plugin's manifest")
                && !error.contains('\n'),
            "{name}: {error}"
        );
        assert_eq!(status.traps, 0, "{name}: {status:?}");
    }
}
