//! `leasehold new`: writes a plugin project that builds, tests and loads as it is, in Rust,
//! Python or JavaScript, for any of the three worlds.
//!
//! The templates are files under `host/templates/` compiled into the binary, filled by replacing
//! `{{placeholder}}`s. The WIT, `scripts/cargo-wasm.sh` and the toolchain pins of
//! `guests/tools/` are compiled in as well, so a project gets what this checkout builds and tests
//! with.
//!
//! Order (each module may use only those listed before it; `host/tests/layers.rs` checks):
//!
//! 1. [`spec`]: the flags, the languages and worlds, the name check, and what is compiled in;
//! 2. [`sdk`]: the Rust SDK a Rust project gets a copy of, and its lock file;
//! 3. [`project`]: the project's files, rendered from the templates;
//! 4. [`write`](mod@write): writing the project all or nothing, then saying what to do next.

mod project;
mod sdk;
mod spec;
mod write;

pub(crate) use spec::NewArgs;
pub(crate) use write::run;

#[cfg(test)]
mod tests;
