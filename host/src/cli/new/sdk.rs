//! What a Rust project carries so that it builds with nothing but a toolchain: a copy of the
//! `leasehold-guest` SDK this binary was built with (`sdk/leasehold-guest/`, which finds the
//! project's `wit/` at `../../wit` as the SDK in a checkout finds the checkout's), and a
//! `Cargo.lock` holding the versions the checkout's guests are built and tested with. The SDK
//! is not published, and without a lock file the project's first `cargo test` would have to
//! resolve its dependencies from the registry; with both, cargo only needs the crates, which
//! any earlier build of the guests has downloaded.

use std::collections::{BTreeMap, BTreeSet};

use super::spec::ProjectFile;

/// Where the copy goes in the project (the SDK's `../../wit` is then the project's `wit/`).
pub(crate) const SDK_DIR: &str = "sdk/leasehold-guest";

/// The SDK's sources, as in `guests/leasehold-guest/src/`. A test checks that this is every
/// file there.
pub(crate) const SDK_SOURCES: [(&str, &str); 11] = [
    (
        "lib.rs",
        include_str!("../../../../guests/leasehold-guest/src/lib.rs"),
    ),
    (
        "__private.rs",
        include_str!("../../../../guests/leasehold-guest/src/__private.rs"),
    ),
    (
        "capability.rs",
        include_str!("../../../../guests/leasehold-guest/src/capability.rs"),
    ),
    (
        "config.rs",
        include_str!("../../../../guests/leasehold-guest/src/config.rs"),
    ),
    (
        "context.rs",
        include_str!("../../../../guests/leasehold-guest/src/context.rs"),
    ),
    (
        "error.rs",
        include_str!("../../../../guests/leasehold-guest/src/error.rs"),
    ),
    (
        "kv.rs",
        include_str!("../../../../guests/leasehold-guest/src/kv.rs"),
    ),
    (
        "lease.rs",
        include_str!("../../../../guests/leasehold-guest/src/lease.rs"),
    ),
    (
        "log.rs",
        include_str!("../../../../guests/leasehold-guest/src/log.rs"),
    ),
    (
        "sql.rs",
        include_str!("../../../../guests/leasehold-guest/src/sql.rs"),
    ),
    (
        "testing.rs",
        include_str!("../../../../guests/leasehold-guest/src/testing.rs"),
    ),
];

/// The SDK's own manifest, standing alone: the checkout's inherits from the guests' workspace.
/// A test checks its wit-bindgen line against that workspace's.
pub(crate) const SDK_MANIFEST: &str = include_str!("../../../templates/rust/sdk-Cargo.toml");

/// The guests' lock file, which the project's lock is cut from.
const GUESTS_LOCK: &str = include_str!("../../../../guests/Cargo.lock");

/// The SDK's files for the project.
pub(crate) fn sdk_files() -> Vec<ProjectFile> {
    let mut files = vec![ProjectFile {
        path: format!("{SDK_DIR}/Cargo.toml"),
        text: SDK_MANIFEST.to_string(),
        executable: false,
    }];
    files.extend(SDK_SOURCES.iter().map(|(name, text)| ProjectFile {
        path: format!("{SDK_DIR}/src/{name}"),
        text: (*text).to_string(),
        executable: false,
    }));
    files
}

/// One package of a lock file.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Package {
    /// Its name.
    name: String,
    /// Its version.
    version: String,
    /// Where it comes from (`registry+…`); none for a path dependency.
    source: Option<String>,
    /// The registry's checksum of its crate.
    checksum: Option<String>,
    /// Its dependencies as the lock names them: `name`, `name version` or
    /// `name version (source)`.
    dependencies: Vec<String>,
}

/// The project `name`'s `Cargo.lock`: the project, the SDK and every package the SDK reaches in
/// the guests' lock, written as cargo writes it, so that cargo keeps it as it is.
pub(crate) fn project_lock(name: &str) -> Result<String, String> {
    let all = parse(GUESTS_LOCK)?;
    let find = |dep: &str| -> Result<&Package, String> {
        let mut words = dep.splitn(3, ' ');
        let dep_name = words.next().unwrap_or_default();
        let version = words.next();
        all.iter()
            .find(|p| p.name == dep_name && version.is_none_or(|v| p.version == v))
            .ok_or_else(|| format!("guests/Cargo.lock names {dep:?} but has no such package"))
    };
    let mut kept: BTreeSet<Package> = BTreeSet::new();
    let mut todo = vec![find("leasehold-guest")?];
    while let Some(package) = todo.pop() {
        if kept.insert(package.clone()) {
            for dep in &package.dependencies {
                todo.push(find(dep)?);
            }
        }
    }
    kept.insert(Package {
        name: name.to_string(),
        version: "0.1.0".to_string(),
        source: None,
        checksum: None,
        dependencies: vec!["leasehold-guest".to_string()],
    });
    // A dependency is written as its name alone unless the lock holds more than one version of
    // it: renamed here, as cargo would, since the cut may have left only one.
    let mut versions: BTreeMap<&str, usize> = BTreeMap::new();
    for package in &kept {
        *versions.entry(package.name.as_str()).or_default() += 1;
    }
    let mut out = String::from(
        "# This file is automatically @generated by Cargo.\n# It is not intended for manual editing.\nversion = 4\n",
    );
    for package in &kept {
        out.push_str(&format!(
            "\n[[package]]\nname = \"{}\"\nversion = \"{}\"\n",
            package.name, package.version
        ));
        if let Some(source) = &package.source {
            out.push_str(&format!("source = \"{source}\"\n"));
        }
        if let Some(checksum) = &package.checksum {
            out.push_str(&format!("checksum = \"{checksum}\"\n"));
        }
        if !package.dependencies.is_empty() {
            let mut deps: Vec<String> = package
                .dependencies
                .iter()
                .map(|dep| {
                    let dep_name = dep.split(' ').next().unwrap_or(dep);
                    if versions.get(dep_name).copied().unwrap_or(0) > 1 {
                        dep.clone()
                    } else {
                        dep_name.to_string()
                    }
                })
                .collect();
            deps.sort();
            out.push_str("dependencies = [\n");
            for dep in deps {
                out.push_str(&format!(" \"{dep}\",\n"));
            }
            out.push_str("]\n");
        }
    }
    Ok(out)
}

/// The packages of a lock file.
fn parse(lock: &str) -> Result<Vec<Package>, String> {
    #[derive(serde::Deserialize)]
    struct Lock {
        package: Vec<Raw>,
    }
    #[derive(serde::Deserialize)]
    struct Raw {
        name: String,
        version: String,
        source: Option<String>,
        checksum: Option<String>,
        #[serde(default)]
        dependencies: Vec<String>,
    }
    let lock: Lock = toml::from_str(lock).map_err(|e| format!("guests/Cargo.lock: {e}"))?;
    Ok(lock
        .package
        .into_iter()
        .map(|raw| Package {
            name: raw.name,
            version: raw.version,
            source: raw.source,
            checksum: raw.checksum,
            dependencies: raw.dependencies,
        })
        .collect())
}
