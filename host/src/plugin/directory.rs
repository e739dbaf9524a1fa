//! The plugin directory: every `NAME.wasm` (with its optional `NAME.toml`) validated on load. A
//! bad file is reported with its path and reason and kept as `invalid`; it never disturbs the
//! other plugins.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use sha2::{Digest, Sha256};

use super::error::LoadError;
use super::name;
use crate::capability::{Capabilities, Grants};
use crate::manifest::Manifest;
use crate::runtime::{Loaded, Runtime, World};

/// One plugin file as loaded.
pub struct PluginEntry {
    /// The plugin name: the file name without `.wasm`; for a file whose name breaks the rule
    /// ([`super::name`]), that name as it may be shown ([`super::name::shown`]).
    pub name: String,
    /// The component file.
    pub path: PathBuf,
    /// The manifest (defaults when there is no `.toml`, or when it did not parse).
    pub manifest: Manifest,
    /// The pre-linked component, or why the file or its manifest did not load.
    pub loaded: Result<Loaded, LoadError>,
    /// What the manifest grants, resolved (empty when the plugin is invalid).
    pub grants: Grants,
    /// Hash of the component and manifest bytes: a change means the plugin was replaced. Empty
    /// for a file whose name breaks the rule, which is never read.
    pub digest: String,
}

impl std::fmt::Debug for PluginEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PluginEntry")
            .field("name", &self.name)
            .field("path", &self.path)
            .field("binding", &self.manifest.binding)
            .field("loaded", &self.loaded.as_ref().map(|l| l.prepared.world()))
            .finish()
    }
}

/// Every plugin of the directory, by name.
pub type PluginSet = BTreeMap<String, Arc<PluginEntry>>;

/// Loads every `*.wasm` in `dir`, reusing entries of `previous` whose files did not change.
/// Grants are resolved against `capabilities` and the process environment.
pub fn scan(
    dir: &Path,
    runtime: &Runtime,
    capabilities: &Capabilities,
    previous: &PluginSet,
) -> std::io::Result<PluginSet> {
    let mut set = PluginSet::new();
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "wasm") && p.is_file())
        .collect();
    paths.sort();
    for path in paths {
        let name = match plugin_name(&path) {
            Ok(name) => name,
            Err(error) => {
                let shown = name::shown(path.file_stem().unwrap_or_default());
                // Listed once under its shown name, and logged once: a rescan keeps the entry.
                if let Some(old) = previous.get(&shown).filter(|old| old.digest.is_empty()) {
                    set.insert(shown, old.clone());
                    continue;
                }
                tracing::error!(plugin = %shown, "invalid plugin: {}", crate::report::chain(&error));
                let entry = PluginEntry {
                    name: shown.clone(),
                    path,
                    manifest: Manifest::defaults(),
                    loaded: Err(error),
                    grants: Grants::default(),
                    digest: String::new(),
                };
                set.insert(shown, Arc::new(entry));
                continue;
            }
        };
        let manifest_path = path.with_extension("toml");
        let wasm = match read_component_file(&path) {
            Ok(bytes) => bytes,
            Err(e) => {
                tracing::error!(plugin = %name, path = %path.display(), error = %e, "cannot read plugin");
                continue;
            }
        };
        // No manifest means defaults; a manifest that exists but cannot be read makes the plugin
        // invalid rather than silently run with defaults.
        let manifest_text = read_manifest_file(&manifest_path);
        let mut hasher = Sha256::new();
        hasher.update(&wasm);
        if let Ok(Some(bytes)) = &manifest_text {
            hasher.update(bytes);
        }
        let digest = format!("{:x}", hasher.finalize());
        if let Some(old) = previous.get(&name).filter(|old| old.digest == digest) {
            set.insert(name, old.clone());
            continue;
        }
        let entry = load_one(
            runtime,
            capabilities,
            name.clone(),
            path,
            &manifest_path,
            manifest_text,
            &wasm,
            digest,
        );
        match &entry.loaded {
            Ok(l) => tracing::info!(
                plugin = %entry.name, lease = %entry.manifest.binding, world = l.prepared.world().name(),
                cache = ?l.cache, load_time = ?l.load_time, "plugin loaded"
            ),
            Err(error) => tracing::error!(
                plugin = %entry.name,
                "invalid plugin: {}",
                crate::report::chain(error)
            ),
        }
        set.insert(name, Arc::new(entry));
    }
    Ok(set)
}

/// The plugin name of the component file `path`, or why its name is not one (the file shown
/// escaped).
fn plugin_name(path: &Path) -> Result<String, LoadError> {
    let stem = path.file_stem().unwrap_or_default();
    name::of_stem(stem)
        .map(str::to_string)
        .map_err(|source| LoadError::Name {
            file: format!("{}.wasm", name::shown(stem)),
            source,
        })
}

/// A few hundred bytes is a typical manifest; 64 KiB leaves room for long `[config]` tables and
/// keeps something that is not a manifest (a device, a `/proc` file, a huge file) from being
/// read whole.
const MAX_MANIFEST_BYTES: u64 = 64 << 10;

/// Components are a few MiB (Rust) to a few tens of MiB (an interpreter built in, as Python's
/// and JavaScript's are); 256 MiB is far beyond any of them and keeps a huge file dropped in the
/// directory from being read whole into the host's memory.
const MAX_COMPONENT_BYTES: u64 = 256 << 20;

/// The component's bytes, if it is a regular file of at most [`MAX_COMPONENT_BYTES`].
fn read_component_file(path: &Path) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let file = std::fs::File::open(path)?;
    let mut bytes = Vec::new();
    file.take(MAX_COMPONENT_BYTES + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > MAX_COMPONENT_BYTES {
        return Err(std::io::Error::other(format!(
            "larger than {} MiB: not a plugin component",
            MAX_COMPONENT_BYTES >> 20
        )));
    }
    Ok(bytes)
}

/// The manifest's bytes; `None` when there is none. Links are followed (a ConfigMap's files are
/// links), but what they reach must be a regular file of at most [`MAX_MANIFEST_BYTES`]; it is
/// opened without blocking, so a FIFO cannot hang the scan.
fn read_manifest_file(path: &Path) -> Result<Option<Vec<u8>>, LoadError> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let read_error = |source| LoadError::ReadManifest {
        path: path.to_path_buf(),
        source,
    };
    let file = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32)
        .open(path)
    {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(read_error(source)),
    };
    if !file.metadata().map_err(read_error)?.is_file() {
        return Err(LoadError::ManifestNotAFile {
            path: path.to_path_buf(),
        });
    }
    let mut bytes = Vec::new();
    file.take(MAX_MANIFEST_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(read_error)?;
    if bytes.len() as u64 > MAX_MANIFEST_BYTES {
        return Err(LoadError::ManifestTooLarge {
            path: path.to_path_buf(),
            limit: MAX_MANIFEST_BYTES,
        });
    }
    Ok(Some(bytes))
}

#[allow(clippy::too_many_arguments)] // one call site; the arguments are the file's parts
fn load_one(
    runtime: &Runtime,
    capabilities: &Capabilities,
    name: String,
    path: PathBuf,
    manifest_path: &Path,
    manifest_text: Result<Option<Vec<u8>>, LoadError>,
    wasm: &[u8],
    digest: String,
) -> PluginEntry {
    let (manifest, loaded) = match read_manifest(manifest_path, manifest_text) {
        Ok(m) => {
            let loaded =
                load_component(runtime, capabilities, &name, &path, manifest_path, &m, wasm);
            (m, loaded)
        }
        Err(e) => (Manifest::defaults(), Err(e)),
    };
    let (loaded, grants) = match loaded {
        Ok((loaded, grants)) => (Ok(loaded), grants),
        Err(e) => (Err(e), Grants::default()),
    };
    PluginEntry {
        name,
        path,
        manifest,
        loaded,
        grants,
        digest,
    }
}

/// The manifest, or the defaults when there is no `.toml`.
fn read_manifest(
    path: &Path,
    text: Result<Option<Vec<u8>>, LoadError>,
) -> Result<Manifest, LoadError> {
    match text? {
        None => Ok(Manifest::defaults()),
        Some(bytes) => {
            let text = String::from_utf8(bytes).map_err(|_| LoadError::ManifestNotUtf8 {
                path: path.to_path_buf(),
            })?;
            Ok(Manifest::parse(&path.display().to_string(), &text)?)
        }
    }
}

/// The component, checked against what its manifest asks for, and its grants resolved.
fn load_component(
    runtime: &Runtime,
    capabilities: &Capabilities,
    name: &str,
    path: &Path,
    manifest_path: &Path,
    manifest: &Manifest,
    wasm: &[u8],
) -> Result<(Loaded, Grants), LoadError> {
    let at_fault = || manifest_path.to_path_buf();
    let loaded = runtime.load_bytes(&path.display().to_string(), wasm)?;
    fits(runtime, &loaded, manifest, manifest_path)?;
    let grants = Grants::resolve(name, manifest, capabilities, |k| {
        capabilities.environment().get(k)
    })
    .map_err(|source| LoadError::Grant {
        path: at_fault(),
        source,
    })?;
    Ok((loaded, grants))
}

/// Whether `manifest` asks only for what the component and the host can give.
fn fits(
    runtime: &Runtime,
    loaded: &Loaded,
    manifest: &Manifest,
    manifest_path: &Path,
) -> Result<(), LoadError> {
    let at_fault = || manifest_path.to_path_buf();
    if manifest.limits.fuel.is_some() && !runtime.meters_fuel() {
        return Err(LoadError::FuelNotMetered { path: at_fault() });
    }
    let world = loaded.prepared.world();
    let asks = manifest.grants.kv || manifest.grants.sql.is_some() || !manifest.events.is_empty();
    if world == World::HealthCheck && asks {
        return Err(LoadError::GrantsOnHealthCheck { path: at_fault() });
    }
    if !manifest.events.is_empty() && world != World::EventReconciler {
        return Err(LoadError::EventsWithoutHandler { path: at_fault() });
    }
    Ok(())
}

/// A plugin file as `leasehold check` sees it: what [`scan`] would load of it.
pub struct Checked {
    /// The plugin's name.
    pub name: String,
    /// The manifest read, or `None` when there is none (the defaults apply).
    pub manifest_path: Option<PathBuf>,
    /// The manifest, or the defaults.
    pub manifest: Manifest,
    /// The pre-linked component.
    pub loaded: Loaded,
}

/// Checks `wasm` and its manifest (`manifest`, else `NAME.toml` beside it when there is one) with
/// the same reads and rules as [`scan`]: the name, the manifest's file, text and keys, the
/// component, and what the manifest asks of it. Only what depends on a running host is left
/// out: its sql grants' variables and databases, and events on the lease database, are resolved
/// when the host loads the file (`leasehold config check` checks its side).
pub fn check_file(
    runtime: &Runtime,
    wasm: &Path,
    manifest: Option<&Path>,
) -> Result<Checked, LoadError> {
    let name = plugin_name(wasm)?;
    let bytes = read_component_file(wasm).map_err(|source| LoadError::ReadComponent {
        path: wasm.to_path_buf(),
        source,
    })?;
    let manifest_path = manifest.map_or_else(|| wasm.with_extension("toml"), Path::to_path_buf);
    let text = read_manifest_file(&manifest_path);
    // A manifest named on the command line must be there; the one beside is optional, as in
    // the directory.
    let text = match (text, manifest) {
        (Ok(None), Some(path)) => Err(LoadError::ReadManifest {
            path: path.to_path_buf(),
            source: rustix::io::Errno::NOENT.into(),
        }),
        (text, _) => text,
    };
    let read = matches!(text, Ok(Some(_)));
    let parsed = read_manifest(&manifest_path, text)?;
    let loaded = runtime.load_bytes(&wasm.display().to_string(), &bytes)?;
    fits(runtime, &loaded, &parsed, &manifest_path)?;
    Ok(Checked {
        name,
        manifest_path: read.then_some(manifest_path),
        manifest: parsed,
        loaded,
    })
}
