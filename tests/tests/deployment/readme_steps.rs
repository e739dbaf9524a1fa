//! The README's "Write a plugin" steps, run as written: the fenced `sh` block under that heading
//! is read from README.md and its steps from `leasehold new` on (2–6) run verbatim in bash, in a
//! fresh directory, with the built `leasehold` first on `PATH`. Step 1 (`make run`) is the one
//! replaced: the test starts `leasehold run --plugins plugins --http 127.0.0.1:0` in the same
//! directory itself. The plugin must then log its own first line in that host's log.
//!
//! It runs for each language: step 2 as written for Python, and with `--lang js` and
//! `--lang rust`, which its comment offers. The slow toolchains are the ones
//! `tests/tests/plugins/new_project.rs` keeps under target/tmp/new-project (its Python
//! environment, `LEASEHOLD_PY_VENV`, which the project's scripts honour; its Rust target
//! directory), so no run but the first installs componentize-py or builds std for the target.
//! Each step's time is printed, from bash's own trace.
//!
//! And every fenced `toml` block of the README, as pasted: a plugin's manifest (the blocks under
//! `## Plugins` and `## Fenced capabilities`) parses as the host parses `plugins/NAME.toml`; any
//! other is a whole config file that `leasehold config check` accepts, printing its verdict and
//! nothing else. The programs a block names are stood in for by scripts on `PATH`, as the check
//! looks for them.

#![allow(clippy::unwrap_used, missing_docs)]

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use leasehold_tests::host::{HostBuilder, binary, now_time_of_day, time_of_day};
use leasehold_tests::log::Logged;
use tokio::process::Command;

/// The lines of the first fenced `sh` block under `## Write a plugin` in README.md.
fn write_a_plugin_block(readme: &str) -> Vec<String> {
    let section = readme
        .split("\n## Write a plugin\n")
        .nth(1)
        .expect("README.md has no \"## Write a plugin\" section");
    let section = section.split("\n## ").next().unwrap_or(section);
    let block = section
        .split("```sh\n")
        .nth(1)
        .and_then(|rest| rest.split("\n```").next())
        .expect("README.md's \"Write a plugin\" has no ```sh block");
    block.lines().map(str::to_string).collect()
}

/// Steps 2 and on of the block: every line from the one marked `# 2.`. The lines before are
/// step 1, `make run`, which the test replaces with a host of its own.
fn steps_after_the_host(block: &[String]) -> Vec<String> {
    assert!(
        block.first().is_some_and(|l| l.starts_with("make run")),
        "the README's block no longer starts with `make run`, which this test replaces: {block:#?}"
    );
    let from = block
        .iter()
        .position(|l| l.contains("# 2."))
        .unwrap_or_else(|| panic!("no line of the README's block is marked `# 2.`: {block:#?}"));
    block[from..].to_vec()
}

/// A directory `tests/tests/plugins/new_project.rs` keeps between runs: its Python virtual
/// environment (`py-venv`), its Rust projects' target directory (`cargo-target`).
fn shared(name: &str) -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("new-project")
        .join(name)
}

/// One traced command of the script: when it started (seconds since midnight UTC) and its text.
struct Traced {
    start: f64,
    command: String,
}

/// The commands bash traced (`PS4='+ $EPOCHREALTIME '`), in order.
fn traced(trace: &str) -> Vec<Traced> {
    trace
        .lines()
        .filter_map(|line| {
            let rest = line.strip_prefix("+ ")?;
            let (time, command) = rest.split_once(' ')?;
            let since_epoch: f64 = time.parse().ok()?;
            Some(Traced {
                start: since_epoch.rem_euclid(86_400.0),
                command: command.to_string(),
            })
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readmes_write_a_plugin_steps_run_as_written_in_python_and_the_plugin_logs_its_first_line()
 {
    steps_as_written("python", &[("LEASEHOLD_PY_VENV", shared("py-venv"))]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readmes_write_a_plugin_steps_run_as_written_in_javascript_and_the_plugin_logs_its_first_line()
 {
    // npm installs the pinned tools from its own cache.
    steps_as_written("js", &[]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readmes_write_a_plugin_steps_run_as_written_in_rust_and_the_plugin_logs_its_first_line()
 {
    // The target directory `new_project.rs` builds Rust projects in: the SDK and std for
    // wasm32-wasip2 are built once. Offline: the project carries its SDK and lock.
    steps_as_written(
        "rust",
        &[
            ("CARGO_TARGET_DIR", shared("cargo-target")),
            ("CARGO_NET_OFFLINE", PathBuf::from("true")),
        ],
    )
    .await;
}

/// Steps 2–6 of the README's block, as written but for step 2's `--lang python`, which names
/// `lang` instead (the README's comment offers the others), with `env` for the project's
/// scripts; then the plugin's first line in the host's log.
async fn steps_as_written(lang: &str, env: &[(&str, PathBuf)]) {
    let readme_path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md");
    let readme = std::fs::read_to_string(&readme_path).unwrap();
    let mut steps = steps_after_the_host(&write_a_plugin_block(&readme));
    assert!(
        steps[0].contains("--lang python") && steps[0].contains("--lang js, --lang rust"),
        "step 2 names Python, and the others in its comment: {}",
        steps[0]
    );
    steps[0] = steps[0].replacen("--lang python", &format!("--lang {lang}"), 1);
    let leasehold = binary().unwrap();
    let bin_dir = leasehold.parent().unwrap().to_path_buf();
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    // What `make run` does before it starts the host.
    std::fs::create_dir(dir.join("plugins")).unwrap();
    // The host and `leasehold check` share a compile cache, as they do for a user (both under
    // $HOME/.cache), but not the user's own.
    let cache = dir.join("cache");
    let host = HostBuilder::new("readme")
        .current_dir(dir)
        .args(&["--plugins", "plugins"])
        .env("XDG_CACHE_HOME", cache.to_str().unwrap())
        .spawn()
        .await
        .unwrap();

    let trace = dir.join("trace");
    let output = dir.join("output");
    let script = format!(
        "exec 3>{trace:?}\nBASH_XTRACEFD=3\nPS4='+ $EPOCHREALTIME '\nset -eo pipefail -x\n{}\n",
        steps.join("\n")
    );
    let path = std::env::var_os("PATH").unwrap_or_default();
    let path =
        std::env::join_paths(std::iter::once(bin_dir.clone()).chain(std::env::split_paths(&path)))
            .unwrap();
    let out = std::fs::File::create(&output).unwrap();
    let started = now_time_of_day();
    let run = Command::new("bash")
        .arg("-c")
        .arg(&script)
        .current_dir(dir)
        .env("PATH", path)
        .envs(env.iter().map(|(k, v)| (*k, v)))
        .env("XDG_CACHE_HOME", &cache)
        .stdin(Stdio::null())
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .kill_on_drop(true)
        .status();
    // The first run installs componentize-py into the shared environment, or builds std for
    // wasm32-wasip2 (a minute or two).
    let status = tokio::time::timeout(Duration::from_secs(600), run)
        .await
        .expect("the README's steps still running after 10 minutes")
        .unwrap();
    let ended = now_time_of_day();
    let said = std::fs::read_to_string(&output).unwrap_or_default();
    let trace = std::fs::read_to_string(&trace).unwrap_or_default();
    assert!(
        status.success(),
        "the README's steps failed ({status}) in {}:\n{}\n--- their output:\n{said}\n--- bash's trace:\n{trace}",
        dir.display(),
        steps.join("\n")
    );
    assert!(
        said.contains("my-plugin.wasm: ok: leasehold:plugin@0.1.0 world reconciler"),
        "step 5, `leasehold check`, did not find the world:\n{said}"
    );

    let first = host
        .log()
        .wait_for("hello from epoch", Duration::from_secs(60))
        .await
        .unwrap();
    assert!(first.contains("my-plugin"), "{first}");
    let first_at = time_of_day(&first).unwrap();

    // Each command's time, from its start to the next one's (the last one's to the end).
    let commands = traced(&trace);
    eprintln!("the README's steps in {lang}, as timed (s):");
    for (i, command) in commands.iter().enumerate() {
        let end = commands.get(i + 1).map_or(ended, |next| next.start);
        eprintln!("  {:>6.1}  {}", end - command.start, command.command);
    }
    let copied = commands
        .iter()
        .rfind(|c| c.command.starts_with("cp "))
        .map_or(started, |c| c.start);
    eprintln!("  {:>6.1}  copy -> first line", first_at - copied);
    eprintln!("  {:>6.1}  total: new -> first line", first_at - started);
}

/// Every fenced `toml` block of `readme`, with the `## ` section it is under.
fn toml_blocks(readme: &str) -> Vec<(String, String)> {
    let mut section = String::new();
    let mut blocks = Vec::new();
    let mut block: Option<String> = None;
    for line in readme.lines() {
        match &mut block {
            Some(text) if line == "```" => {
                blocks.push((section.clone(), std::mem::take(text)));
                block = None;
            }
            Some(text) => {
                text.push_str(line);
                text.push('\n');
            }
            None if line == "```toml" => block = Some(String::new()),
            None => {
                if let Some(heading) = line.strip_prefix("## ") {
                    section = heading.to_string();
                }
            }
        }
    }
    assert!(block.is_none(), "README.md ends inside a ```toml block");
    blocks
}

/// The sections whose `toml` blocks are a plugin's manifest (`plugins/NAME.toml`).
const MANIFEST_SECTIONS: [&str; 2] = ["Plugins", "Fenced capabilities"];

/// The programs a config's `[[process]]` and `[[service]]` tables run.
fn programs(config: &toml::Table) -> Vec<String> {
    let tables = ["process", "service"]
        .into_iter()
        .filter_map(|key| config.get(key)?.as_array())
        .flatten()
        .filter_map(toml::Value::as_table);
    tables
        .flat_map(|table| {
            ["command", "activate", "deactivate", "health"]
                .into_iter()
                .filter_map(|key| table.get(key)?.as_array()?.first()?.as_str())
        })
        .map(str::to_string)
        .collect()
}

#[tokio::test]
async fn every_toml_block_of_the_readme_is_accepted_as_pasted_by_config_check_or_as_a_manifest() {
    use std::os::unix::fs::PermissionsExt;
    let readme_path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md");
    let readme = std::fs::read_to_string(&readme_path).unwrap();
    let blocks = toml_blocks(&readme);
    let configs = blocks
        .iter()
        .filter(|(section, _)| !MANIFEST_SECTIONS.contains(&section.as_str()))
        .count();
    assert!(
        configs >= 3 && blocks.len() > configs,
        "the README's toml blocks are not where this test looks for them: {blocks:#?}"
    );
    for (i, (section, block)) in blocks.iter().enumerate() {
        if MANIFEST_SECTIONS.contains(&section.as_str()) {
            if let Err(e) = leasehold::manifest::Manifest::parse("plugins/readme.toml", block) {
                panic!("block {i} (## {section}) is not a plugin manifest: {e}\n{block}");
            }
            continue;
        }
        let dir = tempfile::tempdir().unwrap();
        let dir = dir.path();
        // Stand-ins for the programs the block names, found on PATH as the check looks.
        let bin = dir.join("bin");
        std::fs::create_dir(&bin).unwrap();
        let config: toml::Table = toml::from_str(block)
            .unwrap_or_else(|e| panic!("block {i} (## {section}) is not TOML: {e}\n{block}"));
        for program in programs(&config) {
            assert!(
                !program.contains('/'),
                "block {i} (## {section}) names {program}: a bare name is looked up in PATH, \
                 where this test puts a stand-in; a path would have to exist here\n{block}"
            );
            let stand_in = bin.join(&program);
            std::fs::write(&stand_in, "#!/bin/sh\nexit 0\n").unwrap();
            std::fs::set_permissions(&stand_in, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        std::fs::write(dir.join("leasehold.toml"), block).unwrap();
        let path = std::env::var_os("PATH").unwrap_or_default();
        let path =
            std::env::join_paths(std::iter::once(bin.clone()).chain(std::env::split_paths(&path)))
                .unwrap();
        let mut check = Command::new(binary().unwrap());
        check
            .args(["config", "check", "leasehold.toml"])
            .current_dir(dir)
            .env("PATH", path)
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .kill_on_drop(true);
        for (key, _) in std::env::vars().filter(|(k, _)| k.starts_with("LEASEHOLD_")) {
            check.env_remove(key);
        }
        let out = tokio::time::timeout(Duration::from_secs(60), check.output())
            .await
            .expect("config check still running after 60 s")
            .unwrap();
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
        assert!(
            out.status.success(),
            "block {i} (## {section}) is refused by `leasehold config check`:\n{stderr}\n{block}"
        );
        assert_eq!(stderr, "", "block {i} (## {section}): the check logged");
        assert!(
            stdout.starts_with("# leasehold.toml: ok;"),
            "block {i} (## {section}): {stdout}"
        );
    }
}
