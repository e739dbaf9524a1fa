//! Plugins as files (DESIGN §2.2): `NAME.wasm` with an optional `NAME.toml` manifest.

pub mod directory;
pub mod manifest;

pub use directory::{PluginEntry, PluginSet, scan};
pub use manifest::{Manifest, ManifestError};
