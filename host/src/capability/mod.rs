//! Host capabilities granted to plugins by their manifest (docs/ARCHITECTURE.md §4, §8).
//! [`Capabilities`] is what the process offers (the lease database); [`Grants`] is what one
//! plugin file was granted.
//!
//! Order (each module may use only those listed before it; `host/tests/layers.rs` checks):
//!
//! 1. [`error`]: why a capability call failed, or a manifest's grants could not be resolved;
//! 2. [`variables`]: which variables a manifest may name for a database URL;
//! 3. [`fence`]: the check every write to the lease database makes, so that a write from a stale
//!    epoch can never commit after a newer epoch exists;
//! 4. [`identity`]: whether a granted database is the lease database;
//! 5. [`kv`]: a key-value store scoped to the plugin, kept in the lease database;
//! 6. [`host`]: what this process offers plugins, and where grants read their variables;
//! 7. [`events`]: PostgreSQL notifications delivered to the lease holder;
//! 8. [`sql`]: statements on a PostgreSQL database named in the grant;
//! 9. [`grants`]: what one plugin file was granted, and what one store may use.

pub mod error;
pub mod events;
pub mod fence;
pub mod grants;
pub mod host;
pub mod identity;
pub mod kv;
pub mod sql;
pub mod variables;

pub use error::{CapabilityError, GrantError};
pub use fence::Fence;
pub use grants::{Grants, PluginCapabilities};
pub use host::{Capabilities, Environment};
pub use variables::UrlVariables;
