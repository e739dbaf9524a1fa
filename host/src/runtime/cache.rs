//! Compiled components on disk, keyed by the content hash of the `.wasm` file and the engine's
//! compatibility hash, so a restart or a standby's reload costs a file read instead of a compile.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use wasmtime::Engine;
use wasmtime::component::Component;

/// Where compiled artifacts live.
#[derive(Debug, Clone)]
pub struct ComponentCache {
    /// The directory, created on first store.
    dir: PathBuf,
    /// Hash of everything that makes an artifact loadable by this engine (version, settings).
    engine_key: String,
}

/// What a load found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheOutcome {
    /// Loaded a previously compiled artifact.
    Hit,
    /// Compiled now (and stored, if the directory was writable).
    Compiled,
}

/// The default cache directory: `$XDG_CACHE_HOME/leasehold/components`, else
/// `$HOME/.cache/leasehold/components`, else one under the system temp directory.
pub fn default_dir() -> PathBuf {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(std::env::temp_dir);
    base.join("leasehold").join("components")
}

impl ComponentCache {
    /// A cache in `dir` for artifacts of `engine`.
    pub fn new(dir: PathBuf, engine: &Engine) -> Self {
        let mut hasher = DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut hasher);
        ComponentCache {
            dir,
            engine_key: format!("{:016x}", hasher.finish()),
        }
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Compiles `wasm`, or loads the artifact compiled from the same bytes by a compatible engine.
    /// A cache that cannot be read or written only costs a compile: it is never an error.
    pub fn load(
        &self,
        engine: &Engine,
        wasm: &[u8],
    ) -> wasmtime::Result<(Component, CacheOutcome)> {
        let key = format!("{:x}-{}", Sha256::digest(wasm), self.engine_key);
        let artifact = self.dir.join(format!("{key}.cwasm"));
        if let Some(component) = self.read(engine, &artifact) {
            return Ok((component, CacheOutcome::Hit));
        }
        let compiled = engine.precompile_component(wasm)?;
        if let Err(e) = self.write(&artifact, &compiled) {
            tracing::debug!(dir = %self.dir.display(), error = %e, "cannot store a compiled component");
        }
        let component = deserialize(engine, &compiled)?;
        Ok((component, CacheOutcome::Compiled))
    }

    fn read(&self, engine: &Engine, artifact: &Path) -> Option<Component> {
        let bytes = std::fs::read(artifact).ok()?;
        let sum = std::fs::read_to_string(artifact.with_extension("sha256")).ok()?;
        // The checksum guards against a torn or corrupted file being handed to the deserializer.
        if sum.trim() != format!("{:x}", Sha256::digest(&bytes)) {
            tracing::warn!(artifact = %artifact.display(), "cached component fails its checksum; recompiling");
            return None;
        }
        deserialize(engine, &bytes).ok()
    }

    fn write(&self, artifact: &Path, compiled: &[u8]) -> std::io::Result<()> {
        std::fs::create_dir_all(&self.dir)?;
        // Write-then-rename, so a concurrent reader never sees half a file.
        let tmp = artifact.with_extension(format!("tmp{}", std::process::id()));
        std::fs::write(&tmp, compiled)?;
        std::fs::write(
            artifact.with_extension("sha256"),
            format!("{:x}\n", Sha256::digest(compiled)),
        )?;
        std::fs::rename(&tmp, artifact)
    }
}

#[allow(unsafe_code)]
fn deserialize(engine: &Engine, bytes: &[u8]) -> wasmtime::Result<Component> {
    // SAFETY: `bytes` is either what `engine.precompile_component` just produced, or an artifact
    // this cache wrote with a matching checksum under a key that includes the engine's
    // compatibility hash; wasmtime itself re-checks the header and engine settings.
    unsafe { Component::deserialize(engine, bytes) }
}
