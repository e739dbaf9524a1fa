//! The test suite's own promises (README, "Two commands"): `cargo test` builds no binary that runs
//! no test, the suite's table lists every step slowest first with its tests' counts, and the
//! suite's counts close the run on a line of their own.

#![allow(clippy::unwrap_used, missing_docs)]

use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Whether any Rust file at `path` (a file, or a directory searched whole) declares a test.
fn declares_a_test(path: &Path) -> bool {
    if path.is_dir() {
        return std::fs::read_dir(path)
            .unwrap()
            .any(|entry| declares_a_test(&entry.unwrap().path()));
    }
    path.extension().is_some_and(|e| e == "rs")
        && std::fs::read_to_string(path)
            .unwrap()
            .lines()
            .any(|l| l.trim_start().starts_with("#[test]") || l.contains("#[tokio::test"))
}

#[test]
fn cargo_test_builds_a_test_harness_only_for_targets_that_declare_a_test() {
    // `cargo metadata` takes no build lock, so this runs beside a build. It lists each target with
    // `test`: whether `cargo test` builds a test harness for it.
    let metadata = stdout(
        Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into())).args([
            "metadata",
            "--no-deps",
            "--format-version",
            "1",
        ]),
    );
    let metadata: serde_json::Value = serde_json::from_str(&metadata).unwrap();
    let mut harnesses = Vec::new();
    let mut empty = Vec::new();
    for package in metadata["packages"].as_array().unwrap() {
        for target in package["targets"].as_array().unwrap() {
            if !target["test"].as_bool().unwrap() {
                continue;
            }
            let kinds: Vec<&str> = target["kind"]
                .as_array()
                .unwrap()
                .iter()
                .map(|k| k.as_str().unwrap())
                .collect();
            let src = Path::new(target["src_path"].as_str().unwrap());
            // A library's tests are anywhere in its directory but the programs under it; a
            // program's, in its file; an integration test's, in its file or its directory.
            let found = match kinds.as_slice() {
                ["test"] if src.ends_with("main.rs") => declares_a_test(src.parent().unwrap()),
                ["test"] | ["bin"] => declares_a_test(src),
                _ => std::fs::read_dir(src.parent().unwrap())
                    .unwrap()
                    .map(|e| e.unwrap().path())
                    .filter(|p| p.file_name().is_some_and(|n| n != "bin" && n != "main.rs"))
                    .any(|p| declares_a_test(&p)),
            };
            let name = format!("{} {:?} {}", package["name"], kinds, target["name"]);
            if found {
                harnesses.push(name);
            } else {
                empty.push(name);
            }
        }
    }
    assert!(
        empty.is_empty(),
        "`cargo test` would build these and run no test in them (set `test = false`): \
         {empty:#?}"
    );
    // The suite's binaries are among them.
    assert!(
        harnesses.iter().any(|h| h.contains("\"leases\"")),
        "{harnesses:#?}"
    );
    assert!(
        harnesses.iter().any(|h| h.contains("\"plugins\"")),
        "{harnesses:#?}"
    );
}

/// Runs `cmd` in the repository's root; fails the test with its stderr unless it succeeds.
fn stdout(cmd: &mut Command) -> String {
    let out = cmd.current_dir(root()).output().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Runs `script` in bash with scripts/lib/timing.sh sourced; returns stdout.
fn bash(script: &str) -> String {
    stdout(
        Command::new("bash")
            .arg("-c")
            .arg(format!(". scripts/lib/timing.sh\n{script}")),
    )
}

#[test]
fn the_suites_table_lists_each_step_slowest_first_with_its_cpu_and_counts_then_the_whole() {
    let dir = tempfile::tempdir().unwrap();
    let table = dir.path().join("times.tsv");
    std::fs::write(
        &table,
        "12.5\ttests/http\tok\t39 passed, 0 failed, 0 ignored\t30\n\
         300.0\ttests/plugins\tFAILED\t75 passed, 1 failed, 0 ignored\t380\n\
         61.0\ttest build\tok\t\t140\n",
    )
    .unwrap();
    let text = stdout(
        Command::new(root().join("scripts/suite-table.sh"))
            .arg("400")
            .arg(&table),
    );
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 5, "{text}");
    assert!(lines[0].starts_with("step"), "{text}");
    for (line, (step, wall, cpu, result)) in lines[1..4].iter().zip([
        ("tests/plugins", "5m00.0s", "380s", "FAILED"),
        ("test build", "1m01.0s", "140s", "ok"),
        ("tests/http", "0m12.5s", "30s", "ok"),
    ]) {
        let words: Vec<&str> = line.split_whitespace().collect();
        assert!(line.starts_with(step), "{text}");
        assert!(words.contains(&wall), "{line}");
        assert!(words.contains(&cpu), "{line}");
        assert!(words.contains(&result), "{line}");
    }
    assert!(
        lines[1].ends_with("75 passed, 1 failed, 0 ignored"),
        "{text}"
    );
    assert!(lines[4].starts_with("the whole, wall time"), "{text}");
    assert!(lines[4].ends_with("6m40.0s"), "{text}");
}

#[test]
fn a_suites_counts_add_up_every_binarys_summary_line() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a.log"), dir.path().join("b.log"));
    std::fs::write(
        &a,
        "test x ... ok\ntest result: ok. 3 passed; 0 failed; 1 ignored; 0 measured; 0 filtered \
         out; finished in 0.01s\n",
    )
    .unwrap();
    std::fs::write(
        &b,
        "test result: FAILED. 10 passed; 2 failed; 0 ignored; 0 measured; 0 filtered out; \
         finished in 9.00s\ntest result: ok. 1 passed; 0 failed; 0 ignored; 0 measured; 0 \
         filtered out; finished in 0.00s\n",
    )
    .unwrap();
    let counts = bash(&format!("test_counts {a:?} {b:?}"));
    assert_eq!(counts, "14 passed, 2 failed, 1 ignored");
}

#[test]
fn a_timed_step_is_one_row_with_its_result_and_the_cpu_its_command_spent() {
    let dir = tempfile::tempdir().unwrap();
    let table = dir.path().join("t.tsv");
    bash(&format!(
        "timed {table:?} spin bash -c 'for ((i = 0; i < 3000000; i++)); do :; done'\n\
         timed {table:?} refused false || true"
    ));
    let text = std::fs::read_to_string(&table).unwrap();
    let rows: Vec<Vec<&str>> = text.lines().map(|l| l.split('\t').collect()).collect();
    assert_eq!(rows.len(), 2, "{text}");
    assert_eq!((rows[0][1], rows[0][2]), ("spin", "ok"), "{text}");
    let wall: f64 = rows[0][0].parse().unwrap();
    let cpu: f64 = rows[0][4].parse().unwrap();
    // Three million turns of a shell loop take seconds of CPU: they are counted, and the wall
    // time is at least that.
    assert!(cpu >= 1.0, "{text}");
    assert!(wall >= cpu - 0.5, "{text}");
    assert_eq!((rows[1][1], rows[1][2]), ("refused", "FAILED"), "{text}");
}
