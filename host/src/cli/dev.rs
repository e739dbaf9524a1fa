//! `leasehold dev`: a plugin author's loop in one command. It builds the project once, then on
//! every change of its sources: runs `./build.sh` (its output streamed), checks `NAME.wasm` with
//! its manifest as `leasehold check` does (same code, same words, compiled into the same cache
//! the host reads), and only when the check passes copies both into the plugin directory, where
//! a running host reloads them without compiling again.
//!
//! - [`DevArgs`]: the flags;
//! - [`run`]: the loop, until SIGTERM or SIGINT (exit 0);
//! - [`DevError`]: what can stop it or fail a step;
//! - `is_source`: which changes are the author's (not the build's outputs);
//! - `install`: the copy, each file written under a name the directory ignores, then renamed.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::mpsc;

use crate::runtime::WIT_PACKAGE;

/// How long the sources must be quiet before a build starts: an editor's save (often a write, a
/// rename and a chmod) and a `git checkout` of several files make one build, not several.
const QUIET: Duration = Duration::from_millis(200);

/// Directories whose changes are the build's or the tools', never the author's sources.
const IGNORED_DIRS: &[&str] = &[
    ".git",
    ".venv",
    ".bindings",
    "__pycache__",
    "node_modules",
    "target",
];

/// Flags of `leasehold dev`.
#[derive(Debug, Args)]
pub(crate) struct DevArgs {
    /// The plugin project (as `leasehold new` writes it): `build.sh` there builds `NAME.wasm`,
    /// `NAME` being the directory's name, configured by `NAME.toml` beside it.
    #[arg(default_value = ".")]
    pub project: PathBuf,
    /// The plugin directory a host watches [default: `plugins` beside the project, as a project
    /// made by `leasehold new` in a checkout sits beside the `plugins/` of `make run`].
    #[arg(long, value_name = "DIR")]
    pub plugins: Option<PathBuf>,
}

/// What stops `leasehold dev`, or fails one of its steps.
#[derive(Debug, thiserror::Error)]
pub(crate) enum DevError {
    /// The project's directory cannot be found.
    #[error("cannot open the project directory {dir}: {source}")]
    Project {
        /// The project directory given.
        dir: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The project's directory does not name a plugin.
    #[error("the project directory {dir} does not name a plugin: {source}")]
    ProjectName {
        /// The project directory.
        dir: PathBuf,
        /// Why its name is not a plugin name.
        source: crate::plugin::name::NameError,
    },
    /// The project has no build script.
    #[error("{path} does not exist: a project builds its component with ./build.sh")]
    NoBuildScript {
        /// Where it was looked for.
        path: PathBuf,
    },
    /// A directory could not be read, created or watched.
    #[error("cannot watch {dir}: {source}")]
    Watch {
        /// The directory.
        dir: PathBuf,
        /// The watcher's error.
        source: notify::Error,
    },
    /// The build script could not be started.
    #[error("cannot run {path}: {source}")]
    Build {
        /// The script.
        path: PathBuf,
        /// The error from starting it.
        source: std::io::Error,
    },
    /// A file could not be copied into the plugin directory.
    #[error("cannot copy {from} to {to}: {source}")]
    Copy {
        /// The file copied.
        from: PathBuf,
        /// Where to.
        to: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A signal handler could not be installed.
    #[error("cannot install the signal handlers: {0}")]
    Signal(std::io::Error),
}

/// `leasehold dev`: build, check and copy at start and after each change of the sources, until
/// SIGTERM or SIGINT. A failed build, check or copy is reported and the loop goes on watching.
pub(crate) async fn run(args: DevArgs) -> anyhow::Result<ExitCode> {
    let project = std::fs::canonicalize(&args.project).map_err(|source| DevError::Project {
        dir: args.project.clone(),
        source,
    })?;
    let stem = project.file_name().unwrap_or_default();
    let name = crate::plugin::name::of_stem(stem)
        .map_err(|source| DevError::ProjectName {
            dir: project.clone(),
            source,
        })?
        .to_string();
    let plugins = args
        .plugins
        .unwrap_or_else(|| project.with_file_name("plugins"));
    let script = project.join("build.sh");
    if !script.is_file() {
        return Err(DevError::NoBuildScript { path: script }.into());
    }
    // Made if missing: `leasehold run --plugins DIR` needs it, and the author meant it to be.
    std::fs::create_dir_all(&plugins).map_err(|source| DevError::Copy {
        from: project.join(format!("{name}.wasm")),
        to: plugins.clone(),
        source,
    })?;
    let mut sigterm = signal(SignalKind::terminate()).map_err(DevError::Signal)?;
    let mut sigint = signal(SignalKind::interrupt()).map_err(DevError::Signal)?;
    let (tx, mut changes) = mpsc::unbounded_channel::<()>();
    // A plugin directory inside the project is an output too: its copies must not start a build.
    let output_dir = std::fs::canonicalize(&plugins).unwrap_or_else(|_| plugins.clone());
    let watched = project.clone();
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        // Only writes count: reading the sources (the build, the check) is an event too.
        if let Ok(event) = event
            && !matches!(event.kind, notify::EventKind::Access(_))
            && event
                .paths
                .iter()
                .any(|p| !p.starts_with(&output_dir) && is_source(&watched, p))
        {
            let _ = tx.send(());
        }
    })
    .map_err(|source| DevError::Watch {
        dir: project.clone(),
        source,
    })?;
    notify::Watcher::watch(&mut watcher, &project, notify::RecursiveMode::Recursive).map_err(
        |source| DevError::Watch {
            dir: project.clone(),
            source,
        },
    )?;
    loop {
        tokio::select! {
            _ = cycle(&project, &name, &plugins) => {}
            _ = sigterm.recv() => return Ok(ExitCode::SUCCESS),
            _ = sigint.recv() => return Ok(ExitCode::SUCCESS),
        }
        eprintln!("leasehold dev: watching {} for changes", project.display());
        tokio::select! {
            _ = changes.recv() => {}
            _ = sigterm.recv() => return Ok(ExitCode::SUCCESS),
            _ = sigint.recv() => return Ok(ExitCode::SUCCESS),
        }
        // Debounce: wait until nothing has changed for QUIET.
        while let Ok(Some(())) = tokio::time::timeout(QUIET, changes.recv()).await {}
    }
}

/// One turn: build, check, copy; each failure is one line on stderr and ends the turn.
async fn cycle(project: &Path, name: &str, plugins: &Path) {
    if let Err(line) = build(project).await {
        eprintln!("leasehold: error: {line}; nothing copied");
        return;
    }
    let wasm = project.join(format!("{name}.wasm"));
    let checked = {
        let wasm = wasm.clone();
        tokio::task::spawn_blocking(move || crate::app::check_plugin(&wasm, None)).await
    };
    let file = crate::report::escape_controls(&wasm.display().to_string()).into_owned();
    match checked {
        Ok(Ok(Ok(checked))) => {
            println!(
                "{file}: ok: {WIT_PACKAGE} world {}",
                checked.loaded.prepared.world().name()
            );
            match install(project, name, plugins) {
                Ok(()) => println!("leasehold dev: copied {name} into {}", plugins.display()),
                Err(e) => eprintln!(
                    "leasehold: error: {}",
                    crate::report::escape_controls(&crate::report::chain(&e))
                ),
            }
        }
        Ok(Ok(Err(error))) => {
            let explanation = match &error {
                crate::plugin::LoadError::Component(e) => e.explain(),
                _ => None,
            };
            super::check::check_failed(&file, &error, explanation, false);
            eprintln!("leasehold dev: {name} not copied");
        }
        Ok(Err(e)) => eprintln!(
            "leasehold: error: {}",
            crate::report::escape_controls(&crate::report::chain(&e))
        ),
        Err(e) => eprintln!("leasehold: error: the check panicked: {e}"),
    }
}

/// Runs `./build.sh` in the project, its output passed through; an error line when it fails.
async fn build(project: &Path) -> Result<(), String> {
    let script = project.join("build.sh");
    let status = tokio::process::Command::new(&script)
        .current_dir(project)
        // A signal ends the loop while a build runs: the build ends with it.
        .kill_on_drop(true)
        .status()
        .await
        .map_err(|source| {
            let e = DevError::Build {
                path: script.clone(),
                source,
            };
            crate::report::chain(&e)
        })?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{} failed ({status})", script.display()))
    }
}

/// Copies `NAME.toml` then `NAME.wasm` into `plugins`, each written as `.FILE.tmp` (a name the
/// directory does not load) and renamed over the old one, so the host never reads half a file.
///
/// The manifest goes first: a `NAME.toml` without its `NAME.wasm` is inert (the host loads only
/// `*.wasm`), so a first install never runs the component with the defaults' binding, and the
/// wasm's rename is the one event that makes it visible. For an update the two renames follow
/// each other within the host's quiet time, so its rescan sees both. A project without a
/// manifest removes the old one: the defaults are what the check passed with.
fn install(project: &Path, name: &str, plugins: &Path) -> Result<(), DevError> {
    let manifest = project.join(format!("{name}.toml"));
    if manifest.is_file() {
        copy_atomically(&manifest, plugins)?;
    } else {
        let old = plugins.join(format!("{name}.toml"));
        match std::fs::remove_file(&old) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(source) => {
                return Err(DevError::Copy {
                    from: manifest,
                    to: old,
                    source,
                });
            }
        }
    }
    copy_atomically(&project.join(format!("{name}.wasm")), plugins)
}

/// Copies `from` into `dir` under a hidden temporary name, then renames it to its own name.
fn copy_atomically(from: &Path, dir: &Path) -> Result<(), DevError> {
    let file_name = from.file_name().unwrap_or_default();
    let to = dir.join(file_name);
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(file_name);
    tmp_name.push(".tmp");
    let tmp = dir.join(tmp_name);
    let error = |source| DevError::Copy {
        from: from.to_path_buf(),
        to: to.clone(),
        source,
    };
    std::fs::copy(from, &tmp).map_err(error)?;
    std::fs::rename(&tmp, &to).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        error(e)
    })
}

/// Whether a change of `path` is the author's: not the build's outputs (any `*.wasm` or `*.tmp`,
/// the tools' directories), whose changes would otherwise start the next build forever.
fn is_source(project: &Path, path: &Path) -> bool {
    let Ok(relative) = path.strip_prefix(project) else {
        return false;
    };
    let in_ignored = relative.components().any(|c| {
        IGNORED_DIRS
            .iter()
            .any(|d| c.as_os_str() == std::ffi::OsStr::new(d))
    });
    let output = path.extension().is_some_and(|e| e == "wasm" || e == "tmp");
    !relative.as_os_str().is_empty() && !in_ignored && !output
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn build_outputs_and_tool_directories_are_not_sources() {
        let project = Path::new("/p/my-plugin");
        assert!(is_source(project, &project.join("my_plugin.py")));
        assert!(is_source(project, &project.join("my-plugin.toml")));
        assert!(is_source(project, &project.join("src/lib.rs")));
        assert!(!is_source(project, &project.join("my-plugin.wasm")));
        assert!(!is_source(project, &project.join("my-plugin.wasm.tmp")));
        assert!(!is_source(project, &project.join("target/debug/x")));
        assert!(!is_source(project, &project.join(".venv/lib/site.py")));
        assert!(!is_source(project, &project.join("node_modules/a/b.js")));
        assert!(!is_source(project, &project.join("__pycache__/m.pyc")));
        assert!(!is_source(project, Path::new("/elsewhere/x.py")));
    }
}
