//! Why a plugin file did not load: one [`LoadError`] per cause, naming the `.wasm` or `.toml`
//! at fault and keeping the underlying error (wasmtime's, the parser's, the driver's) as its
//! source, so `/status` and `leasehold check` can show the whole chain.

use std::path::PathBuf;

use super::name::NameError;
use crate::capability::GrantError;
use crate::manifest::ManifestError;
use crate::runtime::ComponentError;

/// Why a plugin is invalid.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The file's name is not a plugin name: nothing of it is read, its manifest neither.
    #[error("{file}: not a plugin name")]
    Name {
        /// The file as it may be shown (`\` and control characters escaped).
        file: String,
        /// What breaks the rule.
        #[source]
        source: NameError,
    },
    /// The component file cannot be read (missing, unreadable, too large).
    #[error("{}: cannot read", .path.display())]
    ReadComponent {
        /// The component.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The manifest exists but cannot be read (a plugin does not silently run with defaults).
    #[error("{}: cannot read", .path.display())]
    ReadManifest {
        /// The manifest.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The manifest is not a regular file (a directory, a FIFO, a device).
    #[error("{}: not a regular file", .path.display())]
    ManifestNotAFile {
        /// The manifest.
        path: PathBuf,
    },
    /// The manifest is larger than any manifest needs to be.
    #[error("{}: larger than {limit} bytes", .path.display())]
    ManifestTooLarge {
        /// The manifest.
        path: PathBuf,
        /// The limit.
        limit: u64,
    },
    /// The manifest is not UTF-8 text.
    #[error("{}: not UTF-8 text", .path.display())]
    ManifestNotUtf8 {
        /// The manifest.
        path: PathBuf,
    },
    /// The manifest does not parse or holds a value out of range.
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    /// The component does not load.
    #[error(transparent)]
    Component(#[from] ComponentError),
    /// The manifest sets a fuel budget on a host that does not meter fuel.
    #[error("{}: limits.fuel is set but this host does not meter fuel", .path.display())]
    FuelNotMetered {
        /// The manifest.
        path: PathBuf,
    },
    /// A health check asks for grants or events, which only reconcilers can use.
    #[error(
        "{}: [grants] and [events] are for reconcilers; a health-check cannot use them",
        .path.display()
    )]
    GrantsOnHealthCheck {
        /// The manifest.
        path: PathBuf,
    },
    /// The manifest lists event channels but the component has no `handle-event`.
    #[error(
        "{}: [events] lists channels but the plugin does not export handle-event (build it as an event-reconciler, e.g. with the SDK's export_event_reconciler!)",
        .path.display()
    )]
    EventsWithoutHandler {
        /// The manifest.
        path: PathBuf,
    },
    /// A grant could not be resolved.
    #[error("{}", .path.display())]
    Grant {
        /// The manifest.
        path: PathBuf,
        /// What is wrong with the grant.
        #[source]
        source: GrantError,
    },
}
