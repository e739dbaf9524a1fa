//! Plugins as files (DESIGN §2.2): `NAME.wasm` with an optional `NAME.toml` manifest
//! ([`crate::manifest`]), validated on load ([`directory`], failures typed in [`error`]) and watched for changes
//! ([`watch`]).

pub mod directory;
pub mod error;
pub mod watch;

pub use directory::{PluginEntry, PluginSet, scan};
pub use error::LoadError;
