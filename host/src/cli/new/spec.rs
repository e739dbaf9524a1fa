//! What `leasehold new` is asked for (its flags, a language, a world) and what it checks of a
//! name; and what is compiled in for every project: the WIT, `scripts/cargo-wasm.sh`, the
//! toolchain pins.

use std::path::PathBuf;

use anyhow::bail;
use clap::{Args, ValueEnum};

/// The WIT package every plugin is built against.
pub(super) const WIT: &str = include_str!("../../../../wit/plugin.wit");
/// Picks a toolchain for wasm32-wasip2 and runs cargo: a Rust project's build.sh calls it.
pub(super) const CARGO_WASM: &str = include_str!("../../../../scripts/cargo-wasm.sh");
/// The componentize-py pin Python guests are built and tested with.
pub(super) const PY_REQUIREMENTS: &str =
    include_str!("../../../../guests/tools/python/requirements.txt");
/// The oldest Python a Python project's scripts accept, as `(major, minor)`: the bindings its
/// tests import use `typing.Self`, new in 3.11 (componentize-py itself runs on 3.10). The README
/// of the project and the top README say the same, which `cli::new`'s tests check.
pub(super) const PYTHON_MIN: (u32, u32) = (3, 11);
/// The componentize-js and jco pins JavaScript guests are built and tested with.
pub(super) const JS_TOOLS_PACKAGE: &str = include_str!("../../../../guests/tools/js/package.json");
/// Their whole tree, locked.
pub(super) const JS_TOOLS_LOCK: &str =
    include_str!("../../../../guests/tools/js/package-lock.json");

/// Flags of `leasehold new`.
#[derive(Debug, Args)]
pub(crate) struct NewArgs {
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
pub(crate) enum Lang {
    /// Rust, with the leasehold-guest SDK; built with cargo for wasm32-wasip2.
    Rust,
    /// Python, built with componentize-py.
    Python,
    /// JavaScript, built with componentize-js.
    Js,
}

impl Lang {
    /// How the README names it.
    pub(super) fn title(self) -> &'static str {
        match self {
            Lang::Rust => "Rust",
            Lang::Python => "Python",
            Lang::Js => "JavaScript",
        }
    }
}

/// The worlds of `wit/plugin.wit`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum World {
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
pub(crate) struct ProjectFile {
    /// Its path inside the project directory.
    pub path: String,
    /// Its contents.
    pub text: String,
    /// Whether it is a script to run.
    pub executable: bool,
}

/// Checks a plugin name: the plugin directory's rule ([`crate::plugin::name`]), and none a
/// language would trip over (a Rust keyword, a Python module the plugin would hide).
pub(crate) fn check_name(name: &str, lang: Lang) -> anyhow::Result<()> {
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
pub(super) const RUST_RESERVED: &str = "\
    abstract alloc as async await become box break const continue core crate do dyn else enum \
    extern false final fn for gen if impl in leasehold-guest let loop macro match mod move mut \
    override priv proc-macro pub ref return self static std struct super test trait true try \
    type typeof unsafe unsized use virtual where while wit-bindgen yield";

/// Python keywords, and modules of its own that the bindings, the tests or common code import:
/// a plugin module of that name would be imported in their place.
pub(super) const PYTHON_RESERVED: &str = "\
    abc and as assert ast async asyncio await base64 break class collections continue copy \
    dataclasses datetime decimal def del elif else enum except finally for from functools global \
    hashlib if import in inspect io is itertools json lambda logging math nonlocal not operator \
    or os pass pathlib poll_loop random raise re return string struct sys threading time \
    traceback try types typing unittest uuid warnings weakref while with yield";

/// Names a Rust plugin's type must not take: the SDK's names its source imports, and the
/// prelude's.
pub(super) const RUST_TYPE_RESERVED: &str = "\
    Box Clone Config Context Copy Default Drop Err Error EventHandler Fake HealthCheck Level \
    None Ok Option Outcome Reconciler Result Role Self Send Some String Sync Vec";

/// Whether `word` is one of the words of `list`.
pub(super) fn is_listed(list: &str, word: &str) -> bool {
    list.split_whitespace().any(|w| w == word)
}
