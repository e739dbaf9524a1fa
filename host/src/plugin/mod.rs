//! Plugins as files: `NAME.wasm` with an optional `NAME.toml` manifest
//! ([`crate::manifest`]), validated on load ([`directory`], failures typed in [`error`]) and watched for changes
//! ([`watch`]); `NAME` keeps one rule ([`name`]).

pub mod directory;
pub mod error;
pub mod name;
pub mod watch;

pub use directory::{Checked, PluginEntry, PluginSet, check_file, scan};
pub use error::LoadError;
