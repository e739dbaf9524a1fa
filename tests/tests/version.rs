//! `leasehold --version` names the release and the commit checked out when the binary was built,
//! so that a binary found on a machine names its source.

#![allow(clippy::unwrap_used, missing_docs)]

use std::path::Path;
use std::process::Command;

use leasehold_tests::host::binary;

#[test]
fn the_version_names_the_release_and_the_commit_it_was_built_from() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let manifest: toml::Value =
        toml::from_str(&std::fs::read_to_string(root.join("host/Cargo.toml")).unwrap()).unwrap();
    let release = manifest["package"]["version"]
        .as_str()
        .map(str::to_string)
        .unwrap_or_else(|| {
            let workspace: toml::Value =
                toml::from_str(&std::fs::read_to_string(root.join("Cargo.toml")).unwrap()).unwrap();
            workspace["workspace"]["package"]["version"]
                .as_str()
                .unwrap()
                .to_string()
        });
    let commit = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(&root)
        .output()
        .unwrap();
    let commit = String::from_utf8(commit.stdout).unwrap();
    let out = Command::new(binary().unwrap())
        .arg("--version")
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8(out.stdout).unwrap().trim(),
        format!("leasehold {release} ({})", commit.trim())
    );
}
