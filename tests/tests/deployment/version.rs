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

/// The newest release named in CHANGELOG.md, the workspace's version, and what the examples
/// deploy agree: the manifests run the newest release's image, and this tree is that release or
/// the next one's development (`X.Y.Z-dev`).
#[test]
fn the_changelog_the_version_and_the_deployed_image_tags_agree() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let read = |path: &str| std::fs::read_to_string(root.join(path)).unwrap();
    let changelog = read("CHANGELOG.md");
    let released: Vec<&str> = changelog
        .lines()
        .filter_map(|l| l.strip_prefix("## "))
        .filter_map(|l| l.split(' ').next())
        .filter(|v| v.chars().next().is_some_and(|c| c.is_ascii_digit()))
        .collect();
    let newest = released.first().expect("CHANGELOG.md names a release");
    let workspace: toml::Value = toml::from_str(&read("Cargo.toml")).unwrap();
    let version = workspace["workspace"]["package"]["version"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        version == *newest || version.ends_with("-dev"),
        "the workspace says {version}: the newest release ({newest}) or a -dev version"
    );
    assert!(
        changelog.contains("## Unreleased"),
        "CHANGELOG.md keeps an Unreleased section"
    );
    for file in [
        "examples/kubernetes/leasehold.yaml",
        "examples/kubernetes/leader-only.yaml",
        "examples/kubernetes/README.md",
    ] {
        let text = read(file);
        let tags: Vec<&str> = text
            .split("leasehold:")
            .skip(1)
            .filter_map(|rest| rest.split(|c: char| c.is_whitespace() || c == '`').next())
            .filter(|tag| tag.chars().next().is_some_and(|c| c.is_ascii_digit()))
            .collect();
        assert!(!tags.is_empty(), "{file} names no image tag");
        for tag in tags {
            assert_eq!(tag, *newest, "{file} deploys {tag}, not the newest release");
        }
    }
    // The chart is versioned with the workspace, and deploys the newest release by default.
    let chart: serde_norway::Value =
        serde_norway::from_str(&read("charts/leasehold/Chart.yaml")).unwrap();
    assert_eq!(chart["version"], version.as_str(), "the chart's version");
    assert_eq!(
        chart["appVersion"],
        newest.to_string().as_str(),
        "the chart's appVersion is the newest release"
    );
    // A plain `docker build` (no --build-arg) labels the image with the newest release.
    assert!(
        read("examples/docker/Dockerfile").contains(&format!("ARG VERSION={newest}\n")),
        "the Dockerfile's default VERSION is the newest release, {newest}"
    );
}
