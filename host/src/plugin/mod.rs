//! Plugins as files (DESIGN §2.2): `NAME.wasm` with an optional `NAME.toml` manifest.

pub mod manifest;

pub use manifest::{Manifest, ManifestError};
