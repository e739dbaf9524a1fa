//! Compiled components on disk, keyed by the content hash of the `.wasm` file and the engine's
//! compatibility hash, so a restart or a standby's reload costs a file read instead of a compile.
//!
//! An artifact is native code that `Component::deserialize` maps and runs without verifying it, so
//! whoever can write the cache can run code as the host (docs/ARCHITECTURE.md §8.4). The cache is
//! trusted only while it is private to the host's user:
//! - no shared fallback: without `XDG_CACHE_HOME`, `HOME` or a configured directory there is no
//!   cache and every load compiles ([`default_dir`]);
//! - the directory is created 0700, artifacts 0600;
//! - the directory and every file are opened without following a symbolic link and judged by the
//!   opened descriptor, so what is checked is what is read: owned by the host's effective user,
//!   not writable by group or others, a directory or a regular file ([`Refusal`]);
//! - files are opened relative to the checked directory's descriptor, never by path again;
//! - a refused file is never deserialized: the component is compiled instead, and the path and
//!   the reason are logged;
//! - writes go to a fresh 0600 file in the same directory, synced, then renamed over the
//!   artifact, so a reader sees the old file or the whole new one;
//! - the checksum beside each artifact catches a torn or corrupted file; it is no defence against
//!   a writer (the owner and mode checks are).

use std::fs::File;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};

use rustix::fs::{Mode, OFlags};
use sha2::{Digest, Sha256};
use wasmtime::Engine;
use wasmtime::component::Component;

/// Where compiled artifacts live, if anywhere.
#[derive(Debug, Clone)]
pub(crate) struct ComponentCache {
    /// The directory, created on first store; `None`: no cache, every load compiles.
    dir: Option<PathBuf>,
    /// Hash of everything that makes an artifact loadable by this engine (version, settings).
    engine_key: String,
}

/// What a load found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheOutcome {
    /// Loaded a previously compiled artifact.
    Hit,
    /// Compiled now: there was no artifact yet (stored, if the directory was writable).
    Compiled,
    /// Compiled now because the directory or the artifact was refused (logged with the reason).
    Refused,
    /// Compiled now: the host has no cache directory.
    Off,
}

/// Why a cache directory or file is not trusted. Each names the path.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Refusal {
    /// A symbolic link where a file or the directory should be: the cache follows none.
    #[error("{} is a symbolic link; the compile cache follows none", .0.display())]
    Symlink(PathBuf),
    /// Not a directory (for the cache directory) or not a regular file (for an artifact).
    #[error("{} is not a {expected}", path.display())]
    Kind {
        /// The path.
        path: PathBuf,
        /// "directory" or "regular file".
        expected: &'static str,
    },
    /// Owned by another user than the one the host runs as.
    #[error("{} is owned by uid {owner}, not by the host's user (uid {euid})", path.display())]
    Owner {
        /// The path.
        path: PathBuf,
        /// Its owner.
        owner: u32,
        /// The host's effective uid.
        euid: u32,
    },
    /// Writable by the group or by everyone.
    #[error("{} is writable by group or others (mode {mode:04o})", path.display())]
    Writable {
        /// The path.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// The artifact does not match the checksum written beside it.
    #[error("{} fails its checksum (torn or altered)", .0.display())]
    Checksum(PathBuf),
    /// The engine rejected the artifact.
    #[error("{} is not an artifact this engine loads: {reason}", path.display())]
    Artifact {
        /// The path.
        path: PathBuf,
        /// The engine's words.
        reason: String,
    },
    /// Opening or reading failed for another reason.
    #[error("{}: {source}", path.display())]
    Io {
        /// The path.
        path: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
}

/// The default cache directory: `$XDG_CACHE_HOME/leasehold/components`, else
/// `$HOME/.cache/leasehold/components`, else none. There is deliberately no temp-directory
/// fallback: a shared, world-writable place is where another user would plant native code.
pub fn default_dir() -> Option<PathBuf> {
    // Relative values are invalid by the XDG base directory spec, and ignored as it says.
    let absolute = |v: std::ffi::OsString| Some(PathBuf::from(v)).filter(|p| p.is_absolute());
    let base = std::env::var_os("XDG_CACHE_HOME")
        .and_then(absolute)
        .or_else(|| {
            std::env::var_os("HOME")
                .and_then(absolute)
                .map(|h| h.join(".cache"))
        })?;
    Some(base.join("leasehold").join("components"))
}

impl ComponentCache {
    /// A cache in `dir` (none: compile on every load) for artifacts of `engine`.
    pub fn new(dir: Option<PathBuf>, engine: &Engine) -> Self {
        let mut hasher = DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut hasher);
        ComponentCache {
            dir,
            engine_key: format!("{:016x}", hasher.finish()),
        }
    }

    /// The directory, if there is a cache.
    pub fn dir(&self) -> Option<&Path> {
        self.dir.as_deref()
    }

    /// Compiles `wasm`, or loads the artifact compiled from the same bytes by a compatible engine.
    /// A cache that cannot be read or written, or is refused, only costs a compile: it is never
    /// an error.
    pub fn load(
        &self,
        engine: &Engine,
        wasm: &[u8],
    ) -> wasmtime::Result<(Component, CacheOutcome)> {
        let Some(dir) = &self.dir else {
            return Ok((Component::new(engine, wasm)?, CacheOutcome::Off));
        };
        let name = format!("{:x}-{}.cwasm", Sha256::digest(wasm), self.engine_key);
        let mut outcome = CacheOutcome::Compiled;
        let opened = open_dir(dir);
        match &opened {
            Ok(Some(d)) => match read(engine, d, dir, &name) {
                Ok(Some(component)) => return Ok((component, CacheOutcome::Hit)),
                Ok(None) => {}
                Err(refusal) => {
                    outcome = CacheOutcome::Refused;
                    tracing::warn!("compile cache: {refusal}; compiling instead");
                }
            },
            Ok(None) => {}
            Err(refusal) => {
                outcome = CacheOutcome::Refused;
                tracing::warn!("compile cache: {refusal}; compiling without it");
            }
        }
        let compiled = engine.precompile_component(wasm)?;
        let stored = match opened {
            Ok(Some(d)) => Ok(d),
            Ok(None) => create_dir(dir),
            Err(refusal) => Err(refusal),
        }
        .and_then(|d| write(&d, dir, &name, &compiled));
        match stored {
            Ok(()) => {}
            // Refused already logged above; say nothing twice.
            Err(_) if outcome == CacheOutcome::Refused => {}
            Err(e) => tracing::warn!("compile cache: cannot store a compiled component: {e}"),
        }
        Ok((deserialize(engine, &compiled)?, outcome))
    }
}

/// The host's effective uid: the owner every cache file must have.
fn euid() -> u32 {
    rustix::process::geteuid().as_raw()
}

/// Opens `name` under `dir` (a directory descriptor, or `None` for an absolute path) without
/// following a link; `Ok(None)` when it does not exist.
fn open_nofollow(
    at: Option<&OwnedFd>,
    path: &Path,
    name: &Path,
    flags: OFlags,
) -> Result<Option<File>, Refusal> {
    let flags = flags | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let opened = match at {
        Some(dir) => rustix::fs::openat(dir, name, flags, Mode::from_raw_mode(0o600)),
        None => rustix::fs::open(name, flags, Mode::empty()),
    };
    match opened {
        Ok(fd) => Ok(Some(File::from(fd))),
        Err(rustix::io::Errno::NOENT) => Ok(None),
        Err(rustix::io::Errno::LOOP) => Err(Refusal::Symlink(path.to_path_buf())),
        Err(rustix::io::Errno::NOTDIR) => Err(Refusal::Kind {
            path: path.to_path_buf(),
            expected: "directory",
        }),
        Err(e) => Err(Refusal::Io {
            path: path.to_path_buf(),
            source: e.into(),
        }),
    }
}

/// Checks what `file` (opened as `path`) is: the right kind, the host's user's, and writable by
/// nobody else.
fn check(file: &File, path: &Path, directory: bool) -> Result<(), Refusal> {
    let meta = file.metadata().map_err(|source| Refusal::Io {
        path: path.to_path_buf(),
        source,
    })?;
    if directory && !meta.is_dir() || !directory && !meta.is_file() {
        return Err(Refusal::Kind {
            path: path.to_path_buf(),
            expected: if directory {
                "directory"
            } else {
                "regular file"
            },
        });
    }
    let euid = euid();
    if meta.uid() != euid {
        return Err(Refusal::Owner {
            path: path.to_path_buf(),
            owner: meta.uid(),
            euid,
        });
    }
    let mode = meta.mode() & 0o7777;
    if mode & 0o022 != 0 {
        return Err(Refusal::Writable {
            path: path.to_path_buf(),
            mode,
        });
    }
    Ok(())
}

/// Opens and checks the cache directory; `Ok(None)` when it does not exist yet.
fn open_dir(dir: &Path) -> Result<Option<OwnedFd>, Refusal> {
    let Some(file) = open_nofollow(None, dir, dir, OFlags::RDONLY | OFlags::DIRECTORY)? else {
        return Ok(None);
    };
    check(&file, dir, true)?;
    Ok(Some(file.into()))
}

/// Creates the cache directory (and missing parents) private to the host's user, then opens
/// and checks it like any other.
fn create_dir(dir: &Path) -> Result<OwnedFd, Refusal> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|source| Refusal::Io {
            path: dir.to_path_buf(),
            source,
        })?;
    open_dir(dir)?.ok_or_else(|| Refusal::Io {
        path: dir.to_path_buf(),
        source: std::io::ErrorKind::NotFound.into(),
    })
}

/// Reads and checks the regular file `name` in the checked directory `d`.
fn read_file(d: &OwnedFd, dir: &Path, name: &str) -> Result<Option<Vec<u8>>, Refusal> {
    let path = dir.join(name);
    let Some(mut file) = open_nofollow(Some(d), &path, Path::new(name), OFlags::RDONLY)? else {
        return Ok(None);
    };
    check(&file, &path, false)?;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)
        .map_err(|source| Refusal::Io { path, source })?;
    Ok(Some(bytes))
}

/// The checksum file of artifact `name` (`KEY.cwasm` → `KEY.sha256`, as earlier releases named
/// it, so that hosts of both sharing a cache agree on which checksum goes with which artifact).
fn sum_name(name: &str) -> String {
    let key = name.strip_suffix(".cwasm").unwrap_or(name);
    format!("{key}.sha256")
}

/// The artifact `name`, if present and trusted.
fn read(
    engine: &Engine,
    d: &OwnedFd,
    dir: &Path,
    name: &str,
) -> Result<Option<Component>, Refusal> {
    let Some(bytes) = read_file(d, dir, name)? else {
        return Ok(None);
    };
    let sum = read_file(d, dir, &sum_name(name))?.unwrap_or_default();
    let path = dir.join(name);
    if String::from_utf8_lossy(&sum).trim() != format!("{:x}", Sha256::digest(&bytes)) {
        return Err(Refusal::Checksum(path));
    }
    deserialize(engine, &bytes)
        .map(Some)
        .map_err(|e| Refusal::Artifact {
            path,
            reason: format!("{e:#}"),
        })
}

/// Writes `bytes` as `name` in the checked directory `d`: a fresh 0600 file, synced, renamed
/// into place.
fn write_file(d: &OwnedFd, dir: &Path, name: &str, bytes: &[u8]) -> Result<(), Refusal> {
    let io = |source: std::io::Error| Refusal::Io {
        path: dir.join(name),
        source,
    };
    let tmp = format!(
        ".{name}.{}.{:016x}.tmp",
        std::process::id(),
        rand::random::<u64>()
    );
    let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let fd = rustix::fs::openat(d, tmp.as_str(), flags, Mode::from_raw_mode(0o600))
        .map_err(|e| io(e.into()))?;
    let mut file = File::from(fd);
    let written = file
        .write_all(bytes)
        .and_then(|()| file.sync_all())
        .and_then(|()| rustix::fs::renameat(d, tmp.as_str(), d, name).map_err(Into::into));
    if let Err(e) = written {
        let _ = rustix::fs::unlinkat(d, tmp.as_str(), rustix::fs::AtFlags::empty());
        return Err(io(e));
    }
    Ok(())
}

/// Stores artifact `compiled` as `name` with its checksum, and syncs the directory so the
/// renames survive a crash.
fn write(d: &OwnedFd, dir: &Path, name: &str, compiled: &[u8]) -> Result<(), Refusal> {
    // The checksum last: until it is in place a reader sees a mismatch and compiles.
    write_file(d, dir, name, compiled)?;
    let sum = format!("{:x}\n", Sha256::digest(compiled));
    write_file(d, dir, &sum_name(name), sum.as_bytes())?;
    rustix::fs::fsync(d).map_err(|e| Refusal::Io {
        path: dir.to_path_buf(),
        source: e.into(),
    })
}

#[allow(unsafe_code)]
fn deserialize(engine: &Engine, bytes: &[u8]) -> wasmtime::Result<Component> {
    // SAFETY: `bytes` is either what `engine.precompile_component` just produced, or an artifact
    // read through a descriptor checked to be a regular file owned by the host's user in a
    // directory of that user, neither writable by anyone else, matching the checksum written
    // with it under a key that includes the engine's compatibility hash; wasmtime itself
    // re-checks the header and engine settings.
    unsafe { Component::deserialize(engine, bytes) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn engine() -> Engine {
        Engine::default()
    }

    /// The smallest component (a header, no sections): compiles fast.
    const EMPTY: &[u8] = b"\0asm\x0d\x00\x01\x00";

    #[test]
    fn a_new_cache_directory_and_its_artifacts_are_private_to_the_user() {
        let scratch = tempfile::tempdir().unwrap();
        let dir = scratch.path().join("a").join("components");
        let engine = engine();
        let cache = ComponentCache::new(Some(dir.clone()), &engine);
        let wasm = EMPTY;
        assert_eq!(cache.load(&engine, wasm).unwrap().1, CacheOutcome::Compiled);
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&dir), 0o700);
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            assert_eq!(mode(&path), 0o600, "{}", path.display());
            assert!(
                !path.to_string_lossy().ends_with(".tmp"),
                "a temp file was left"
            );
        }
        assert_eq!(cache.load(&engine, wasm).unwrap().1, CacheOutcome::Hit);
    }

    #[test]
    fn a_writable_directory_or_a_linked_artifact_is_refused() {
        let scratch = tempfile::tempdir().unwrap();
        let dir = scratch.path().join("components");
        let engine = engine();
        let cache = ComponentCache::new(Some(dir.clone()), &engine);
        let wasm = EMPTY;
        cache.load(&engine, wasm).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        assert_eq!(cache.load(&engine, wasm).unwrap().1, CacheOutcome::Refused);
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        assert_eq!(cache.load(&engine, wasm).unwrap().1, CacheOutcome::Hit);
        let artifact = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| p.extension().is_some_and(|e| e == "cwasm"))
            .unwrap();
        let elsewhere = scratch.path().join("elsewhere.cwasm");
        std::fs::rename(&artifact, &elsewhere).unwrap();
        std::os::unix::fs::symlink(&elsewhere, &artifact).unwrap();
        assert_eq!(cache.load(&engine, wasm).unwrap().1, CacheOutcome::Refused);
        // The compile replaced the link with a file of its own.
        assert!(!std::fs::symlink_metadata(&artifact).unwrap().is_symlink());
        assert_eq!(cache.load(&engine, wasm).unwrap().1, CacheOutcome::Hit);
    }

    #[test]
    fn no_directory_means_no_cache() {
        let engine = engine();
        let cache = ComponentCache::new(None, &engine);
        let wasm = EMPTY;
        assert_eq!(cache.load(&engine, wasm).unwrap().1, CacheOutcome::Off);
    }
}
