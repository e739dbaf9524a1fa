//! Plugins as files (DESIGN §2.2): `NAME.wasm` with an optional `NAME.toml` manifest, validated
//! on load ([`directory`], [`manifest`]) and watched for changes ([`watch`]).

pub mod directory;
pub mod manifest;
pub mod watch;

pub use directory::{PluginEntry, PluginSet, scan};
pub use manifest::{Manifest, ManifestError};
