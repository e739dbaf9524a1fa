//! The settings of `leasehold run`: defaults, then the TOML file, then `LEASEHOLD_*` environment
//! variables and flags (clap reads those two), each layer overriding the one before. The file and
//! the flags are the same type, [`Layer`], so a setting is declared once for both.
//!
//! Order (each module may use only those listed before it; `host/tests/layers.rs` checks):
//!
//! 1. [`process`]: a `[[process]]` table, and `leasehold exec`'s flags, validated;
//! 2. [`service`]: a `[[service]]` table, validated;
//! 3. [`error`]: why the configuration was refused, naming the file or value at fault;
//! 4. [`layer`]: one layer of the settings (the file's, the flags'), every key optional;
//! 5. [`resolve`]: the layers merged over the defaults and validated into a [`Config`].

pub mod error;
pub mod layer;
pub mod process;
pub mod resolve;
pub mod service;

pub use self::layer::{Layer, LogFormat};
pub use self::resolve::{Config, DATABASE_URL_FLAG, DEFAULT_CONNECT_TIMEOUT};
