//! `leasehold new`: writes a plugin project that builds, tests and loads as it is, in Rust,
//! Python or JavaScript, for any of the three worlds.
//!
//! The templates are files under `host/templates/` compiled into the binary, filled by replacing
//! `{{placeholder}}`s. The WIT, `scripts/cargo-wasm.sh` and the toolchain pins of
//! `guests/tools/` are compiled in as well, so a project gets what this checkout builds and tests
//! with.
//!
//! - this file: the flags, the name check, where the SDK is, writing the project all or nothing;
//! - [`project`]: the project's files, rendered from the templates.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, bail};
use clap::{Args, ValueEnum};

/// The WIT package every plugin is built against.
const WIT: &str = include_str!("../../../wit/plugin.wit");
/// Picks a toolchain for wasm32-wasip2 and runs cargo: a Rust project's build.sh calls it.
const CARGO_WASM: &str = include_str!("../../../scripts/cargo-wasm.sh");
/// The componentize-py pin Python guests are built and tested with.
const PY_REQUIREMENTS: &str = include_str!("../../../guests/tools/python/requirements.txt");
/// The oldest Python a Python project's scripts accept, as `(major, minor)`: the bindings its
/// tests import use `typing.Self`, new in 3.11 (componentize-py itself runs on 3.10). The README
/// of the project and the top README say the same, which `cli::new`'s tests check.
const PYTHON_MIN: (u32, u32) = (3, 11);
/// The componentize-js and jco pins JavaScript guests are built and tested with.
const JS_TOOLS_PACKAGE: &str = include_str!("../../../guests/tools/js/package.json");
/// Their whole tree, locked.
const JS_TOOLS_LOCK: &str = include_str!("../../../guests/tools/js/package-lock.json");

/// Flags of `leasehold new`.
#[derive(Debug, Args)]
pub struct NewArgs {
    /// The plugin's name: lowercase letters, digits and '-', starting with a letter, at most 64
    /// characters. The project directory, NAME.wasm and its manifest NAME.toml are named after it.
    pub name: String,
    /// The language of the project.
    #[arg(long, value_enum, default_value_t = Lang::Rust)]
    pub lang: Lang,
    /// The world the plugin implements.
    #[arg(long, value_enum, default_value_t = World::Reconciler)]
    pub world: World,
    /// The directory to create the project NAME in.
    #[arg(long, value_name = "PARENT", default_value = ".")]
    pub dir: PathBuf,
    /// Rust: a leasehold checkout's SDK (its guests/leasehold-guest) to depend on by path
    /// [default: a copy of this leasehold's SDK, written into the project].
    #[arg(long, value_name = "PATH")]
    pub sdk: Option<PathBuf>,
}

/// The languages a project can be written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Lang {
    /// Rust, with the leasehold-guest SDK; built with cargo for wasm32-wasip2.
    Rust,
    /// Python, built with componentize-py.
    Python,
    /// JavaScript, built with componentize-js.
    Js,
}

impl Lang {
    /// How the README names it.
    fn title(self) -> &'static str {
        match self {
            Lang::Rust => "Rust",
            Lang::Python => "Python",
            Lang::Js => "JavaScript",
        }
    }
}

/// The worlds of `wit/plugin.wit`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum World {
    /// Called on a schedule while its replica holds the lease.
    Reconciler,
    /// A reconciler that is also called for PostgreSQL notifications.
    EventReconciler,
    /// Says whether its replica may hold (active) or campaign for (standby) the lease.
    HealthCheck,
}

impl World {
    /// Its WIT name.
    pub fn wit_name(self) -> &'static str {
        match self {
            World::Reconciler => "reconciler",
            World::EventReconciler => "event-reconciler",
            World::HealthCheck => "health-check",
        }
    }
}

/// One file of a project.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProjectFile {
    /// Its path inside the project directory.
    pub path: String,
    /// Its contents.
    pub text: String,
    /// Whether it is a script to run.
    pub executable: bool,
}

/// `leasehold new`: writes the project, then says what to do next.
pub fn run(args: NewArgs) -> anyhow::Result<ExitCode> {
    check_name(&args.name, args.lang)?;
    // `new x` says `x`, not `./x`.
    let target = if args.dir == Path::new(".") {
        PathBuf::from(&args.name)
    } else {
        args.dir.join(&args.name)
    };
    refuse_existing(&target)?;
    let sdk = match args.lang {
        Lang::Rust => args.sdk.as_deref().map(find_sdk).transpose()?,
        Lang::Python | Lang::Js => {
            if args.sdk.is_some() {
                bail!(
                    "--sdk is for Rust projects: a {} project needs no SDK",
                    args.lang.title()
                );
            }
            None
        }
    };
    let files = project(&args.name, args.lang, args.world, sdk.as_deref())
        .map_err(|e| anyhow::anyhow!("a template of this leasehold is broken: {e}"))?;
    write_project(&args.dir, &target, &files)?;

    let shown = target.display();
    let name = &args.name;
    println!(
        "Created {shown}: a {} plugin of the world {}.",
        args.lang.title(),
        args.world.wit_name()
    );
    let mut sdk_files = 0;
    for file in &files {
        if file.path.starts_with(sdk::SDK_DIR) {
            sdk_files += 1;
        } else {
            println!("  {}", file.path);
        }
    }
    if sdk_files > 0 {
        println!("  {}/ (a copy of the SDK, {sdk_files} files)", sdk::SDK_DIR);
    }
    println!("\nNext (its README.md says more):");
    let steps = [
        (format!("cd {shown}"), ""),
        ("./test.sh".to_string(), "# unit tests, against a fake host"),
        ("./build.sh".to_string(), "# writes the component"),
        (
            format!("leasehold check {name}.wasm"),
            "# as the host will load it",
        ),
        (
            format!("cp {name}.wasm {name}.toml DIR/"),
            "# into the host's plugin directory (run --plugins DIR)",
        ),
    ];
    let width = steps.iter().map(|(cmd, _)| cmd.len()).max().unwrap_or(0);
    for (cmd, comment) in steps {
        println!("  {}", format!("{cmd:width$}  {comment}").trim_end());
    }
    Ok(ExitCode::SUCCESS)
}

/// Checks a plugin name: the plugin directory's rule ([`crate::plugin::name`]), and none a
/// language would trip over (a Rust keyword, a Python module the plugin would hide).
pub fn check_name(name: &str, lang: Lang) -> anyhow::Result<()> {
    if let Err(reason) = crate::plugin::name::check(name) {
        bail!("invalid plugin name {name:?}: {reason}");
    }
    let module = name.replace('-', "_");
    match lang {
        Lang::Rust if is_listed(RUST_RESERVED, name) => bail!(
            "invalid plugin name {name:?} for Rust: cargo refuses it as a package name (a keyword, or a crate of Rust's own or of the SDK); pick another"
        ),
        Lang::Python if is_listed(PYTHON_RESERVED, &module) => bail!(
            "invalid plugin name {name:?} for Python: its module {module} would be a Python keyword or hide a module of Python's own; pick another"
        ),
        _ => Ok(()),
    }
}

/// Names cargo refuses for a package, or that would clash with the crates a plugin links.
const RUST_RESERVED: &str = "\
    abstract alloc as async await become box break const continue core crate do dyn else enum \
    extern false final fn for gen if impl in leasehold-guest let loop macro match mod move mut \
    override priv proc-macro pub ref return self static std struct super test trait true try \
    type typeof unsafe unsized use virtual where while wit-bindgen yield";

/// Python keywords, and modules of its own that the bindings, the tests or common code import:
/// a plugin module of that name would be imported in their place.
const PYTHON_RESERVED: &str = "\
    abc and as assert ast async asyncio await base64 break class collections continue copy \
    dataclasses datetime decimal def del elif else enum except finally for from functools global \
    hashlib if import in inspect io is itertools json lambda logging math nonlocal not operator \
    or os pass pathlib poll_loop random raise re return string struct sys threading time \
    traceback try types typing unittest uuid warnings weakref while with yield";

/// Names a Rust plugin's type must not take: the SDK's names its source imports, and the
/// prelude's.
const RUST_TYPE_RESERVED: &str = "\
    Box Clone Config Context Copy Default Drop Err Error EventHandler Fake HealthCheck Level \
    None Ok Option Outcome Reconciler Result Role Self Send Some String Sync Vec";

/// Whether `word` is one of the words of `list`.
fn is_listed(list: &str, word: &str) -> bool {
    list.split_whitespace().any(|w| w == word)
}

/// Refuses a target that exists and is not an empty directory.
fn refuse_existing(target: &Path) -> anyhow::Result<()> {
    let shown = target.display();
    match std::fs::symlink_metadata(target) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(anyhow::Error::new(e).context(format!("cannot look at {shown}"))),
        Ok(meta) if !meta.is_dir() => {
            bail!("{shown} already exists and is not a directory: nothing was written")
        }
        Ok(_) => {
            let mut entries =
                std::fs::read_dir(target).with_context(|| format!("cannot read {shown}"))?;
            if entries.next().is_some() {
                bail!(
                    "{shown} already exists and is not empty: nothing was written (pick another NAME or --dir)"
                );
            }
            Ok(())
        }
    }
}

/// The SDK `--sdk` names for a Rust project, as an absolute path.
fn find_sdk(path: &Path) -> anyhow::Result<PathBuf> {
    let manifest = path.join("Cargo.toml");
    let is_sdk = std::fs::read_to_string(&manifest)
        .is_ok_and(|text| text.contains("name = \"leasehold-guest\""));
    if !is_sdk {
        bail!(
            "--sdk {}: not the leasehold-guest SDK (no Cargo.toml of package leasehold-guest there); pass a leasehold checkout's guests/leasehold-guest",
            path.display()
        );
    }
    std::fs::canonicalize(path).with_context(|| format!("cannot resolve {}", path.display()))
}

/// Writes `files` into a new directory beside `target`, then moves it to `target`: a project
/// appears whole or not at all. A directory is never replaced: a `target` that appears
/// meanwhile is an error, and an empty `target` that was there is filled in place, keeping its
/// mode and owner. On an error only what this call created is removed.
fn write_project(parent: &Path, target: &Path, files: &[ProjectFile]) -> anyhow::Result<()> {
    std::fs::create_dir_all(parent)
        .with_context(|| format!("cannot create {}", parent.display()))?;
    let name = target
        .file_name()
        .and_then(|n| n.to_str())
        .context("the project directory has no name")?;
    let staging = parent.join(format!(".{name}.new-{}", std::process::id()));
    // Not ours if it is already there (a run of the same pid before a reboot, or someone else's):
    // then it is left as it is.
    std::fs::create_dir(&staging).with_context(|| {
        format!(
            "cannot create {} to write the project in (if it is left from an earlier run, remove it)",
            staging.display()
        )
    })?;
    let written = write_files(&staging, files).and_then(|()| place(&staging, target));
    if written.is_err() {
        let _ = std::fs::remove_dir_all(&staging);
    }
    written
}

/// Moves the written project `staging` to `target`: a rename that never replaces anything, or,
/// into an existing empty directory, a rename of each of its entries (undone if one fails).
fn place(staging: &Path, target: &Path) -> anyhow::Result<()> {
    use rustix::fs::{CWD, RenameFlags, renameat_with};
    let appeared = || {
        format!(
            "cannot move the new project into {} (did something else create it meanwhile?)",
            target.display()
        )
    };
    let is_dir = std::fs::symlink_metadata(target).is_ok_and(|m| m.is_dir());
    if !is_dir {
        return renameat_with(CWD, staging, CWD, target, RenameFlags::NOREPLACE)
            .map_err(std::io::Error::from)
            .with_context(appeared);
    }
    refuse_existing(target)?;
    let mut moved = Vec::new();
    let mut result = Ok(());
    for entry in
        std::fs::read_dir(staging).with_context(|| format!("cannot read {}", staging.display()))?
    {
        let from = match entry {
            Ok(entry) => entry.path(),
            Err(e) => {
                result = Err(
                    anyhow::Error::new(e).context(format!("cannot read {}", staging.display()))
                );
                break;
            }
        };
        let to = target.join(from.file_name().unwrap_or_default());
        if let Err(e) = renameat_with(CWD, &from, CWD, &to, RenameFlags::NOREPLACE) {
            result = Err(anyhow::Error::new(std::io::Error::from(e)).context(appeared()));
            break;
        }
        moved.push((from, to));
    }
    if result.is_err() {
        // Back into the staging directory, which is removed with them.
        for (from, to) in moved {
            if renameat_with(CWD, &to, CWD, &from, RenameFlags::NOREPLACE).is_err() {
                let _ = match std::fs::symlink_metadata(&to).is_ok_and(|m| m.is_dir()) {
                    true => std::fs::remove_dir_all(&to),
                    false => std::fs::remove_file(&to),
                };
            }
        }
        return result;
    }
    std::fs::remove_dir(staging).with_context(|| format!("cannot remove {}", staging.display()))
}

/// Writes every file into the directory `dir`.
fn write_files(dir: &Path, files: &[ProjectFile]) -> anyhow::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    for file in files {
        let path = dir.join(&file.path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("cannot create {}", parent.display()))?;
        }
        let mode = if file.executable { 0o755 } else { 0o644 };
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&path)
            .and_then(|mut f| f.write_all(file.text.as_bytes()))
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(())
}

mod project;
mod sdk;

pub use project::project;

#[cfg(test)]
mod tests;
